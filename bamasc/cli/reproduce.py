"""`bamasc reproduce`: the paper kit's collect, train and bench over a file's systems and budgets, resumably, into one folder."""

from __future__ import annotations

import argparse
import os
import sys

from bamasc.cli import args as cli_args
from bamasc.cli import output, scoring
from bamasc.cli.report import Report

DEFAULT_CONFIRM_ABOVE = 1.0  # USD
# evaluate.paper_rows.OBJECTIVES, repeated so that building the parser imports nothing of it.
OBJECTIVES = ("weighted", "naive", "reference")
TRAIN_SPLITS = ("paper", "all")


def names(text: str) -> list[str]:
    """Comma-separated system names; `none` for none."""
    found = [part.strip() for part in text.split(",") if part.strip()]
    if not found:
        raise argparse.ArgumentTypeError("need system names separated by commas, or none")
    return [] if found == ["none"] else found


def objectives(text: str) -> tuple[str, ...]:
    """Comma-separated training objectives, each one of OBJECTIVES, none twice."""
    found = tuple(part.strip() for part in text.split(","))
    unknown = [name for name in found if name not in OBJECTIVES]
    if unknown or len(set(found)) != len(found):
        raise argparse.ArgumentTypeError(f"need objectives among {', '.join(OBJECTIVES)}, separated by commas "
                                         f"and none twice, not {text!r}")
    return found


def dollars(text: str) -> float:
    try:
        value = float(text.strip().removeprefix("$"))
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1e9:  # NaN too
        raise argparse.ArgumentTypeError(f"need a dollar amount of 0 or more, like 1 or $0.50, not {text!r}")
    return value


def add_parser(commands) -> None:
    reproduce = commands.add_parser(
        "reproduce", help="the paper's table: collect, train and bench every system at its budgets"
    )
    reproduce.add_argument("file", metavar="FILE")
    reproduce.add_argument("--dataset", required=True, metavar="D", help="the tasks every row is benchmarked on "
                           "(" + scoring.DATASET_HELP + ")")
    reproduce.add_argument("-o", "--output", required=True, metavar="DIR",
                           help="every stage's outputs, the manifest, the table and the plot go here; "
                                "the same command with the same DIR resumes")
    reproduce.add_argument("--train-dataset", metavar="D",
                           help="the published training data the policies' tasks come from, read as --dataset "
                                "is (default: the tasks of --dataset); --train-split picks the tasks")
    reproduce.add_argument("--train-split", choices=TRAIN_SPLITS, default="paper",
                           help="with --train-dataset: paper (the default) takes the reference's training tasks "
                                "from it: GSM8K 500 sampled with seed 42, MBPP ids 601-974, MATH 1000 stratified "
                                "by level with seed 888; all takes every task")
    reproduce.add_argument("--budgets", type=cli_args.budget_set, metavar="B,B,...",
                           help="µ$ budgets of every row (default: the `budgets` the systems declare)")
    reproduce.add_argument("--systems", type=names, metavar="NAME,...", help="the systems to run (default: every one but the *_reference_mode systems, which make the "
                                "BAMAS reference's calls under its after-the-fact budget monitor, overruns "
                                "included; name them to add their rows beside bamasc's)")
    reproduce.add_argument("--learn", type=names, metavar="NAME,...|none",
                           help="systems to train a policy for, each with a row selecting by it "
                                "(default: every system with more than one template)")
    reproduce.add_argument("--greedy", type=names, metavar="NAME,...|none",
                           help="systems with a row of the greedy ablation (default: those named *_bamasc)")
    reproduce.add_argument("--paper-cost", type=names, metavar="NAME,...|none",
                           help="systems bound with the reference's cost model (default: those named *_reference)")
    reproduce.add_argument("--kind", choices=scoring.KINDS,
                           help="dataset format and scorer (default: from the systems' `answer`)")
    reproduce.add_argument("--scorer", choices=scoring.SCORERS,
                           help="score every row with this scorer (default: math-strict for MATH, the paper's "
                                "Hendrycks check; the dataset kind's own otherwise; mbpp-reference: MBPP code "
                                "taken as the BAMAS reference kit takes it)")
    reproduce.add_argument("--split", choices=scoring.SPLITS, help=scoring.SPLIT_HELP)
    reproduce.add_argument("--limit", type=cli_args.positive, metavar="N",
                           help="the first N tasks of each dataset only (after the sample)")
    scoring.add_sampling_options(reproduce, seed_option="--sample-seed")
    reproduce.add_argument("--embedding", choices=("minilm", "hashed"), default="minilm",
                           help="the policies' task embedding (as for `train`)")
    reproduce.add_argument("--objective", type=objectives, metavar="NAME[,NAME]",
                           help="how the policies are trained, a policy row for each: weighted (bamasc's, the "
                                "default), reference (the BAMAS reference's training: its loss on raw rewards, "
                                "network, settings and seed; rows labelled 'policy, reference objective'), naive; "
                                "e.g. weighted,reference for both")
    reproduce.add_argument("--epochs", type=cli_args.positive,
                           help="the most training epochs (default 100; the reference objective's 10)")
    reproduce.add_argument("--seed", type=int, default=0,
                           help="training and run seed (default 0; the reference objective trains with its own, "
                                "42, MBPP 123)")
    reproduce.add_argument("--yes", action="store_true", help="spend above --confirm-above without asking")
    reproduce.add_argument("--confirm-above", type=dollars, default=DEFAULT_CONFIRM_ABOVE, metavar="USD",
                           help=f"ask before spending more than this many dollars (default {DEFAULT_CONFIRM_ABOVE:g})")
    cli_args.add_run_options(reproduce, "--concurrency", "--fake", "--cassette", "--record", "--skip-bad-rows",
                             "--timeout", "--retries", concurrency="tasks run at once (default 8)")
    scoring.add_sandbox_options(reproduce)
    reproduce.set_defaults(run=run)


