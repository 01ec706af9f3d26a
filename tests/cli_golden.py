"""CLI golden files: standard output, standard error, exit code and written files of `bamasc` commands.

Each case runs `python -m bamasc ARGS...` in a subprocess, in a fresh folder
that holds copies of its group's inputs (so every path it prints is relative
and short), and is recorded in `tests/fixtures/cli/GROUP/CASE.txt`:

    $ bamasc compile gsm8k.bam -o plan.json
    exit: 0
    --- stdout
    ...
    --- stderr: empty
    --- file plan.json
    ...

A section whose text does not end with a newline says so in its header
(`--- stdout (no newline at end)`), so the record is exact. The cases of a
group run in order in one folder (later ones read what earlier ones wrote:
`plan.json`, a trace to `--resume`); groups run in parallel.

What is covered: for every file of `examples/`, lint in every format,
compile (table, JSON, `--method weights`, `-o`), explain, graph (mermaid and
dot; png only by its stdout, not its bytes, which depend on the Graphviz
build, and only where Graphviz's `dot` is installed), and exec on the fake provider (a task, a plan, `--dry-run`, a
dataset with a trace, `--resume`); every template of
`tests/fixtures/stages/combinators.bam` run on the fake in echo and dry-run
mode with its trace; multi-file lint, `--strict`, `--with-importers`,
sweeps; output caps chosen in ranges (`tests/fixtures/cli/inputs/caps.bam`); `score` (GSM8K and MATH), `bench` and `collect` with `--fake` on the
small datasets of `tests/fixtures/datasets/`; usage and input errors; the
`--help` of every command. Not covered: `train` and `compile --task` (they
load the MiniLM policy stack, tens of seconds), MBPP scoring (it needs the
code sandbox, whose availability depends on the machine), and cassettes.

Only volatile text is normalised (`normalise`), nothing else:

- the case's temporary folder becomes `<work>` and the checkout `<repo>`;
- the random per-run prefix of trace reservation ids (`"id": "5a40ec39.3"`)
  becomes `<run1>`, `<run2>`, ... in order of first appearance in the text
  (so the lines of different runs stay apart; the counter after the dot is kept);
- `"latency_ms": 0.061` (wall-clock time) becomes `"latency_ms": "<ms>"`, a
  task's `"elapsed_s": 0.004` becomes `"elapsed_s": "<s>"`, and a trace line's
  `"at": 1796083200.123` (when it was written) becomes `"at": "<at>"`.

Cases marked `argparse` print text that argparse words (usage lines, help,
its own error messages); that wording changes between Python versions, so
they are compared only on the version the goldens were written with
(`ARGPARSE_PYTHON`).

Regenerate (together with the stage goldens): `python -m tests.stages --write`;
these alone: `python -m tests.cli_golden --write`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import PINNED_CATALOGUE

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "fixtures" / "cli"
INPUTS = GOLDEN / "inputs"
DATASETS = ROOT / "tests" / "fixtures" / "datasets"
STAGES = ROOT / "tests" / "fixtures" / "stages"
EXAMPLES = ROOT / "examples"

# The Python version whose argparse wrote the `argparse` cases.
ARGPARSE_PYTHON = (3, 11)
TIMEOUT = 120

TASK = "Tom has 3 apples and buys 4 more. How many apples does he have now?"
TASK2 = "A shop sells 12 pens a day. How many pens does it sell in 5 days?"


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    files: tuple[str, ...] = ()  # files the command writes, recorded after it ran
    images: tuple[str, ...] = ()  # files recorded only by whether they are PNG images
    argparse: bool = False  # its output is argparse's wording (see ARGPARSE_PYTHON)
    programs: tuple[str, ...] = ()  # programs it runs that a machine may lack (the case skips without them)


@dataclass
class Group:
    name: str
    inputs: dict[str, Path]  # name in the case folder -> the file copied there
    cases: list[Case] = field(default_factory=list)

    def add(self, name: str, *args: str, files=(), images=(), argparse=False, programs=()) -> None:
        self.cases.append(Case(name, tuple(args), tuple(files), tuple(images), argparse, tuple(programs)))


# ---------------------------------------------------------------- the cases

# Per example: its first system's templates, and the task text exec runs.
EXAMPLE_TEMPLATES = ("linear", "star", "feedback", "planner")
EXAMPLE_TASKS = {
    "gsm8k": TASK,
    "math": "What is $2^{10}$? Give the answer in \\boxed{}.",
    "mbpp": "Write a function that returns the sum of a list of numbers.",
    "review": "Write a function that returns the sum of a list of numbers.",
    "quickstart": TASK,
    "support": "My invoice for March charged me twice; please refund the duplicate payment.",
    "support_tools": "Order A1002 was charged twice. Can I get the second payment back?",
}
# Examples whose runs start tools (a Python function, an MCP server): their exec cases are not
# recorded here; the tool tests run them.
NO_EXEC = ("support_tools",)
# Examples whose every template is explained and drawn, not only the selected one.
EVERY_TEMPLATE = ("gsm8k", "quickstart")

COMBINATOR_TEMPLATES = ("single", "relay", "ballot", "panel", "review", "solo_plan", "critic_plan")


def _example_group(stem: str) -> Group:
    source = f"{stem}.bam"
    group = Group(stem, {source: EXAMPLES / source, "tasks.jsonl": INPUTS / "tasks.jsonl"})
    group.add("lint", "lint", source)
    for format_ in ("json", "sarif", "github"):
        group.add(f"lint-{format_}", "lint", source, "--format", format_)
    group.add("compile", "compile", source)
    group.add("compile-json", "compile", source, "--format", "json")
    group.add("compile-weights", "compile", source, "--method", "weights")
    group.add("compile-o", "compile", source, "-o", "plan.json", files=["plan.json"])
    group.add("explain", "explain", source)
    group.add("explain-plan", "explain", "plan.json")
    group.add("graph", "graph", "plan.json")
    group.add("graph-dot", "graph", "plan.json", "--format", "dot")
    if stem in EVERY_TEMPLATE:
        for template in EXAMPLE_TEMPLATES:
            group.add(f"explain-{template}", "explain", "plan.json", "--template", template)
            group.add(f"graph-{template}", "graph", "plan.json", "--template", template)
    task = EXAMPLE_TASKS[stem]
    if stem in NO_EXEC:
        return group
    group.add("exec-task", "exec", source, "--fake", "echo", "--task", task, "--trace", "trace-task.jsonl",
              files=["trace-task.jsonl"])
    group.add("exec-plan-verbose", "exec", "plan.json", "--fake", "verbose", "--task", TASK2,
              "--trace", "trace-verbose.jsonl", files=["trace-verbose.jsonl"])
    group.add("exec-dry-run", "exec", source, "--dry-run", "--task", task)
    group.add("exec-dataset", "exec", source, "--fake", "echo", "--dataset", "tasks.jsonl",
              "--trace", "trace-dataset.jsonl", files=["trace-dataset.jsonl"])
    if stem == "gsm8k":
        group.add("exec-resume", "exec", source, "--fake", "echo", "--dataset", "tasks.jsonl",
                  "--trace", "trace-dataset.jsonl", "--resume", files=["trace-dataset.jsonl"])
        # A trace left by a crash: one reservation open, one task finished, one ended in error,
        # and a half-written last line.
        group.inputs["interrupted-trace.jsonl"] = INPUTS / "interrupted-trace.jsonl"
        group.add("exec-resume-interrupted", "exec", source, "--fake", "echo", "--dataset", "tasks.jsonl",
                  "--trace", "interrupted-trace.jsonl", "--resume", files=["interrupted-trace.jsonl"])
        group.add("exec-baseline-system", "exec", source, "--system", "gsm8k_star_nano", "--fake", "echo",
                  "--task", task)
        group.add("exec-template", "exec", "plan.json", "--template", "planner", "--fake", "echo", "--task", task,
                  "--trace", "trace-planner.jsonl", files=["trace-planner.jsonl"])
        group.add("compile-budget", "compile", source, "--system", "gsm8k", "--budget", "$0.000875")
        group.add("compile-sweep", "compile", source, "--system", "gsm8k", "--sweep", "500:2000:500")
        group.add("compile-sweep-json", "compile", source, "--system", "gsm8k", "--sweep", "500:1000:250",
                  "--format", "json")
        group.add("explain-budget", "explain", source, "--budget", "875")
        group.add("graph-o", "graph", "plan.json", "--format", "dot", "-o", "graph.dot", files=["graph.dot"])
        group.add("graph-png", "graph", "plan.json", "--format", "png", "-o", "graph.png", images=["graph.png"],
                  programs=["dot"])
    return group


def _combinators_group() -> Group:
    group = Group("combinators", {"combinators.bam": STAGES / "combinators.bam", "tasks.jsonl": INPUTS / "tasks.jsonl"})
    group.add("compile-o", "compile", "combinators.bam", "-o", "plan.json", files=["plan.json"])
    group.add("explain", "explain", "plan.json")
    for template in COMBINATOR_TEMPLATES:
        group.add(f"graph-{template}", "graph", "plan.json", "--template", template, "--format", "dot")
        group.add(f"exec-{template}", "exec", "plan.json", "--template", template, "--fake", "echo", "--task", TASK,
                  "--trace", f"trace-{template}.jsonl", files=[f"trace-{template}.jsonl"])
        group.add(f"dry-run-{template}", "exec", "plan.json", "--template", template, "--dry-run", "--task", TASK,
                  "--trace", f"dry-{template}.jsonl", files=[f"dry-{template}.jsonl"])
    group.add("exec-thrifty-dataset", "exec", "combinators.bam", "--system", "thrifty", "--fake", "echo",
              "--dataset", "tasks.jsonl", "--concurrency", "2", "--trace", "trace-thrifty.jsonl",
              files=["trace-thrifty.jsonl"])
    group.add("explain-thrifty", "explain", "combinators.bam", "--system", "thrifty")
    return group


def _lint_group() -> Group:
    names = ("combinators.bam", "tight.bam", "imports.bam", "pool.bam")
    group = Group("lint", {name: STAGES / name for name in names})
    several = ("combinators.bam", "tight.bam", "imports.bam")
    group.add("lint-several", "lint", *several)
    for format_ in ("json", "sarif", "github"):
        group.add(f"lint-several-{format_}", "lint", *several, "--format", format_)
    group.add("lint-strict", "lint", "--strict", "combinators.bam")
    group.add("lint-max-diagnostics", "lint", "--max-diagnostics", "1", "tight.bam", "combinators.bam")
    group.add("lint-with-importers", "lint", "--with-importers", "pool.bam")
    group.add("compile-tight", "compile", "tight.bam")
    group.add("compile-imports", "compile", "imports.bam")
    group.add("compile-imports-system", "compile", "imports.bam", "--system", "second", "--budget", "$0.00015")
    group.add("compile-imports-sweep", "compile", "imports.bam", "--system", "second", "--sweep", "100:400:100")
    group.add("explain-tight", "explain", "tight.bam")
    group.add("explain-tight-infeasible", "explain", "tight.bam", "--template", "feedback")
    return group


def _caps_group() -> Group:
    """Output caps the compiler chooses (`max_output = lo..hi`): the table, a sweep across the smallest caps'
    bound, the plan, explain, and a worst-case run on the verbose fake with a task as long as the bound's."""
    group = Group("caps", {"caps.bam": INPUTS / "caps.bam"})
    group.add("compile", "compile", "caps.bam")
    group.add("compile-sweep", "compile", "caps.bam", "--sweep", "250:600:50")
    group.add("compile-o", "compile", "caps.bam", "-o", "plan.json", files=["plan.json"])
    group.add("explain", "explain", "plan.json")
    group.add("exec-verbose", "exec", "plan.json", "--task", "t" * 21, "--fake", "verbose")
    return group


