"""The template MILP's test kit: random templates and pools, loading, brute force and comparing objectives."""

from __future__ import annotations

import itertools
import math
import random

from bamasc.ir.bounds import call_bounds, worst_case_cost
from bamasc.ir.unroll import unroll
from bamasc.optimize import bind
from bamasc.optimize.exact import has_idle_seat
from bamasc.optimize.problem import violations
from bamasc.optimize.strategy import DEFAULT_STRATEGY, BindStrategy
from bamasc.plan.compile import check_file
from bamasc.records import replace

ROLES = '''
role Executor {
  max_output = %(exec_cap)s
  reads = answer
  prompt = """
    Solve: {{task}} {{previous?}}{{solution?}}{{feedback?}}{{plan?}}{{step?}}%(extra)s
    """
}
role Critic {
  max_output = 64
  reads = verdict
  prompt = "Check {{solution}} for {{task}}."
}
role Planner {
  max_output = 80
  reads = plan
  prompt = "Plan {{task}} {{feedback?}}"
}
role Formatter {
  max_output = 32
  reads = answer
  prompt = "Answer {{task}} from %(steps)s"
}
'''


FLOWS = [
    ("chain", ["executor:Executor"], "answer chain executor(task)"),
    ("star", ["executor:Executor"], "drafts = parallel executor(task)\n    answer vote(drafts)"),
    ("refine", ["executor:Executor", "critic:Critic"], "answer refine executor(task) with critic until approved"),
    (
        "plan",
        ["planner:Planner", "executor:Executor", "critic:Critic", "formatter:Formatter"],
        "steps = plan planner(task) using executor review critic max_steps 2\n    answer formatter(task, steps)",
    ),
    (
        "fan-in",
        ["drafter:Executor", "executor:Executor"],
        "drafts = parallel drafter(task)\n    answer chain executor(task, drafts)",
    ),
    (
        "refine-after",
        ["drafter:Executor", "executor:Executor", "critic:Critic"],
        "drafts = parallel drafter(task)\n    answer refine executor(task, drafts) with critic until approved",
    ),
]


def random_source(rng: random.Random) -> tuple[str, str]:
    name, slots, flow = rng.choice(FLOWS)
    models = []
    for m in range(rng.randint(2, 3)):
        cap = rng.choice(["", f"max_output = {rng.choice([16, 48, 96])}"])
        quality = rng.choice(["", f"quality {{ Executor = {rng.choice([0.5, 1.0, 2.0])} }}"])
        models.append(
            f"model m{m} {{\n  provider = fake\n  name = \"m{m}\"\n"
            f"  price {{ input = {rng.choice([0.1, 0.5, 1.0, 3.0])}  output = {rng.choice([0.4, 2.0, 5.0, 15.0])} }}\n"
            f"  tier = {1 if m == 0 else rng.randint(1, 2)}\n  {cap}\n  {quality}\n}}\n"
        )
    slot_lines = []
    for slot in slots:
        slot_name, role = slot.split(":")
        if slot_name in ("planner", "formatter"):
            lo = hi = 1
        else:
            lo = rng.choice([0, 1])
            hi = lo + rng.randint(0 if lo else 1, 2)
        slot_lines.append(f"  slot {slot_name} : {role} [{lo}..{hi}]")
    require = rng.choice(["", "  require count(executor, tier = 1) <= 1", "  require count(executor) >= 1"])
    budget = rng.choice([300, 800, 2000, 6000])
    source = (
        "\n".join(models)
        + ROLES % {"exec_cap": rng.choice([64, 128]), "extra": "{{drafts?}}" if "drafts" in flow and "vote" not in flow else "",
            "steps": "{{steps}}" if "steps" in flow else ""}
        + "topology t {\n" + "\n".join(slot_lines) + f"\n{require}\n  flow {{\n    {flow}\n  }}\n}}\n"
        + f"system s {{\n  models = [{', '.join(f'm{m}' for m in range(len(models)))}]\n  topologies = [t]\n"
        + f"  budget = {budget}\n  task_tokens = 40\n  min_agents = {rng.choice([1, 2])}\n}}\n"
    )
    return name, source


def load(tmp_path, source: str):
    path = tmp_path / "t.bam"
    path.write_text(source)
    program, diagnostics, _ = check_file(str(path), budgets=False)
    assert program is not None, [d.message for d in diagnostics]
    return program


# The most bindings one brute force may enumerate (`search_space`): about 1 to 7 s of CPU at 0.1 to 0.7 ms a
# binding. A generator's draw above it is replaced by its next draw, so a test's cost is set by this cap, not by
# which seeds happen to draw the largest templates (one seed once drew 324,900 bindings: 32 s per brute force).
MAX_SEARCH_SPACE = 10_000


def search_space(program) -> int:
    """How many bindings `brute_force` enumerates for system `s`'s template `t`: per slot, every count from
    lo to hi and every multiset of that many models of the pool."""
    pool = len(program.systems["s"].models)
    return math.prod(sum(math.comb(pool + n - 1, n) for n in range(slot.lo, slot.hi + 1))
                     for slot in program.topologies["t"].slots)