def run(args) -> int:
    report = Report()
    for path in (args.file, args.train_dataset) + (() if args.record else (args.cassette,)):
        if path is not None and not os.path.isfile(path):
            output.usage(report, f"no such file: {path}")
    if args.record and args.cassette is None:
        output.usage(report, "--record needs --cassette: the file to record the calls to")
    if report.usage_errors:
        return report.return_code
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        output.usage(report, f"cannot write the reproduction to {args.output}: it is not a folder")
        return report.return_code
    program = _program(report, args.file)
    if program is None:
        return report.return_code
    from bamasc.evaluate.reproduce import Providers, Reproduction, ReproduceError, choose

    try:
        setup = choose(program, args.file, args.kind, args.budgets, args.systems, args.learn, args.greedy,
                       args.paper_cost, embedding=args.embedding, epochs=args.epochs, seed=args.seed,
                       objectives=args.objective)
    except ReproduceError as problem:
        output.usage(report, problem)
        return report.return_code
    from bamasc.evaluate.scorers import default_scorer, scorer_for

    try:
        scorer = scorer_for(setup.kind, args.scorer or default_scorer(setup.kind))
    except ValueError as problem:
        output.usage(report, problem)
        return report.return_code
    rows: dict = {}
    dataset = scoring.load_dataset(report, args.dataset, setup.kind, args.split, args.skip_bad_rows, rows)
    if dataset is None:
        return report.return_code
    kept = scoring.sampled(report, dataset.items, args, "tasks", seed_option="--sample-seed")
    if kept is None:
        return report.return_code
    dataset.items = kept[: args.limit] if args.limit else kept
    if not dataset.items:
        output.usage(report, f"{args.dataset} holds no tasks to run")
        return report.return_code
    train_tasks = _train_tasks(report, args, setup, dataset.items, rows)
    if train_tasks is None:
        return report.return_code
    isolation = scoring.isolation(report, args, setup.kind)
    if isolation is None:
        return report.return_code
    from bamasc.evaluate.sandbox import Limits

    providers = Providers(args.fake, args.cassette, args.record, args.concurrency, cli_args.retry_policy(args))
    code = (max(1, min(args.concurrency, os.cpu_count() or 1)), Limits(wall_time=args.code_timeout), isolation)
    bar = output.RunProgress(lines=False)  # on a terminal: every collect and bench task run, against the estimate
    reproduction = Reproduction(setup, program, args.output, dataset, train_tasks, providers, code,
                                tell=bar.say, scorer=scorer, progress=bar)
    print(f"scoring {setup.kind} with the {scorer} scorer", file=sys.stderr)
    try:
        reproduction.check()
        estimate = reproduction.estimate()
    except ReproduceError as problem:
        output.usage(report, problem)
        return report.return_code
    print(_estimate_text(estimate, len(reproduction.cells)))
    if not _confirmed(report, args, estimate):
        return report.return_code
    return _run(report, args, reproduction, bar)


def _program(report: Report, path: str):
    from bamasc.plan.compile import check_file

    program, found, sources = check_file(path)
    report.add(found)
    output.diagnostics(found, sources)
    return program


