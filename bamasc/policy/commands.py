"""`bamasc collect` and `bamasc train`: parsers, and the command functions that call the policy library.

Nothing heavy is imported until a command runs: the parsers are built from
the standard library only.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from bamasc.limits import MAX_REWARD


def _budget_list(text: str) -> list[float]:
    from bamasc.cli import _budget

    budgets = [_budget(part.strip()) for part in text.split(",") if part.strip()]
    if not budgets:
        raise argparse.ArgumentTypeError("need at least one budget, e.g. 500,875,1250")
    return sorted(set(budgets))


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"need a share from 0 up to (not including) 1, not {text!r}")
    return value


def _finite(text: str) -> float:
    """A float that training can compute with: NaN or infinity would turn every loss into NaN."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or abs(value) > MAX_REWARD:
        raise argparse.ArgumentTypeError(f"need a finite number of at most {MAX_REWARD:g} in size, not {text!r}")
    return value


def _positive(text: str) -> int:
    from bamasc.cli import _positive as positive

    return positive(text)


def add_collect(commands) -> None:
    from bamasc.cli import _seconds

    collect = commands.add_parser(
        "collect", help="run every feasible template on every task and budget: offline rows for `train`"
    )
    collect.add_argument("file", metavar="FILE")
    collect.add_argument("--dataset", required=True, metavar="JSONL", help="tasks with reference answers, one per line")
    collect.add_argument("-o", "--output", required=True, metavar="JSONL", help="offline rows are appended here")
    collect.add_argument("--system")
    collect.add_argument("--budgets", type=_budget_list, metavar="B,B,...",
                         help="budgets in µ$ (default: the system's `budgets`, else its `budget`)")
    collect.add_argument("--concurrency", type=_positive, default=8, metavar="N")
    collect.add_argument("--fake", choices=("echo", "verbose"), help="answer every model with the offline fake provider")
    collect.add_argument("--cassette", metavar="JSONL", help="replay recorded calls (or record them with --record)")
    collect.add_argument("--record", action="store_true", help="record every real call to --cassette")
    collect.add_argument("--trace", metavar="JSONL", help="append one line per call and per run here")
    collect.add_argument("--skip-bad-rows", action="store_true", help="report malformed dataset rows and go on")
    collect.add_argument("--timeout", type=_seconds, default=60.0, help="seconds per call attempt (default 60)")
    collect.add_argument("--retries", type=int, default=3, help="retries per call after the first attempt (default 3)")
    collect.set_defaults(run=run_collect)


def add_train(commands) -> None:
    # Defaults left unset here are TrainConfig's (train.py), which the parser does not import.
    train = commands.add_parser("train", help="train the topology policy on offline rows; writes a checkpoint")
    train.add_argument("file", metavar="FILE")
    train.add_argument("--data", required=True, metavar="JSONL", help="offline rows (from `bamasc collect`)")
    train.add_argument("-o", "--output", required=True, metavar="CHECKPOINT", help="e.g. policy.msgpack")
    train.add_argument("--system")
    train.add_argument("--skip-bad-rows", action="store_true", help="report malformed offline rows and go on")
    train.add_argument("--epochs", type=_positive, help="passes over the training rows (default 100)")
    train.add_argument("--seed", type=int, help="initialisation, batch order and split (default 0)")
    train.add_argument("--holdout", type=_share, help="share of task ids held out for the report (default 0.2)")
    train.add_argument("--entropy", type=_finite, help="entropy bonus weight beta (default 0.05)")
    train.add_argument("--learning-rate", type=_finite, help="Adam step size (default 0.001)")
    train.add_argument("--batch-size", type=_positive, help="rows per step (default 64)")
    train.add_argument("--hidden", type=_positive, help="width of the hidden layers (default 128)")
    train.add_argument("--embedding", choices=("minilm", "hashed"), default="minilm",
                       help="task embedding: all-MiniLM-L6-v2, or hashed words (a model-free stand-in)")
    train.add_argument("--cache", metavar="DIR", help="embedding cache folder (default: ~/.cache/bamasc)")
    for name in ("success", "failure", "overflow", "efficiency"):
        train.add_argument(
            f"--reward-{name}", type=_finite, metavar="X", help=f"reward constant '{name}' (default: the system's)"
        )
    train.set_defaults(run=run_train)


def _system(report, program, name):
    if name is None:
        if not program.systems:
            report.usage("the file declares no system")
            return None
        return next(iter(program.systems.values()))
    if name not in program.systems:
        report.usage(f"no system '{name}'; the file declares: {', '.join(program.systems)}")
        return None
    return program.systems[name]


def _end_progress_line() -> None:
    if sys.stderr.isatty():  # the bar redraws one line; end it before other output
        print(file=sys.stderr)


def _checked_system(report, path: str, name: str | None):
    """The named (or only) system of a checked .bam file, or None once the problems are printed."""
    from bamasc.cli import _print_diagnostics
    from bamasc.plan.compile import check_file

    program, diagnostics, sources = check_file(path)
    report.add(diagnostics)
    _print_diagnostics(diagnostics, sources)
    if program is None:
        return None
    return _system(report, program, name)


def _usable_file(report, path: str) -> bool:
    if not os.path.isfile(path):
        report.usage(f"no such file: {path}")
        return False
    return True


# ---------------------------------------------------------------- collect


