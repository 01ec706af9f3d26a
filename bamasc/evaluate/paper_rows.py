"""Which rows a reproduction has: its setup (systems, budgets, who learns, who is bound how) and one cell per row and budget."""

from __future__ import annotations

from bamasc.records import record


# Systems that run the reference's templates as its engine does (the `*_reference_mode` systems of examples/paper/).
REFERENCE_MODE = "_reference_mode"


class ReproduceError(ValueError):
    """A request reproduce cannot act on: unknown systems, no budgets, an output folder of another run."""


# The policies' training objectives (policy.train.OBJECTIVES, repeated so that planning rows imports no jax).
OBJECTIVES = ("weighted", "naive", "reference")
# How a policy row trained with an objective other than bamasc's own is named in the table.
METHOD_WORDS = {"policy-naive": "policy, naive objective", "policy-reference": "policy, reference objective"}


def policy_method(objective: str) -> str:
    """The method of the row that selects with a policy trained with `objective` ("policy": bamasc's own)."""
    return "policy" if objective == "weighted" else f"policy-{objective}"


def method_objective(method: str) -> str:
    """The objective a policy row's method was trained with."""
    return "weighted" if method == "policy" else method.removeprefix("policy-")


@record
class Cell:
    """One row of the table at one budget: a system, how it selects its template, how it is bound."""

    system: str
    method: str  # declared: as the file says; policy (policy-reference, policy-naive): the policy trained here; greedy
    budget: float
    binder: str  # the compile method: lexicographic, paper (the reference's cost model) or greedy

    @property
    def label(self) -> str:
        return self.system if self.method == "declared" else f"{self.system} ({METHOD_WORDS.get(self.method, self.method)})"

    @property
    def key(self) -> tuple:
        return (self.system, self.method, float(self.budget))


@record
class Setup:
    """What a reproduction runs. Each field changes its results, so the manifest pins them all."""

    path: str
    kind: str  # the dataset kind the systems' answers are scored as: gsm8k, mbpp or math
    budgets: tuple[float, ...]
    systems: tuple[str, ...]
    learned: tuple[str, ...]  # systems a policy is collected for and trained
    greedy: tuple[str, ...]  # systems with a row of the greedy ablation
    paper_cost: tuple[str, ...]  # systems bound with the reference's cost model
    embedding: str = "minilm"  # the policy's task embedding (policy.features)
    epochs: int | None = None  # None: TrainConfig's
    seed: int = 0
    # Each learned system gets a policy row per objective; the first selects for a system declaring policy(...).
    objectives: tuple[str, ...] = ("weighted",)


def choose(program, path: str, kind: str | None = None, budgets=None, systems=None, learned=None, greedy=None,
           paper_cost=None, **training) -> Setup:
    """The Setup for `program`, each choice left None taking its default (docs/paper.md):
    every system but the `*_reference_mode` ones (rows on request: they overrun their budgets as the
    reference does); a policy for each with more than one template; a greedy row for `*_bamasc`;
    the paper cost model for `*_reference` and `*_reference_mode`; the budgets the systems declare."""
    from bamasc.evaluate.scorers import answer_kind_dataset

    declared = list(program.systems)
    if not declared:
        raise ReproduceError(f"{path} declares no system")
    chosen = tuple(_known(program, systems, "--systems") if systems is not None
                   else [name for name in declared if not name.endswith(REFERENCE_MODE)])

    def subset(names, option: str, default) -> tuple[str, ...]:
        if names is None:
            return tuple(name for name in chosen if default(program.systems[name]))
        for name in _known(program, names, option):
            if name not in chosen:
                raise ReproduceError(f"{option}: system '{name}' is not among --systems ({', '.join(chosen)})")
        return tuple(names)

    objectives = tuple(training.get("objectives") or ("weighted",))
    for objective in objectives:
        if objective not in OBJECTIVES:
            raise ReproduceError(f"--objective: no objective '{objective}'; there are {', '.join(OBJECTIVES)}")
    if len(set(objectives)) != len(objectives):
        raise ReproduceError(f"--objective names an objective twice: {','.join(objectives)}")
    training["objectives"] = objectives
    learned = subset(learned, "--learn", lambda system: len(system.topologies) > 1)
    for name in learned:
        if len(program.systems[name].topologies) < 2:
            raise ReproduceError(f"--learn: system '{name}' has one template, so a policy has nothing to choose")
    greedy = subset(greedy, "--greedy", lambda system: system.name.endswith("_bamasc"))
    paper_cost = subset(paper_cost, "--paper-cost", lambda system: system.name.endswith(("_reference", REFERENCE_MODE)))
    if kind is None:
        kinds = {answer_kind_dataset(program.systems[name].answer) for name in chosen}
        if None in kinds or len(kinds) != 1:
            answers = ", ".join(f"{name}: {program.systems[name].answer}" for name in chosen)
            raise ReproduceError(f"the systems must all answer as one dataset kind (number, code or boxed), not {answers}; "
                                 "give --kind")
        (kind,) = kinds
    if budgets is None:
        budgets = sorted({float(b) for name in chosen for b in program.systems[name].budgets})
        if not budgets:
            raise ReproduceError(f"no system of {path} declares `budgets` (the budgets the paper evaluates at); "
                                 "give --budgets")
    return Setup(path, kind, tuple(float(b) for b in budgets), chosen, learned, greedy, paper_cost, **training)


def _known(program, names, option: str) -> list[str]:
    for name in names:
        if name not in program.systems:
            raise ReproduceError(f"{option}: no system '{name}'; the file declares: {', '.join(program.systems)}")
    return list(names)


def plan_cells(setup: Setup, program) -> list[Cell]:
    """Every row of the table, system by system in the file's order, each at every budget."""
    cells = []
    for name in setup.systems:
        binder = "paper" if name in setup.paper_cost else "lexicographic"
        methods = [("declared", binder)]
        if name in setup.learned:
            # A system that declares policy(...) selects its declared row with the first objective's policy.
            declared = program.systems[name].select.kind == "policy"
            methods += [(policy_method(objective), binder) for objective in setup.objectives[declared:]]
        if name in setup.greedy:
            methods.append(("greedy", "greedy"))
        cells += [Cell(name, method, budget, how) for method, how in methods for budget in setup.budgets]
    return cells
