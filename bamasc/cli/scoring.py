"""What `bench`, `score` and `collect` share: dataset kinds, scorers, samplers, the sandbox options, loading a dataset."""

from __future__ import annotations

import os
import sys

from bamasc.cli import args as cli_args
from bamasc.cli import output
from bamasc.cli.report import Report

# bamasc.evaluate.datasets.KINDS and its MBPP splits, repeated so that building a parser imports no dataset code.
KINDS = ("gsm8k", "mbpp", "math")
SPLITS = ("prompt", "test", "validation", "train")
# bamasc.evaluate.scorers.SCORERS, for the same reason.
SCORERS = ("gsm8k", "math", "math-strict", "mbpp", "mbpp-reference")
SCORER_HELP = ("score with this scorer (default: the dataset kind's own; math-strict: MATH, Hendrycks' string "
               "equality; mbpp-reference: MBPP code taken as the BAMAS reference kit takes it)")
SPLIT_HELP = "MBPP: keep only this split's task ids (test: 11-510)"
DATASET_HELP = "GSM8K/MBPP/MATH file (or MATH folder) as published"
UNSAFE_HOOKS_HELP = ("MBPP: where no jail can be built, run candidates under Python audit hooks only "
                     "(NOT a sandbox: a hostile candidate can read files and escape)")


def add_sandbox_options(parser) -> None:
    parser.add_argument("--code-timeout", type=cli_args.seconds, default=5.0, metavar="S",
                        help="MBPP: seconds each program may run in the sandbox (default 5)")
    parser.add_argument("--unsafe-hooks", action="store_true", help=UNSAFE_HOOKS_HELP)


def isolation(report: Report, args, kind: str) -> str | None:
    """The sandbox level `--unsafe-hooks` asks for, warned about; None (reported) where MBPP cannot be scored here.

    Checked before any task runs: a benchmark must not spend its calls and
    then find that it cannot score them.
    """
    level = "hooks" if args.unsafe_hooks else "namespaces"
    if kind != "mbpp":
        return level
    from bamasc.evaluate.sandbox import SandboxError, check_isolation

    try:
        check_isolation(level)
    except SandboxError as problem:
        hint = "" if args.unsafe_hooks else " (--unsafe-hooks scores without it, and is not a sandbox)"
        output.failure(report, f"{problem}{hint}")
        return None
    if args.unsafe_hooks:
        output.warning("--unsafe-hooks: candidates run without a jail, under Python audit hooks only; "
                       "this is not a sandbox, and a hostile candidate can read this machine's files or escape")
    return level


def load_dataset(report: Report, path: str, kind: str, split, skip_bad: bool, rows: dict | None = None):
    """The dataset at `path` (a file, or a MATH folder), each skipped row warned about; None once reported.
    `rows`, when given, gets each item's row by its id."""
    from bamasc.evaluate.datasets import DatasetError, load

    if not os.path.exists(path):
        output.usage(report, f"no such file: {path}")
        return None
    try:
        dataset = load(path, kind, skip_bad=skip_bad, split=split, rows=rows)
    except DatasetError as problem:
        output.failure(report, f"{problem} (use --skip-bad-rows to skip such rows)")
        return None
    for problem in dataset.problems:
        output.warning(f"skipped {problem}")
    return dataset


def add_sampling_options(parser, seed_option: str = "--seed") -> None:
    """--ids, --sample, --seed, --stratify: a reproducible subset of the tasks (docs/paper.md, "Samplers").
    `seed_option` names the seed's option where the command has a --seed of its own."""
    parser.add_argument("--ids", metavar="A-B[,C-D]",
                        help="keep only these task ids, inclusive ranges (MBPP test: 11-510); every one must be there")
    parser.add_argument("--sample", type=cli_args.positive, metavar="N",
                        help="N tasks drawn without replacement: the first N of a seeded shuffle")
    parser.add_argument(seed_option, type=cli_args.whole, metavar="S",
                        help="the shuffle's seed (default 42; 888 with --stratify)")
    parser.add_argument("--stratify", metavar="FIELD",
                        help="with --sample: draw N in proportion to FIELD's values (MATH: level)")


def sampled(report: Report, items: list, args, what: str = "items", seed_option: str = "--seed"):
    """The items the sampling options keep (all of them without any), noted on standard error;
    None once a bad option or a dataset that cannot satisfy it is reported."""
    seed = getattr(args, seed_option.removeprefix("--").replace("-", "_"))
    if args.sample is None:
        for name, value in ((seed_option, seed), ("--stratify", args.stratify)):
            if value is not None:
                output.usage(report, f"{name} applies to a sample: give --sample N")
                return None
        if args.ids is None:
            return items
    from bamasc.evaluate.samplers import SampleError, Sampling, parse_ids, select

    try:
        sampling = Sampling(args.sample, seed, args.stratify, parse_ids(args.ids) if args.ids else ())
        kept = select(items, sampling)
    except SampleError as problem:
        output.usage(report, problem)
        return None
    print(f"kept {len(kept)} of {len(items)} {what} ({sampling.describe()})", file=sys.stderr)
    return kept