def _fallbacks_group() -> Group:
    """A seat model's fallbacks as explain shows them, from the source and from its plan."""
    group = Group("fallbacks", {"fallbacks.bam": INPUTS / "fallbacks.bam"})
    group.add("explain", "explain", "fallbacks.bam")
    group.add("compile-o", "compile", "fallbacks.bam", "-o", "plan.json", files=["plan.json"])
    group.add("explain-plan", "explain", "plan.json")
    return group


def _errors_group() -> Group:
    group = Group(
        "errors",
        {
            "gsm8k.bam": EXAMPLES / "gsm8k.bam",
            "tight.bam": STAGES / "tight.bam",
            "broken.bam": INPUTS / "broken.bam",
            "tasks.jsonl": INPUTS / "tasks.jsonl",
            "gsm8k_bad.jsonl": DATASETS / "gsm8k_bad.jsonl",
        },
    )
    group.add("compile-o", "compile", "gsm8k.bam", "-o", "plan.json")
    group.add("no-command", argparse=True)
    group.add("unknown-command", "frobnicate", argparse=True)
    group.add("version", "--version")
    group.add("lint-no-files", "lint", argparse=True)
    group.add("budget-not-a-number", "compile", "gsm8k.bam", "--budget", "abc", argparse=True)
    group.add("budget-negative", "compile", "gsm8k.bam", "--budget", "-5", argparse=True)
    group.add("budget-too-large", "compile", "gsm8k.bam", "--budget", "2e12", argparse=True)
    group.add("concurrency-zero", "exec", "gsm8k.bam", "--task", TASK, "--concurrency", "0", argparse=True)
    group.add("lint-missing-file", "lint", "missing.bam")
    group.add("lint-missing-file-json", "lint", "missing.bam", "--format", "json")
    group.add("lint-directory", "lint", ".")
    group.add("compile-missing-file", "compile", "missing.bam")
    group.add("explain-missing-plan", "explain", "missing.json")
    group.add("graph-missing-plan", "graph", "missing.json")
    group.add("lint-syntax-error", "lint", "broken.bam")
    group.add("lint-syntax-error-json", "lint", "broken.bam", "--format", "json")
    group.add("compile-syntax-error", "compile", "broken.bam")
    group.add("exec-syntax-error", "exec", "broken.bam", "--fake", "echo", "--task", TASK)
    group.add("compile-unknown-system", "compile", "gsm8k.bam", "--system", "nope")
    group.add("compile-infeasible", "compile", "tight.bam", "--budget", "100")
    group.add("compile-plot-without-sweep", "compile", "gsm8k.bam", "--plot", "plot.png")
    group.add("compile-unwritable-output", "compile", "gsm8k.bam", "-o", "no-such-folder/plan.json")
    group.add("explain-unknown-template", "explain", "plan.json", "--template", "nope")
    group.add("explain-plan-with-budget", "explain", "plan.json", "--budget", "875")
    group.add("graph-png-without-output", "graph", "plan.json", "--format", "png")
    group.add("graph-unknown-system", "graph", "plan.json", "--system", "nope")
    group.add("exec-without-task", "exec", "gsm8k.bam", argparse=True)
    group.add("exec-task-and-dataset", "exec", "gsm8k.bam", "--task", TASK, "--dataset", "tasks.jsonl", argparse=True)
    group.add("exec-resume-without-trace", "exec", "gsm8k.bam", "--fake", "echo", "--task", TASK, "--resume")
    group.add("exec-without-api-key", "exec", "gsm8k.bam", "--task", TASK)
    group.add("exec-plan-with-budget", "exec", "plan.json", "--fake", "echo", "--task", TASK, "--budget", "100")
    group.add("exec-unknown-template", "exec", "plan.json", "--fake", "echo", "--task", TASK, "--template", "nope")
    group.add("exec-infeasible-template", "exec", "tight.bam", "--fake", "echo", "--task", TASK, "--template", "feedback")
    group.add("exec-missing-dataset", "exec", "gsm8k.bam", "--fake", "echo", "--dataset", "missing.jsonl")
    group.add("exec-bad-rows", "exec", "gsm8k.bam", "--fake", "echo", "--dataset", "gsm8k_bad.jsonl")
    group.add("exec-skip-bad-rows", "exec", "gsm8k.bam", "--fake", "echo", "--dataset", "gsm8k_bad.jsonl",
              "--skip-bad-rows")
    group.add("exec-trace-is-dataset", "exec", "gsm8k.bam", "--fake", "echo", "--dataset", "tasks.jsonl",
              "--trace", "tasks.jsonl")
    return group


