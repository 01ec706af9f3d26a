"""Binds a pipeline template exactly, slot by slot, keeping only the partial bindings no other beats.

Where every statement is padded and every read is a product of two seats
(optimize/coupled.py), the template MILP (template.py) holds nothing but seat
columns, products and value columns nothing prices. A binding's cost is then
what each slot's seats cost on their own, plus the products of a seat with a
seat of the same slot or of the slot next to it. A slot's seats are one
*configuration*: how many instances, and which models, strongest first (the
MILP's fill and order rows allow no other arrangement). So the best binding is
a path through the slots' configurations, and a dynamic program over the slots
finds it.

A partial binding of slots 0..s ending in configuration b is a *label*: its
tier counts, quality and cost. One label beats another of the same b when its
tier counts and then quality are at least as high (compared in that order) and
its cost no higher: every way of completing the second completes the first at
least as well. Only the labels nothing beats are kept, and only those that can
still be completed within the budget (the cheapest completion of each b is
found first, backwards), and whose tier counts can still reach those of some
binding within the budget (one found first by keeping a single label per
configuration). The best complete label is the lexicographic optimum
the MILP would find: most seats of each tier strongest first, then the highest
quality (within `QUALITY_TOLERANCE`), then the lowest cost, all priced by the
MILP's own cost coefficients, so exact.py checks the answer the same way.
By value (`objective = value`) labels have no tier counts: the best is the
highest quality (each slot's weight x quality, on its instance 0), then the lowest cost.

A `min_agents` above the slots' lower counts is left out of the program: where
the best binding without it seats that many, it is the best binding with it
(the MILP with the row allows a subset of the same bindings); where it seats
fewer, `sweep` returns None.

What it deliberately does not do: `require` rows, excluded bindings, routes, rotating statements,
deadlines, reads priced through R and Q (exact.py builds such a template's MILP
again with every read a product, for this module only), the paper's weights, or the cheapest
binding. `sweep` returns None for those, and for templates whose
configurations or labels would grow past `MOST_CONFIGURATIONS` or
`MOST_LABELS`; the MILP solves them.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

from bamasc.optimize.formulation import QUALITY_TOLERANCE
from bamasc.optimize.problem import SeatProblem
from bamasc.records import record

MOST_CONFIGURATIONS = 512
"""Configurations of one slot (5 models at [1..3] make 55; 5 at [0..5] make 252)."""

MOST_LABELS = 50_000
"""Labels kept after one slot, beyond which the MILP is asked instead."""

_ROWS = frozenset({"seat", "fill", "order", "min_count", "value", "couple", "budget", "min_agents"})


@record
class Swept:
    """The answer: every column's value, or None when no binding fits the budget."""

    values: list[float] | None


def sweep(problem: SeatProblem, model, budget_tolerance: float) -> Swept | None:
    """The best binding of the template MILP `model` by dynamic programming, or None where it does not apply."""
    if arrangements(problem, model) > MOST_CONFIGURATIONS:
        return None
    shape = _shape(problem, model)
    if shape is None:
        return None
    slots, products = shape
    configurations = [_configurations(problem, s, columns) for s, columns in enumerate(slots)]
    return _solve(problem, model, slots, products, configurations, budget_tolerance)


def arrangements(problem: SeatProblem, model) -> int:
    """The most configurations a slot of `model` allows (`sweep` takes up to `MOST_CONFIGURATIONS`)."""
    offered = [0] * len(problem.slot_names)
    for s, k, _ in model.ilp.seats:
        offered[s] += k == 0
    return max(
        (sum(math.comb(n + o - 1, n) if o else n == 0 for n in range(lo, hi + 1)) for o, lo, hi in zip(offered, problem.lo, problem.hi)),
        default=1,
    )


def _shape(problem: SeatProblem, model):
    """Per slot its columns [instance][rank] and offered models; the products, or None if not a pipeline."""
    ilp = model.ilp
    if problem.excluded or problem.require:
        return None
    if any(row.family.split("[")[0] not in _ROWS for row in ilp.rows):
        return None
    seats = len(ilp.seats)
    product_columns = {z for z, _, _ in model.products}
    for j, column in enumerate(ilp.extra, start=seats):
        if j not in product_columns and (model.cost[j] or not column.name.startswith("W[")):
            return None
    slots: list[dict] = [{} for _ in problem.slot_names]
    for j, (s, k, m) in enumerate(ilp.seats):
        slots[s].setdefault(k, []).append((j, m))
    slot_of = {j: s for j, (s, _, _) in enumerate(ilp.seats)}
    products = []
    for z, readers, sources in model.products:
        sides = {slot_of[j] for j in readers}, {slot_of[j] for j in sources}
        if any(len(side) != 1 for side in sides):
            return None
        (a,), (b,) = sides
        if abs(a - b) > 1:
            return None
        products.append((model.cost[z], z, readers, sources))
    return slots, products


