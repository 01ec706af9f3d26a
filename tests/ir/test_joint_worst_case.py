"""`worst_case` on decisions tied by amounts paid under both (a dynamic plan's steps), against
brute force over every combination of their branches."""

from __future__ import annotations

import itertools
import random

import pytest

from bamasc.ir.alternatives import Both, worst_case


def random_plan(rng: random.Random, reads_all: bool = True):
    """Steps 0..n-1, each a decision over some seats: an own amount per seat, and each step reading
    every earlier one at its seat's rate, the tokens its writer's seat wrote (plus numbering)."""
    steps = rng.randint(2, 6)
    seats = [rng.randint(1, 3) for _ in range(steps)]
    decision = [f"p.seat{i}" for i in range(steps)]
    path = [[((decision[i], f"s{k}"),) for k in range(seats[i])] for i in range(steps)]
    own = [[rng.uniform(0, 50) for _ in range(seats[i])] for i in range(steps)]
    rate = [[rng.choice([0.0, 0.1, 1.0, 3.0]) for _ in range(seats[i])] for i in range(steps)]
    wrote = [[rng.choice([0, 10, 40, 200]) for _ in range(seats[i])] for i in range(steps)]
    amounts = [(path[i][k], own[i][k]) for i in range(steps) for k in range(seats[i])]
    amounts.append(((), rng.uniform(0, 100)))
    for i in range(1, steps):
        for k in range(seats[i]):
            if not reads_all and rng.random() < 0.3:
                continue
            for j in range(i):
                numbering = 4 + 6 * j
                for l in range(seats[j]):
                    tokens = wrote[j][l] + numbering
                    amounts.append((Both(path[i][k], path[j][l], rate[i][k], tokens), rate[i][k] * tokens))
    return amounts, decision, seats


def brute(amounts, decision, seats) -> float:
    best = 0.0
    for picks in itertools.product(*(range(n) for n in seats)):
        chosen = {decision[i]: f"s{k}" for i, k in enumerate(picks)}

        def runs(path):
            return all(chosen.get(d) == b for d, b in path)

        total = sum(a for key, a in amounts if (runs(key.reader) and runs(key.writer) if isinstance(key, Both) else runs(key)))
        best = max(best, total)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_joint_worst_case_is_the_dearest_combination(seed):
    rng = random.Random(seed)
    amounts, decision, seats = random_plan(rng)
    found = worst_case(amounts)
    assert found.total == pytest.approx(brute(amounts, decision, seats), rel=1e-9, abs=1e-9)
    # The recorded branches are that combination: priced alone, they give the total.
    picks = {d: found.chosen[d] for d in decision}
    again = [(key, a) for key, a in amounts if not isinstance(key, Both) or all(picks[d] == b for d, b in key.reader + key.writer)]
    fixed = worst_case([(key.reader, a) if isinstance(key, Both) else (key, a) for key, a in again
                        if isinstance(key, Both) or not key or picks[key[0][0]] == key[0][1]])
    assert fixed.total == pytest.approx(found.total, rel=1e-9, abs=1e-9)
    # Each step alone, reading the most of every earlier step: never below the joint worst case.
    assert worst_case(amounts, joint=False).total >= found.total - 1e-9


@pytest.mark.parametrize("seed", range(20))
def test_seats_that_read_nothing_or_some_steps_stay_safe(seed):
    """Where the amounts are not one rate times the tokens of every earlier step, the block falls
    back to each decision alone: safe, at or above brute force."""
    amounts, decision, seats = random_plan(random.Random(500 + seed), reads_all=False)
    assert worst_case(amounts).total >= brute(amounts, decision, seats) - 1e-9