def _evaluate_group() -> Group:
    group = Group(
        "evaluate",
        {
            "gsm8k.bam": EXAMPLES / "gsm8k.bam",
            "gsm8k.jsonl": DATASETS / "gsm8k.jsonl",
            "math500.jsonl": DATASETS / "math500.jsonl",
            "gsm8k-predictions.jsonl": INPUTS / "gsm8k-predictions.jsonl",
            "math-predictions.jsonl": INPUTS / "math-predictions.jsonl",
        },
    )
    group.add("score-gsm8k-bad-row", "score", "--dataset", "gsm8k.jsonl", "--kind", "gsm8k",
              "--predictions", "gsm8k-predictions.jsonl")
    group.add("score-gsm8k", "score", "--dataset", "gsm8k.jsonl", "--kind", "gsm8k",
              "--predictions", "gsm8k-predictions.jsonl", "--skip-bad-rows", "-o", "scored.jsonl",
              files=["scored.jsonl"])
    group.add("score-math", "score", "--dataset", "math500.jsonl", "--kind", "math",
              "--predictions", "math-predictions.jsonl", "-o", "math-scored.jsonl", files=["math-scored.jsonl"])
    group.add("score-missing-dataset", "score", "--dataset", "missing.jsonl", "--kind", "gsm8k",
              "--predictions", "gsm8k-predictions.jsonl")
    group.add("bench", "bench", "gsm8k.bam", "--dataset", "gsm8k.jsonl", "--budgets", "500,1625",
              "--baseline", "gsm8k_linear_nano", "--baseline", "gsm8k_star_nano", "--fake", "echo",
              "--concurrency", "3", "-o", "results.json", files=["results.json"])
    group.add("bench-limit", "bench", "gsm8k.bam", "--dataset", "gsm8k.jsonl", "--limit", "2", "--fake", "verbose")
    group.add("collect", "collect", "gsm8k.bam", "--dataset", "gsm8k.jsonl", "--budgets", "875,1625",
              "--fake", "echo", "-o", "offline.jsonl", "--trace", "collect-trace.jsonl",
              files=["offline.jsonl", "collect-trace.jsonl"])
    group.add("collect-again", "collect", "gsm8k.bam", "--dataset", "gsm8k.jsonl", "--budgets", "875,1625",
              "--fake", "echo", "-o", "offline.jsonl")
    return group


