"""Per-stage golden files: what each stage of the compiler makes of a fixed set of sources.

For every source `tests/fixtures/stages/NAME.bam` there are up to three goldens:

- `NAME.ast.txt`: the parsed AST of the file itself (`dump_ast`): every field
  of every node, in declaration order, as an indented tree; spans as
  `line:col-end_line:end_col`.
- `NAME.ir.txt`: the unrolled calls (`dump_ir`). First, for each system (as
  the compiler binds it, with `COMPILE_OPTIONS`) and each of its templates:
  the slot counts and seats the binder chose, every call with its id, slot,
  instance, role, reads_task, inputs, condition, combinator and step and its token
  and cost bounds, the answer value and the worst case; for an infeasible
  template, why. Then every topology declared in the file, unrolled at every
  slot-count combination its ranges allow (calls and answer, no bounds).
  Nothing in it names a Python class, so it reads the same whether the IR is
  a list of records or a graph whose nodes carry these fields (only
  `_calls` and `_answer` below would change).
- `NAME.plan.json`: the exact bytes `bamasc compile NAME.bam -o NAME.plan.json`
  writes, run in a folder that holds the sources, with the options of
  `COMPILE_OPTIONS`. Only sources that declare a system have one (`NO_PLAN`).
  No normalisation is needed: the plan names each source relative to the plan
  (`NAME.bam`, `pool.bam`) or as `std/NAME.bam`, and hashes file contents only.

The sources are copies of every file of `examples/` and `stdlib_topologies/`
(refreshed by `--write`; `test_copies_match_their_originals` keeps them in
step) and the handwritten `HANDWRITTEN` ones, which between them use every
combinator: direct call, chain, parallel, vote, refine, and plan with and
without a reviewing critic.

Regenerate every golden of this module and of `tests/cli_golden.py`, after a
change that is meant to alter them (review the diff before committing):

    python -m tests.stages --write
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import io
import itertools
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGES = ROOT / "tests" / "fixtures" / "stages"

# Copied into STAGES by --write, so that the goldens follow the shipped files.
ORIGINALS = ("examples", "stdlib_topologies")
# Written by hand for these goldens (and used by tests/cli_golden.py).
HANDWRITTEN = ("combinators.bam", "tight.bam", "imports.bam", "pool.bam", "deadline.bam")

# Sources whose plan is compiled with more than the defaults: the options of
# `bamasc compile` (and the same system and budget for the IR).
COMPILE_OPTIONS: dict[str, dict] = {
    # One of two systems, at a budget other than the declared 400 µ$: the plan
    # records both in `compiled_with`.
    "imports.bam": {"system": "second", "budget": 150},
}

# Sources with no plan golden, and why.
NO_PLAN = {
    "feedback.bam": "a stdlib template: no system to compile",
    "linear.bam": "a stdlib template: no system to compile",
    "planner.bam": "a stdlib template: no system to compile",
    "star.bam": "a stdlib template: no system to compile",
    "pool.bam": "models and roles only: no system to compile",
}

STAGE_SUFFIXES = {"ast": ".ast.txt", "ir": ".ir.txt", "plan": ".plan.json"}


def sources() -> list[str]:
    """The names of the stage sources, sorted."""
    return sorted(path.name for path in STAGES.glob("*.bam"))


def golden_path(name: str, stage: str) -> Path:
    return STAGES / (Path(name).stem + STAGE_SUFFIXES[stage])


def compile_args(name: str) -> list[str]:
    """The `bamasc compile` options of `name` beyond the file and -o."""
    options = COMPILE_OPTIONS.get(name, {})
    args = []
    if "system" in options:
        args += ["--system", options["system"]]
    if "budget" in options:
        args += ["--budget", f"{options['budget']:g}"]
    if "method" in options:
        args += ["--method", options["method"]]
    return args


# ---------------------------------------------------------------- AST


def _fields(value) -> tuple[str, ...] | None:
    """The field names of a record or dataclass node, or None for anything else."""
    names = getattr(type(value), "__record_fields__", None)
    if names is not None:
        return tuple(names)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return tuple(field.name for field in dataclasses.fields(value))
    return None


def _is_span(value) -> bool:
    return all(hasattr(value, name) for name in ("file", "line", "col", "end_line", "end_col")) and _fields(value)


def _span_text(span, file: str, shown: str) -> str:
    where = f"{span.line}:{span.col}-{span.end_line}:{span.end_col}"
    if span.file != file:
        other = os.path.basename(span.file) if span.file else repr(span.file)
        return f"{other}@{where}"
    return where


def _scalar(value, file: str, shown: str) -> str:
    if isinstance(value, str) and value == file:
        return repr(shown)
    return repr(value)


def _dump_node(value, file: str, shown: str, indent: int, lines: list[str], label: str) -> None:
    pad = "  " * indent
    if _is_span(value):
        lines.append(f"{pad}{label}{_span_text(value, file, shown)}")
        return
    names = _fields(value)
    if names is not None:
        lines.append(f"{pad}{label}{type(value).__name__}")
        for name in names:
            _dump_node(getattr(value, name), file, shown, indent + 1, lines, f"{name}: ")
        return
    if isinstance(value, (tuple, list)):
        if not value:
            lines.append(f"{pad}{label}()")
        elif all(_fields(item) is None for item in value):
            lines.append(f"{pad}{label}({', '.join(_scalar(item, file, shown) for item in value)})")
        else:
            lines.append(f"{pad}{label}".rstrip())
            for index, item in enumerate(value):
                _dump_node(item, file, shown, indent + 1, lines, f"[{index}] ")
        return
    if isinstance(value, dict):
        lines.append(f"{pad}{label}{'{}' if not value else ''}".rstrip())
        for key, item in value.items():
            _dump_node(item, file, shown, indent + 1, lines, f"{key!r}: ")
        return
    lines.append(f"{pad}{label}{_scalar(value, file, shown)}")


def dump_tree(node, file: str = "", shown: str = "") -> str:
    """An indented dump of a tree of record/dataclass nodes: every field, in order.

    Strings equal to `file` (the node's source path) are shown as `shown`, and
    spans in `file` as `line:col-end_line:end_col` (others with their file's name).
    """
    lines: list[str] = []
    _dump_node(node, file, shown, 0, lines, "")
    return "\n".join(lines) + "\n"


def dump_ast(name: str) -> str:
    """The AST the loader parses from STAGES/name (the file itself, not its imports)."""
    from bamasc.loader import load

    path = str(STAGES / name)
    loaded = load(path)
    module = loaded.modules.get(path)
    if module is None:
        codes = ", ".join(f"{d.code} {d.span.line}:{d.span.col}" for d in loaded.diagnostics if d.span)
        return f"# {name}: no module ({codes})\n"
    return f"# AST of {name}\n" + dump_tree(module, path, name)


# ---------------------------------------------------------------- IR

CALL_FIELDS = ("slot", "instance", "role", "reads_task", "combinator", "inputs", "condition", "step")
BOUND_FIELDS = ("model", "input_tokens", "output_tokens", "input_cost", "output_cost", "cost")


def _calls(unrolled) -> list[dict]:
    """Every call of an unrolled flow, in the compiler's order, as plain fields."""
    return [{"id": call.id, **{name: getattr(call, name) for name in CALL_FIELDS}} for call in unrolled.calls]


def _answer(unrolled) -> dict:
    answer = unrolled.answer
    return {"nodes": tuple(answer.nodes), "one_of": answer.one_of, "task": answer.task}


def _value(value) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(value) + "]"
    return repr(value)


def _call_lines(calls: list[dict], bounds: dict, pad: str) -> list[str]:
    lines = []
    for call in calls:
        fields = " ".join(f"{name}={_value(call[name])}" for name in CALL_FIELDS)
        lines.append(f"{pad}{call['id']}: {fields}")
        bound = bounds.get(call["id"])
        if bound is not None:
            lines.append(f"{pad}  bound: " + " ".join(f"{name}={getattr(bound, name)!r}" for name in BOUND_FIELDS))
    return lines


def _answer_line(unrolled, pad: str) -> str:
    answer = _answer(unrolled)
    return f"{pad}answer: nodes={_value(answer['nodes'])} one_of={answer['one_of']!r} task={answer['task']!r}"


def _counts_text(counts) -> str:
    return " ".join(f"{slot}={count}" for slot, count in counts) or "(no slots)"


def _binding_lines(binding) -> list[str]:
    lines = [f"  template {binding.template}: " + ("feasible" if binding.feasible else "infeasible")]
    if not binding.feasible:
        lines.append(f"    cheapest_cost: {binding.cheapest_cost!r}")
        lines.append(f"    binding_rows: {_value(tuple(binding.binding_rows))}")
        return lines
    lines.append(f"    counts: {_counts_text(binding.counts)}")
    lines.append("    seats: " + " ".join(f"{s.slot}[{s.instance}]={s.model}" for s in binding.seats))
    lines.append("    calls:")
    lines.extend(_call_lines(_calls(binding.unrolled), {b.node: b for b in binding.bounds}, "      "))
    lines.append(_answer_line(binding.unrolled, "    "))
    lines.append(f"    worst_case_cost: {binding.worst_case_cost!r}")
    return lines


def _vector_lines(topology) -> list[str]:
    from bamasc.ir.unroll import unroll

    names = [slot.name for slot in topology.slots]
    lines = [f"topology {topology.name}"]
    for vector in itertools.product(*(range(slot.lo, slot.hi + 1) for slot in topology.slots)):
        counts = dict(zip(names, vector))
        unrolled = unroll(topology, counts)
        lines.append(f"  counts {_counts_text(counts.items())}")
        lines.extend(_call_lines(_calls(unrolled), {}, "    "))
        lines.append(_answer_line(unrolled, "    "))
    return lines


def dump_ir(name: str) -> str:
    from bamasc.plan.compile import check_file, compile_file

    path = str(STAGES / name)
    options = COMPILE_OPTIONS.get(name, {})
    lines = [f"# IR of {name}" + (f" ({' '.join(compile_args(name))})" if options else "")]
    program, _, _ = check_file(path)
    if program is None:
        return "\n".join(lines + ["no program: the file has errors"]) + "\n"
    if program.systems:
        result = compile_file(path, options.get("system"), options.get("budget"), options.get("method", "lexicographic"))
        for system_name, found in result.bindings.items():
            system = result.program.systems[system_name]
            budget = found[0].budget if found else system.budget
            lines.append("")
            lines.append(f"system {system_name}: budget={budget!r} task_tokens={system.task_tokens!r}")
            for binding in found:
                lines.extend(_binding_lines(binding))
    for topology in program.topologies.values():
        if os.path.realpath(topology.file) == os.path.realpath(path):
            lines.append("")
            lines.extend(_vector_lines(topology))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- plan


def plan_bytes(name: str) -> bytes | None:
    """What `bamasc compile NAME -o NAME.plan.json` writes, run where the sources are; None if no plan."""
    if name in NO_PLAN:
        return None
    from bamasc.cli import main

    plan = Path(name).stem + ".plan.json"
    with tempfile.TemporaryDirectory() as folder:
        for source in STAGES.glob("*.bam"):
            shutil.copyfile(source, os.path.join(folder, source.name))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.chdir(folder), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["compile", name, "-o", plan, *compile_args(name)])
        if code != 0:
            raise RuntimeError(f"compiling {name} exited {code}:\n{err.getvalue()}")
        return Path(folder, plan).read_bytes()


# ---------------------------------------------------------------- comparing and writing


def produce(name: str, stage: str) -> bytes | None:
    if stage == "ast":
        return dump_ast(name).encode("utf-8")
    if stage == "ir":
        return dump_ir(name).encode("utf-8")
    return plan_bytes(name)


def difference(expected: bytes, actual: bytes, label: str) -> str:
    """A unified diff of two goldens (empty when equal), for an assertion message."""
    if expected == actual:
        return ""
    old = expected.decode("utf-8", "replace").splitlines(keepends=True)
    new = actual.decode("utf-8", "replace").splitlines(keepends=True)
    diff = "".join(difflib.unified_diff(old, new, f"{label} (golden)", f"{label} (now)", n=2))
    if not diff:  # same lines, different line endings or final newline
        diff = f"{label}: same lines, different bytes (line endings or final newline)\n"
    return diff + "\nIf the change is intended: python -m tests.stages --write, and review the diff.\n"


def compare(expected_path: Path, actual: bytes) -> str:
    if not expected_path.is_file():
        return f"{expected_path.relative_to(ROOT)} is missing: python -m tests.stages --write\n"
    return difference(expected_path.read_bytes(), actual, str(expected_path.relative_to(ROOT)))


def copy_originals() -> None:
    """Refresh the copies of the shipped examples and stdlib templates."""
    for folder in ORIGINALS:
        for source in sorted((ROOT / folder).glob("*.bam")):
            shutil.copyfile(source, STAGES / source.name)


def write() -> list[Path]:
    """Regenerate every stage golden; returns the files written. Stale goldens are removed."""
    copy_originals()
    written = []
    for name in sources():
        for stage in STAGE_SUFFIXES:
            data = produce(name, stage)
            path = golden_path(name, stage)
            if data is None:
                if path.exists():
                    path.unlink()
                continue
            path.write_bytes(data)
            written.append(path)
    keep = set(written) | set(STAGES.glob("*.bam"))
    for path in STAGES.iterdir():
        if path.is_file() and path not in keep:
            path.unlink()
    return written


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print("usage: python -m tests.stages --write   (regenerates the stage and CLI goldens)", file=sys.stderr)
        return 2
    from tests import cli_golden
    from tests.helpers import PINNED_CATALOGUE

    os.environ["BAMASC_CATALOG"] = PINNED_CATALOGUE  # what the tests compile against (tests/helpers/__init__.py)
    stage_files = write()
    cli_files = cli_golden.write()
    print(f"wrote {len(stage_files)} stage goldens in {STAGES.relative_to(ROOT)}")
    print(f"wrote {len(cli_files)} CLI goldens in {cli_golden.GOLDEN.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
