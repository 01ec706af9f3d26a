"""`bamasc reproduce` as a library call: the paper kit's collect, train and bench stages over a file's systems and budgets.

Every stage writes under one output folder, and a small manifest says what
is done, so a run killed at any point continues where it stopped: collect
rows are appended one by one and skipped when already there
(`policy.data.collect`), a checkpoint counts as trained once its metadata
names the very rows it was trained on, and each bench cell (one system,
method and budget, on every task) is one line of `bench/cells.jsonl`,
written once the cell is whole. A cell cut short runs again from its start.
The table is built from the cells in planned order, never in file order, so
a resumed run's table is an uninterrupted run's.

It does no terminal I/O: `tell(message)` hears what each stage did.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os

from bamasc.evaluate.paper_rows import Cell, ReproduceError, Setup, choose, method_objective, plan_cells  # noqa: F401 (the interface)
from bamasc.program import UNGUARDED_CHECKS
from bamasc.provider_registry import lookup
from bamasc.records import as_dict, record
from bamasc.rows import drop_torn_line

MANIFEST = "manifest.json"
CELLS = os.path.join("bench", "cells.jsonl")
# What a changed pinned field means, for the refusal to resume another run's folder.
PINNED_WORDS = {"setup": "settings (budgets, systems, training)", "sources_sha256": "sources", "tasks": "tasks",
                "train_tasks": "training tasks", "providers": "providers", "scorer": "scorer"}


@record
class Providers:
    """Who answers the calls, and how many tasks run at once."""

    fake_mode: str | None = None
    cassette: str | None = None
    record: bool = False
    concurrency: int = 8
    retry: object = None  # a RetryPolicy; None for the default

    @property
    def mode(self) -> str:
        if self.fake_mode:
            return f"fake {self.fake_mode}"
        return "cassette" if self.cassette else "models"


@record
class Estimate:
    bound: float  # µ$: an upper bound on what the runs still to do may cost, at the models' prices
    runs: int  # task runs still to do (collect and bench)
    cells: int  # bench cells still to do
    offline: bool  # no call costs money: the fake, a cassette played back, or only local and fake models


class Reproduction:
    """The stages of one reproduction into `out_dir`: `check`, `estimate`, then `run`."""

    def __init__(self, setup: Setup, program, out_dir: str, dataset, train_tasks, providers: Providers,
                 code=(2, None, "namespaces"), tell=lambda message: None, scorer: str | None = None,
                 progress=None):
        from bamasc.evaluate.scorers import default_scorer

        self.setup = setup
        self.scorer = scorer or default_scorer(setup.kind)  # scores every bench cell and every collect row
        self.program = program
        self.out_dir = out_dir
        self.dataset = dataset  # an evaluate.datasets.Dataset: the tasks every cell is benchmarked on
        self.train_tasks = train_tasks  # policy.data.ScoredTask list: the tasks collect runs for training
        self.providers = providers
        self.code_concurrency, self.code_limits, self.isolation = code  # how MBPP programs are scored
        self.tell = tell
        # progress(done, total, spent, limit): the task runs of every collect and bench cell as one count,
        # against the estimate's runs and bound (evaluate.progress).
        self.progress = progress
        self._stages = None
        self.cells = plan_cells(setup, program)
        self._compiled: dict = {}
        self._told: set[str] = set()

    # ------------------------------------------------------------ where things go

    def where(self, *parts: str) -> str:
        return os.path.join(self.out_dir, *parts)

    def rows_path(self, system: str) -> str:
        return self.where("collect", f"{system}.jsonl")

    def checkpoint(self, system: str, objective: str = "weighted") -> str:
        """Where the policy trained for `system` with `objective` goes: SYSTEM.msgpack for bamasc's own,
        SYSTEM.OBJECTIVE.msgpack for another."""
        suffix = "" if objective == "weighted" else f".{objective}"
        return self.where("train", f"{system}{suffix}.msgpack")

    def pinned(self) -> dict:
        """What the manifest pins: the setup, the sources, the datasets and who answers."""
        sources = hashlib.sha256()
        for name, text in sorted(self.program.source_texts.items()):
            sources.update(os.path.basename(name).encode() + b"\0" + text.encode("utf-8", "surrogatepass") + b"\0")
        setup = as_dict(self.setup)
        setup["path"] = os.path.basename(self.setup.path)
        if tuple(setup["objectives"]) == ("weighted",):
            del setup["objectives"]  # as folders written before the field pinned it: they still resume
        return {
            "setup": json.loads(json.dumps(setup)),
            "sources_sha256": sources.hexdigest(),
            "tasks": [item.id for item in self.dataset.items],
            "train_tasks": [task.id for task in self.train_tasks],
            "providers": self.providers.mode,
            "scorer": self.scorer,
        }

    # ------------------------------------------------------------ the manifest

    def manifest(self) -> dict | None:
        try:
            with open(self.where(MANIFEST), encoding="utf-8") as handle:
                return json.load(handle)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as problem:
            raise ReproduceError(f"cannot read {self.where(MANIFEST)}: {problem}") from None

    def check(self) -> None:
        """Refuse, before anything is spent, a run that needs an extra not installed, or an output
        folder that holds a reproduction of other inputs."""
        self.require_extras()
        found = self.manifest()
        if found is None:
            return
        pinned = self.pinned()
        for field, value in pinned.items():
            if found.get("pinned", {}).get(field) != value:
                raise ReproduceError(
                    f"{self.out_dir} holds a reproduction with other {PINNED_WORDS[field]}; "
                    "give another --output folder, or remove it to start again"
                )

    def _save_manifest(self, stages: dict) -> None:
        data = {"version": 1, "pinned": self.pinned(), "stages": stages}
        temporary = self.where(MANIFEST + ".tmp")
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, ensure_ascii=False)
            handle.write("\n")
        os.replace(temporary, self.where(MANIFEST))

    def _mark(self, stage: str, value) -> None:
        found = self.manifest() or {}
        stages = found.get("stages", {})
        stages[stage] = value
        self._save_manifest(stages)

    def _stage_progress(self):
        """The progress callback of the next collect or bench cell (None without `progress`)."""
        return self._stages.stage() if self._stages is not None else None

    def _stage(self, stage: str):
        return ((self.manifest() or {}).get("stages") or {}).get(stage)

    # ------------------------------------------------------------ compiling and estimating

    def compiled(self, system: str, binder: str, budget: float):
        """The system compiled at `budget` with `binder`, once per run."""
        key = (system, binder, float(budget))
        if key not in self._compiled:
            from bamasc.plan.compile import compile_file

            self._compiled[key] = compile_file(self.setup.path, system, budget, binder)
        return self._compiled[key]

    def _per_task(self, cell: Cell, every: bool) -> list[float]:
        """The worst case of a task's run, capped at its budget by the guard: of the selected template,
        or of each feasible template (`every`: a policy may pick any, and collect runs them all)."""
        compiled = self.compiled(cell.system, cell.binder, cell.budget)
        if compiled.plan is None:
            return []
        plan = compiled.plan.system(cell.system)
        feasible = [t for t in plan.templates if t.feasible]
        if not every:
            feasible = [t for t in feasible if t.name == plan.selection["selected"]]
        # A system checked after each call, or not at all (budget_check = after or none), may pass its
        # budget, never its bound.
        after = self.program.systems[cell.system].budget_check in UNGUARDED_CHECKS
        return [t.worst_case_cost if after else min(t.worst_case_cost, cell.budget) for t in feasible]

    def estimate(self) -> Estimate:
        """An upper bound on what the collect and bench runs still to do may cost: each run at its plan's
        proven worst case (the costliest feasible template where a policy picks), capped at its budget."""
        from bamasc.policy.data import done_keys

        bound, runs, cells = 0.0, 0, 0
        for system in self.setup.learned:
            if self._stage(f"collect/{system}") is not None:
                continue
            done = done_keys(self.rows_path(system))
            binder = "paper" if system in self.setup.paper_cost else "lexicographic"
            for budget in self.setup.budgets:
                compiled = self.compiled(system, binder, budget)
                if compiled.plan is None:
                    continue
                for template in compiled.plan.system(system).templates:
                    if not template.feasible:
                        continue
                    todo = sum((task.id, float(budget), template.name) not in done for task in self.train_tasks)
                    bound += todo * min(template.worst_case_cost, budget)
                    runs += todo
        finished = self._finished_cells()
        for cell in self.cells:
            if cell.key in finished:
                continue
            cells += 1
            per_task = self._per_task(cell, every=self._by_policy(cell))
            if per_task:
                bound += len(self.dataset.items) * max(per_task)
                runs += len(self.dataset.items)
        return Estimate(bound, runs, cells, self.offline())

    def _by_policy(self, cell: Cell) -> bool:
        return cell.method.startswith("policy") or (
            cell.method == "declared" and self.program.systems[cell.system].select.kind == "policy")

    def needed_extras(self) -> list:
        """(extra, what needs it) for every optional extra the stages still to run will import: the policy
        extra to train and to select by a policy, its MiniLM part for that embedding, and a provider's
        (llama.cpp) when its models answer for real."""
        from bamasc.extras import EXTRAS, MINILM, for_providers

        needs = []
        if self.setup.learned or any(self._by_policy(cell) for cell in self.cells):
            needs.append((EXTRAS["policy"], "training and selecting with a template policy"))
        if self.setup.learned and self.setup.embedding == "minilm":
            needs.append((MINILM, "the MiniLM task embedding (--embedding minilm; hashed needs no model)"))
        if not (self.providers.fake_mode or (self.providers.cassette and not self.providers.record)):
            models = {model for name in self.setup.systems for model in self.program.systems[name].models}
            needs += for_providers(self.program.models[model].provider for model in models)
        return needs

    def require_extras(self) -> None:
        """ReproduceError naming the extra to install, unless every one the run needs is installed:
        checked before collect spends, not when training imports jax after it."""
        from bamasc.extras import ExtraMissing, require_all

        try:
            require_all(self.needed_extras(), "reproduce")
        except ExtraMissing as problem:
            raise ReproduceError(str(problem)) from None

    def offline(self) -> bool:
        if self.providers.fake_mode or (self.providers.cassette and not self.providers.record):
            return True
        models = {model for name in self.setup.systems for model in self.program.systems[name].models}
        # Calls to offline providers cost no money, whatever prices the file declares for them.
        return all(getattr(lookup(self.program.models[model].provider), "offline", False) for model in models)

    # ------------------------------------------------------------ the stages

    def run(self) -> list[tuple[Cell, dict]]:
        """Collect and train for every learned system, then bench every cell; (cell, result) in planned order."""
        self.require_extras()
        os.makedirs(self.out_dir, exist_ok=True)
        if self.manifest() is None:
            self._save_manifest({})
        if self.progress is not None:
            from bamasc.evaluate.progress import Stages

            estimate = self.estimate()
            self._stages = Stages(self.progress, estimate.runs, estimate.bound)
        for system in self.setup.learned:
            self.collect(system)
            for objective in self.setup.objectives:
                self.train(system, objective)
        return self.bench()

    def collect(self, system: str) -> None:
        stage = f"collect/{system}"
        if self._stage(stage) is not None:
            self.tell(f"collect {system}: done before")
            return
        from bamasc.evaluate.scorers import score
        from bamasc.policy.data import CollectOptions, collect

        binder = "paper" if system in self.setup.paper_cost else "lexicographic"
        plans = {}
        for budget in self.setup.budgets:
            compiled = self.compiled(system, binder, budget)
            plans[float(budget)] = (compiled.plan, compiled.program)
        options = CollectOptions(concurrency=self.providers.concurrency, fake_mode=self.providers.fake_mode,
                                 cassette=self.providers.cassette, record=self.providers.record,
                                 retry=self.providers.retry, seed=self.setup.seed)
        os.makedirs(self.where("collect"), exist_ok=True)
        topologies = self.program.systems[system].topologies
        scorer = functools.partial(score, scorer=self.scorer)
        summary = asyncio.run(collect(plans, system, topologies, self.train_tasks, self.rows_path(system), options,
                                      self._stage_progress(), scorer))
        self._mark(stage, {"rows": summary.written + summary.skipped})
        self.tell(f"collect {system}: {summary.written} rows written, {summary.skipped} already there")

    def train(self, system: str, objective: str = "weighted") -> None:
        from bamasc.policy.checkpoint import load_policy, read_metadata, save_policy
        from bamasc.policy.data import file_sha256, read_rows
        from bamasc.policy.errors import PolicyError
        from bamasc.policy.features import HASHED, MINILM, Features, budget_scale, default_cache_dir
        from bamasc.policy.train import Reward, TrainConfig, checkpoint_metadata, reference_config, train_policy

        declared = self.program.systems[system]
        rows_path, checkpoint = self.rows_path(system), self.checkpoint(system, objective)
        named = system if objective == "weighted" else f"{system} ({objective} objective)"
        data_sha256 = file_sha256(rows_path)
        try:
            if read_metadata(checkpoint).get("data_sha256") == data_sha256:
                load_policy(checkpoint, declared.topologies)
                self.tell(f"train {named}: done before")
                return
        except PolicyError:
            pass  # none yet, or one cut short: train it (again)
        # Sorted: a resumed collect appends its rows in another order, and training reads them in order.
        rows = sorted(read_rows(rows_path), key=lambda row: (row.task_id, row.budget, row.template))
        given = {"epochs": self.setup.epochs} if self.setup.epochs is not None else {}
        # No hold-out: the bench stage is the evaluation. The reference's objective trains with its own
        # settings and seed (policy.train.reference_config); --epochs applies to every objective.
        reward = Reward(**as_dict(declared.reward))
        if objective == "reference":
            config = reference_config(self.setup.kind, **given, holdout=0.0, reward=reward)
        else:
            config = TrainConfig(**given, objective=objective, seed=self.setup.seed, holdout=0.0, reward=reward)
        embedding = MINILM if self.setup.embedding == "minilm" else HASHED
        scale = budget_scale(declared)
        try:
            result = train_policy(rows, declared.topologies, config, Features(embedding, default_cache_dir()).embed, scale)
        except ValueError as problem:
            raise ReproduceError(f"cannot train a policy for '{named}' on {rows_path}: {problem}") from None
        metadata = checkpoint_metadata(declared, embedding, scale, config, rows_path, len(rows), result)
        save_policy(checkpoint, result.state.params, metadata)
        load_policy(checkpoint, declared.topologies)  # self-check: it loads and matches the system
        stage = f"train/{system}" if objective == "weighted" else f"train/{system}.{objective}"
        self._mark(stage, {"data_sha256": data_sha256, "epochs_run": len(result.history)})
        self.tell(f"train {named}: {result.samples} runs, {len(result.history)} epochs")

    def _finished_cells(self) -> dict[tuple, dict]:
        """Each whole line of the cells file by its cell, its counts recomputed from its items
        (evaluate.cells); a line cut short by a crash is not there, any other that is not a cell is
        a CellError naming the line and the field."""
        from bamasc.evaluate.cells import read_cells

        path = self.where(CELLS)
        if not os.path.exists(path):
            return {}
        finished, notes = read_cells(path, [item.id for item in self.dataset.items])
        for note in notes:
            if note not in self._told:  # (estimate and bench both read the file)
                self._told.add(note)
                self.tell(note)
        return finished

    def bench(self) -> list[tuple[Cell, dict]]:
        from bamasc.evaluate.bench import BenchError, bench_run
        from bamasc.runtime.execute import ExecOptions
        from bamasc.runtime.retry import RetryPolicy

        options = ExecOptions(concurrency=self.providers.concurrency, fake_mode=self.providers.fake_mode,
                              cassette=self.providers.cassette, record=self.providers.record,
                              retry=self.providers.retry or RetryPolicy(), seed=self.setup.seed)
        finished = self._finished_cells()
        os.makedirs(self.where("bench"), exist_ok=True)
        drop_torn_line(self.where(CELLS))
        for index, cell in enumerate(self.cells, 1):
            if cell.key in finished:
                continue
            # The policy trained here selects for its policy rows, each with its objective's, and for every
            # row of a system that declares `select = policy(...)` (its greedy row too), with the first's.
            by_row = cell.method.startswith("policy")
            selects = by_row or self.program.systems[cell.system].select.kind == "policy"
            objective = method_objective(cell.method) if by_row else self.setup.objectives[0]
            checkpoint = (self.checkpoint(cell.system, objective)
                          if selects and cell.system in self.setup.learned else None)
            try:
                result = bench_run(self.setup.path, self.dataset, cell.system, cell.budget, options,
                                   code_concurrency=self.code_concurrency, code_limits=self.code_limits,
                                   isolation=self.isolation, method=cell.binder, checkpoint=checkpoint,
                                   scorer=self.scorer, progress=self._stage_progress())
            except BenchError as problem:
                raise ReproduceError(f"{cell.label} at {cell.budget:g} µ$: {problem}") from None
            line = {"cell": list(cell.key), "label": cell.label, "by_policy": self._by_policy(cell),
                    "scorer": self.scorer, **result}
            with open(self.where(CELLS), "a", encoding="utf-8") as handle:
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            finished[cell.key] = line
            done = f"{result['correct']}/{result['tasks']} correct" if result["feasible"] else "infeasible"
            self.tell(f"bench {index}/{len(self.cells)}: {cell.label} at {cell.budget:g} µ$: {done}")
        self._mark("bench", {"cells": len(self.cells)})
        return [(cell, finished[cell.key]) for cell in self.cells]
