"""The spend page as HTML: one self-contained file for `bamasc report`, or the shell that `/ui` serves.

Both draw a summary (bamasc/http/spend.py) with the same script (page.js)
and Plotly's bundle, which the `plotly` package ships (the `report` extra):
the report inlines both and the summary, so it opens with no network; the
live shell loads them from its own server and polls the summary there. The
summary goes in as JSON with `<`, `>` and `&` escaped, so no text from a
trace can close its script element, and the page writes every text as text.
"""

from __future__ import annotations

import functools
import html
import json
from importlib import resources

from bamasc.extras import EXTRAS, missing_modules

# The report opens from a file: nothing may be fetched from anywhere.
REPORT_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                 "img-src data: blob:; font-src data:")
# The live page: scripts from its own server, requests to its own server only.
LIVE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src 'self' data: blob:; "
               "font-src data:; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'")


class ReportMissing(RuntimeError):
    """The `report` extra (plotly) is not installed."""


def require() -> None:
    missing = missing_modules(EXTRAS["report"])
    if missing:
        raise ReportMissing(f"the spend report needs the report extra ({', '.join(missing)} not installed): "
                            f"{EXTRAS['report'].install}")


@functools.cache
def plotly_js() -> str:
    """Plotly's bundle as the `plotly` package ships it (read once)."""
    require()
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


@functools.cache
def _asset(name: str) -> str:
    return resources.files("bamasc.http").joinpath(name).read_text(encoding="utf-8")


def page_js() -> str:
    return _asset("page.js")


def _inline_script(text: str) -> str:
    # A script element ends at the first `</script`, whatever the script says.
    return text.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")


def _json(summary: dict) -> str:
    return (json.dumps(summary, ensure_ascii=False, allow_nan=False)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def _body(title: str) -> str:
    return f"""<header><h1>{html.escape(title)}</h1>
<p>Traces: <span id="sources"></span> <span id="state"></span> <span id="problems" class="problem"></span></p>
<form id="login" hidden><span id="login-message"></span>
<input id="login-token" type="password" autocomplete="off" placeholder="token or client key">
<button type="submit">Show</button></form></header>
<main>
<section><h2>Totals</h2><div id="totals" class="cards"></div><p id="statuses"></p></section>
<section><h2>Spend over time</h2><div id="chart-timeline" class="chart"></div><p id="timeline-note" class="note"></p>
</section>
<section id="windows-over-time" hidden><h2>Windows over time</h2><div id="chart-windows" class="chart"></div></section>
<section><h2>Cost against the bound</h2><div id="chart-ratios" class="chart"></div></section>
<section class="pair"><div id="chart-model" class="chart"></div><div id="chart-template" class="chart"></div></section>
<section class="pair"><div id="chart-key" class="chart"></div><div id="chart-team" class="chart"></div></section>
<section class="pair"><div id="chart-window" class="chart"></div><div id="chart-tool" class="chart"></div></section>
<section><h2>Dearest tasks</h2><div id="dearest"></div></section>
<section><h2>Slowest tasks</h2><div id="slowest"></div></section>
<section><h2>Refused calls</h2><div id="refusals"></div></section>
</main>"""


_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 auto; max-width: 1200px; padding: 0 16px 40px; color: #1f2328; }
h1 { font-size: 20px; margin: 16px 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
.cards { display: flex; flex-wrap: wrap; gap: 8px; }
.card { border: 1px solid #d0d7de; border-radius: 6px; padding: 8px 12px; min-width: 150px; }
.card .name { color: #57606a; font-size: 12px; } .card .value { font-size: 20px; font-weight: 600; }
.card .note { color: #57606a; font-size: 11px; max-width: 220px; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
.pair > [hidden] { display: none; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border-bottom: 1px solid #d0d7de; padding: 3px 6px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; } td.id, td.why { word-break: break-all; }
tr.refused td { color: #cf222e; } tr.detail td { border-bottom: none; padding-left: 24px; }
p.note { color: #57606a; font-size: 12px; margin: 4px 0; }
table.calls { font-size: 12px; } .problem { color: #cf222e; } #state { color: #57606a; }
"""


def report_html(summary: dict, title: str = "bamasc spend report") -> str:
    """One self-contained HTML file that draws `summary`: styles, scripts and data inline, nothing fetched."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{REPORT_POLICY}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{_STYLE}</style>
<script>{_inline_script(plotly_js())}</script>
<script>{_inline_script(page_js())}</script>
<script type="application/json" id="bamasc-summary">{_json(summary)}</script>
</head><body>
{_body(title)}
</body></html>
"""


def live_html(title: str, summary_url: str, plotly_url: str, script_url: str, every_ms: int = 2000) -> str:
    """The `/ui` shell: no data in it; its script polls `summary_url` with the token the user gives."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{_STYLE}</style>
<script src="{html.escape(plotly_url)}"></script>
<script src="{html.escape(script_url)}"></script>
</head><body data-summary="{html.escape(summary_url)}" data-every="{int(every_ms)}">
{_body(title)}
</body></html>
"""


def trace_report(paths: list[str], total: float | None = None, title: str = "bamasc spend report") -> str:
    """The report of the traces at `paths` as one HTML file (`total`: a budget, µ$, to draw the spend against).
    A line that is not a trace record is a spend.TraceLineError naming its file and line."""
    from bamasc.http.spend import SpendBook, read_trace

    book = SpendBook()
    for path in paths:
        read_trace(book, path)
    summary = book.summary()
    if total is not None:
        left = total - summary["totals"]["spent"] - summary["totals"]["held"]
        summary["live"] = {"total": total, "left": round(max(0.0, left), 6)}
    return report_html(summary, title)
