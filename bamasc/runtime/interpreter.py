"""Runs one task through a bound template: the flow's calls, under the budget guard.

The interpreter drives the flow walker (`ir/walk.py`) with real outputs: the
walker says which call comes next and with which inputs, and takes the call's
ids from the same place the unroller did, so every call made is a node of the
plan whose bound was proven; a call the plan does not know is refused.
Concurrent calls (`parallel`) run together on asyncio. Loops end early when a
critic approves or a plan has fewer steps; the calls they skip are not made.

With a rate limiter, each attempt waits its provider key's turn after the
guard reserves for it (runtime/limiter.py); the wait is on its trace line,
and with a deadline it ends as soon as the turn cannot come in time.

With a deadline, time is guarded as money is (runtime/deadline.py); when the
next attempt might pass it, the task stops as when the budget runs out
(`on_exhausted`), recording `deadline` as what ran out.
"""

from __future__ import annotations

import asyncio
import random
import time

from bamasc.program import Program
from bamasc.ir.tokens import output_cap
from bamasc.combinators import answer
from bamasc.combinators.requests import Note
from bamasc.ir.walk import Card, CallGroup, Decision, FlowValue, Seats, walk
from bamasc.prices import Usage
from bamasc.runtime.answers import Answers
from bamasc.runtime.extract import extract_answer
from bamasc.runtime.deadline import DeadlineGuard
from bamasc.runtime.guard import BudgetGuard
from bamasc.runtime.limiter import Pace, TurnTooLate
from bamasc.runtime import reference_mode
from bamasc.runtime.providers.base import Message, ProviderError, decoding_for, expectations
from bamasc.runtime.render import MissingPlaceholder, numbered, render
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.tokens import safe_prompt_bound, task_tokens
from bamasc.runtime.outcomes import (  # noqa: F401 (re-exported: the interpreter's results and stops)
    BudgetExhausted, DeadlineReached, Output, TaskError, TaskOverbilled, TaskResult,
)


