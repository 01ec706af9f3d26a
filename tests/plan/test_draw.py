"""`graph --format png`: drawn by Graphviz from the dot text, so the picture holds every edge the dot output has."""

from __future__ import annotations

import collections
import glob
import os
import re
import shlex
import shutil
import struct

import pytest

from bamasc.plan import draw, render
from tests.conftest import ROOT

needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's `dot` program is not installed (apt-get install graphviz)")
DOT_EDGE = re.compile(r'^  "([^"]+)" -> "([^"]+)"', re.MULTILINE)


def _templates():
    """Every feasible template of the examples (examples/ and examples/paper/), with its file's name."""
    from bamasc.plan.compile import compile_file

    paths = sorted(glob.glob(os.path.join(ROOT, "examples", "*.bam")) + glob.glob(os.path.join(ROOT, "examples", "paper", "*.bam")))
    found = []
    for path in paths:
        plan = compile_file(path).plan
        if plan is None:
            continue
        for system in plan.systems:
            found += [(f"{os.path.relpath(path, ROOT)}:{system.name}:{t.name}", t) for t in system.templates if t.feasible]
    return found


@pytest.fixture(scope="module")
def templates():
    return _templates()


def _laid_out_edges(sources: list[str]) -> list[collections.Counter]:
    """The edges Graphviz laid out for each of `sources`: its plain output's `edge TAIL HEAD ...` lines.
    One `dot` run lays out every graph, each one's output ending at its `stop` line."""
    plain = draw.run_dot("".join(sources), "plain").decode("utf-8")
    found = [collections.Counter()]
    for line in plain.splitlines():
        if line.startswith("edge "):
            tail, head = shlex.split(line)[1:3]
            found[-1][tail, head] += 1
        elif line == "stop":
            found.append(collections.Counter())
    return found[:-1]


def test_dot_and_mermaid_are_written_from_one_arrow_list(templates):
    """Each arrow of `render.arrows` is one edge of the dot text and one of the Mermaid text, in order."""
    styles = collections.Counter()
    for name, template in templates:
        arrows = render.arrows(template)
        styles.update(arrow.style for arrow in arrows)
        assert DOT_EDGE.findall(render.dot(template)) == [(a.source, a.target) for a in arrows], name
        mermaid = render.mermaid(template)
        assert sum(line.count(" --> ") + line.count(" -.-> ") + line.count(" ==> ") + line.count(" .-> ")
                   for line in mermaid.splitlines()) == len(arrows), name
    # The examples hold every kind of arrow: the checks above saw routes' branches and plans' seats too.
    assert set(styles) == set(render.ARROW_STYLES), styles


@needs_dot
def test_the_png_draws_every_edge_of_the_dot_output(templates):
    """The PNG's source laid out by Graphviz has exactly the dot output's edges: router to branch and
    planner to seat included."""
    laid_out = _laid_out_edges([draw.png_source(template) for _, template in templates])
    assert len(laid_out) == len(templates)
    checked = collections.Counter()
    for (name, template), edges in zip(templates, laid_out):
        assert edges == collections.Counter(DOT_EDGE.findall(render.dot(template))), name
        for arrow in render.arrows(template):
            checked[arrow.style] += 1
    assert checked["choice"] and checked["worst"], "no route or plan was drawn"


@needs_dot
def test_the_largest_plans_are_drawn_readably(tmp_path, templates):
    """The largest template of the examples: a PNG whose text is at least 10 points at 96 dpi (the
    style's), and whose size stays within what a screen or a page shows at that scale."""
    name, template = max(templates, key=lambda pair: len(render.arrows(pair[1])))
    assert len(render.arrows(template)) >= 50, name  # a dynamic plan of four steps
    target = tmp_path / "graph.png"
    draw.draw_png(template, str(target))
    image = target.read_bytes()
    assert image[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", image[16:24])
    assert 'dpi=96' in draw.STYLE[0] and "fontsize=10" in draw.STYLE[1]
    assert width <= 4000 and height <= 4000, (name, width, height)


def test_a_missing_graphviz_is_named(monkeypatch, tmp_path, templates):
    monkeypatch.setattr(draw.shutil, "which", lambda program: None)
    target = tmp_path / "graph.png"
    with pytest.raises(draw.DrawError, match=r"Graphviz's `dot` program, which is not on PATH: install Graphviz"):
        draw.draw_png(templates[0][1], str(target))
    assert not target.exists()


def test_graph_png_without_graphviz_is_an_error_not_a_traceback(monkeypatch, capsys, tmp_path):
    from bamasc.cli import main

    plan = tmp_path / "plan.json"
    assert main(["compile", os.path.join(ROOT, "examples", "support.bam"), "-o", str(plan)]) == 0
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` here
    capsys.readouterr()
    target = tmp_path / "graph.png"
    assert main(["graph", str(plan), "--format", "png", "-o", str(target)]) == 1
    err = capsys.readouterr().err
    assert "bamasc: error: drawing a PNG needs Graphviz's `dot` program" in err and "apt-get install graphviz" in err
    assert "Traceback" not in err and not target.exists()


def test_a_failing_graphviz_is_reported(monkeypatch, tmp_path, templates):
    """A `dot` that exits non-zero: its error is told, and nothing is written."""
    fake = tmp_path / "dot"
    fake.write_text("#!/bin/sh\necho 'Error: syntax error in line 1' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    target = tmp_path / "graph.png"
    with pytest.raises(draw.DrawError, match="failed: Error: syntax error in line 1"):
        draw.draw_png(templates[0][1], str(target))
    assert not target.exists()


def test_the_docs_pictures_are_there():
    """docs/graphs.md shows PNGs that exist, one per section, each named after a template of its example."""
    import re as regex

    text = open(os.path.join(ROOT, "docs", "graphs.md"), encoding="utf-8").read()
    pictures = regex.findall(r"!\[(\w+)\]\((images/graph-[\w-]+\.png)\)", text)
    assert len(pictures) == text.count("\n## ") >= 4
    for template, picture in pictures:
        with open(os.path.join(ROOT, "docs", picture), "rb") as handle:
            assert handle.read(8) == b"\x89PNG\r\n\x1a\n", picture
        assert picture.endswith(f"-{template}.png"), picture
