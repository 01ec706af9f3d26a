"""`bamasc bench`: accuracy and cost of a system across budgets, beside single-model baselines."""

from __future__ import annotations

import os
import sys

from bamasc.cli import args as cli_args
from bamasc.cli import inputs, output, scoring
from bamasc.cli.report import Report


def add_parser(commands) -> None:
    bench = commands.add_parser("bench", help="accuracy and cost of a system across budgets, beside baselines")
    bench.add_argument("file", metavar="FILE")
    bench.add_argument("--dataset", required=True, metavar="D", help=scoring.DATASET_HELP)
    bench.add_argument("--budgets", type=cli_args.budget_list, metavar="B,B,...",
                       help="µ$ budgets to run the system at (default: the system's `budgets`, else its budget)")
    bench.add_argument("--baseline", action="append", default=[], metavar="NAME",
                       help="a system of FILE with one template and one model, run at its own budget (repeatable)")
    bench.add_argument("--system", help="the system to benchmark (default: the first in FILE)")
    bench.add_argument("--kind", choices=scoring.KINDS,
                       help="dataset format and scorer (default: from the system's `answer`)")
    bench.add_argument("--split", choices=scoring.SPLITS, help=scoring.SPLIT_HELP)
    bench.add_argument("--limit", type=cli_args.positive, metavar="N", help="the first N items only")
    scoring.add_sampling_options(bench)
    bench.add_argument("--scorer", choices=scoring.SCORERS, help=scoring.SCORER_HELP)
    cli_args.add_run_options(bench, "--concurrency", concurrency="tasks run at once (default 8)")
    bench.add_argument("-o", "--output", metavar="JSON", help="write the results here")
    bench.add_argument("--plot", metavar="PNG", help="draw mean cost against accuracy here")
    cli_args.add_run_options(bench, "--fake", "--cassette", "--skip-bad-rows", "--total-budget",
                             cassette="replay recorded calls instead of calling providers",
                             total_budget="µ$ (or $) for every run of the benchmark together: a task starts only if "
                                          "its worst case fits in what is left, else it is skipped (scored wrong)")
    scoring.add_sandbox_options(bench)
    bench.set_defaults(run=run)


def run(args) -> int:
    report = Report()
    for path in (args.file, args.cassette):
        if path is not None and not os.path.isfile(path):
            output.usage(report, f"no such file: {path}")
    if report.usage_errors:
        return report.return_code
    # Before any task runs: a benchmark is minutes of calls, and its results must have somewhere to go.
    if args.output and not inputs.writable(report, args.output, "the results"):
        return report.return_code
    if args.plot and not inputs.writable(report, args.plot, "the plot"):
        return report.return_code
    result = inputs.compiled(report, args.file, args.system, None, "lexicographic")
    if result is None or result.plan is None:
        return report.return_code
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
        output.usage(report, f"system '{system}' answers with `{declared.answer}`, which no scorer reads; give --kind")
        return report.return_code
    from bamasc.evaluate.scorers import scorer_for

    try:
        for name in args.baseline:
            check_baseline(program, name)
        scorer_for(kind, args.scorer)
    except (BenchError, ValueError) as problem:
        output.usage(report, problem)
        return report.return_code
    budgets = args.budgets or list(declared.budgets) or [declared.budget]
    dataset = scoring.load_dataset(report, args.dataset, kind, args.split, args.skip_bad_rows)
    if dataset is None:
        return report.return_code
    kept = scoring.sampled(report, dataset.items, args)
    if kept is None:
        return report.return_code
    dataset.items = kept[: args.limit] if args.limit is not None else kept
    if not dataset.items:
        output.usage(report, f"{args.dataset} holds no items to run")
        return report.return_code
    isolation = scoring.isolation(report, args, kind)
    if isolation is None:
        return report.return_code
    if not inputs.extras(report, _extras(args, program, system), "bench"):
        return report.return_code
    options = ExecOptions(concurrency=args.concurrency, fake_mode=args.fake, cassette=args.cassette)
    if args.total_budget is not None:
        from bamasc.runtime.batch import BatchBudget

        # One ledger for every budget and baseline: the total is the whole benchmark's.
        options = ExecOptions(concurrency=args.concurrency, fake_mode=args.fake, cassette=args.cassette,
                              total_budget=args.total_budget, ledger=BatchBudget(args.total_budget))
    workers = max(1, min(args.concurrency, os.cpu_count() or 1))

    bar = output.RunProgress(lines=False)
    bar.start(len(dataset.items) * (len(budgets) + len(args.baseline)),
              _spend_limit(program, budgets, args.baseline, len(dataset.items), args.total_budget))

    def progress(run: dict) -> None:
        where = f"{run['system']} at {run['budget']:g} µ$"
        done = f"{run['correct']}/{run['tasks']} correct" if run["feasible"] else "infeasible"
        bar.say(f"ran {where}: {done}")

    def save(data: dict) -> None:
        try:
            write_results(data, args.output)
        except OSError as problem:  # writable at the start, and no longer (a full disk)
            raise BenchError(f"cannot write the results to {args.output}: {problem.strerror or problem}") from None

    try:
        limits = Limits(wall_time=args.code_timeout)
        # Saved after every budget and baseline: an interruption keeps the runs already done.
        try:
            data = bench(args.file, dataset, system, budgets, tuple(args.baseline), options, workers, limits, progress,
                         save if args.output else None, isolation, args.scorer, bar)
        finally:  # the bar's line ends before any message about how the run ended
            bar.close()
    except (ProviderError, ValueError) as problem:
        output.failure(report, problem)
        return report.return_code
    except KeyboardInterrupt:
        kept = f"; the runs finished so far are in {args.output}" if args.output else ""
        print(f"\ninterrupted{kept}", file=sys.stderr)
        report.failed()
        return report.return_code
    print(bench_table(data))
    if args.output:
        print(f"results written to {args.output}")
    if args.plot:
        from bamasc.evaluate.plots import plot_bench

        plot_bench(data, args.plot)
        print(f"plot written to {args.plot}")
    if any(run.get("overruns") for run in data["runs"]):
        report.failed()
    return report.return_code


def _spend_limit(program, budgets, baselines, tasks: int, total_budget: float | None) -> float | None:
    """The most the runs may spend: each task at its run's budget (a baseline's own), within the total."""
    own = [program.systems[name].budget for name in baselines]
    if any(budget is None for budget in own):
        return total_budget
    limit = tasks * (sum(budgets) + sum(own))
    return limit if total_budget is None else min(limit, total_budget)


def _extras(args, program, system: str) -> list:
    """The extras the runs will import: the policy one for a system that selects by policy, and the
    providers' of every model that answers for real."""
    from bamasc.extras import EXTRAS

    selects = program.systems[system].select.kind == "policy"
    needs = [(EXTRAS["policy"], f"system '{system}', which selects by policy")] if selects else []
    pool = {model for name in (system, *args.baseline) for model in program.systems[name].models}
    return needs + inputs.run_extras(program, pool, offline=bool(args.fake or args.cassette))
