"""An MCP server over stdio that lets a model read the help pages in `help/`, beside this file.

Two tools, `list_dir` and `read_file`, both confined to that folder. Built with
the official MCP Python SDK (`pip install 'bamasc[mcp]'`). support_tools.bam
declares it as `mcp = "python files_server.py"`: a run that uses it starts it
once, in this folder, and stops it when the run ends. Run it alone to try it
with any MCP client.
"""

from __future__ import annotations

import os

try:
    from mcp.server.mcpserver import MCPServer  # the SDK's 2.x name
except ImportError:  # 1.x
    from mcp.server.fastmcp import FastMCP as MCPServer

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "help"))

server = MCPServer("help-pages")


def _inside(path: str) -> str | None:
    """`path` in the help folder, or None when it leaves the folder."""
    full = os.path.realpath(os.path.join(ROOT, path))
    return full if os.path.commonpath([full, ROOT]) == ROOT else None


@server.tool()
def list_dir(path: str = ".") -> str:
    """List the help pages in a folder of the help pages ("." for the top folder)."""
    folder = _inside(path)
    if folder is None or not os.path.isdir(folder):
        return f"There is no folder {path!r} among the help pages."
    names = sorted(os.listdir(folder))
    return "\n".join(name + ("/" if os.path.isdir(os.path.join(folder, name)) else "") for name in names)


@server.tool()
def read_file(path: str) -> str:
    """Read one help page, such as "refunds.md"."""
    page = _inside(path)
    if page is None or not os.path.isfile(page):
        return f"There is no help page {path!r}; list_dir shows them."
    with open(page, encoding="utf-8") as handle:
        return handle.read()


if __name__ == "__main__":
    server.run()