def _help_group() -> Group:
    group = Group("help", {})
    group.add("help", "--help", argparse=True)
    for command in ("lint", "fmt", "compile", "explain", "graph", "exec", "trace", "report", "bench", "score", "collect", "train", "fit-weights", "reproduce", "prices", "lsp", "serve"):
        group.add(f"help-{command}", command, "--help", argparse=True)
    return group


def groups() -> list[Group]:
    found = [_example_group(path.stem) for path in sorted(EXAMPLES.glob("*.bam"))]
    return found + [_combinators_group(), _lint_group(), _caps_group(), _fallbacks_group(), _errors_group(), _evaluate_group(), _help_group()]


def all_cases() -> list[tuple[Group, Case]]:
    return [(group, case) for group in groups() for case in group.cases]


def golden_path(group: Group, case: Case) -> Path:
    return GOLDEN / group.name / f"{case.name}.txt"


# ---------------------------------------------------------------- running and recording

_RESERVATION_ID = re.compile(r'("id": ")([0-9a-f]{8})(\.\d+")')
_LATENCY = re.compile(r'("latency_ms": )-?[0-9][0-9.e+-]*')
_ELAPSED = re.compile(r'("elapsed_s": )-?[0-9][0-9.e+-]*')
_AT = re.compile(r'("at": )[0-9][0-9.e+-]*')


