"""`bamasc exec` as a library call: run tasks on a plan with providers, guard, trace and concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bamasc.records import record
from bamasc.metering.guard import BudgetGuard, PosthocGuard
from bamasc.runtime.interpreter import TaskResult, TaskRun
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.trace import TaskLedger, TraceWriter

if TYPE_CHECKING:
    from bamasc.program import Model
    from bamasc.runtime.batch import Allocator, BatchLedger, BudgetLevel, Limiter, Selector

TASK_FIELDS = ("task", "question", "text", "problem", "prompt")
ID_FIELDS = ("id", "task_id")


_RUN_THRESHOLDS = (20_000, 10, 10)
_runs_in_progress = 0
_saved_thresholds = gc.get_threshold()


@contextlib.contextmanager
def fewer_collections():
    """Collect garbage less often while tasks run; the collector is restored afterwards.

    Everything alive when a run starts (modules, the plan, the SDK clients) is
    frozen out of the collector's view, and the youngest generation is scanned
    after 20,000 allocations instead of 700. A run allocates mostly
    short-lived request and reply objects; with the defaults, at concurrency 64,
    the collector re-scanned the same long-lived objects for about a tenth of
    the client's CPU. Runs may nest or overlap: the first to start sets this
    up, the last to finish undoes it.
    """
    global _runs_in_progress, _saved_thresholds
    if _runs_in_progress == 0:
        _saved_thresholds = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(*_RUN_THRESHOLDS)
    _runs_in_progress += 1
    try:
        yield
    finally:
        _runs_in_progress -= 1
        if _runs_in_progress == 0:
            gc.set_threshold(*_saved_thresholds)
            gc.unfreeze()


class DatasetError(ValueError):
    """A dataset row that cannot be read; the message names the file, line and field."""


@record
class Task:
    id: str
    text: str
    thread: str | None = None  # a thread's id: the task is its next turn (runtime/threads.py)
    thread_budget: float | None = None  # µ$ for the whole thread; None: the thread's own (or no cap)


@record
class ExecOptions:
    concurrency: int = 8
    trace_path: str | None = None
    resume: bool = False  # skip finished tasks; continue unfinished ones from what they already spent
    guard: str = "reserve"  # reserve | posthoc (the paper's check; benchmarks only)
    fake_mode: str | None = None  # echo | verbose: answer every model offline
    cassette: str | None = None
    record: bool = False
    retry: RetryPolicy = RetryPolicy()
    seed: int = 0
    template: str | None = None  # run this template instead of the selected one
    selector: Selector | None = None  # select = policy(...): task texts -> a template name per task
    total_budget: float | None = None  # µ$ for the whole batch (runtime/batch.py); None: no cap beyond each task's
    budget_plans: tuple[BudgetLevel, ...] = ()  # the system compiled at other per-task budgets
    allocator: Allocator | None = None  # picks each task's per-task budget under the total (runtime/allocate.py)
    ledger: BatchLedger | None = None  # a BatchBudget (or one behind an actor) to share, not a new one of total_budget
    limiter: Limiter | None = None  # a shared RateLimiter; None: one for this run from the models' rate_limits
    providers: Callable[[Model], Any] | None = None  # model -> Provider, not make_provider (the API's own providers)
    listener: Callable[[str, dict], None] | None = None  # (kind, record) as each reserve, call and task line is written


def read_dataset(path: str, skip_bad: bool = False) -> tuple[list[Task], list[str]]:
    """Tasks from JSONL rows with an id (`id`/`task_id`, else the 1-based line number) and a text
    (`task`/`question`/`text`/`problem`/`prompt`); bad rows raise, or are skipped and reported."""
    from bamasc.rows import read_jsonl

    return read_jsonl(path, task_reader(), DatasetError, skip_bad)


def task_reader(check_duplicates: bool = True):
    """`read(row, number, where) -> Task` for one file's rows; it remembers the ids it gave, to refuse a duplicate,
    and each thread's budget, to refuse a row that gives its thread another."""
    seen: set[str] = set()
    budgets: dict[str, float | None] = {}

    def read(row, number: int, where: str) -> Task:
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: a row must be a JSON object")
        field = next((f for f in TASK_FIELDS if isinstance(row.get(f), str)), None)
        if field is None:
            raise DatasetError(f"{where}: no task text (one of the fields {', '.join(TASK_FIELDS)})")
        task_id = str(next((row[f] for f in ID_FIELDS if row.get(f) is not None), number))
        if check_duplicates:
            if task_id in seen:
                raise DatasetError(f"{where}: duplicate task id {task_id!r}")
            seen.add(task_id)
        thread, thread_budget = _thread_of(row, where, budgets)
        return Task(task_id, task_text(row, field), thread, thread_budget)

    return read