def within_search_space(tmp_path, draw, cap: int = MAX_SEARCH_SPACE) -> tuple[str, object]:
    """The first source `draw()` gives whose brute force enumerates at most `cap` bindings, and its program."""
    largest = 0
    for _ in range(100):
        source = draw()
        program = load(tmp_path, source)
        space = search_space(program)
        if space <= cap:
            return source, program
        largest = max(largest, space)
    raise AssertionError(f"100 draws in a row were above {cap:,} bindings (up to {largest:,}): the generator "
                         "no longer fits the cap")


def brute_force(program, budget: float) -> tuple | None:
    """Every count vector, every binding with instances strongest first: the best objective (the
    system's: tier counts, quality, cost; or by value, weight x quality, cost)."""
    system = program.systems["s"]
    topology = program.topologies["t"]
    pool = [program.models[name] for name in system.models]
    slot_index = {slot.name: i for i, slot in enumerate(topology.slots)}
    rows = tuple(
        bind.RequireRow(tuple((slot_index[s], t, c) for s, t, c in row.terms), row.sense, row.rhs)
        for row in (bind.linear_row(r) for r in topology.requires)
    )
    largest = bind.unroll(topology, {slot.name: slot.hi for slot in topology.slots})
    order = bind._order_problem(program, system, topology, pool, rows, budget, largest)
    best = None
    per_slot = []
    for s, slot in enumerate(topology.slots):
        strength = order.strength_order(s)
        choices = []
        for n in range(slot.lo, slot.hi + 1):
            choices += [tuple((s, k, m) for k, m in enumerate(pick)) for pick in itertools.combinations_with_replacement(strength, n)]
        per_slot.append(choices)
    unrolls, idle = {}, {}
    for parts in itertools.product(*per_slot):
        seats = tuple(seat for part in parts for seat in part)
        counts = {slot.name: len(part) for slot, part in zip(topology.slots, parts)}
        key = tuple(counts.values())
        if key not in unrolls:  # the unroll depends on the counts alone
            unrolls[key] = unroll(topology, counts)
            idle[key] = has_idle_seat(unrolls[key], counts)
        unrolled = unrolls[key]
        if idle[key]:
            continue
        if [v for v in violations(order, seats) if v != "budget"]:
            continue
        model_of = {(topology.slots[s].name, k): pool[m] for s, k, m in seats}
        bounds = call_bounds(unrolled.calls, model_of, program.roles, system.task_tokens)
        # The binder's price: a dynamic plan's steps each at their costliest seat, reading the
        # largest output of every earlier step (`joint=False`); the plan records the exact bound.
        price = worst_case_cost(unrolled.calls, bounds, unrolled.choices, joint=False)
        if price > budget * (1 + 1e-9):
            continue
        tiers = tuple(sum(pool[m].tier == t for _, _, m in seats) for t in order.tier_levels)
        quality = round(_worth(order, seats), 6)
        objective = order.score(tiers, quality, price)
        if best is None or objective > best[0]:
            best = objective, worst_case_cost(unrolled.calls, bounds, unrolled.choices)
    return None if best is None else (*best[0][:-1], -best[1])


def _worth(order, seats) -> float:
    """Quality as the objective counts it: by value, each slot's best seat once (docs/language.md,
    "Weights"), whichever instance holds it; by tiers, every seat."""
    if not order.by_value:
        return math.fsum(order.quality[s][m] for s, _, m in seats)
    best: dict[int, float] = {}
    for s, _, m in seats:
        best[s] = max(best.get(s, 0.0), order.quality[s][m])
    return math.fsum(best.values())


def objective(binding) -> tuple | None:
    if not binding.feasible:
        return None
    if binding.objective_kind == "value":
        return (round(binding.quality, 6), -binding.worst_case_cost)
    return (*binding.tier_seats, round(binding.quality, 6), -binding.worst_case_cost)


def same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return a[:-1] == b[:-1] and math.isclose(a[-1], b[-1], rel_tol=1e-7, abs_tol=1e-6)


def strategy(**thresholds) -> BindStrategy:
    """The default binder strategy with some thresholds changed."""
    return replace(DEFAULT_STRATEGY, **thresholds)


def assert_binds_like_brute_force(program, source: str) -> None:
    """The best binding at the system's budget, with every rotating slot enumerated (the default
    for small templates), with none (one MILP with count indicators), and with that MILP narrowed
    to the tier counts before its last objectives (the default above 1,000 columns), equals brute
    force."""
    system = program.systems["s"]
    truth = brute_force(program, system.budget)
    enumerated = objective(bind.bind_template(program, system, "t", system.budget))
    one = objective(bind.bind_template(program, system, "t", system.budget, strategy=strategy(enumerate_up_to=0)))
    in_steps = strategy(enumerate_up_to=0, split_from_columns=0)
    narrowed = objective(bind.bind_template(program, system, "t", system.budget, strategy=in_steps))
    assert same(enumerated, truth), (source, enumerated, truth)
    assert same(one, truth), (source, one, truth)
    assert same(narrowed, truth), (source, narrowed, truth)
