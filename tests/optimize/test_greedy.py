"""`--method greedy`: seats filled one at a time on the strongest model that fits, checked by hand."""

from __future__ import annotations

import pytest

from bamasc.optimize.bind import bind_template
from bamasc.optimize.greedy import bind_greedy
from bamasc.plan.compile import compile_file

SOURCE = """
model strong {
  provider = fake
  name     = "strong"
  price    { input = 1  output = 4 }
  tier     = 1
}

model weak {
  provider = fake
  name     = "weak"
  price    { input = 0.5  output = 1 }
  tier     = 2
}

role Big {
  max_output = 400
  prompt     = "{{task}}"
}

role Small {
  max_output = 50
  prompt     = "{{task}}"
}

topology pair {
  slot big   : Big   [1..1]
  slot small : Small [0..3]
  flow {
    notes = parallel small(task)
    answer big(task)
  }
}

system demo {
  models      = [strong, weak]
  topologies  = [pair]
  budget      = 1800
  task_tokens = 100
}
"""

# Each call reads its prompt (0 bytes without the placeholder, plus 8 tokens of chat format) and
# 100 task tokens: 108 tokens in. Big on strong: 1·108 + 4·400 = 1708 µ$; on weak 0.5·108 + 1·400 = 454.
# Small on strong: 108 + 4·50 = 308; on weak 54 + 50 = 104.


def _program(tmp_path, budget):
    path = tmp_path / "greedy.bam"
    path.write_text(SOURCE.replace("budget      = 1800", f"budget      = {budget}"))
    result = compile_file(str(path), method="greedy", plan_dir=str(tmp_path))
    return result


def _seats(binding):
    return [(s.slot, s.instance, s.model) for s in binding.seats]


def test_greedy_spends_the_budget_on_the_first_seat_where_the_milp_buys_three_strong_ones(tmp_path):
    result = _program(tmp_path, 1800)
    program, system = result.program, result.program.systems["demo"]
    greedy = bind_greedy(program, system, "pair")
    assert _seats(greedy) == [("big", 0, "strong")]
    assert greedy.worst_case_cost == pytest.approx(1708)  # a weak small seat (104) would make 1812 > 1800
    best = bind_template(program, system, "pair")
    assert sorted(_seats(best)) == [("big", 0, "weak"), ("small", 0, "strong"), ("small", 1, "strong"), ("small", 2, "strong")]
    assert best.worst_case_cost == pytest.approx(454 + 3 * 308)
    assert greedy.tier_seats == (1, 0) and best.tier_seats == (3, 1)
    (template,) = result.plan.systems[0].templates
    assert template.worst_case_cost == pytest.approx(1708)
    assert result.plan.compiled_with["method"] == "greedy"


def test_greedy_steps_down_a_tier_when_the_strong_model_does_not_fit(tmp_path):
    result = _program(tmp_path, 500)
    greedy = bind_greedy(result.program, result.program.systems["demo"], "pair")
    # big on strong (1708) does not fit; on weak 454 does; no small seat fits after it (454 + 104 = 558).
    assert _seats(greedy) == [("big", 0, "weak")]
    assert greedy.worst_case_cost == pytest.approx(454)


def test_greedy_has_no_binding_below_the_cheapest_first_seat(tmp_path):
    result = _program(tmp_path, 500)
    assert not bind_greedy(result.program, result.program.systems["demo"], "pair", 450).feasible
    assert bind_greedy(result.program, result.program.systems["demo"], "pair", 454).feasible


def test_greedy_keeps_require_rows_and_skips_idle_seats(tmp_path):
    import os

    from bamasc.plan.compile import check_file

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    program, _, _ = check_file(os.path.join(root, "examples", "paper", "gsm8k.bam"))
    system = program.systems["gsm8k_reference"]
    for budget in system.budgets:
        binding = bind_greedy(program, system, "ref_feedback", budget)
        if not binding.feasible:
            continue
        assert binding.worst_case_cost <= budget
        tiers = {s.model: program.models[s.model].tier for s in binding.seats}
        critics = [s for s in binding.seats if s.slot == "critic"]
        executors = [s for s in binding.seats if s.slot == "executor"]
        assert len(critics) <= len(executors)
        assert sum(tiers[s.model] == 1 for s in critics) <= sum(tiers[s.model] == 1 for s in executors)
        assert len(executors) <= len(critics) + 1  # a third executor would never be called

