"""The `bamasc` command line: parses arguments, calls library functions, prints, sets exit codes.

One module per command (`add_parser` and `run`); heavy libraries (solvers,
ML, provider SDKs) are imported only inside the command that needs them, so
`bamasc lint` starts fast.
"""

from __future__ import annotations

import os
import sys

from bamasc.cli.parser import COMMANDS, build_parser
from bamasc.cli.report import EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    first = argv[0] if argv else None
    args = build_parser(first if first in COMMANDS else None).parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:
        # The reader (`| head`) went away: stop quietly, as other tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
