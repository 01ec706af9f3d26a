"""The offline dataset: rows of (task, budget, template, outcome), how they are read, scored and collected.

One JSONL row per task, budget and template (docs/policy.md):
`task_id`, `task`, `budget` (µ$), `template`, `success` (bool), `cost` (µ$
charged), `feasible` (bool: the template had a binding within that budget;
an infeasible row records no run), and optionally `behavior_prob`, the
probability with which the logging policy picked this template (`collect`
runs every feasible template, and logs 1 / the number of them).

Success is decided by the `score(kind, output, row)` that `collect` is given:
`bamasc collect` passes `bamasc.evaluate.scorers.score` (evaluate is a later
stage, so it is passed in, not imported); by default `local_score`, a
comparison of the answer extracted from the output with the dataset row's
reference (`answer`, GSM8K's `... #### 72` or a plain value; or the
`\\boxed{}` of a `solution`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os

from bamasc.limits import MAX_BUDGET
from bamasc.records import record
from bamasc.rows import drop_torn_line, lines, parse_lines, read_jsonl

ROW_FIELDS = ("task_id", "task", "budget", "template", "success", "cost", "feasible")


class OfflineDataError(ValueError):
    """A row of an offline dataset that cannot be read; the message names the file and line."""


@record
class OfflineRow:
    task_id: str
    task: str
    budget: float  # µ$ per task
    template: str
    success: bool
    cost: float  # µ$ charged
    feasible: bool  # False: no binding within the budget, so nothing ran
    behavior_prob: float | None = None  # the logging policy's probability of this template


def row_data(row: OfflineRow, **extra) -> dict:
    data = {
        "task_id": row.task_id,
        "task": row.task,
        "budget": row.budget,
        "template": row.template,
        "success": row.success,
        "cost": round(row.cost, 6),
        "feasible": row.feasible,
    }
    if row.behavior_prob is not None:
        data["behavior_prob"] = row.behavior_prob
    data.update(extra)
    return data


def read_rows(path: str) -> list[OfflineRow]:
    """Every row of an offline dataset; a malformed one raises OfflineDataError naming file:line."""
    return read_offline_rows(path)[0]


def read_offline_rows(path: str, skip_bad: bool = False) -> tuple[list[OfflineRow], list[str]]:
    """The rows, and (with `skip_bad`) a message for each malformed row left out instead of raised."""
    return read_jsonl(path, lambda data, _, where: _row(data, where), OfflineDataError, skip_bad)


def _row(data, where: str) -> OfflineRow:
    if not isinstance(data, dict):
        raise OfflineDataError(f"{where}: a row must be a JSON object")
    missing = [f for f in ROW_FIELDS if f not in data]
    if missing:
        raise OfflineDataError(f"{where}: missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    for name in ("success", "feasible"):
        if not isinstance(data[name], bool):
            raise OfflineDataError(f"{where}: '{name}' must be true or false, not {json.dumps(data[name])}")
    for name in ("budget", "cost"):
        value = data[name]
        # One comparison rejects NaN and the too large alike (training divides by budgets).
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_BUDGET:
            raise OfflineDataError(
                f"{where}: '{name}' must be a number of µ$ from 0 to {MAX_BUDGET:.0e}, not {json.dumps(value)[:40]}"
            )
    if data["budget"] <= 0:
        raise OfflineDataError(f"{where}: 'budget' must be above zero")
    if not isinstance(data["task"], str) or not isinstance(data["template"], str):
        raise OfflineDataError(f"{where}: 'task' and 'template' must be strings")
    probability = data.get("behavior_prob")
    if probability is not None and (
        isinstance(probability, bool) or not isinstance(probability, (int, float)) or not 0 < probability <= 1
    ):
        raise OfflineDataError(
            f"{where}: 'behavior_prob' must be a probability in (0, 1], not {json.dumps(probability)[:40]}"
        )
    return OfflineRow(
        task_id=str(data["task_id"]),
        task=data["task"],
        budget=float(data["budget"]),
        template=data["template"],
        success=data["success"],
        cost=float(data["cost"]),
        feasible=data["feasible"],
        behavior_prob=None if probability is None else float(probability),
    )


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------- scoring


def reference_answer(row: dict, kind: str) -> str | None:
    """The reference a dataset row gives: `answer` (after GSM8K's `####` if any), else a `solution`'s `\\boxed{}`."""
    from bamasc.runtime.extract import extract_answer, last_boxed

    value = row.get("answer")
    if value is None and isinstance(row.get("solution"), str):
        value = last_boxed(row["solution"])
    if value is None:
        return None
    if isinstance(value, bool):
        value = str(value).lower()
    text = str(value)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    if kind == "number":
        return extract_answer("number", text)
    return text.strip()


def answers_match(answer: str | None, reference: str) -> bool:
    """Numerically equal when both read as numbers, else equal as text (case, spaces and `$` ignored)."""
    if answer is None:
        return False
    try:
        a, b = float(answer.replace(",", "")), float(reference.replace(",", ""))
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    except ValueError:
        pass

    def plain(text: str) -> str:
        return "".join(text.replace("$", "").split()).lower()

    return plain(answer) == plain(reference)


def local_score(kind: str, output: str | None, row: dict) -> bool:
    from bamasc.runtime.extract import extract_answer

    reference = reference_answer(row, kind)
    if reference is None:
        raise OfflineDataError("the dataset row has no reference answer ('answer' or 'solution') to score against")
    if kind == "code":
        raise OfflineDataError("scoring code answers needs bamasc.evaluate (tests are run in its sandbox)")
    return answers_match(extract_answer(kind, output), reference)


# ---------------------------------------------------------------- collect


@record
class ScoredTask:
    id: str
    text: str
    row: dict  # the dataset row, for its reference answer


def read_scored_tasks(path: str, skip_bad: bool = False) -> tuple[list[ScoredTask], list[str]]:
    """The tasks of a dataset, read as `exec` reads them, each with its whole row (for its reference)."""
    from bamasc.runtime.execute import DatasetError, task_reader

    task = task_reader()

    def read(row, number: int, where: str) -> ScoredTask:
        found = task(row, number, where)
        return ScoredTask(found.id, found.text, row)

    return read_jsonl(path, read, DatasetError, skip_bad)


def done_keys(path: str) -> set[tuple[str, float, str]]:
    """(task id, budget, template) of every whole row already in `path` (what a resumed collect skips)."""
    return done_rows(path)[0]


def done_rows(path: str) -> tuple[set[tuple[str, float, str]], float]:
    """The keys of the rows already in `path`, and what their runs charged (µ$), which a total budget counts."""
    keys = set()
    spent = 0.0
    if not os.path.exists(path):
        return keys, spent
    for _, data, problem in parse_lines(line for _, line in lines(path)):
        if problem is not None:
            continue  # a line cut short by a crash
        try:
            keys.add((str(data["task_id"]), float(data["budget"]), data["template"]))
        except (KeyError, TypeError, ValueError, OverflowError):
            continue  # not a row of ours
        cost = data.get("cost")
        if type(cost) in (int, float) and 0 <= cost <= MAX_BUDGET:
            spent += cost
    return keys, spent


class RowWriter:
    """Appends rows, each written whole and flushed; a half line left by a crash is cut first."""

    def __init__(self, path: str):
        drop_torn_line(path)
        self.handle = open(path, "a", encoding="utf-8")

    def write(self, data: dict) -> None:
        self.handle.write(json.dumps(data, ensure_ascii=False) + "\n")
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


@record
class CollectOptions:
    concurrency: int = 8
    fake_mode: str | None = None  # echo | verbose: answer every model offline
    cassette: str | None = None
    record: bool = False
    retry: object = None  # RetryPolicy; None for the default
    seed: int = 0
    trace_path: str | None = None
    total_budget: float | None = None  # µ$ for the whole collect, the rows already in the output included


@record
class CollectSummary:
    written: int  # rows written by this run
    skipped: int  # rows already in the output (resume)
    infeasible: int  # rows of templates with no binding at their budget
    successes: int
    over_total: int = 0  # runs left out because the total budget had no room (the same command runs them later)


async def collect(
    plans: dict[float, tuple],
    system_name: str,
    templates: tuple[str, ...],
    tasks: list[ScoredTask],
    output: str,
    options: CollectOptions,
    progress=None,
    score=local_score,
) -> CollectSummary:
    """Run every feasible template on every task at every budget and append one row per run to `output`.

    `plans` maps each budget to (plan, program) compiled at that budget, or
    (None, program) when no template fits it. `score(kind, output, row) -> bool`
    decides each run's success. Rows already in `output` are skipped, so an
    interrupted collect resumes where it stopped. After each run, `progress(done,
    total, spent, limit)` hears the runs done and to do, the µ$ they spent and the
    most they may spend.
    """
    from bamasc.runtime.execute import ExecOptions, make_providers
    from bamasc.metering.guard import guard_class
    from bamasc.runtime.interpreter import TaskRun
    from bamasc.runtime.retry import RetryPolicy
    from bamasc.runtime.trace import TraceWriter

    if score is local_score:  # it cannot score code, nor a row without a reference: refuse before any call
        kinds = {plan.system(system_name).answer for plan, _ in plans.values() if plan is not None}
        for task in tasks:
            for kind in kinds:
                if kind == "code":
                    raise OfflineDataError("scoring code answers needs bamasc.evaluate (tests are run in its sandbox)")
                if reference_answer(task.row, kind) is None:
                    raise OfflineDataError(f"task {task.id!r} has no reference answer ('answer' or 'solution') to score against")
    done, spent_before = done_rows(output)
    ledger = None
    if options.total_budget is not None:
        from bamasc.runtime.batch import BatchBudget

        ledger = BatchBudget(options.total_budget, spent=spent_before)
    writer = RowWriter(output)
    trace = TraceWriter(options.trace_path)
    retry = options.retry or RetryPolicy()
    counts = {"written": 0, "skipped": 0, "infeasible": 0, "successes": 0, "over_total": 0}
    total = 0
    limit = 0.0  # the most the runs may spend: each at its budget, or what the total has left
    for budget, (plan, program) in plans.items():
        system = plan.system(system_name) if plan is not None else None
        feasible = [t.name for t in system.templates if t.feasible] if system is not None else []
        for task in tasks:
            for name in templates:
                if (task.id, float(budget), name) in done:
                    counts["skipped"] += 1
                elif name in feasible:
                    total += 1
                    limit += system.budget
                else:
                    writer.write(row_data(OfflineRow(task.id, task.text, float(budget), name, False, 0.0, False)))
                    counts["written"] += 1
                    counts["infeasible"] += 1

    def jobs():
        """Every run still to do, made as the workers take them: never a list of them all."""
        for budget, (plan, program) in plans.items():
            system = plan.system(system_name) if plan is not None else None
            feasible = [t.name for t in system.templates if t.feasible] if system is not None else []
            for task in tasks:
                for name in templates:
                    if name in feasible and (task.id, float(budget), name) not in done:
                        yield budget, system, program, task, name, 1.0 / len(feasible)

    if ledger is not None:
        limit = min(limit, max(0.0, options.total_budget - spent_before))
    providers: dict = {}
    ran = 0
    spent = 0.0

    async def one(budget, system, program, task, name, probability) -> None:
        nonlocal ran, spent
        if ledger is not None and not await _room(ledger, system.budget):
            counts["over_total"] += 1
        else:
            guard = guard_class("reserve", program.systems[system.name].budget_check)(system.budget)
            try:
                run = TaskRun(program, system, system.template(name), providers, guard,
                              task.id, task.text, trace, retry, options.seed)
                result = await run.run()
            finally:
                if ledger is not None:
                    await ledger.settle(system.budget, guard.charged)
            spent += result.cost
            success = bool(score(system.answer, result.output, task.row)) if result.status != "error" else False
            trace.task({"task_id": task.id, "budget": float(budget), "template": name, "answer": result.answer,
                        "success": success, "cost": round(result.cost, 6), "status": result.status, "error": result.error})
            writer.write(
                row_data(
                    OfflineRow(task.id, task.text, float(budget), name, success, result.cost, True, probability),
                    answer=result.answer,
                    status=result.status,
                )
            )
            counts["written"] += 1
            counts["successes"] += success
        ran += 1
        if progress is not None:
            progress(ran, total, spent, limit)

    async def worker(source) -> None:
        for job in source:  # one generator for every worker: `next` does not await
            await one(*job)

    exec_options = ExecOptions(fake_mode=options.fake_mode, cassette=options.cassette, record=options.record)
    try:
        if total:
            # The source is the same at every budget, so one set of providers (one cassette writer) serves all.
            providers.update(make_providers(next(iter(plans.values()))[1], system_name, exec_options))
        source = jobs()
        await asyncio.gather(*(worker(source) for _ in range(max(1, options.concurrency))))
    finally:
        writer.close()
        trace.close()
        for provider in providers.values():
            await provider.aclose()
    return CollectSummary(**counts)


async def _room(ledger, amount: float) -> bool:
    """Hold `amount` of the total for a run, waiting while runs in flight may give some back; False: no room."""
    while not await ledger.reserve(amount):
        if ledger.held <= 1e-9 or amount > ledger.remaining + ledger.held + 1e-9:
            return False
        await ledger.wait()
    return True
