"""The `bamasc bench` and `bamasc score` commands: their parsers, and runs that print and set exit codes."""

from __future__ import annotations

import argparse
import os
import sys

KINDS = ("gsm8k", "mbpp", "math")
SPLITS = ("prompt", "test", "validation", "train")


def add_bench(commands) -> None:
    from bamasc.cli import _positive, _seconds

    bench = commands.add_parser("bench", help="accuracy and cost of a system across budgets, beside baselines")
    bench.add_argument("file", metavar="FILE")
    bench.add_argument("--dataset", required=True, metavar="D", help="GSM8K/MBPP/MATH file (or MATH folder) as published")
    bench.add_argument("--budgets", type=_budgets, metavar="B,B,...",
                       help="µ$ budgets to run the system at (default: the system's `budgets`, else its budget)")
    bench.add_argument("--baseline", action="append", default=[], metavar="NAME",
                       help="a system of FILE with one template and one model, run at its own budget (repeatable)")
    bench.add_argument("--system", help="the system to benchmark (default: the first in FILE)")
    bench.add_argument("--kind", choices=KINDS, help="dataset format and scorer (default: from the system's `answer`)")
    bench.add_argument("--split", choices=SPLITS, help="MBPP: keep only this split's task ids (test: 11-510)")
    bench.add_argument("--limit", type=_positive, metavar="N", help="the first N items only")
    bench.add_argument("--concurrency", type=_positive, default=8, metavar="N", help="tasks run at once (default 8)")
    bench.add_argument("-o", "--output", metavar="JSON", help="write the results here")
    bench.add_argument("--plot", metavar="PNG", help="draw mean cost against accuracy here")
    bench.add_argument("--fake", choices=("echo", "verbose"), help="answer every model with the offline fake provider")
    bench.add_argument("--cassette", metavar="JSONL", help="replay recorded calls instead of calling providers")
    bench.add_argument("--skip-bad-rows", action="store_true", help="report malformed dataset rows and go on")
    bench.add_argument("--code-timeout", type=_seconds, default=5.0, metavar="S",
                       help="MBPP: seconds each program may run in the sandbox (default 5)")
    bench.add_argument("--unsafe-hooks", action="store_true", help=UNSAFE_HOOKS_HELP)
    bench.set_defaults(run=run_bench)


UNSAFE_HOOKS_HELP = ("MBPP: where no jail can be built, run candidates under Python audit hooks only "
                     "(NOT a sandbox: a hostile candidate can read files and escape)")


def _isolation(args, kind: str) -> str | None:
    """The sandbox level `--unsafe-hooks` asks for, warned about; None (reported) where MBPP cannot be scored here.

    Checked before any task runs: a benchmark must not spend its calls and
    then find that it cannot score them.
    """
    isolation = "hooks" if args.unsafe_hooks else "namespaces"
    if kind != "mbpp":
        return isolation
    from bamasc.evaluate.sandbox import SandboxError, check_isolation

    try:
        check_isolation(isolation)
    except SandboxError as problem:
        hint = "" if args.unsafe_hooks else " (--unsafe-hooks scores without it, and is not a sandbox)"
        print(f"bamasc: error: {problem}{hint}", file=sys.stderr)
        return None
    if args.unsafe_hooks:
        print("bamasc: warning: --unsafe-hooks: candidates run without a jail, under Python audit hooks only; "
              "this is not a sandbox, and a hostile candidate can read this machine's files or escape",
              file=sys.stderr)
    return isolation


def add_score(commands) -> None:
    from bamasc.cli import _positive, _seconds

    score = commands.add_parser("score", help="score a file of model outputs against a dataset")
    score.add_argument("--dataset", required=True, metavar="D", help="GSM8K/MBPP/MATH file (or MATH folder) as published")
    score.add_argument("--kind", required=True, choices=KINDS)
    score.add_argument("--predictions", required=True, metavar="JSONL",
                       help="one object a line: `id` or `task_id` (else the line number) and `prediction`")
    score.add_argument("-o", "--output", metavar="JSONL", help="write one verdict a line here")
    score.add_argument("--split", choices=SPLITS, help="MBPP: keep only this split's task ids (test: 11-510)")
    score.add_argument("--concurrency", type=_positive, default=2, metavar="N", help="MBPP programs run at once (default 2)")
    score.add_argument("--skip-bad-rows", action="store_true", help="report malformed rows and go on")
    score.add_argument("--code-timeout", type=_seconds, default=5.0, metavar="S",
                       help="MBPP: seconds each program may run in the sandbox (default 5)")
    score.add_argument("--unsafe-hooks", action="store_true", help=UNSAFE_HOOKS_HELP)
    score.set_defaults(run=run_score)


