"""`bamasc lsp`: the language server for editors, over standard input and output."""

from __future__ import annotations

from bamasc.cli import output
from bamasc.cli.report import Report


def add_parser(commands) -> None:
    lsp = commands.add_parser("lsp", help="language server for editors, over stdio (needs bamasc[lsp])")
    # Editors launch servers with --stdio; it is the only transport, so the flag changes nothing.
    lsp.add_argument("--stdio", action="store_true", help="talk over standard input and output (the default)")
    lsp.set_defaults(run=run)


def run(args) -> int:
    from bamasc.lsp import LspMissing, require

    report = Report()
    try:
        require()
    except LspMissing as problem:
        output.failure(report, problem)
        return report.return_code
    from bamasc.lsp.start import serve

    serve()
    return report.return_code
