"""Golden files of `bamasc` commands: stdout, stderr, exit code and written files (see tests/cli_golden.py).

Every case runs `python -m bamasc ...` in a subprocess and is compared with
`tests/fixtures/cli/GROUP/CASE.txt` byte for byte, after `cli_golden.normalise`
(temporary folder, trace run ids, latencies). After a change that is meant to
alter them, regenerate every golden (these and the stage ones) and review the
diff before committing:

    python -m tests.stages --write
"""

from __future__ import annotations

import shutil

import pytest

from tests import cli_golden, stages

CASES = cli_golden.all_cases()


@pytest.fixture(scope="session")
def records(request):
    """The records of every group that a selected test needs, run once, groups in parallel."""
    wanted = {item.callspec.params["group"].name for item in request.session.items
              if item.originalname == "test_cli" and hasattr(item, "callspec")}
    return cli_golden.run_all(only=wanted)


@pytest.mark.parametrize(("group", "case"), CASES, ids=[f"{g.name}/{c.name}" for g, c in CASES])
def test_cli(records, group, case):
    if case.argparse and not cli_golden.argparse_version_matches():
        pytest.skip(f"argparse wording: the golden was written on Python {cli_golden.ARGPARSE_PYTHON}")
    missing = [program for program in case.programs if shutil.which(program) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} is not installed (graph --format png runs Graphviz's dot)")
    path = cli_golden.golden_path(group, case)
    difference = stages.compare(path, records[(group.name, case.name)].encode("utf-8"))
    if difference:
        pytest.fail(difference, pytrace=False)


def test_no_stray_goldens():
    assert cli_golden.stray_goldens() == []
