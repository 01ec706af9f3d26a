"""Random dynamic plans for the tests: seats of different roles, caps, prices and ranges."""

from __future__ import annotations

import random

ROLES = '''
role Planner {
  max_output = %(plan_cap)s
  reads = plan
  prompt = """
    Plan {{task}} in steps. The seats: {{seats}}
    Answer with a JSON list of step cards: [{"step": "...", "by": "<seat>", "reads": [1]}].
    """
}
role Executor {
  max_output = %(exec_cap)s
  reads = answer
  prompt = "Do {{step}} of {{plan}} for {{task}}. {{previous?}}"
}
role Coder {
  max_output = 96
  prompt = "Write code for {{step}} of {{plan}} ({{task}}). Earlier results: {{previous?}}"
}
role Checker {
  max_output = 24
  reads = verdict
  prompt = "Check the results {{previous?}} against step {{step}} of {{plan}} for {{task}}."
}
role Formatter {
  max_output = 32
  reads = answer
  prompt = "Answer {{task}} from {{steps}}"
}
'''

SEATS = ["executor:Executor", "coder:Coder", "checker:Checker", "helper:Executor"]


def random_dynamic_source(rng: random.Random, budgets=(600, 1500, 4000, 12000)) -> str:
    models = []
    for m in range(rng.randint(2, 3)):
        cap = rng.choice(["", f"max_output = {rng.choice([48, 96, 200])}"])  # 48 holds one card
        models.append(
            f"model m{m} {{\n  provider = fake\n  name = \"m{m}\"\n"
            f"  price {{ input = {rng.choice([0.1, 0.5, 1.0, 3.0])}  output = {rng.choice([0.4, 2.0, 5.0, 15.0])} }}\n"
            f"  tier = {1 if m == 0 else rng.randint(1, 2)}\n  {cap}\n}}\n"
        )
    seats = rng.sample(SEATS, rng.randint(1, 4))
    slot_lines = ["  slot planner : Planner [1..1]"]
    for seat in seats:
        name, role = seat.split(":")
        lo = rng.choice([0, 1])
        slot_lines.append(f"  slot {name} : {role} [{lo}..{lo + rng.randint(0 if lo else 1, 2)}]")
    formatter = rng.choice([None, "[0..1]", "[1..1]"])
    if formatter:
        slot_lines.append(f"  slot formatter : Formatter {formatter}")
    flow = (
        f"answer plan planner(task) using {', '.join(s.split(':')[0] for s in seats)} "
        f"max_steps {rng.randint(1, 4)} dynamic" + (" format formatter" if formatter else "")
    )
    return (
        "\n".join(models)
        + ROLES % {"plan_cap": rng.choice([300, 400]), "exec_cap": rng.choice([32, 64, 128])}
        + "topology t {\n" + "\n".join(slot_lines) + f"\n  flow {{\n    {flow}\n  }}\n}}\n"
        + f"system s {{\n  models = [{', '.join(f'm{m}' for m in range(len(models)))}]\n  topologies = [t]\n"
        + f"  budget = {rng.choice(budgets)}\n  task_tokens = 40\n  min_agents = 1\n}}\n"
    )
