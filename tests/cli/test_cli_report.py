"""The CLI's Report: what it counts and the exit code that follows; the shared run options."""

from __future__ import annotations

import argparse

from bamasc.cli.args import RUN_OPTIONS, add_run_options
from bamasc.cli.report import EXIT_ERRORS, EXIT_OK, EXIT_USAGE, Report
from bamasc.records import record


@record
class Found:
    severity: str


def test_warnings_pass_unless_strict_and_usage_outranks_errors():
    found = [Found("warning"), Found("warning"), Found("error")]
    report = Report()
    report.add(found[:2])
    assert (report.errors, report.warnings, report.return_code) == (0, 2, EXIT_OK)
    strict = Report(strict=True)
    strict.add(found)
    assert (strict.errors, strict.warnings, strict.return_code) == (3, 2, EXIT_ERRORS)
    assert strict.summary(1) == "1 file checked: 3 errors, 2 warnings"
    report.failed()
    assert report.return_code == EXIT_ERRORS
    report.misused()
    assert report.return_code == EXIT_USAGE


def test_a_run_option_is_declared_once_and_may_be_reworded():
    parser = argparse.ArgumentParser()
    add_run_options(parser, "--fake", "--cassette", "--timeout", cassette="replay only")
    actions = {action.dest: action for action in parser._actions}
    assert actions["cassette"].help == "replay only"
    assert actions["fake"].help == RUN_OPTIONS["--fake"]["help"]
    assert parser.parse_args(["--timeout", "2.5"]).timeout == 2.5
    assert "record" not in actions