def _configurations(problem: SeatProblem, s: int, columns: dict) -> list[tuple[int, ...]]:
    """Every arrangement the MILP allows at slot s, as the columns it fills: n instances, strongest first."""
    offered = len(columns.get(0, ()))
    out = []
    for n in range(problem.lo[s], problem.hi[s] + 1):
        if n and not offered:
            continue
        for ranks in itertools.combinations_with_replacement(range(offered), n):
            out.append(tuple(columns[k][r][0] for k, r in enumerate(ranks)))
    return out


def _solve(problem, model, slots, products, configurations, budget_tolerance) -> Swept | None:
    import numpy as np

    ilp = model.ilp
    levels = problem.tier_levels
    base = problem.capacity + 1
    if base ** len(levels) > 2**62:
        return None
    # By value there are no tier counts: every key is 0, and labels compare by quality, then cost.
    weight = {t: 0 if problem.by_value else base ** (len(levels) - 1 - i) for i, t in enumerate(levels)}
    model_of = [m for _, _, m in ilp.seats]
    slot_of = [s for s, _, _ in ilp.seats]
    limit = problem.budget * (1 + budget_tolerance) if math.isfinite(problem.budget) else math.inf

    # Per slot and configuration: tier key, quality and the cost of its own seats and products.
    fills = [_fills(configs, len(ilp.seats)) for configs in configurations]  # [slot]: configurations x seats, 0/1
    tier_key = np.array([weight[problem.tiers[m]] for m in model_of], dtype=np.int64)
    quality_of = np.array([problem.seat_quality(s, k, m) for s, k, m in ilp.seats])
    seat_cost = np.array(model.cost[: len(ilp.seats)])
    keys = [f.astype(np.int64) @ tier_key for f in fills]
    qualities = [f @ quality_of for f in fills]
    own = [f @ seat_cost for f in fills]
    # cross[s][a, b]: products between slot s - 1 in configuration a and slot s in configuration b.
    cross = [None] + [np.zeros((len(configurations[s - 1]), len(configurations[s]))) for s in range(1, len(slots))]
    by_pair: dict = defaultdict(list)
    for cost, _, readers, sources in products:
        a, b = slot_of[readers[0]], slot_of[sources[0]]
        lower, upper = (readers, sources) if a <= b else (sources, readers)
        by_pair[min(a, b), max(a, b)].append((cost, list(lower), list(upper)))
    for (a, b), terms in by_pair.items():
        left = np.stack([fills[a][:, lower].sum(axis=1) for _, lower, _ in terms], axis=1)
        right = np.stack([fills[b][:, upper].sum(axis=1) for _, _, upper in terms], axis=1)
        weights = np.array([cost for cost, _, _ in terms])
        if a == b:
            own[a] = own[a] + (left * right) @ weights
        else:
            cross[b] = cross[b] + (left * weights) @ right.T

    alive = [_undominated(s, keys, qualities, own, cross) for s in range(len(slots))]
    for s in range(len(slots)):
        pick = alive[s]
        configurations[s] = [configurations[s][i] for i in pick]
        keys[s], qualities[s], own[s] = keys[s][pick], qualities[s][pick], own[s][pick]
        if s:
            cross[s] = cross[s][:, pick]
        if s + 1 < len(slots):
            cross[s + 1] = cross[s + 1][pick, :]

    # rest[s][b]: the cheapest completion of slots s+1.. after configuration b at slot s.
    rest = [None] * len(slots)
    rest[-1] = np.zeros(len(configurations[-1]))
    for s in range(len(slots) - 2, -1, -1):
        rest[s] = (cross[s + 1] + own[s + 1] + rest[s + 1]).min(axis=1)
    if not (own[0] + rest[0]).min() <= limit:
        return Swept(None)

    # A label whose key cannot reach the key of some binding within the budget, even with the
    # strongest configuration in every slot after it, leads to no best binding: it is not kept.
    floor = _some_key(keys, own, cross, rest, limit)
    most_after = np.zeros(len(keys), dtype=np.int64)  # [s]: the highest key slots s+1.. can add
    for s in range(len(keys) - 2, -1, -1):
        most_after[s] = most_after[s + 1] + keys[s + 1].max()

    # Forward: per slot, the labels kept, as arrays (configuration, key, quality, cost, parent label).
    state = np.flatnonzero((own[0] + rest[0] <= limit) & (keys[0] + most_after[0] >= floor))
    layer = (state, keys[0][state], qualities[0][state], own[0][state], np.full(len(state), -1))
    layers = [layer]
    for s in range(1, len(slots)):
        state_prev, key_prev, quality_prev, cost_prev, _ = layer
        if len(state_prev) * len(configurations[s]) > MOST_LABELS * 8:
            return None
        cost = cost_prev[:, None] + cross[s][state_prev, :] + own[s][None, :]
        reach = key_prev[:, None] + keys[s][None, :] + most_after[s] >= floor
        parent, b = np.nonzero((cost + rest[s][None, :] <= limit) & reach)
        cost = cost[parent, b]
        key = key_prev[parent] + keys[s][b]
        quality = quality_prev[parent] + qualities[s][b]
        kept = _unbeaten(b, key, quality, cost)
        layer = (b[kept], key[kept], quality[kept], cost[kept], parent[kept])
        if len(kept) > MOST_LABELS:
            return None
        layers.append(layer)

    _, key, quality, cost, _ = layer
    best = key == key.max()
    best &= quality >= quality[best].max() - QUALITY_TOLERANCE
    chosen = int(np.flatnonzero(best)[np.argmin(cost[best])])
    values = [0.0] * ilp.width
    for s in range(len(slots) - 1, -1, -1):
        for j in configurations[s][int(layers[s][0][chosen])]:
            values[j] = 1.0
        chosen = int(layers[s][4][chosen])
    for _, z, readers, sources in products:
        values[z] = float(sum(values[j] for j in readers) * sum(values[j] for j in sources))
    if sum(values[: len(ilp.seats)]) < problem.min_agents:
        return None  # the best binding without `min_agents` breaks it: the MILP decides
    return Swept(values)