def _thread_of(row: dict, where: str, budgets: dict[str, float | None]) -> tuple[str | None, float | None]:
    """A row's `thread` (rows of one thread are its turns, run in file order) and `thread_budget` (µ$)."""
    from bamasc.metering.threads import thread_budget_problem, thread_id_problem

    thread, budget = row.get("thread"), row.get("thread_budget")
    if thread is None:
        if budget is not None:
            raise DatasetError(f"{where}: thread_budget needs a thread")
        return None, None
    if isinstance(thread, int) and not isinstance(thread, bool):
        thread = str(thread)
    problem = thread_id_problem(thread) or thread_budget_problem(budget)
    if problem is not None:
        raise DatasetError(f"{where}: {problem.replace('thread_id', 'thread', 1)}")
    if thread not in budgets:  # its first row gives the thread's budget; a later row may leave it out
        budgets[thread] = None if budget is None else float(budget)
    known = budgets[thread]
    if budget is not None and (known is None or abs(budget - known) > 1e-9):
        had = "no thread_budget" if known is None else f"thread_budget {known:g}"
        raise DatasetError(f"{where}: thread {thread[:80]!r} has {had} in its first row, not {budget:g}")
    return thread, known


def task_text(row: dict, field: str) -> str:
    """The text a task asks: the row's text field, and for an MBPP row (a `test_list` of strings)
    its tests after it, which name the function the code must define, as `bench` asks it."""
    tests = row.get("test_list")
    if field in ("text", "prompt") and isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests):
        return mbpp_prompt(row[field], tuple(tests))
    return row[field]


def mbpp_prompt(text: str, tests: tuple[str, ...]) -> str:
    """The MBPP paper's prompt: the description, then the tests the code must pass (they name the function)."""
    return f"{text.strip()}\nYour code should pass these tests:\n\n" + "\n".join(tests)


class DatasetStream:
    """A dataset's tasks read from its file as they are run, so a large one is never held whole.

    `open` reads the file once to check every row (a bad row stops the run
    before any task starts, as when rows were read whole) and keeps only the
    ids, for duplicates and the progress bar's total, and the line numbers of
    rows skipped; iterating reads it again, a row at a time.
    """

    def __init__(self, path: str, ids: set[str], bad: set[int]) -> None:
        self.path = path
        self._ids: set[str] | None = ids
        self.count = len(ids)
        self.bad = bad
        self.threads: dict[str, float | None] = {}  # each thread's budget, as its first row gives it (threads.py)

    @classmethod
    def open(cls, path: str, skip_bad: bool = False) -> tuple[DatasetStream, list[str]]:
        """The stream and (with `skip_bad`) a message per row left out; a bad row otherwise raises DatasetError."""
        from bamasc.rows import parse_lines

        ids: set[str] = set()
        bad: set[int] = set()
        problems: list[str] = []
        threads: dict[str, float | None] = {}
        read = task_reader()
        try:
            handle = open(path, "rb")
        except OSError as problem:
            raise DatasetError(f"{path}: cannot read the file: {problem.strerror}") from None
        with handle:  # as rows.read_jsonl reads, keeping the ids only
            for number, value, problem in parse_lines(handle):
                where = f"{path}:{number}"
                try:
                    if problem is not None:
                        raise DatasetError(f"{where}: {problem}")
                    task = read(value, number, where)
                    ids.add(task.id)
                    if task.thread is not None:
                        threads.setdefault(task.thread, task.thread_budget)
                except DatasetError as wrong:
                    if not skip_bad:
                        raise
                    problems.append(str(wrong))
                    bad.add(number)
        stream = cls(path, ids, bad)
        stream.threads = threads
        return stream, problems

    def __len__(self) -> int:
        return self.count

    def take_ids(self) -> set[str]:
        """Every task id, handed over once: the run counts what is left to do, then lets them go."""
        ids, self._ids = self._ids, None
        return ids if ids is not None else set()

    def __iter__(self):
        from bamasc.rows import parse_lines

        read = task_reader(check_duplicates=False)
        with open(self.path, "rb") as handle:
            for number, value, problem in parse_lines(handle):
                if problem is None and number not in self.bad:
                    yield read(value, number, f"{self.path}:{number}")


