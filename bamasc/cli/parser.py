"""The argparse tree: one sub-parser per command, each added by its own module of this package."""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module

from bamasc.version import __version__
from bamasc.cli.report import EXIT_USAGE

# Each command's module, in the order `--help` lists them; it has `add_parser(commands)`.
COMMANDS = ("lint", "fmt", "compile", "explain", "graph", "exec", "trace", "spend_report", "bench", "score", "collect", "train", "fit_weights", "reproduce", "prices", "lsp", "serve", "proxy")


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter with the width found without importing shutil.

    argparse builds a formatter for every add_argument call, and the default one
    imports shutil (and with it bz2 and lzma) just to read the terminal width:
    several milliseconds of a start-up that `bamasc lint` keeps small.
    """

    def __init__(self, prog: str) -> None:
        columns = os.environ.get("COLUMNS", "")
        if columns.isdigit():
            width = int(columns)
        else:
            try:
                width = os.get_terminal_size(sys.__stdout__.fileno()).columns
            except (OSError, ValueError, AttributeError):
                width = 80
        super().__init__(prog, width=max(40, width - 2))


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # argparse's own usage errors keep exit code 2
        self.print_usage(sys.stderr)
        print(f"bamasc: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (`only`) just one command's parser: `bamasc lint` then
    imports and builds none of the others, which matters for its start-up."""
    parser = _Parser(prog="bamasc", description="Compiler for budget-aware multi-agent LLM systems.")
    parser.add_argument("--version", action="version", version=f"bamasc {__version__}")
    # An explicit prog spares argparse a help formatter (and its shutil import) at start-up.
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser, prog="bamasc")
    commands.required = True
    for name in COMMANDS:
        if only is None or only == name:
            import_module(f"bamasc.cli.{name}").add_parser(commands)
    return parser
