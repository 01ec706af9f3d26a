"""A hypothesis strategy for random small systems: `.bam` sources of a few models, one topology and a budget."""

from __future__ import annotations

from hypothesis import strategies as st

FLOWS = {
    # name: (slots with their roles, flow text)
    "parallel": ([("a", "R1")], "d = parallel a(task)\n answer vote(d)"),
    "chain": ([("a", "R1")], "answer chain a(task)"),
    "refine": ([("a", "R1"), ("c", "R2")], "answer refine a(task) with c until approved"),
    "two": ([("a", "R1"), ("b", "R2")], "x = chain a(task)\n y = parallel b(task, x)\n answer vote(y)"),
    "plan": ([("p", "R2"), ("a", "R1"), ("c", "R2")], "s = plan p(task) using a review c max_steps 2\n answer s"),
}


@st.composite
def systems(draw):
    n_models = draw(st.integers(2, 4))
    tiers = [draw(st.integers(1, 3)) for _ in range(n_models)]
    models = []
    for i, tier in enumerate(tiers):
        price_in = draw(st.sampled_from([0.05, 0.1, 0.27, 0.5, 1.0, 2.5]))
        price_out = draw(st.sampled_from([0.2, 0.4, 1.1, 2.0, 8.0]))
        cap = draw(st.sampled_from(["", "max_output = 100", "max_output = 300"]))
        quality = draw(st.sampled_from(["", "quality = 0.8", "quality = 1.3"]))
        models.append(
            f"model m{i} {{ provider = fake name = \"m{i}\" tier = {tier} {cap} {quality}\n"
            f"  price {{ input = {price_in} output = {price_out} }} }}"
        )
    flow = draw(st.sampled_from(sorted(FLOWS)))
    slots, flow_text = FLOWS[flow]
    slot_lines = []
    for name, role in slots:
        lo = draw(st.integers(0 if name == "c" else 1, 2))
        hi = draw(st.integers(max(lo, 1), 3))
        if name == "p":
            lo = hi = 1
        slot_lines.append(f"slot {name} : {role} [{lo}..{hi}]")
    require = ""
    if draw(st.booleans()) and len(slots) > 1:
        require = f"require count({slots[-1][0]}) <= count({slots[0][0]})"
    if draw(st.booleans()):
        require += f"\n require count({slots[0][0]}, tier = 1) >= {draw(st.integers(0, 1))}"
    caps = [draw(st.sampled_from([64, 200, 400])) for _ in range(2)]
    budget = draw(st.integers(50, 4000))
    min_agents = draw(st.integers(0, 4))
    return (
        "\n".join(models)
        + f'\nrole R1 {{ max_output = {caps[0]} prompt = "Do {{{{task}}}} {{{{previous?}}}}" }}'
        + f'\nrole R2 {{ max_output = {caps[1]} prompt = "Check {{{{task}}}} {{{{solution?}}}}" }}'
        + "\ntopology t {\n " + "\n ".join(slot_lines) + f"\n {require}\n flow {{\n {flow_text}\n }}\n}}"
        + f"\nsystem s {{ models = [{', '.join(f'm{i}' for i in range(n_models))}] topologies = [t]"
        + f" budget = {budget} task_tokens = {draw(st.integers(10, 300))} min_agents = {min_agents} }}\n"
    )