def normalise(text: str, work: str) -> str:
    """Replace what differs between runs of the same command (see the module docstring)."""
    for folder in sorted({work, os.path.realpath(work)}, key=len, reverse=True):
        text = text.replace(folder, "<work>")
    for folder in sorted({str(ROOT), os.path.realpath(ROOT)}, key=len, reverse=True):
        text = text.replace(folder, "<repo>")
    runs: dict[str, str] = {}

    def run(match: re.Match) -> str:
        label = runs.setdefault(match.group(2), f"<run{len(runs) + 1}>")
        return match.group(1) + label + match.group(3)

    text = _RESERVATION_ID.sub(run, text)
    text = _ELAPSED.sub(r'\1"<s>"', text)
    text = _AT.sub(r'\1"<at>"', text)
    return _LATENCY.sub(r'\1"<ms>"', text)


CATALOG_DAY = "1796083200"  # 2026-12-01


def _environment(work: str) -> dict[str, str]:
    """The run's environment: no API keys, this checkout's bamasc, a fixed terminal width and day."""
    env = {
        key: value
        for key, value in os.environ.items()
        if "API_KEY" not in key and not key.startswith(("BAMASC_", "PYTHON", "COLUMNS"))
    }
    env.update(
        PYTHONPATH=str(ROOT),
        PYTHONIOENCODING="utf-8",
        PYTHONDONTWRITEBYTECODE="1",
        COLUMNS="80",
        BAMASC_CACHE=os.path.join(work, ".cache"),
        # The day catalogue prices are taken at (and the snapshot's age measured from).
        SOURCE_DATE_EPOCH=CATALOG_DAY,
        # The catalogue the goldens were written with, whatever genai-prices is installed (tests/conftest.py).
        BAMASC_CATALOG=PINNED_CATALOGUE,
    )
    return env


