"""Draws a template's call graph as a PNG: the dot text `render.dot` writes, laid out and drawn by Graphviz.

The picture is the dot output with a title and colours added, never a second
drawing of the graph: every arrow `render.arrows` lists (the calls' inputs,
each route's branches from its router, each dynamic plan's seats from its
planner) is an edge Graphviz lays out. Graphviz's layered layout (`dot`)
orders the calls to keep edges short and uncrossed, which a hand-made layout
cannot do for the larger plans. This module does not lay anything out itself.
"""

from __future__ import annotations

import shutil
import subprocess

from bamasc.plan.render import Arrow, dot, dot_attributes
from bamasc.plan.schema import TemplatePlan

PROGRAM = "dot"  # Graphviz's layered layout, the one made for directed call graphs
INSTALL_HINT = "install Graphviz (Debian and Ubuntu: apt-get install graphviz; macOS: brew install graphviz)"

# What the picture adds to the dot text: a title, boxes and arrows in colours the eye can tell apart,
# and a resolution at which a label of three 10-point lines reads well.
STYLE = (
    'graph [fontname="Helvetica", fontsize=12, labelloc=t, labeljust=l, dpi=96, nodesep=0.35, ranksep=0.6, '
    'pad=0.2, bgcolor=white];',
    'node [fontsize=10, style="rounded,filled", fillcolor="#eef3fb", color="#4a6fa5"];',
    'edge [fontname="Helvetica", fontsize=9, color="#444444", arrowsize=0.7];',
)


# Colours by kind of edge: the task's inputs recede (every call reads the task), a route's or a plan's
# choices stand out, the worst case's most.
TASK_COLOUR = "#a8b3c4"
CHOICE_COLOUR = "#2a6fb0"
WORST_COLOUR = "#c0392b"


def arrow_attributes(arrow: Arrow) -> str:
    """The dot output's attributes of `arrow`, with the picture's colours."""
    plain = dot_attributes(arrow)
    if arrow.style == "worst":
        colour = f'color="{WORST_COLOUR}", fontcolor="{WORST_COLOUR}", penwidth=1.6'
    elif arrow.style == "choice":
        colour = f'color="{CHOICE_COLOUR}", fontcolor="{CHOICE_COLOUR}"'
    elif arrow.source == "task":
        colour = f'color="{TASK_COLOUR}"'
    else:
        return plain
    return f"{plain[:-1]}, {colour}]" if plain else f" [{colour}]"


class DrawError(Exception):
    """The picture could not be drawn: Graphviz is missing or failed."""


def png_source(template: TemplatePlan) -> str:
    """The dot text the PNG is drawn from: `render.dot`'s, with the title and the picture's style."""
    title = (f"{template.name}: worst case {template.worst_case_cost:.1f} µ$\\l(dashed: calls that run only "
             "under a condition; dotted, blue: a route's or a plan's choices; red: the worst case's)\\l")
    return dot(template, STYLE + (f'label="{title}";',), arrow_attributes)


def draw_png(template: TemplatePlan, path: str) -> None:
    """The call graph as a PNG at `path`; DrawError when Graphviz is not installed or fails.
    Nothing is written unless the whole picture was drawn."""
    image = render_png(png_source(template))
    with open(path, "wb") as handle:
        handle.write(image)


def render_png(source: str) -> bytes:
    """`source` (dot text) laid out and drawn by Graphviz's `dot` program, as PNG bytes."""
    return run_dot(source, "png")


def run_dot(source: str, output_format: str) -> bytes:
    program = shutil.which(PROGRAM)
    if program is None:
        raise DrawError(f"drawing a PNG needs Graphviz's `{PROGRAM}` program, which is not on PATH: {INSTALL_HINT}; "
                        "or write --format dot and draw it elsewhere")
    try:
        done = subprocess.run([program, f"-T{output_format}"], input=source.encode("utf-8"), capture_output=True,
                              check=False)
    except OSError as problem:  # found, but cannot be run (a broken install)
        raise DrawError(f"cannot run Graphviz's `{program}`: {problem.strerror or problem}") from None
    if done.returncode != 0 or not done.stdout:
        message = done.stderr.decode("utf-8", "replace").strip() or f"exit status {done.returncode}"
        raise DrawError(f"Graphviz's `{program}` failed: {message}")
    return done.stdout