class TaskRun:
    """One task on one bound template. `providers` maps model names to providers."""

    def __init__(
        self,
        program: Program,
        system,  # plan.schema.SystemPlan
        template,  # plan.schema.TemplatePlan
        providers: dict,
        guard: BudgetGuard,
        task_id: str,
        task: str,
        trace=None,
        retry: RetryPolicy | None = None,
        seed: int = 0,
        limiter=None,  # a runtime.limiter.RateLimiter, or anything with its interface
        arrived: float | None = None,  # when the task began to wait for its turn (time.perf_counter), if before run()
    ):
        self.program = program
        self.system = system
        self.template = template
        self.topology = program.topologies[template.name]
        self.providers = providers
        self.guard = guard
        self.task_id = task_id
        self.task = task
        self.trace = trace
        self.retry = retry or RetryPolicy()
        self.limiter = limiter
        self.rng = random.Random(f"{seed}:{task_id}")
        self.nodes = {node.id: node for node in template.nodes}
        self.model_of = {(seat.slot, seat.instance): program.models[seat.model] for seat in template.binding}
        self.counts = template.counts
        self.expects = expectations(getattr(template, "decisions", ()))  # routers' and dynamic planners'
        self.outputs: dict[str, Output] = {}  # by call id, each call made so far
        self.cards: dict[str, list[str]] = {}  # a plan call's step cards
        self.best: Output | None = None
        self.calls_made = 0
        self.in_flight: set[asyncio.Future] = set()  # concurrent calls of a `parallel`, cancelled on overbilling
        self.clock = DeadlineGuard(getattr(system, "deadline_s", None), self.retry.timeout)
        self.arrived = arrived

    # ------------------------------------------------------------ the task

    async def run(self) -> TaskResult:
        status, error, result, exhausted = "ok", None, None, None
        length = task_tokens(self.task, [self.providers[name] for name in self._models() if name in self.providers])
        self.clock.start(self.arrived)  # time spent waiting for room in a batch's total counts against the deadline
        try:
            result = await self.drive(walk(self.topology, self.counts))
        except BudgetExhausted as problem:
            status = "exhausted"
            exhausted = "deadline" if isinstance(problem, DeadlineReached) else "budget"
        except TaskError as problem:
            status, error = "error", str(problem)
        except TaskOverbilled as problem:
            status, error = "overbilled", str(problem)
        final = self._final(result) if status == "ok" else self._fallback()
        if status != "ok" and final is None:
            status = "failed" if status == "exhausted" else status
        if status == "exhausted" and self.system.on_exhausted == "fail":
            final, status = None, "failed"
        text = final.text if final else None
        return TaskResult(
            task_id=self.task_id,
            template=self.template.name,
            answer=extract_answer(self.system.answer, text),
            output=text,
            cost=self.guard.charged,
            budget=self.guard.budget,
            bound=self.template.worst_case_cost,
            overran=self.guard.overran,
            status=status,
            error=error,
            calls=self.calls_made,
            exhausted=exhausted,
            elapsed_s=self.clock.elapsed,
            deadline_s=self.clock.deadline,
            latency_bound_s=getattr(self.template, "worst_case_latency_s", None),
            task_tokens=length,
            assumed_task_tokens=self.system.task_tokens,
        )

    def _models(self) -> list[str]:
        """The models the template binds, each once."""
        return sorted({model.name for model in self.model_of.values()})

    def _too_late(self, node, model, prompt_tokens: int, cap: int, attempt: int, waited=None) -> DeadlineReached:
        """Record the attempt the deadline does not leave time for."""
        why = self.clock.refusal(model.latency, cap)
        self._record(node, model, prompt_tokens, 0, 0.0, 0.0, 0.0, attempt, skipped=True, clamped=False, error=why, rate_wait=waited)
        return DeadlineReached(node.id)

    def _final(self, value: FlowValue) -> Output | None:
        # A list as the answer (the steps of a plan, a conversation's transcript) answers with
        # its last output that is not a verdict: a reviewer's approval ends a conversation, and
        # what it approved is the answer.
        if not value.nodes or value.task:
            return None
        if value.many:
            for node in reversed(value.nodes):
                if self.program.roles[self.nodes[node].role].reads != "verdict":
                    return self.outputs[node]
        return self.outputs[value.nodes[-1]]

    def _fallback(self) -> Output | None:
        return self.best if self.system.on_exhausted == "best_so_far" else None

    # ------------------------------------------------------------ one call

    def render(self, template: str, inputs: dict[str, str], where: str = "") -> str:
        try:
            return render(template, inputs, where)
        except MissingPlaceholder as problem:
            raise TaskError(str(problem)) from None

    def inputs(self, call) -> dict[str, str]:
        """The text of each input the walker gave the call (a later one of the same name wins)."""
        return {name: self.text_of(value) for name, value in call.inputs}

    def text_of(self, value: FlowValue | Card | Seats | Note) -> str:
        if isinstance(value, (Card, Seats, Note)):
            return self.cards[value.plan][value.index] if isinstance(value, Card) else value.text
        if value.task:
            return self.task
        if value.many:
            return numbered(self.outputs[node].text for node in value.nodes)
        return self.outputs[value.nodes[0]].text if value.nodes else ""

    async def call(self, request) -> Output:
        node_id = request.id
        node = self.nodes.get(node_id)
        if node is None:
            raise TaskError(f"call {node_id} is not in the plan; recompile it")
        role = self.program.roles[node.role]
        model = self.model_of[(request.slot, request.instance)]
        inputs = self.inputs(request)
        provider = self.providers[model.name]
        messages = []
        where = f"{node_id} (role '{role.name}'): "
        if role.system:
            messages.append(Message("system", self.render(role.system, inputs, where)))
        messages.append(Message("user", self.render(role.prompt, inputs, where)))
        exact = provider.count_prompt_tokens(messages)
        prompt_tokens = exact if exact is not None else safe_prompt_bound(messages)
        cap = output_cap(role, model)
        pace = Pace(self.limiter, model)
        for attempt in range(1, self.retry.max_attempts + 1):
            if self.guard.overbilled:
                raise TaskOverbilled(self.guard.overbilled)
            timeout = self.clock.timeout_for(model.latency, cap)
            if timeout is None:
                raise self._too_late(node, model, prompt_tokens, cap, attempt)
            reservation = self.guard.reserve(model, prompt_tokens, cap, **reference_mode.reserve_options(self.guard, request))
            if reservation is None:
                self._record(node, model, prompt_tokens, 0, 0.0, 0.0, 0.0, attempt, skipped=True, clamped=False)
                raise BudgetExhausted(node_id)
            try:
                waited = await pace.wait(self.guard, reservation, self.clock.wait_left(model.latency, cap))
            except TurnTooLate as late:  # the key's turn comes after the deadline: the wait ends now
                raise self._too_late(node, model, prompt_tokens, cap, attempt, late.waited) from None
            if waited and (timeout := self.clock.timeout_for(model.latency, cap)) is None:
                self.guard.release(reservation)  # the wait for the provider's rate used up the time
                raise self._too_late(node, model, prompt_tokens, cap, attempt, waited)
            held = self._reserved(node, model, attempt, reservation)
            started = time.perf_counter()
            try:
                completion = await provider.complete(
                    messages, reservation.max_tokens, timeout=timeout, decoding=decoding_for(role, model),
                    expect=self.expects.get(node_id, role.reads),
                )
            except ProviderError as problem:
                charged = self.guard.keep(reservation) if problem.outcome_unknown else self.guard.release(reservation)
                self._failed(node, model, attempt, reservation, held, started, charged, f"{problem.kind}: {problem.message}", waited)
                limited = pace.refused(problem)
                if not self.retry.should_retry(attempt, problem):
                    raise TaskError(f"{node_id} on {model.name}: {problem.message}") from None
                if limited:
                    # A 429 paused the key in the limiter, whose queue the retry joins: that is its wait,
                    # and it ends at the deadline.
                    continue
                wait = self.retry.delay(attempt, problem, self.rng)
                if self.clock.timeout_for(model.latency, cap, wait) is None:
                    # Waiting out the backoff would leave too little time for the retry.
                    raise self._too_late(node, model, prompt_tokens, cap, attempt + 1)
                await asyncio.sleep(wait)
                continue
            except asyncio.CancelledError:
                # Stopped from outside (a sibling was overbilled, or the run was
                # interrupted) while the request was out: it may be billed.
                charged = self.guard.keep(reservation)
                self._failed(node, model, attempt, reservation, held, started, charged, "cancelled: outcome unknown, reservation kept", waited)
                raise
            except Exception as problem:
                # A provider that fails in a way it does not classify (a defect in
                # it or in its SDK) ends this task only, and may have billed.
                charged = self.guard.keep(reservation)
                what = f"unexpected {type(problem).__name__} from the provider"
                self._failed(node, model, attempt, reservation, held, started, charged, f"malformed: {what}, reservation kept", waited)
                raise TaskError(f"{node_id} on {model.name}: {what}") from None
            usage = Usage(completion.prompt_tokens, completion.completion_tokens,
                          completion.cached_tokens, completion.cache_write_tokens)
            charged, rates = self.guard.settle_usage(reservation, usage)
            self.calls_made += 1
            pace.answered(completion.rate_headers)
            self._record(
                node, model, completion.prompt_tokens, completion.completion_tokens, reservation.amount, charged,
                time.perf_counter() - started, attempt, clamped=reservation.clamped, held=held,
                error=f"overbilled: {self.guard.overbilled}" if self.guard.overbilled else None,
                settled=(usage, rates), rate_wait=waited,
            )
            if self.guard.overbilled:
                for sibling in self.in_flight:
                    if sibling is not asyncio.current_task():
                        sibling.cancel()
                raise TaskOverbilled(self.guard.overbilled)
            output = self.outputs[node_id] = Output(completion.text, node_id, model.tier)
            if role.reads not in ("verdict", "plan"):
                self.best = output
            return output
        raise TaskError(f"{node_id}: no attempts left")  # max_attempts >= 1 makes this unreachable

    def _failed(self, node, model, attempt: int, reservation, held, started: float, charged: float, error: str, waited) -> None:
        """Record an attempt that ended without a completion."""
        self._record(
            node, model, reservation.prompt_tokens, 0, reservation.amount, charged, time.perf_counter() - started,
            attempt, clamped=reservation.clamped, error=error, held=held, rate_wait=waited,
        )

    def _reserved(self, node, model, attempt: int, reservation) -> str | None:
        """Write the reservation ahead of the attempt: if the process dies in flight, the trace still holds it."""
        if self.trace is None:
            return None
        return self.trace.reserve(
            {"task_id": self.task_id, "node": node.id, "model": model.name, "attempt": attempt,
             "reserved": round(reservation.amount, 6)}
        )

    def _record(self, node, model, prompt_tokens, completion_tokens, reserved, charged, latency, attempt, *, clamped, skipped=False, error=None, held=None, settled=None, rate_wait=None):
        if self.trace is None:
            return
        # A settled call shows the usage it was charged for and the rates (the tier) that applied.
        ledger = {} if settled is None else {
            "cached_tokens": settled[0].cached_tokens,
            "cache_write_tokens": settled[0].cache_write_tokens,
            "rates": settled[1].as_dict(),
        }
        if rate_wait is not None:  # the attempt went through a rate limiter
            ledger["rate_wait_s"] = round(rate_wait, 6)
        self.trace.call(
            {
                "id": held,
                "task_id": self.task_id,
                "node": node.id,
                "role": node.role,
                "model": model.name,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "reserved": round(reserved, 6),
                "charged": round(charged, 6),
                "latency_ms": round(latency * 1000, 3),
                "attempt": attempt,
                "clamped": clamped,
                "skipped": skipped,
                "error": error,
                **ledger,
            }
        )

    # ------------------------------------------------------------ the walk

    async def drive(self, steps) -> FlowValue:
        """Make each call the walker asks for and answer each decision from the outputs."""
        reply = None
        while True:
            try:
                request = steps.send(reply)
            except StopIteration as done:
                return done.value
            if isinstance(request, Decision):
                reply = self.decide(request)
            elif isinstance(request, CallGroup):
                reply = await self.parallel(request.calls)
            else:
                reply = await self.call(request)

    def decide(self, decision: Decision):
        """The answer to `decision`, as the unit that asks it reads this run's outputs."""
        return answer(decision, Answers(self))

    async def parallel(self, requests) -> list[Output]:
        calls = [asyncio.ensure_future(self.call(request)) for request in requests]
        self.in_flight.update(calls)
        try:
            outcomes = await asyncio.gather(*calls, return_exceptions=True)
        finally:
            self.in_flight.difference_update(calls)
        # Keep what finished; a budget or provider failure of one branch stops
        # the flow (overbilling first: it cancelled the others).
        done = [o for o in outcomes if isinstance(o, Output)]
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        if failures:
            if done and self.best is None:
                self.best = done[0]
            raise next((f for f in failures if isinstance(f, TaskOverbilled)), failures[0])
        return done
