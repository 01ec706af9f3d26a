"""Selection at run time: a trained policy picks, per task, the most probable template feasible at the budget."""

from __future__ import annotations

import numpy as np

from bamasc.policy.checkpoint import LoadedPolicy, load_policy
from bamasc.policy.errors import PolicyError
from bamasc.policy.features import Features, budget_feature, default_cache_dir


def policy_path(system_plan, program) -> str:
    """The checkpoint a system's `select = policy("PATH")` names, relative to the file that declares the system.

    The compiler resolves it (`System.checkpoint_path`) to hash the checkpoint into the
    plan; the run loads the very file that hash is of.
    """
    path = program.systems[system_plan.name].checkpoint_path()
    if path is None:
        raise PolicyError(f"system '{system_plan.name}' does not select by policy")
    return path


class PolicySelector:
    """A loaded checkpoint and its embedding, ready to score tasks for one system."""

    def __init__(self, policy: LoadedPolicy, features: Features):
        import jax

        self.policy = policy
        self.features = features
        module = policy.module

        @jax.jit
        def forward(params, embedding, budget, feasible):
            return jax.nn.softmax(module.apply({"params": params}, embedding, budget, feasible))

        self._forward = forward

    @classmethod
    def load(cls, path: str, templates, cache_dir: str | None = None) -> PolicySelector:
        policy = load_policy(path, templates)
        return cls(policy, Features(policy.embedding_model, cache_dir if cache_dir is not None else default_cache_dir()))

    def probabilities(self, texts: list[str], budget: float, feasible: dict[str, bool]) -> list[dict[str, float]]:
        """Per task, each template's probability (0 for the infeasible ones), in the order of `feasible`."""
        names = self.policy.templates
        mask = np.array([[feasible.get(name, False) for name in names]] * len(texts), dtype=bool)
        embedding = self.features.embed(texts)
        budgets = budget_feature([budget] * len(texts), self.policy.budget_scale)
        probs = np.asarray(self._forward(self.policy.params, embedding, budgets, mask))
        probs = np.where(mask, probs, 0.0)
        return [{name: float(row[names.index(name)]) for name in feasible} for row in probs]

    def choose(self, texts: list[str], budget: float, feasible: dict[str, bool]) -> list[str]:
        """Per task, the most probable feasible template (ties go to the earlier template)."""
        if not any(feasible.values()):
            raise PolicyError(f"no template is feasible within {budget:g} µ$")
        picks = []
        for probs in self.probabilities(texts, budget, feasible):
            allowed = [name for name in feasible if feasible[name]]
            picks.append(max(allowed, key=lambda name: (probs[name], -allowed.index(name))))
        return picks


def feasibility(system_plan) -> dict[str, bool]:
    return {template.name: template.feasible for template in system_plan.templates}


def selector_for(system_plan, program, cache_dir: str | None = None, checkpoint: str | None = None):
    """For a system that selects by policy (or any system, given a `checkpoint` trained for it):
    a function from task texts to template names."""
    names = [template.name for template in system_plan.templates]
    selector = PolicySelector.load(checkpoint or policy_path(system_plan, program), names, cache_dir)
    feasible = feasibility(system_plan)

    def choose(texts: list[str]) -> list[str]:
        return selector.choose(texts, system_plan.budget, feasible)

    return choose


def probability_text(system_plan, probs: dict[str, float], pick: str) -> str:
    """`compile --task`: every template's probability at the plan's budget, and the pick."""
    lines = [f"policy for system '{system_plan.name}' at {system_plan.budget:g} µ$:"]
    width = max(len(name) for name in probs)
    for template in system_plan.templates:
        mark = "*" if template.name == pick else " "
        note = "" if template.feasible else "  (infeasible: masked)"
        lines.append(f"  {mark} {template.name.ljust(width)}  {probs[template.name]:.3f}{note}")
    lines.append(f"picks: {pick}")
    return "\n".join(lines)
