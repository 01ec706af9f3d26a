"""Random templates whose flows `route` between branches, and the hand-priced DEEP_OR_WIDE template."""

from __future__ import annotations

import random

ROLES = '''
role Router {
  max_output = 8
  prompt = "Route {{task}}"
}
role Executor {
  max_output = %(exec_cap)s
  reads = answer
  prompt = """
    Solve: {{task}} {{previous?}}{{solution?}}{{feedback?}}{{plan?}}{{step?}}%(drafts)s
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
  prompt = "Answer {{task}} from %(picked)s"
}
'''


# (name, slots, flow); `router` and `inner` are [1..1], `formatter` and `planner` [1..1].
FLOWS = [
    (
        "chain-or-refine",
        ["router:Router", "executor:Executor", "writer:Executor", "critic:Critic"],
        "answer route router(task) {\n      fast: chain executor(task)\n"
        "      careful: refine writer(task) with critic until approved\n      otherwise: task\n    }",
    ),
    (
        "vote-or-redo",
        ["drafter:Executor", "router:Router", "executor:Executor"],
        "drafts = parallel drafter(task)\n    answer route router(task) {\n      pick: vote(drafts)\n"
        "      redo: chain executor(task, drafts)\n      otherwise: task\n    }",
    ),
    (
        "nested, one seat in two branches",
        ["router:Router", "inner:Router", "executor:Executor", "writer:Executor", "critic:Critic"],
        "answer route router(task) {\n      a: route inner(task) {\n        x: chain executor(task)\n"
        "        otherwise: chain writer(task)\n      }\n"
        "      b: refine writer(task) with critic until approved\n      otherwise: chain executor(task)\n    }",
    ),
    (
        "read later",
        ["router:Router", "executor:Executor", "writer:Executor", "formatter:Formatter"],
        "picked = route router(task) {\n      one: chain executor(task)\n      two: chain writer(task)\n"
        "      otherwise: task\n    }\n    answer formatter(task, picked)",
    ),
    (
        "lists read later",
        ["router:Router", "executor:Executor", "writer:Executor", "critic:Critic", "formatter:Formatter"],
        "picked = route router(task) {\n      many: parallel executor(task)\n      one: refine writer(task) with critic until approved\n"
        "      otherwise: task\n    }\n    answer formatter(task, picked)",
    ),
    (
        "plan in a branch",
        ["router:Router", "planner:Planner", "executor:Executor", "critic:Critic"],
        "answer route router(task) {\n      plan: plan planner(task) using executor review critic max_steps 2\n"
        "      otherwise: chain executor(task)\n    }",
    ),
]


def random_route_source(rng: random.Random, flows=FLOWS) -> tuple[str, str]:
    name, slots, flow = rng.choice(flows)
    models = []
    for m in range(rng.randint(2, 3)):
        cap = rng.choice(["", f"max_output = {rng.choice([16, 48, 96])}"])
        models.append(
            f"model m{m} {{\n  provider = fake\n  name = \"m{m}\"\n"
            f"  price {{ input = {rng.choice([0.1, 0.5, 1.0, 3.0])}  output = {rng.choice([0.4, 2.0, 5.0, 15.0])} }}\n"
            f"  tier = {1 if m == 0 else rng.randint(1, 2)}\n  {cap}\n}}\n"
        )
    slot_lines = []
    for slot in slots:
        slot_name, role = slot.split(":")
        if slot_name in ("router", "inner", "planner", "formatter"):
            lo = hi = 1
        else:
            lo = rng.choice([0, 1])
            hi = lo + rng.randint(0 if lo else 1, 2)
        slot_lines.append(f"  slot {slot_name} : {role} [{lo}..{hi}]")
    budget = rng.choice([300, 800, 2000, 6000])
    source = (
        "\n".join(models)
        + ROLES % {"exec_cap": rng.choice([64, 128]), "picked": "{{picked}}" if "picked" in flow else "",
                   "drafts": "{{drafts?}}" if "drafts" in flow else ""}
        + "topology t {\n" + "\n".join(slot_lines) + f"\n  flow {{\n    {flow}\n  }}\n}}\n"
        + f"system s {{\n  models = [{', '.join(f'm{m}' for m in range(len(models)))}]\n  topologies = [t]\n"
        + f"  budget = {budget}\n  task_tokens = 40\n  min_agents = 1\n}}\n"
    )
    return name, source


DEEP_OR_WIDE = """
model dear { provider = fake  name = "d"  price { input = 10  output = 10 }  tier = 1 }
role Router { max_output = 4  prompt = "Route {{task}}" }
role Agent { max_output = 100  prompt = "Answer {{task}} {{previous?}}" }
role Formatter { max_output = 10  prompt = "Format {{picked}}" }
topology t {
  slot router    : Router    [1..1]
  slot many      : Agent     [2..2]
  slot one       : Agent     [3..3]
  slot formatter : Formatter [1..1]
  flow {
    picked = route router(task) { wide: parallel many(task)  deep: chain one(task)  otherwise: task }
    answer formatter(picked)
  }
}
system s { models = [dear]  topologies = [t]  budget = %s  task_tokens = 10 }
"""
