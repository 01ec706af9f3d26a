"""The language server's parts that need no pygls: positions, analysis, completion, rename rules, bounds."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from bamasc.lsp.analysis import Analysis
from bamasc.lsp.bounds import COMPUTING, DONE, ERRORS, FAILED, Bounds
from bamasc.lsp.complete import COMBINATORS, TOPOLOGY_ITEMS, completions
from bamasc.lsp.navigate import RenameError, references, rename
from bamasc.lsp.positions import Lines
from bamasc.syntax.lalr import load_tables
from tests.conftest import ROOT

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
KEYWORDS = set(load_tables().keywords)

ROLE = 'role Executor { prompt = "{{task}} {{draft?}} {{previous?}} {{feedback?}}"  max_output = 10  reads = answer }\n'
CRITIC = 'role Critic { prompt = "{{solution}}"  max_output = 10  reads = verdict }\n'
MODEL = 'model nano { provider = openai  name = "n"  price { input = 1  output = 1 }  tier = 1 }\n'
TOPOLOGY = (
    "topology t {\n  slot executor : Executor [1..2]\n  slot critic : Critic [1..1]\n  require count(executor) >= 1\n"
    "  flow {\n    draft = chain executor(task)\n    answer refine executor(task, draft) with critic until approved\n  }\n}\n"
)
SYSTEM = "system s { models = [nano]  topologies = [t]  budget = 100000  answer = number }\n"
PROGRAM = ROLE + CRITIC + MODEL + TOPOLOGY + SYSTEM


def test_lines_count_utf16_units_and_clamp():
    lines = Lines('a = "😀é" x\nsecond')
    # 😀 is two UTF-16 units, é one: the x at code point column 10 is at UTF-16 character 10.
    assert lines.position(1, 10) == (0, 10)
    assert lines.point(0, 10) == (1, 10)
    assert lines.point(0, 7) == (1, 7)  # just after the astral character
    assert lines.offset(1, 3) == len('a = "😀é" x\n') + 3
    assert lines.point(7, 0) == (2, 7)  # past the last line: its end
    assert Lines("x😀y", units=len).position(1, 3) == (0, 2)  # a client counting code points


def test_overlay_text_wins_over_the_disk_and_reaches_imports(tmp_path):
    shared = tmp_path / "shared.bam"
    shared.write_text(MODEL)
    main = tmp_path / "main.bam"
    main.write_text('import "shared.bam"\n' + ROLE + CRITIC + TOPOLOGY + SYSTEM)
    assert Analysis(str(main), {}).diagnostics == []
    broken = MODEL.replace("tier = 1", "tier = 0")
    analysis = Analysis(str(main), {os.path.realpath(shared): broken})
    assert [d.code for d in analysis.diagnostics] == ["BAM204"]
    shown = analysis.shown_here()
    assert shown[0].span.file == str(main) and shown[0].span.line == 1 and shown[0].span.col == 8
    assert shown[0].notes[0].span.file == str(shared)
    # A buffer never saved: the path need not exist on disk.
    ghost = tmp_path / "unsaved.bam"
    assert Analysis(str(ghost), {os.path.realpath(ghost): PROGRAM}).diagnostics == []


def test_lint_file_is_what_lint_paths_reports(tmp_path):
    from bamasc.lint import lint_file, lint_paths

    path = tmp_path / "bad.bam"
    path.write_text(PROGRAM.replace("reads = answer", "reads = answr") + MODEL)
    _, program, found = lint_file(str(path))
    assert program is not None and "nano" in program.models
    assert [d.code for d in found] == [d.code for d in lint_paths([str(path)]).diagnostics] == ["BAM110", "BAM101"]
    assert found[1].notes[0].span.line == 3  # the first `nano`


@pytest.mark.parametrize(
    "marker, expected, absent",
    [
        ("slot executor : ", ["Executor"], []),
        ("count(", ["executor", "critic"], ["Executor"]),
        ("draft = ", ["chain", "refine", "executor", "draft"], ["answer"]),
        ("executor(", ["draft", "task"], ["executor"]),
        ("with ", ["executor", "critic"], ["draft"]),
        ("provider = ", ["openai", "fake"], ["provider"]),
        ("price { ", ["input", "output"], ["tier"]),
        ("models = [", ["nano"], ["t"]),
        ("topologies = [", ["t"], ["nano"]),
        ("system s { ", ["budget", "select"], ["provider"]),
        ("", ["model", "role", "topology", "system", "import"], []),
    ],
)
def test_completion_contexts(tmp_path, marker, expected, absent):
    path = tmp_path / "main.bam"
    path.write_text(PROGRAM)
    analysis = Analysis(str(path), {})
    labels = [item.label for item in completions(PROGRAM, PROGRAM.index(marker) + len(marker), analysis)]
    assert all(name in labels for name in expected), labels
    assert not any(name in labels for name in absent), labels


def test_completion_in_broken_text_comments_and_strings(tmp_path):
    path = tmp_path / "main.bam"
    path.write_text(PROGRAM)
    analysis = Analysis(str(path), {})
    typing = PROGRAM + "model other {\n  pro"  # unclosed and unparsable: names still come from the last analysis
    assert "provider" in [i.label for i in completions(typing, len(typing), analysis)]
    assert "nano" in [i.label for i in completions(SYSTEM.replace("[nano", "[na"), SYSTEM.index("na") + 2, analysis)]
    commented = "// model x {\n"
    assert completions(commented, 5, analysis) == []
    prompt = 'role R { prompt = "see {{'
    assert [i.label for i in completions(prompt, len(prompt), analysis)][:1] == ["task"]
    closed = 'role R { prompt = "see {{task}}'
    assert completions(closed, len(closed), analysis) == []
    outside = 'role R { max_output = 1 }\nmodel m { name = "{{'
    assert completions(outside, len(outside), analysis) == []  # placeholders are a prompt's only


def test_completion_keywords_are_the_grammars():
    assert set(TOPOLOGY_ITEMS) | set(COMBINATORS) <= KEYWORDS


def test_rename_rules(tmp_path):
    path = tmp_path / "main.bam"
    path.write_text(PROGRAM)
    analysis = Analysis(str(path), {})

    def at(marker, delta=0):
        index = PROGRAM.index(marker) + delta
        line = PROGRAM.count("\n", 0, index) + 1
        return analysis.index.at(str(path), line, index - PROGRAM.rfind("\n", 0, index))

    def point(marker, delta=0):
        index = PROGRAM.index(marker) + delta
        return PROGRAM.count("\n", 0, index) + 1, index - PROGRAM.rfind("\n", 0, index)

    draft = at("draft =")
    spans = rename([], analysis, draft, "first", KEYWORDS)
    assert [(s.line, s.col) for s in spans] == [point("draft ="), point("task, draft", 6)]
    for name, message in [("critic", "slot 'critic' is already declared"), ("task", "flow's input"), ("until", "keyword")]:
        with pytest.raises(RenameError, match=message):
            rename([], analysis, draft, name, KEYWORDS)
    with pytest.raises(RenameError, match="not declared"):
        rename([], analysis, at("executor(task)", 9), "x", KEYWORDS)
    # A slot is renamed in its topology: its count(), its calls and `with`.
    executor = at("slot executor", 5)
    assert len(rename([], analysis, executor, "solver", KEYWORDS)) == 4
    assert [(u.span.line, u.span.col) for u in references([], analysis, executor, declarations=False)] == [
        point("count(executor", 6), point("chain executor", 6), point("refine executor", 7)
    ]


def test_bounds_compute_in_the_background_once_per_program(tmp_path):
    path = tmp_path / "main.bam"
    path.write_text(PROGRAM)
    analysis = Analysis(str(path), {})
    release, calls, done = threading.Event(), [], threading.Event()

    def compute(program):
        calls.append(program)
        release.wait(30)
        return {"s": "bound"}

    bounds = Bounds(on_done=done.set, compute=compute)
    assert bounds.state(analysis) == (COMPUTING, None)
    release.set()
    assert done.wait(30)
    assert bounds.state(Analysis(str(path), {})) == (DONE, {"s": "bound"})  # same text: the cached bound
    assert len(calls) == 1
    broken = Analysis(str(path), {os.path.realpath(path): PROGRAM.replace("answer = number", "answer = numbr")})
    assert bounds.state(broken) == (ERRORS, None)
    failing = Bounds(compute=lambda program: 1 / 0)
    failing.wait(analysis, 30)
    assert failing.state(analysis)[0] == FAILED and "ZeroDivisionError" in failing.state(analysis)[1]


def test_real_bounds_match_the_compiler(tmp_path):
    from bamasc.lsp.bounds import bind_program
    from bamasc.plan.compile import compile_file

    path = tmp_path / "main.bam"
    path.write_text(PROGRAM)
    found = bind_program(Analysis(str(path), {}).program)["s"]
    compiled = compile_file(str(path))
    (binding,) = compiled.bindings["s"]
    assert found.template("t").worst_case_cost == binding.worst_case_cost
    assert found.selected == "t" and found.fits


def test_lsp_without_the_extra_says_how_to_install(monkeypatch, capsys):
    from bamasc.cli import main

    monkeypatch.setitem(sys.modules, "pygls", None)  # import pygls now raises ImportError
    assert main(["lsp"]) == 1
    assert "pip install 'bamasc[lsp]'" in capsys.readouterr().err


def test_a_tool_is_renamed_where_it_is_declared_and_where_roles_name_it(tmp_path):
    source = (
        'tool files { mcp = "python -m files"  allow = ["read_file"]  max_result = 100 tokens }\n'
        'role Reader { tools = [files.read_file]  max_tool_rounds = 2  max_output = 10  prompt = "{{task}}" }\n'
    )
    path = tmp_path / "main.bam"
    path.write_text(source)
    analysis = Analysis(str(path), {})
    assert not analysis.errors
    files = analysis.index.at(str(path), 1, 7)
    assert (files.kind, files.name, files.declares) == ("tool", "files", True)
    spans = rename([], analysis, files, "docs", KEYWORDS)
    assert [(s.line, s.col, s.end_col) for s in spans] == [(1, 6, 11), (2, 24, 29)]


@pytest.mark.parametrize("name", ["gsm8k", "math", "mbpp", "quickstart", "support_tools"])
def test_every_declared_name_of_the_examples_hovers_and_completion_never_fails(name):
    from bamasc.lsp.bounds import COMPUTING
    from bamasc.lsp.hover import hover_text

    path = os.path.join(ROOT, "examples", f"{name}.bam")
    analysis = Analysis(path, {})
    assert not analysis.errors
    uses = [o for found in analysis.index.by_file.values() for o in found]
    assert uses
    for use in uses:
        text = hover_text(analysis, use, (COMPUTING, None))
        declared = analysis.index.declarations(use.key)
        assert (text is not None) == (bool(declared) or use.name == "task"), use
    source = analysis.text(path)
    cut = source[: len(source) // 2]  # mid-file: unclosed blocks, maybe inside a string
    for offset in range(0, len(source), 5):
        completions(source, offset, analysis)
        completions(cut, min(offset, len(cut)), analysis)
