"""Random topologies with one conversation (`converse`), for the binder against brute force."""

from __future__ import annotations

import random

ROLES = '''
role Coder {
  max_output = %(coder_cap)s
  reads = code
  prompt = "Code {{task}} %(draft)s{{transcript?}}"
}
role Reviewer {
  max_output = 40
  reads = verdict
  prompt = "Review {{task}} {{transcript?}}"
}
role Tester {
  max_output = 24
  prompt = "Test {{transcript?}}"
}
role Drafter {
  max_output = 30
  prompt = "Draft {{task}}"
}
'''


def random_conversation(rng: random.Random, reader: bool = True) -> str:
    """A random pool and a topology with one conversation (maybe after a draft, maybe read later)."""
    models = []
    for m in range(rng.randint(2, 3)):
        cap = rng.choice(["", f"max_output = {rng.choice([16, 48])}"])
        models.append(
            f"model m{m} {{\n  provider = fake\n  name = \"m{m}\"\n"
            f"  price {{ input = {rng.choice([0.1, 0.5, 1.0, 3.0])}  output = {rng.choice([0.4, 2.0, 5.0, 15.0])} }}\n"
            f"  tier = {1 if m == 0 else rng.randint(1, 2)}\n  {cap}\n}}\n"
        )
    speakers = rng.sample([("coder", "Coder"), ("reviewer", "Reviewer"), ("tester", "Tester")], rng.randint(2, 3))
    slots = []
    for name, role in speakers:
        lo = rng.choice([0, 1])
        slots.append(f"  slot {name} : {role} [{lo}..{lo + rng.randint(0 if lo else 1, 2)}]")
    names = [name for name, _ in speakers]
    until = rng.choice(["", f" until {rng.choice(names)} approves", ' until "LGTM"'])
    draft = rng.random() < 0.3
    lines = []
    if draft:
        slots.append("  slot drafter : Drafter [1..1]")
        lines.append("draft = drafter(task)")
    args = {"coder": "task, draft" if draft else "task", "reviewer": "task", "tester": ""}
    talk = f"converse {', '.join(f'{n}({args[n]})' for n in names)}{until} max_rounds {rng.randint(1, 3)}"
    if reader and rng.random() < 0.3:
        slots.append("  slot judge : Judge [1..1]")
        lines += [f"talk = {talk}", "answer judge(talk)"]
        roles_extra = "\nrole Judge { max_output = 8 prompt = \"Judge {{talk}}\" }\n"
    else:
        lines.append(f"answer {talk}")
        roles_extra = ""
    flow = "\n    ".join(lines)
    return (
        "\n".join(models)
        + ROLES % {"coder_cap": rng.choice([32, 64]), "draft": "{{draft}} " if draft else ""}
        + roles_extra
        + "topology t {\n" + "\n".join(slots) + f"\n  flow {{\n    {flow}\n  }}\n}}\n"
        + f"system s {{\n  models = [{', '.join(f'm{m}' for m in range(len(models)))}]\n  topologies = [t]\n"
        + f"  budget = {rng.choice([300, 800, 2000, 6000])}\n  task_tokens = 40\n  min_agents = {rng.choice([1, 2])}\n}}\n"
    )