def _some_key(keys, own, cross, rest, limit) -> int:
    """The key of a binding within the budget, found by keeping one label per configuration (the
    highest key, then the lowest cost): a lower bound on the best binding's key, in one pass."""
    import numpy as np

    key = np.where(own[0] + rest[0] <= limit, keys[0], -1)
    cost = own[0]
    for s in range(1, len(keys)):
        total = cost[:, None] + cross[s] + own[s][None, :]
        score = np.where((key[:, None] >= 0) & (total + rest[s][None, :] <= limit), key[:, None], -1)
        best = score.max(axis=0)
        cost = np.where(score == best[None, :], total, np.inf).min(axis=0)
        key = np.where(best >= 0, best + keys[s], -1)
    return int(key.max())


def _undominated(s, keys, qualities, own, cross):
    """The configurations of slot s that no other of the slot beats everywhere: (key, quality) at
    least as high in that order, its own cost and every product with a neighbour no higher. Any
    binding through a beaten one does at least as well through the other."""
    import numpy as np

    n = len(own[s])
    left = cross[s].T if s else np.zeros((n, 0))
    right = cross[s + 1] if s + 1 < len(cross) else np.zeros((n, 0))
    profile = np.hstack([own[s][:, None], left, right])
    # Strongest first: every configuration kept before i has (key, quality) at least i's, so i is
    # beaten exactly when one of them costs no more anywhere.
    order = np.lexsort((-qualities[s], -keys[s]))
    kept = np.empty(n, dtype=np.int64)
    rows = np.empty_like(profile)
    m = 0
    for i in order:
        if not m or not (rows[:m] <= profile[i]).all(axis=1).any():
            kept[m], rows[m] = i, profile[i]
            m += 1
    return np.sort(kept[:m])


def _fills(configurations, width: int):
    """Configurations x seat columns: 1.0 where the configuration fills the column."""
    import numpy as np

    out = np.zeros((len(configurations), width))
    for i, columns in enumerate(configurations):
        out[i, list(columns)] = 1.0
    return out


def _unbeaten(group, key, quality, cost):
    """Indices of the labels no other of their group beats: higher (key, quality), in that order, at
    no higher cost."""
    import numpy as np

    by_score = np.lexsort((quality, key))
    ks, qs = key[by_score], quality[by_score]
    distinct = np.r_[True, (ks[1:] != ks[:-1]) | (qs[1:] != qs[:-1])]
    rank = np.empty(len(key), dtype=np.int64)
    rank[by_score] = np.cumsum(distinct)
    by_cost = np.lexsort((-rank, cost, group))
    # Offsetting each group's ranks above every earlier group's lets one running maximum serve all.
    ranks = rank[by_cost] + group[by_cost].astype(np.int64) * (int(rank.max(initial=0)) + 1)
    best_before = np.r_[0, np.maximum.accumulate(ranks)[:-1]]
    return by_cost[ranks > best_before]