def _budgets(text: str) -> list[float]:
    from bamasc.cli import _budget

    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("need at least one budget, e.g. 500,875,1250")
    return [_budget(part) for part in parts]


def _load_dataset(report, path: str, kind: str, split, skip_bad: bool):
    from bamasc.evaluate.datasets import DatasetError, load

    if not os.path.exists(path):
        report.usage(f"no such file: {path}")
        return None
    try:
        dataset = load(path, kind, skip_bad=skip_bad, split=split)
    except DatasetError as problem:
        print(f"bamasc: error: {problem} (use --skip-bad-rows to skip such rows)", file=sys.stderr)
        report.errors += 1
        return None
    for problem in dataset.problems:
        print(f"bamasc: warning: skipped {problem}", file=sys.stderr)
    return dataset


def run_bench(args) -> int:
    from bamasc.cli import Report, _compile, writable

    report = Report()
    for path in (args.file, args.cassette):
        if path is not None and not os.path.isfile(path):
            report.usage(f"no such file: {path}")
    if report.usage_problems:
        return report.exit_code
    # Before any task runs: a benchmark is minutes of calls, and its results must have somewhere to go.
    if args.output and not writable(report, args.output, "the results"):
        return report.exit_code
    if args.plot and not writable(report, args.plot, "the plot"):
        return report.exit_code
    result = _compile(report, args.file, args.system, None, "lexicographic")
    if result is None or result.plan is None:
        return report.exit_code
    from bamasc.evaluate.bench import BenchError, bench, bench_table, check_baseline, write_results
    from bamasc.evaluate.sandbox import Limits
    from bamasc.evaluate.scorers import answer_kind_dataset
    from bamasc.runtime.execute import ExecOptions
    from bamasc.runtime.providers.base import ProviderError

    program = result.program
    system = args.system or result.plan.systems[0].name
    declared = program.systems[system]
    kind = args.kind or answer_kind_dataset(declared.answer)
    if kind is None:
        report.usage(f"system '{system}' answers with `{declared.answer}`, which no scorer reads; give --kind")
        return report.exit_code
    try:
        for name in args.baseline:
            check_baseline(program, name)
    except BenchError as problem:
        report.usage(str(problem))
        return report.exit_code
    budgets = args.budgets or list(declared.budgets) or [declared.budget]
    dataset = _load_dataset(report, args.dataset, kind, args.split, args.skip_bad_rows)
    if dataset is None:
        return report.exit_code
    if args.limit is not None:
        dataset.items = dataset.items[: args.limit]
    if not dataset.items:
        report.usage(f"{args.dataset} holds no items to run")
        return report.exit_code
    isolation = _isolation(args, kind)
    if isolation is None:
        return 1
    options = ExecOptions(concurrency=args.concurrency, fake_mode=args.fake, cassette=args.cassette)
    workers = max(1, min(args.concurrency, os.cpu_count() or 1))

    def progress(run: dict) -> None:
        where = f"{run['system']} at {run['budget']:g} µ$"
        done = f"{run['correct']}/{run['tasks']} correct" if run["feasible"] else "infeasible"
        print(f"ran {where}: {done}", file=sys.stderr)

    def save(data: dict) -> None:
        try:
            write_results(data, args.output)
        except OSError as problem:  # writable at the start, and no longer (a full disk)
            raise BenchError(f"cannot write the results to {args.output}: {problem.strerror or problem}") from None

    try:
        limits = Limits(wall_time=args.code_timeout)
        # Saved after every budget and baseline: an interruption keeps the runs already done.
        data = bench(args.file, dataset, system, budgets, tuple(args.baseline), options, workers, limits, progress,
                     save if args.output else None, isolation)
    except (ProviderError, ValueError) as problem:
        print(f"bamasc: error: {problem}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        kept = f"; the runs finished so far are in {args.output}" if args.output else ""
        print(f"\ninterrupted{kept}", file=sys.stderr)
        return 1
    print(bench_table(data))
    if args.output:
        print(f"results written to {args.output}")
    if args.plot:
        from bamasc.evaluate.plots import plot_bench

        plot_bench(data, args.plot)
        print(f"plot written to {args.plot}")
    if any(run.get("overruns") for run in data["runs"]):
        report.errors += 1
    return report.exit_code


def run_score(args) -> int:
    from bamasc.cli import Report, _read_rows, writable
    from bamasc.words import counted

    report = Report()
    if not os.path.isfile(args.predictions):
        report.usage(f"no such file: {args.predictions}")
        return report.exit_code
    if args.output and not writable(report, args.output, "the verdicts"):
        return report.exit_code
    dataset = _load_dataset(report, args.dataset, args.kind, args.split, args.skip_bad_rows)
    if dataset is None:
        return report.exit_code
    from bamasc.evaluate.sandbox import Limits
    from bamasc.evaluate.scorers import score_items

    predictions = _read_rows(read_predictions, args.predictions, args.skip_bad_rows, PredictionError)
    if predictions is None:
        return 1
    known = {item.id for item in dataset.items}
    unknown = [key for key in predictions if key not in known]
    if unknown:
        print(f"bamasc: warning: {counted(len(unknown), 'prediction')} with an id the dataset does not have (first: {unknown[0]!r})",
              file=sys.stderr)
    missing = sum(item.id not in predictions for item in dataset.items)
    if missing:
        print(f"bamasc: warning: no prediction for {counted(missing, 'item')}: scored as wrong", file=sys.stderr)
    pairs = [(item, predictions.get(item.id)) for item in dataset.items]
    isolation = _isolation(args, args.kind)
    if isolation is None:
        return 1
    # _isolation has checked the sandbox can run here: score_items refuses nothing more.
    verdicts = score_items(args.kind, pairs, Limits(wall_time=args.code_timeout), concurrency=args.concurrency,
                           isolation=isolation)
    if args.output:
        import json

        with open(args.output, "w", encoding="utf-8") as handle:
            for verdict in verdicts:
                row = {"id": verdict.id, "correct": verdict.correct, "prediction": verdict.prediction,
                       "reference": verdict.reference, "detail": verdict.detail}
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"verdicts written to {args.output}")
    correct = sum(verdict.correct for verdict in verdicts)
    print(f"scored {len(verdicts)} {args.kind} items from {args.dataset}")
    print(f"accuracy: {correct}/{len(verdicts)}")
    return report.exit_code


class PredictionError(ValueError):
    """A predictions row that cannot be read; the message names the file and line."""


def read_predictions(path: str, skip_bad: bool = False) -> tuple[dict[str, str | None], list[str]]:
    """Predictions by id: `id` or `task_id`, else the row's 1-based line number; `prediction` text or null."""
    from bamasc.rows import read_jsonl

    predictions: dict[str, str | None] = {}

    def read(row, number: int, where: str) -> None:
        if not isinstance(row, dict):
            raise PredictionError(f"{where}: a row must be a JSON object")
        if "prediction" not in row:
            raise PredictionError(f"{where}: field 'prediction' is missing")
        value = row["prediction"]
        if isinstance(value, bool) or not isinstance(value, (str, int, float, type(None))):
            raise PredictionError(f"{where}: field 'prediction' must be text, a number or null")
        key = str(next((row[f] for f in ("id", "task_id") if row.get(f) is not None), number))
        if key in predictions:
            raise PredictionError(f"{where}: a second prediction for id {key!r}")
        predictions[key] = None if value is None else str(value)

    _, problems = read_jsonl(path, read, PredictionError, skip_bad)
    return predictions, problems
