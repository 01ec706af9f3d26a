"""Argument types (budgets, counts, durations) and the options every command that runs a system shares.

Only the standard library at import: every parser is built from these, and
`bamasc lint` builds none of them.
"""

from __future__ import annotations

import argparse
import math

from bamasc.limits import MAX_BUDGET, MAX_REWARD, written


def _number(text: str, convert, holds, need: str):
    """`convert(text)` when the value `holds`; else an argparse error saying what is needed.
    Text that does not convert fails like a value out of range (NaN fails every test)."""
    try:
        value = convert(text)
    except ValueError:
        value = math.nan
    if not holds(value):
        raise argparse.ArgumentTypeError(f"need {need}, not {text!r}")
    return value


def positive(text: str) -> int:
    return _number(text, int, lambda value: value >= 1, "a whole number of at least 1")


def whole(text: str) -> int:
    return _number(text, int, lambda value: value >= 0, "a whole number of at least 0")


def seconds(text: str) -> float:
    return _number(text, float, lambda value: 0 < value <= 3600, "seconds above 0 (at most 3600)")


def share(text: str) -> float:
    return _number(text, float, lambda value: 0 <= value < 1, "a share from 0 up to (not including) 1")


def finite(text: str) -> float:
    """A float that training can compute with: NaN or infinity would turn every loss into NaN."""
    return _number(
        text, float, lambda value: math.isfinite(value) and abs(value) <= MAX_REWARD,
        f"a finite number of at most {MAX_REWARD:g} in size",
    )


def budget(text: str) -> float:
    try:
        value = float(text[1:]) * 1_000_000 if text.startswith("$") else float(text.removesuffix("µ$").strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a budget: {text!r} (write µ$ like 1625, or dollars like $0.001625)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a budget must be above zero, not {text}")
    if not value <= MAX_BUDGET:  # NaN and infinity too
        raise argparse.ArgumentTypeError(
            f"a budget must be at most {written(MAX_BUDGET)} µ$ (${MAX_BUDGET / 1e6:,.0f}), not {text}"
        )
    return value


def budget_list(text: str) -> list[float]:
    """Comma-separated budgets, in the order given."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("need at least one budget, e.g. 500,875,1250")
    return [budget(part) for part in parts]


def budget_set(text: str) -> list[float]:
    """Comma-separated budgets, each once, smallest first."""
    return sorted(set(budget_list(text)))


def budget_range(text: str) -> list[float]:
    """LO:HI:STEP in µ$: every budget of a sweep."""
    try:
        lo, hi, step = (float(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a range: {text!r} (write LO:HI:STEP in µ$, e.g. 250:3000:250)") from None
    if not (0 < lo <= hi <= MAX_BUDGET and 0 < step <= MAX_BUDGET):  # NaN fails every comparison
        raise argparse.ArgumentTypeError(
            f"need 0 < LO <= HI <= {written(MAX_BUDGET)} and 0 < STEP <= {written(MAX_BUDGET)}, got {text}"
        )
    steps = (hi - lo) / step + 1e-9
    if steps >= 1000:  # compared before int(): a tiny step makes it infinite
        raise argparse.ArgumentTypeError(f"{text} gives more than 1000 budgets, too many for one sweep")
    count = int(steps) + 1
    return [lo + i * step for i in range(count)]


# Options of exec, collect and bench, declared once. Each command adds those it
# takes where its --help lists them, and may word one's help for itself.
RUN_OPTIONS = {
    "--concurrency": dict(type=positive, default=8, metavar="N"),
    "--fake": dict(choices=("echo", "verbose", "random"), help="answer every model with the offline fake provider"),
    "--cassette": dict(metavar="JSONL", help="replay recorded calls (or record them with --record)"),
    "--record": dict(action="store_true", help="record every real call to --cassette"),
    "--skip-bad-rows": dict(action="store_true", help="report malformed dataset rows and go on"),
    "--timeout": dict(type=seconds, default=60.0, help="seconds per call attempt (default 60)"),
    "--retries": dict(type=int, default=3, help="retries per call after the first attempt (default 3)"),
    "--total-budget": dict(
        type=budget, metavar="B",
        help="µ$ (or $) for the whole batch: a task starts only if its worst case fits in what is left, "
             "at a lower per-task budget of the system's `budgets` if need be, else it is skipped (docs/scale.md)",
    ),
    "--allocate": dict(
        metavar="OFFLINE_JSONL",
        help="with --total-budget: pick each task's budget from the system's `budgets` to maximise expected "
             "successes, estimated from this offline table (`collect` rows)",
    ),
    "--engine": dict(
        choices=("local", "ray"), default="local",
        help="local: one process (default); ray: tasks spread over Ray actors, one machine or a cluster, "
             "under one total and one rate limiter (the ray extra; docs/scale.md)",
    ),
    "--ray-address": dict(metavar="ADDR", help="with --engine ray: the Ray cluster to join (default: start one here)"),
    "--actors": dict(type=positive, default=4, metavar="N", help="with --engine ray: runner actors (default 4)"),
}


def add_run_options(parser: argparse.ArgumentParser, *names: str, **helps: str) -> None:
    """Add the named RUN_OPTIONS to `parser`, in the order named; `helps` rewords some
    (keyed by dest: `cassette="..."`)."""
    for name in names:
        options = RUN_OPTIONS[name]
        dest = name.removeprefix("--").replace("-", "_")
        parser.add_argument(name, **({**options, "help": helps[dest]} if dest in helps else options))


def retry_policy(args):
    """The RetryPolicy that --timeout and --retries ask for."""
    from bamasc.runtime.retry import RetryPolicy

    return RetryPolicy(max_attempts=1 + max(0, args.retries), timeout=args.timeout)