def _section(header: str, text: str) -> str:
    if not text:
        return f"--- {header}: empty\n"
    if text.endswith("\n"):
        return f"--- {header}\n{text}"
    return f"--- {header} (no newline at end)\n{text}\n"


def run_case(case: Case, work: str) -> str:
    """Run one case in `work` and return its record."""
    command = [sys.executable, "-m", "bamasc", *case.args]
    done = subprocess.run(command, cwd=work, env=_environment(work), capture_output=True, timeout=TIMEOUT)
    parts = [
        f"$ {shlex.join(['bamasc', *case.args])}\n",
        f"exit: {done.returncode}\n",
        _section("stdout", normalise(done.stdout.decode("utf-8", "replace"), work)),
        _section("stderr", normalise(done.stderr.decode("utf-8", "replace"), work)),
    ]
    for name in case.files:
        path = os.path.join(work, name)
        if not os.path.isfile(path):
            parts.append(f"--- file {name}: not written\n")
            continue
        with open(path, "rb") as handle:
            parts.append(_section(f"file {name}", normalise(handle.read().decode("utf-8", "replace"), work)))
    for name in case.images:
        path = os.path.join(work, name)
        if not os.path.isfile(path):
            parts.append(f"--- file {name}: not written\n")
            continue
        with open(path, "rb") as handle:
            png = handle.read(8) == b"\x89PNG\r\n\x1a\n"
        parts.append(f"--- file {name}: {'a PNG image' if png else 'NOT a PNG image'}\n")
    return "".join(parts)


def run_group(group: Group) -> dict[str, str]:
    """Every case of the group, in order, in one fresh folder: case name -> record."""
    records = {}
    with tempfile.TemporaryDirectory(prefix=f"bamasc-golden-{group.name}-") as work:
        for name, source in group.inputs.items():
            shutil.copyfile(source, os.path.join(work, name))
        for case in group.cases:
            records[case.name] = run_case(case, work)
    return records


def run_all(only: set[str] | None = None, workers: int | None = None) -> dict[tuple[str, str], str]:
    """Every group's records (or those of the groups named in `only`), (group name, case name) -> record;
    groups run in parallel."""
    everything = [group for group in groups() if only is None or group.name in only]
    workers = workers or max(2, min(8, os.cpu_count() or 2))
    # The largest groups first, so that no long group starts last.
    order = sorted(everything, key=lambda g: -len(g.cases))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = dict(zip((g.name for g in order), pool.map(run_group, order)))
    return {(g.name, name): record for g in everything for name, record in results[g.name].items()}


def argparse_version_matches() -> bool:
    return sys.version_info[:2] == ARGPARSE_PYTHON


def write() -> list[Path]:
    """Regenerate every CLI golden; stale ones (of cases no longer listed) are removed."""
    records = run_all()
    written = []
    keep_argparse = not argparse_version_matches()
    for group, case in all_cases():
        path = golden_path(group, case)
        if case.argparse and keep_argparse and path.exists():
            continue  # written on ARGPARSE_PYTHON only
        if any(shutil.which(program) is None for program in case.programs) and path.exists():
            continue  # written where the programs it runs are installed
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(records[(group.name, case.name)].encode("utf-8"))
        written.append(path)
    expected = {golden_path(group, case) for group, case in all_cases()}
    for path in GOLDEN.glob("*/*.txt"):
        if path.parent != INPUTS and path not in expected:
            path.unlink()
    for folder in GOLDEN.iterdir():
        if folder.is_dir() and folder != INPUTS and not any(folder.iterdir()):
            folder.rmdir()
    return written


def stray_goldens() -> list[Path]:
    """Golden files that no case produces."""
    expected = {golden_path(group, case) for group, case in all_cases()}
    return sorted(path for path in GOLDEN.glob("*/*.txt") if path.parent != INPUTS and path not in expected)


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print("usage: python -m tests.cli_golden --write   (regenerates the CLI goldens only)", file=sys.stderr)
        return 2
    written = write()
    print(f"wrote {len(written)} CLI goldens in {GOLDEN.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
