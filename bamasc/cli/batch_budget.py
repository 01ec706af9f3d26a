"""`--total-budget` and `--allocate`: the per-task budgets a batch may use, the allocator, and what the summary says."""

from __future__ import annotations

from bamasc.cli import output
from bamasc.cli.report import Report


def options(report: Report, args, program, system, options, tasks: int):
    """`options` with the total, the system at each lower (or, allocating, every) declared budget, and the
    allocator; None once a problem is reported."""
    from bamasc.records import replace

    if getattr(args, "guard", "reserve") == "posthoc":
        output.usage(report, "--total-budget needs --guard reserve: the after-the-fact check cannot promise a cap")
        return None
    if getattr(program.systems.get(system.name), "budget_check", "before") == "after":
        output.usage(report, f"--total-budget needs the reserve guard, and system '{system.name}' checks its budget "
                             "after each call (budget_check = after), which cannot promise a cap")
        return None
    levels = _levels(report, args, program, system, options)
    if levels is None:
        return None
    options = replace(options, total_budget=args.total_budget, budget_plans=tuple(levels))
    if not args.allocate:
        return options
    allocator = _allocator(report, args, system, options, levels, tasks)
    return None if allocator is None else replace(options, allocator=allocator)


def check(report: Report, args) -> bool:
    """Whether --allocate comes with the --total-budget it shares out."""
    if getattr(args, "allocate", None) and args.total_budget is None:
        output.usage(report, "--allocate needs --total-budget: it shares that total out")
        return False
    return True


def _levels(report: Report, args, program, system, options):
    """A BudgetLevel for each declared budget other than the plan's own.

    A plan file holds its own budget only: lower levels need the source, so
    with a plan a task runs at its budget or, where that does not fit, capped
    at its template's proven bound.
    """
    declared = program.systems.get(system.name)
    if args.file.endswith(".json") or declared is None:
        return []
    from bamasc.plan.compile import compile_file
    from bamasc.runtime.batch import BudgetLevel

    levels = []
    for budget in sorted(set(declared.budgets)):
        if budget == system.budget or (budget > system.budget and not args.allocate):
            continue
        result = compile_file(args.file, system.name, budget)
        if result.plan is None:
            continue  # no template fits that budget: not a level a task can run at
        plan = result.plan.system(system.name)
        selector = None
        if plan.selection["rule"] == "policy" and options.template is None:
            from bamasc.policy.errors import PolicyError
            from bamasc.policy.select import selector_for

            try:
                selector = selector_for(plan, result.program)
            except PolicyError as problem:
                output.failure(report, problem)
                return None
        levels.append(BudgetLevel(float(budget), plan, selector))
    return levels


def _allocator(report: Report, args, system, options, levels, tasks: int):
    from bamasc.policy.data import OfflineDataError, read_rows
    from bamasc.runtime.allocate import DualAllocator, Estimates

    try:
        rows = read_rows(args.allocate)
    except OfflineDataError as problem:
        output.failure(report, problem)
        return None
    from bamasc.runtime.batch import BudgetLevel

    templates = {}
    for level in [BudgetLevel(system.budget, system, options.selector), *levels]:
        if options.template is not None:
            templates[float(level.budget)] = options.template
        else:
            templates[float(level.budget)] = None if level.selector is not None else level.system.selection["selected"]
    estimates = Estimates(((r.task_id, r.budget, r.template, r.success, r.cost) for r in rows if r.feasible), templates)
    try:
        return DualAllocator(estimates, args.total_budget, tasks)
    except ValueError as problem:
        output.failure(report, f"{args.allocate}: {problem}")
        return None


def summary(outcome) -> str:
    """What the total was, what was spent and left, and the per-task budgets the tasks ran at."""
    ledger, totals = outcome.ledger, outcome.totals
    earlier = f" ({ledger.earlier:,.1f} by earlier runs)" if ledger.earlier else ""
    # Reservations never settled (a run that stopped on a failure): held, not spent, until a --resume counts them.
    held = f", held {ledger.held:,.1f} by tasks that did not end" if ledger.held > 1e-6 else ""
    mix = ", ".join(f"{budget:g} µ$ × {count}" for budget, count in sorted(totals.allocated.items(), reverse=True))
    skipped = "".join(f"; {what}: {count}" for what, count in (("skipped for the total", totals.skipped_total),
                                                                ("skipped for their budget", totals.skipped_budget))
                      if count)
    lines = [
        f"total budget: {amount(ledger.total)}; spent {ledger.spent:,.1f}{earlier}{held}, left {ledger.remaining:,.1f}",
        f"per-task budgets: {mix or 'none'}{skipped}",
    ]
    if outcome.allocator is not None:
        lines.append(outcome.allocator.explain())
    else:
        lines.append("each task at the system's budget, or the largest lower one whose worst case fitted what was left")
    return "\n".join(lines)


def amount(micro_dollars: float) -> str:
    """A sum as a reader writes it: dollars to the cent (more digits when it has them), then µ$ in full."""
    dollars = f"{micro_dollars / 1e6:,.7f}".rstrip("0")
    whole, cents = dollars.split(".")
    return f"${whole}.{cents.ljust(2, '0')} ({micro_dollars:,.{0 if micro_dollars == int(micro_dollars) else 1}f} µ$)"
