"""`bamasc lsp`: a language server for `.bam` files over stdio (the optional `lsp` extra).

Only `server.py`, `transport.py`, `features.py` and `start.py` import pygls
and lsprotocol; the other modules of this package work on plain records
(analysis, index, hover text, completion context, message framing) so they
are tested and used without the extra.
"""

from __future__ import annotations

INSTALL_HINT = "the language server needs the lsp extra: pip install 'bamasc[lsp]'"


class LspMissing(Exception):
    """pygls or lsprotocol is not installed."""


def require() -> None:
    """Raise LspMissing with the install hint unless the extra is installed."""
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError:
        raise LspMissing(INSTALL_HINT) from None
