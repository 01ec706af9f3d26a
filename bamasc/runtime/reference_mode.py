"""What `reference` combinators ask of a run: the task tests, the reference's vote, and which calls
the after-the-fact budget check never stops (combinators/reference.py says what each combinator calls)."""

from __future__ import annotations

from bamasc.combinators import reference
from bamasc.runtime.extract import extract_answer


def decide(run, decision):
    """The answer to a "task" or "reference vote" decision of `run` (a runtime.interpreter.TaskRun);
    None where the run must stop for its budget instead."""
    if decision.kind == "task":
        return reference.task_passes(decision.marker, run.task)
    # Like the reference, the vote is taken only while spending is below the budget; past it the
    # task stops with what it has (`on_exhausted`: the last part's output).
    if run.guard.kind == "posthoc" and run.guard.charged >= run.guard.budget:
        return None
    strongest = min(model.tier for model in run.model_of.values())  # the reference's "High"
    drafts = [run.outputs[node] for node in decision.among]
    answers = [extract_answer(run.system.answer, draft.text) for draft in drafts]
    return decision.among[reference.winner(answers, [draft.tier == strongest for draft in drafts])]


def reserve_options(guard, request) -> dict:
    """The guard's `reserve` keywords for `request`: the after-the-fact check never stops a call of a
    reference planner (`CallRequest.budget_checked`); the reserve guard checks every call."""
    return {"checked": False} if guard.kind == "posthoc" and not request.budget_checked else {}
