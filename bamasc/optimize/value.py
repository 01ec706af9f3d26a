"""What a slot is worth under `objective = value`: its role's weight times its best model's quality for the role.

The rules (docs/language.md, "How the compiler binds"):

- value is per slot, not per call: a slot (a role's place in the template)
  is worth the value of the best model among its instances, counted once,
  so two weak engineer seats never outweigh one strong one, and an
  instance beyond the first adds cost but no value;

- a role is a *classifier* in a template when its seats only label: it is a
  route's router there, its output is a verdict (`reads = verdict`), or its
  output cap is at most `SHORT_OUTPUT` tokens;
- a role's weight is its `weight`; a role that declares none weighs
  `CLASSIFIER_WEIGHT` when it is a classifier and `DEFAULT_WEIGHT` otherwise;
- a model's quality for a role is what the model declares (its `quality`
  block's entry for the role, else its one `quality`). A model that declares
  none has quality 1 / tier (1 at tier 1, 0.5 at tier 2, ...) for a role
  that writes, and 1 at every tier for a classifier: a label of a few tokens
  is what any tier gets right, so a classifier seat gets the cheapest model
  unless a quality says otherwise.

What this module deliberately does not do: decide between seats (the binder
maximises the sum over slots of these values, then minimises cost; by value
a slot's instances are numbered most valuable first, so instance 0 carries it).
"""

from __future__ import annotations

from bamasc.program import Model, Role

DEFAULT_WEIGHT = 4.0
"""A seat that writes an answer, a draft, a plan or a revision."""

CLASSIFIER_WEIGHT = 1.0
"""A seat that only labels: a router, a verdict, or a reply of a few tokens."""

SHORT_OUTPUT = 32
"""An output cap at most this many tokens makes a role a classifier: a label, a name, a yes or no."""


def is_classifier(role: Role) -> bool:
    """Does the role only label, wherever it is used (a short output cap, or a verdict)?"""
    return role.reads == "verdict" or (role.max_output is not None and role.max_output <= SHORT_OUTPUT)


class SeatWorth:
    """What seats of one template are worth by value, per role: weight x quality."""

    def __init__(self, program, topology, calls):
        """`calls`: the template unrolled (at its largest counts), to find its routers."""
        routing = {call.slot for call in calls if call.combinator == "route"}
        self.roles = program.roles
        self.classifiers = frozenset(
            slot.role for slot in topology.slots if slot.name in routing or is_classifier(program.roles[slot.role])
        )

    def weight(self, role: str) -> float:
        declared = self.roles[role].weight
        if declared is not None:
            return declared
        return CLASSIFIER_WEIGHT if role in self.classifiers else DEFAULT_WEIGHT

    def quality(self, model: Model, role: str) -> float:
        """The model's quality for `role`: as declared, else 1 / tier (1 for a classifier)."""
        if role in model.quality:
            return model.quality[role]
        if "quality" in model.spans:
            return model.default_quality
        return 1.0 if role in self.classifiers else 1.0 / model.tier

    def worth(self, role: str, models) -> float:
        """What a slot of `role` whose instances run `models` is worth: its best model's, once (0 when empty)."""
        return max((self.weight(role) * self.quality(model, role) for model in models), default=0.0)

    def values(self, topology, pool) -> tuple[tuple[float, ...], ...]:
        """[slot][model]: what a slot is worth with its best instance on the model."""
        return tuple(
            tuple(self.weight(slot.role) * self.quality(model, slot.role) for model in pool) for slot in topology.slots
        )
