"""`bamasc collect`: run every feasible template on every task and budget, appending offline rows for `train`."""

from __future__ import annotations

import sys

from bamasc.cli import args as cli_args
from bamasc.cli import inputs, output, scoring
from bamasc.cli.report import Report


def add_parser(commands) -> None:
    collect = commands.add_parser(
        "collect", help="run every feasible template on every task and budget: offline rows for `train`"
    )
    collect.add_argument("file", metavar="FILE")
    collect.add_argument("--dataset", required=True, metavar="JSONL", help="tasks with reference answers, one per line")
    collect.add_argument("-o", "--output", required=True, metavar="JSONL", help="offline rows are appended here")
    collect.add_argument("--system")
    collect.add_argument("--budgets", type=cli_args.budget_set, metavar="B,B,...",
                         help="budgets in µ$ (default: the system's `budgets`, else its `budget`)")
    cli_args.add_run_options(collect, "--concurrency", "--fake", "--cassette", "--record")
    collect.add_argument("--trace", metavar="JSONL", help="append one line per call and per run here")
    scoring.add_sampling_options(collect)
    collect.add_argument("--scorer", choices=scoring.SCORERS, help=scoring.SCORER_HELP)
    cli_args.add_run_options(collect, "--skip-bad-rows", "--timeout", "--retries", "--total-budget",
                             total_budget="µ$ (or $) for the whole collect, rows already in the output included: a run "
                                          "starts only if its budget fits in what is left; the others are left out")
    collect.set_defaults(run=run)


def run(args) -> int:
    report = Report()
    if not (inputs.is_file(report, args.file) and inputs.is_file(report, args.dataset)):
        return report.return_code
    system = inputs.checked_system(report, args.file, args.system)
    if system is None:
        return report.return_code
    if args.scorer is not None:
        from bamasc.evaluate.scorers import answer_kind_dataset, scorer_for

        try:
            scorer_for(answer_kind_dataset(system.answer) or "text", args.scorer)
        except ValueError as problem:
            output.usage(report, f"{problem} (system '{system.name}' answers with `{system.answer}`)")
            return report.return_code
    budgets = args.budgets or sorted(set(system.budgets or ((system.budget,) if system.budget else ())))
    if not budgets:
        output.usage(report, f"system '{system.name}' declares no budget; give --budgets")
        return report.return_code
    plans = _plans(report, args.file, system.name, budgets)
    if plans is None:
        return report.return_code
    program = next(iter(plans.values()))[1]
    offline = bool(args.fake or (args.cassette and not args.record))
    if not inputs.extras(report, inputs.run_extras(program, system.models, offline), "collect"):
        return report.return_code
    import asyncio
    import functools

    from bamasc.evaluate.scorers import score
    from bamasc.policy.data import CollectOptions, OfflineDataError, collect, read_scored_tasks
    from bamasc.runtime.execute import DatasetError
    from bamasc.runtime.providers.base import ProviderError

    tasks = inputs.rows(report, read_scored_tasks, args.dataset, args.skip_bad_rows, DatasetError)
    if tasks is not None:
        tasks = scoring.sampled(report, tasks, args, "tasks")
    if tasks is None:
        return report.return_code
    options = CollectOptions(
        concurrency=args.concurrency,
        fake_mode=args.fake,
        cassette=args.cassette,
        record=args.record,
        retry=cli_args.retry_policy(args),
        trace_path=args.trace,
        total_budget=args.total_budget,
    )
    progress = output.RunProgress(unit="run")
    try:
        scorer = functools.partial(score, scorer=args.scorer) if args.scorer else score
        try:
            summary = asyncio.run(collect(plans, system.name, system.topologies, tasks, args.output, options, progress,
                                          scorer))
        finally:  # the bar's line ends before any message about how the run ended
            progress.close()
    except (OfflineDataError, ProviderError, ValueError) as problem:
        output.failure(report, problem)
        return report.return_code
    except KeyboardInterrupt:
        print("\ninterrupted: every finished run is in the output; the same command resumes", file=sys.stderr)
        report.failed()
        return report.return_code
    runs = summary.written - summary.infeasible
    rate = f", {summary.successes} of {runs} runs successful" if runs else ""
    print(
        f"{summary.written} rows written to {args.output} ({len(tasks)} tasks, {len(plans)} budgets, "
        f"{len(system.topologies)} templates; {summary.infeasible} infeasible, {summary.skipped} already there{rate})"
    )
    if summary.over_total:
        print(f"{summary.over_total} runs left out: the total budget of {args.total_budget:g} µ$ had no room for them "
              "(the same command with a larger total runs them)")
    return report.return_code


def _plans(report: Report, path: str, system: str, budgets) -> dict | None:
    """The system compiled at each budget: {budget: (plan or None when no template fits, program)}."""
    from bamasc.plan.compile import compile_file

    plans = {}
    for budget in budgets:
        result = compile_file(path, system, budget)
        # BAM502 (no template fits) is a row of the data: every template is infeasible there.
        blocking = [d for d in result.diagnostics if d.severity == "error" and d.code != "BAM502"]
        if blocking or result.program is None:
            report.add(blocking)
            output.diagnostics(blocking, result.sources)
            return None
        if result.plan is None:
            output.warning(f"no template fits {budget:g} µ$; its rows are marked infeasible")
        plans[float(budget)] = (result.plan, result.program)
    return plans