def _train_tasks(report: Report, args, setup, bench_items, bench_rows: dict):
    """The tasks collect runs, each with its row for the scorer: none when no policy is trained; the
    benchmarked tasks without --train-dataset; else the --train-split of the training data."""
    if not setup.learned:
        return []
    from bamasc.policy.data import ScoredTask

    if args.train_dataset is None:
        output.warning("the policies are trained on the tasks they are benchmarked on; "
                       "give --train-dataset for a separate training set")
        return [ScoredTask(item.id, item.prompt, bench_rows[item.id]) for item in bench_items]
    rows: dict = {}
    training = scoring.load_dataset(report, args.train_dataset, setup.kind, None, args.skip_bad_rows, rows)
    if training is None:
        return None
    items = training.items
    if args.train_split == "paper":
        from bamasc.evaluate.samplers import SampleError, paper_training, select

        sampling = paper_training(setup.kind)
        try:
            items = select(items, sampling)
        except SampleError as problem:
            output.usage(report, f"--train-dataset {args.train_dataset}: the paper's training tasks are "
                                 f"{sampling.describe()}: {problem} (--train-split all trains on every task)")
            return None
        print(f"training on {len(items)} of {len(training.items)} tasks of {args.train_dataset} "
              f"(the paper's: {sampling.describe()})", file=sys.stderr)
    items = items[: args.limit] if args.limit else items
    return [ScoredTask(item.id, item.prompt, rows[item.id]) for item in items]


def _estimate_text(estimate, cells: int) -> str:
    done = cells - estimate.cells
    resumed = f"; {done} of {cells} cells already done" if done else ""
    head = (f"estimate: at most {estimate.bound:,.1f} µ$ (${estimate.bound / 1e6:,.4f}) for {estimate.runs} task runs "
            f"in {estimate.cells} bench cells and the collect runs still to do{resumed}")
    if estimate.offline:
        return head + ("\n  an upper bound at the file's prices; no call here costs money "
                       "(the fake provider, a cassette played back, or local models), so nothing is spent")
    return head + "\n  an upper bound: every run at its plan's proven worst case, capped at its budget"


def _confirmed(report: Report, args, estimate) -> bool:
    usd = estimate.bound / 1e6
    if estimate.offline or args.yes or usd <= args.confirm_above:
        return True
    if not sys.stdin.isatty():
        output.failure(report, f"the estimate (${usd:,.4f}) is above --confirm-above ${args.confirm_above:g} and there "
                               "is no terminal to ask on; give --yes to spend it. Nothing was spent")
        return False
    print(f"spend up to ${usd:,.4f}? [y/N] ", end="", flush=True)
    answer = sys.stdin.readline().strip().lower()
    if answer in ("y", "yes"):
        return True
    output.failure(report, "not confirmed; nothing was spent")
    return False


def _run(report: Report, args, reproduction, bar) -> int:
    from bamasc.evaluate.paper_table import markdown, provenance, table_data, write_table
    from bamasc.evaluate.plots import plot_reproduction
    from bamasc.evaluate.reproduce import ReproduceError
    from bamasc.runtime.providers.base import ProviderError

    try:
        try:
            results = reproduction.run()
        finally:  # the bar's line ends before any message about how the run ended
            bar.close()
    except (ReproduceError, ProviderError, ValueError) as problem:
        output.failure(report, problem)
        return report.return_code
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished stage and cell is in {args.output}; the same command resumes",
              file=sys.stderr)
        report.failed()
        return report.return_code
    checks = {name: system.budget_check for name, system in reproduction.program.systems.items()}
    source = provenance(reproduction.providers.mode, reproduction.offline(), len(reproduction.dataset.items),
                        reproduction.scorer, checks)
    data = table_data(reproduction.setup, results, source)
    written = write_table(data, args.output)
    plots = [os.path.join(args.output, name) for name in ("plot.png", "plot.svg")]
    plot_reproduction(data, plots)
    print(markdown(data), end="")
    print(f"table written to {', '.join(written)}; plot to {', '.join(plots)}")
    # An overrun breaks the guard's promise, except on a row checked after each call (`budget_check = after`,
    # the reference mode), which overruns as the reference does, or not at all (`none`, a baseline's real cost).
    from bamasc.program import UNGUARDED_CHECKS

    after = {name for name, system in reproduction.program.systems.items() if system.budget_check in UNGUARDED_CHECKS}
    if any(row["overruns"] and row["system"] not in after for row in data["rows"]):
        report.failed()
    return report.return_code
