"""Golden files of every compiler stage: AST, unrolled IR with bounds, plan bytes (see tests/stages.py).

Each test compares today's output with `tests/fixtures/stages/NAME.{ast.txt,ir.txt,plan.json}`
byte for byte and shows a unified diff when they differ. After a change that is
meant to alter them, regenerate every golden (these and the CLI ones) and
review the diff before committing:

    python -m tests.stages --write
"""

from __future__ import annotations

import filecmp

import pytest

from tests import stages

SOURCES = stages.sources()


def _check(name: str, stage: str) -> None:
    difference = stages.compare(stages.golden_path(name, stage), stages.produce(name, stage))
    if difference:
        pytest.fail(difference, pytrace=False)


@pytest.mark.parametrize("name", SOURCES)
def test_ast(name):
    _check(name, "ast")


@pytest.mark.parametrize("name", SOURCES)
def test_ir(name):
    _check(name, "ir")


@pytest.mark.parametrize("name", [name for name in SOURCES if name not in stages.NO_PLAN])
def test_plan(name):
    _check(name, "plan")


def test_the_sources_are_the_shipped_files_and_the_handwritten_ones():
    shipped = sorted(path.name for folder in stages.ORIGINALS for path in (stages.ROOT / folder).glob("*.bam"))
    assert SOURCES == sorted(shipped + list(stages.HANDWRITTEN))
    for folder in stages.ORIGINALS:
        for path in (stages.ROOT / folder).glob("*.bam"):
            assert filecmp.cmp(path, stages.STAGES / path.name, shallow=False), (
                f"{path.name} differs from {folder}/{path.name}: python -m tests.stages --write"
            )
    assert set(stages.COMPILE_OPTIONS) <= set(SOURCES) and set(stages.NO_PLAN) <= set(SOURCES)


def test_no_golden_without_a_source():
    expected = {stages.golden_path(name, stage) for name in SOURCES for stage in stages.STAGE_SUFFIXES}
    expected = {path for path in expected if not (path.suffix == ".json" and path.name.split(".")[0] + ".bam" in stages.NO_PLAN)}
    present = {path for path in stages.STAGES.iterdir() if path.suffix != ".bam"}
    assert sorted(present - expected) == []


def test_the_sources_use_every_combinator():
    """Direct call, chain, parallel, vote, refine, and plan with and without a critic."""
    from bamasc.syntax import ast

    seen = set()

    def walk(node):
        if isinstance(node, ast.Plan):
            seen.add("plan with critic" if node.critic else "plan without critic")
        elif node is not None and type(node).__name__ in ("SlotCall", "Chain", "Parallel", "Vote", "Refine"):
            seen.add(type(node).__name__)
        for name in getattr(type(node), "__record_fields__", ()):
            value = getattr(node, name)
            for item in value if isinstance(value, tuple) else (value,):
                if hasattr(type(item), "__record_fields__"):
                    walk(item)

    from bamasc.loader import load

    for name in SOURCES:
        path = str(stages.STAGES / name)
        walk(load(path).modules[path])
    assert seen >= {"SlotCall", "Chain", "Parallel", "Vote", "Refine", "plan with critic", "plan without critic"}
