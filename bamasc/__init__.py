"""bamasc: a compiler for budget-aware multi-agent LLM systems.

The public API (docs/python.md): `bamasc.load(path).compile(...)` gives a
`Plan` proven within its budget; `plan.run(task)` runs a task under it.
The names load on first use, so `import bamasc` (and `bamasc lint`) stays cheap.
"""


# Read by type checkers only (mypy and pyright treat a variable of this name as
# typing.TYPE_CHECKING); importing typing here would slow every start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from bamasc.version import __version__ as __version__
    from bamasc.api import providers as providers
    from bamasc.api.errors import BamError as BamError
    from bamasc.api.errors import BudgetError as BudgetError
    from bamasc.api.errors import Diagnostic as Diagnostic
    from bamasc.api.errors import Note as Note
    from bamasc.api.errors import PlanError as PlanError
    from bamasc.api.errors import ProviderError as ProviderError
    from bamasc.api.errors import TraceError as TraceError
    from bamasc.api.errors import UsageError as UsageError
    from bamasc.api.plan import Plan as Plan
    from bamasc.api.program import Program as Program
    from bamasc.api.program import load as load
    from bamasc.api.records import BudgetState as BudgetState
    from bamasc.api.records import Call as Call
    from bamasc.api.records import CallSettled as CallSettled
    from bamasc.api.records import CallStarted as CallStarted
    from bamasc.api.records import Event as Event
    from bamasc.api.records import Result as Result
    from bamasc.api.records import Seat as Seat
    from bamasc.api.records import Task as Task
    from bamasc.api.records import TaskDone as TaskDone
    from bamasc.api.records import Template as Template
    from bamasc.api.records import ThreadState as ThreadState
    from bamasc.api.records import ThreadTurn as ThreadTurn
    from bamasc.api.records import ToolCalled as ToolCalled
    from bamasc.api.session import Session as Session
    from bamasc.api.session import Thread as Thread

# Each public name and the module that defines it.
_HOMES = {
    "load": "bamasc.api.program", "Program": "bamasc.api.program",
    "Plan": "bamasc.api.plan", "Session": "bamasc.api.session", "Thread": "bamasc.api.session",
    **dict.fromkeys(
        ("BamError", "BudgetError", "Diagnostic", "Note", "PlanError", "ProviderError", "TraceError", "UsageError"),
        "bamasc.api.errors",
    ),
    **dict.fromkeys(
        ("BudgetState", "Call", "CallSettled", "CallStarted", "Event", "Result", "Seat", "Task", "TaskDone", "Template",
         "ThreadState", "ThreadTurn", "ToolCalled"),
        "bamasc.api.records",
    ),
}

__all__ = ["__version__", "providers", *_HOMES]


def __getattr__(name: str) -> object:
    from importlib import import_module

    if name == "__version__":  # (bamasc.version: `import bamasc` itself loads no other module)
        from bamasc.version import __version__

        globals()[name] = __version__
        return __version__
    if name == "providers":
        module = import_module("bamasc.api.providers")
        globals()[name] = module
        return module
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'bamasc' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