class Summary:
    """Totals per role and per model, from the call records as they are written."""

    def __init__(self) -> None:
        self.by_role: dict[str, list[float]] = {}
        self.by_model: dict[str, list[float]] = {}

    def add(self, call: dict) -> None:
        if call["skipped"]:
            return  # never sent: its prompt tokens are a bound, not usage
        for table, key in ((self.by_role, call["role"]), (self.by_model, call["model"])):
            row = table.setdefault(key, [0, 0, 0, 0.0])
            row[0] += 1
            row[1] += call["prompt_tokens"]
            row[2] += call["completion_tokens"]
            row[3] += call["charged"]


class Recorder(TraceWriter):
    def __init__(self, path, summary: Summary, calls: list | None, listener=None):
        super().__init__(path)
        self.summary = summary
        self.calls = calls
        self.listener = listener

    def reserve(self, record: dict) -> str:
        held = super().reserve(record)
        if self.listener is not None:
            self.listener("reserve", {"id": held, **record})
        return held

    def call(self, record: dict, count: bool = True) -> None:
        if count:  # charges of earlier runs are in the trace, not in this run's totals
            self.summary.add(record)
            if self.calls is not None:
                self.calls.append(record)
        super().call(record)
        if count and self.listener is not None:
            self.listener("call", record)

    def tool(self, record: dict, count: bool = True) -> None:
        if count and self.calls is not None:  # the one task's ledger table shows its tool calls
            self.calls.append({"tool": True, **record})
        super().tool(record)
        if count and self.listener is not None:
            self.listener("tool", record)

    def task(self, record: dict) -> None:
        super().task(record)
        if self.listener is not None:
            self.listener("task", record)


def make_providers(program, system_name: str, options: ExecOptions, models=None) -> dict:
    """A provider for each of `models` (default: every model of the system) and for each one's fallbacks, which
    needs their API keys: a fallback's missing key stops the run before it starts, as a seat model's does."""
    from bamasc.runtime.providers import make_provider

    names = program.with_fallbacks(program.systems[system_name].models if models is None else models)
    if options.providers is not None:
        return {name: options.providers(program.models[name]) for name in names}
    return {
        name: make_provider(program.models[name], fake_mode=options.fake_mode, cassette=options.cassette, record=options.record)
        for name in names
    }


def settle_interrupted(trace: TraceWriter, task_id: str, ledger: TaskLedger | None) -> float:
    """What a task spent in earlier runs; each reservation left open by a crash is charged in full, in the trace."""
    if ledger is None:
        return 0.0
    for held, reservation in ledger.open.items():
        if "tool" in reservation:  # a tool call's price (runtime/tool_loop.py)
            trace.tool({"id": held, "task_id": task_id, "node": reservation.get("node"),
                        "round": reservation.get("round"), "name": reservation["tool"], "reserved": reservation["reserved"],
                        "charged": reservation["reserved"], "error": INTERRUPTED}, count=False)
            continue
        trace.call(
            {
                "id": held,
                "task_id": task_id,
                "node": reservation.get("node"),
                "role": None,
                "model": reservation.get("model"),
                # What the reserve line names of the model (lines written before they were kept name neither).
                **{key: reservation[key] for key in ("provider", "model_id") if key in reservation},
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "reserved": reservation["reserved"],
                "charged": reservation["reserved"],
                "latency_ms": None,
                "attempt": reservation.get("attempt"),
                "clamped": False,
                "skipped": False,
                "error": INTERRUPTED,
            },
            count=False,
        )
    return ledger.spent


INTERRUPTED = "interrupted: the run ended with this attempt in flight; reservation kept"


def broken(task_id: str, template, guard, reason: str, deadline_s: float | None) -> TaskResult:
    return TaskResult(
        task_id=task_id, template=template.name, answer=None, output=None, cost=guard.charged,
        budget=guard.budget, bound=template.worst_case_cost, overran=guard.overran, status="error",
        error=reason[:500], calls=0, deadline_s=deadline_s,
        latency_bound_s=template.worst_case_latency_s,
    )


def make_limiter(program, models, options: ExecOptions):
    """The run's rate limiter: `options.limiter` when one is shared, else one from the models'
    `rate_limit`s; none when no call reaches a provider (`--fake`, or a cassette played back)."""
    from bamasc.metering.limiter import limiter_for

    if options.limiter is not None:
        return options.limiter
    if options.fake_mode is not None or (options.cassette is not None and not options.record) or getattr(
        options.providers, "offline", False
    ):
        return None
    return limiter_for(program.models[name] for name in program.with_fallbacks(models))


async def close_providers(providers: dict) -> None:
    """Close every provider, even if one fails to: a close error says nothing
    about the tasks, whose outcomes are already in the trace."""
    await asyncio.gather(*(provider.aclose() for provider in providers.values()), return_exceptions=True)