def run_collect(args) -> int:
    import asyncio

    from bamasc.cli import Report, _progress_bar, _read_rows
    from bamasc.policy.data import CollectOptions, OfflineDataError, collect, read_scored_tasks
    from bamasc.runtime.execute import DatasetError
    from bamasc.runtime.providers.base import ProviderError
    from bamasc.runtime.retry import RetryPolicy

    report = Report()
    if not (_usable_file(report, args.file) and _usable_file(report, args.dataset)):
        return report.exit_code
    system = _checked_system(report, args.file, args.system)
    if system is None:
        return report.exit_code
    budgets = args.budgets or sorted(set(system.budgets or ((system.budget,) if system.budget else ())))
    if not budgets:
        report.usage(f"system '{system.name}' declares no budget; give --budgets")
        return report.exit_code
    plans = _plans(report, args.file, system.name, budgets)
    if plans is None:
        return report.exit_code
    tasks = _read_rows(read_scored_tasks, args.dataset, args.skip_bad_rows, DatasetError)
    if tasks is None:
        return 1
    options = CollectOptions(
        concurrency=args.concurrency,
        fake_mode=args.fake,
        cassette=args.cassette,
        record=args.record,
        retry=RetryPolicy(max_attempts=1 + max(0, args.retries), timeout=args.timeout),
        trace_path=args.trace,
    )
    try:
        summary = asyncio.run(collect(plans, system.name, system.topologies, tasks, args.output, options, _progress_bar()))
    except (OfflineDataError, ProviderError, ValueError) as problem:
        _end_progress_line()
        print(f"bamasc: error: {problem}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: every finished run is in the output; the same command resumes", file=sys.stderr)
        return 1
    _end_progress_line()
    runs = summary.written - summary.infeasible
    rate = f", {summary.successes} of {runs} runs successful" if runs else ""
    print(
        f"{summary.written} rows written to {args.output} ({len(tasks)} tasks, {len(plans)} budgets, "
        f"{len(system.topologies)} templates; {summary.infeasible} infeasible, {summary.skipped} already there{rate})"
    )
    return report.exit_code


def _plans(report, path: str, system: str, budgets) -> dict | None:
    """The system compiled at each budget: {budget: (plan or None when no template fits, program)}."""
    from bamasc.cli import _print_diagnostics
    from bamasc.plan.compile import compile_file

    plans = {}
    for budget in budgets:
        result = compile_file(path, system, budget)
        # BAM502 (no template fits) is a row of the data: every template is infeasible there.
        blocking = [d for d in result.diagnostics if d.severity == "error" and d.code != "BAM502"]
        if blocking or result.program is None:
            report.add(blocking)
            _print_diagnostics(blocking, result.sources)
            return None
        if result.plan is None:
            print(f"bamasc: warning: no template fits {budget:g} µ$; its rows are marked infeasible", file=sys.stderr)
        plans[float(budget)] = (result.plan, result.program)
    return plans


# ---------------------------------------------------------------- train


def run_train(args) -> int:
    import time

    from bamasc.cli import Report, _progress_bar, _read_rows
    from bamasc.policy.data import OfflineDataError, read_offline_rows

    report = Report()
    if not (_usable_file(report, args.file) and _usable_file(report, args.data)):
        return report.exit_code
    if args.output.endswith(".json"):
        report.usage(f"name the checkpoint e.g. policy.msgpack, not {args.output}: its metadata is written beside it as .json")
        return report.exit_code
    system = _checked_system(report, args.file, args.system)
    if system is None:
        return report.exit_code
    rows = _read_rows(read_offline_rows, args.data, args.skip_bad_rows, OfflineDataError)
    if rows is None:
        return 1
    if not rows:
        print(f"bamasc: error: {args.data} has no rows", file=sys.stderr)
        return 1

    from bamasc.policy.checkpoint import load_policy, save_policy
    from bamasc.policy.features import HASHED, MINILM, EmbeddingUnavailable, Features, budget_scale, default_cache_dir
    from bamasc.policy.train import Reward, TrainConfig, checkpoint_metadata, report_text, train_policy
    from bamasc.records import as_dict

    overrides = {name: getattr(args, f"reward_{name}") for name in ("success", "failure", "overflow", "efficiency")}
    reward = Reward(**{**as_dict(system.reward), **{k: v for k, v in overrides.items() if v is not None}})
    given = {
        name: getattr(args, name)
        for name in ("hidden", "learning_rate", "epochs", "batch_size", "entropy", "seed", "holdout")
        if getattr(args, name) is not None
    }
    config = TrainConfig(**given, reward=reward)
    embedding = MINILM if args.embedding == "minilm" else HASHED
    features = Features(embedding, args.cache or default_cache_dir())
    scale = budget_scale(system)
    started = time.perf_counter()
    try:
        result = train_policy(rows, system.topologies, config, features.embed, scale, _progress_bar())
    except EmbeddingUnavailable as problem:
        print(f"bamasc: error: {problem}", file=sys.stderr)
        return 1
    except ValueError as problem:
        print(f"bamasc: error: {args.data}: {problem}", file=sys.stderr)
        return 1
    finally:
        _end_progress_line()
    elapsed = time.perf_counter() - started
    metadata = checkpoint_metadata(system, embedding, scale, config, args.data, len(rows), result)
    meta_path = save_policy(args.output, result.state.params, metadata)
    load_policy(args.output, system.topologies)  # self-check: the written checkpoint loads and matches the system
    print(
        f"trained on {result.samples} runs of {result.train_tasks} tasks in {elapsed:.1f} s "
        f"({config.epochs} epochs, final loss {result.history[-1]:.4f})"
    )
    if result.heldout is not None:
        print(report_text(result.heldout))
    else:
        print("no held-out tasks (--holdout 0): no report")
    print(f"policy written to {args.output} (reloaded and checked), metadata to {meta_path}")
    return report.exit_code
