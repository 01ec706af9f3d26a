"""Runs one task through a bound template: the flow's calls, under the budget guard.

The interpreter drives the flow walker (`ir/walk.py`) with real outputs: the
walker says which call comes next and with which inputs, and takes the call's
ids from the same place the unroller did, so every call made is a node of the
plan whose bound was proven; a call the plan does not know is refused.
Concurrent calls (`parallel`) run together on asyncio. Loops end early when a
critic approves or a plan has fewer steps; the calls they skip are not made.

Each attempt at a call passes the links of `admissions` (metering/admission.py):
the deadline (runtime/deadline.py), the budget guard, and with a rate limiter
its provider key's turn (metering/limiter.py), whose wait is on its trace
line and ends as soon as the turn cannot come in time. A link that refuses
stops the task (`on_exhausted`), recording what ran out: `budget`,
`deadline`, or a new limit's name. The trace hears each attempt's events.

A call whose role has tools runs as its tool loop (runtime/tool_loop.py):
up to R + 1 rounds, each sent and admitted as `send` sends any call, with the
run's ToolSet making the tool calls between them.
"""

from __future__ import annotations

import asyncio
import random

from bamasc.program import Program
from bamasc.ir.tokens import output_cap, seat_models
from bamasc.combinators import answer
from bamasc.combinators.requests import Note
from bamasc.ir.walk import Card, CallGroup, Decision, FlowValue, Seats, walk
from bamasc.prices import Usage
from bamasc.runtime import reference_mode
from bamasc.runtime.answers import Answers
from bamasc.metering.admission import Admissions, Attempt, BudgetLink, DeadlineLink, PaceLink
from bamasc.metering.calibrate import Calibration, Learn
from bamasc.runtime.extract import extract_answer
from bamasc.runtime.fallbacks import ModelFailed, fall_back
from bamasc.runtime.deadline import DeadlineGuard
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.providers.base import Message, ProviderError, decoding_for, expectations
from bamasc.runtime.render import MissingPlaceholder, numbered, render, unencodable, unsendable
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.structured import structured
from bamasc.runtime.tokens import calibrated_prompt, safe_prompt_bound, task_tokens
from bamasc.metering.refusals import Refused
from bamasc.runtime.outcomes import (  # noqa: F401 (re-exported: the interpreter's results)
    Output, TaskError, TaskOverbilled, TaskResult,
)
from bamasc.runtime.tool_loop import run_loop
from bamasc.runtime.threads import history_within
from bamasc.runtime.trace import AttemptLines


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
        tools=None,  # the run's started runtime.tools.ToolSet, for calls whose roles have tools
        length: tuple[int, int] | None = None,  # (the task's tokens, its length class) when already fitted
        history: str = "",  # a thread's earlier turns (runtime/threads.py); each role shows it cut to its cap
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
        self.model_of = seat_models(program.models, template.binding)  # each at its chosen output cap
        self.counts = template.counts
        self.expects = expectations(getattr(template, "decisions", ()))  # routers' and dynamic planners'
        self.outputs: dict[str, Output] = {}  # by call id, each call made so far
        self.answered: dict[str, object] = {}  # by call id, the model that answered it last (a fallback's, or the seat's)
        self.cards: dict[str, list[str]] = {}  # a plan call's step cards
        self.best: Output | None = None
        self.calls_made = 0
        self.in_flight: set[asyncio.Future] = set()  # concurrent calls of a `parallel`, cancelled on overbilling
        self.clock = DeadlineGuard(getattr(system, "deadline_s", None), self.retry.timeout)
        self.arrived = arrived
        self.tools = tools
        self.calibration = Calibration()  # what this task's recent prompts were billed (metering/calibrate.py)
        self.length = length
        self.history = history

    # ------------------------------------------------------------ the task

    async def run(self) -> TaskResult:
        status, error, result, exhausted = "ok", None, None, None
        if self.length is not None:
            length, length_class = self.length
        else:
            models = [self.providers[name] for name in self._models() if name in self.providers]
            length, length_class = task_tokens(self.task, models), self.system.task_tokens
        self.clock.start(self.arrived)  # time spent waiting for room in a batch's total counts against the deadline
        try:
            self.check_task()
            result = await self.drive(walk(self.topology, self.counts))
        except Refused as refusal:  # money, time, or another limit ran out
            status, exhausted = "exhausted", refusal.limit
        except TaskError as problem:
            status, error = "error", str(problem)
        except TaskOverbilled as problem:
            status, error = "overbilled", str(problem)
        final = self._final(result) if status == "ok" else self._fallback()
        if status == "ok" and final is not None and not final.text.strip():
            # An empty final answer (a tool loop's last round held only tool calls) is no answer: the task answers
            # with its last non-empty answer, or fails saying so.
            final = self.best
            if final is None:
                status, error = "failed", "the final answer was empty, and no earlier call answered"
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
            assumed_task_tokens=length_class,
            length_class=length_class,
        )

    def check_task(self) -> None:
        """Stop a task whose text no request can carry before anything is reserved for it: the SDK would fail to
        encode every call that sends it, and an attempt that ends in an exception may have been billed."""
        problem = unencodable(self.task, "the task's text")
        if problem is not None:
            raise TaskError(f"{problem}; no call was made")

    def _models(self) -> list[str]:
        """The models the template binds, each once."""
        return sorted({model.name for model in self.model_of.values()})

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
        if role.history is not None:  # never more than the role's cap, which its bound counts
            inputs["history"] = history_within(self.history, role.history)
        provider = structured(self.providers[model.name], role.output_schema)  # sends, reserves for, checks it
        messages = []
        where = f"{node_id} (role '{role.name}'): "
        if role.system:
            messages.append(Message("system", self.render(role.system, inputs, where)))
        messages.append(Message("user", self.render(role.prompt, inputs, where)))
        cap = output_cap(role, model)
        expect = self.expects.get(node_id, role.reads)
        if node.rounds is not None:
            text = await run_loop(self, request, node, role, model, provider, messages, cap, expect)
        else:
            text = (await self.send(request, node, role, model, provider, messages,
                                    self.count_prompt(provider, messages), cap, expect)).text
        output = self.outputs[node_id] = Output(text, node_id, self.answered.get(node_id, model).tier)
        if self.answers(node_id, role, text):
            self.best = output
        return output

    def answers(self, node_id: str, role, text: str) -> bool:
        """Whether a call's output may answer the task in the end: not a verdict, a plan, a router's label or a
        dynamic planner's cards (their calls are in `expects`), and not empty."""
        return role.reads not in ("verdict", "plan") and node_id not in self.expects and bool(text.strip())

    @staticmethod
    def count_prompt(provider, messages) -> int:
        """The prompt tokens of `messages`: the provider's exact count, or the safe bound."""
        exact = provider.count_prompt_tokens(messages)
        return exact if exact is not None else safe_prompt_bound(messages)

    async def send(self, request, node, role, model, provider, messages, prompt_tokens: int, cap: int, expect: str,
                   tools: tuple = (), round: int | None = None):
        """One model call of `request` (a tool loop's `round`, sent with `tools`): its attempts on the seat's model,
        then, when that model's provider keeps failing, on its fallbacks (runtime/fallbacks.py); returns the
        Completion of the model that answered."""
        problem = unsendable(messages)  # a reply sent on, or a tool call's arguments: stopped before any reservation
        if problem is not None:
            raise TaskError(f"{node.id} (role '{role.name}'): {problem}; nothing was sent")
        try:
            return await self.attempts(request, node, role, model, provider, messages, prompt_tokens, cap, expect,
                                       tools, round)
        except ModelFailed as failed:
            return await fall_back(self, failed, request, node, role, provider, messages, prompt_tokens, expect,
                                   tools, round)

    async def attempts(self, request, node, role, model, provider, messages, prompt_tokens: int, cap: int,
                       expect: str, tools: tuple = (), round: int | None = None, fallback: dict | None = None):
        """The call on `model`, attempt after attempt under the retry policy, each admitted before it is sent;
        returns the provider's Completion, or raises ModelFailed when the retries end without one. `fallback`
        is what each attempt's trace line says of the seat's model it stands in for."""
        node_id = node.id
        # A prompt that extends one this task already sent to this model (a tool loop's next round) is bounded by
        # what that one was billed. Its bill bounds the same messages sent without the tools too (the loop's final
        # round): the specs are a section of their own, which only adds tokens.
        prompt = calibrated_prompt(messages, tools, role.output_schema)
        prompt_tokens = self.calibration.bound(self.task_id, model.name, prompt, prompt_tokens)
        lesser = (calibrated_prompt(messages, (), role.output_schema),) if tools else ()
        composed = self.admissions(model)
        # First, so it settles last: it learns the bill only once every other link has settled it within the bound.
        admissions = Admissions((Learn(self.calibration, self.task_id, prompt, *lesser), *composed.links),
                                composed.listeners)
        attempt = Attempt(request, node, model, 1, prompt_tokens, cap, self.retry.timeout, round)
        attempt.fallback = fallback
        offered = {"tools": tools} if tools else {}  # a provider of its own may not take tools
        while True:
            if self.guard.overbilled:
                raise TaskOverbilled(self.guard.overbilled)
            await admissions.admit(attempt)
            try:
                completion = await provider.complete(
                    messages, attempt.max_tokens, timeout=attempt.timeout, decoding=decoding_for(role, model),
                    expect=expect, **offered,
                )
            except ProviderError as problem:
                attempt.reply = problem
                ending = admissions.keep if problem.outcome_unknown else admissions.release
                await ending(attempt, f"{problem.kind}: {problem.message}")
                if not self.retry.should_retry(attempt.number, problem):
                    raise ModelFailed(model, problem, attempt) from None
                if not attempt.held_back:
                    # A 429 paused the key in the limiter, whose queue the retry joins: that is its wait, and it
                    # ends at the deadline. Any other failure backs off, unless that leaves too little time.
                    wait = self.retry.delay(attempt.number, problem, self.rng)
                    if attempt.deadline is not None and not attempt.deadline.fits_after(attempt, wait):
                        late = attempt.again()
                        raise admissions.refused(late, attempt.deadline.refusal(late))
                    await asyncio.sleep(wait)
                attempt = attempt.again()
                continue
            except asyncio.CancelledError:
                # Stopped from outside (a sibling was overbilled, or the run was
                # interrupted) while the request was out: it may be billed.
                await admissions.keep(attempt, "cancelled: outcome unknown, reservation kept")
                raise
            except Exception as problem:
                # A provider that fails in a way it does not classify (a defect in
                # it or in its SDK) ends this task only, and may have billed.
                what = f"unexpected {type(problem).__name__} from the provider"
                await admissions.keep(attempt, f"malformed: {what}, reservation kept")
                raise TaskError(f"{node_id} on {model.name}: {what}") from None
            attempt.reply = completion
            await admissions.settle(attempt, Usage(completion.prompt_tokens, completion.completion_tokens,
                                                   completion.cached_tokens, completion.cache_write_tokens))
            self.calls_made += 1
            self.answered[node_id] = model
            if self.guard.overbilled:
                for sibling in self.in_flight:
                    if sibling is not asyncio.current_task():
                        sibling.cancel()
                raise TaskOverbilled(self.guard.overbilled)
            return completion

    def admissions(self, model) -> Admissions:
        """The links every attempt at a call to `model` passes, in order, and who hears its events: the one
        place they are composed, so a new limit is one more link here."""
        def options(attempt):
            return reference_mode.reserve_options(self.guard, attempt.request)

        links = (DeadlineLink(self.clock), BudgetLink(self.guard, options), PaceLink(self.limiter, model))
        if self.trace is None:
            return Admissions(links, ())
        server = getattr(self.providers.get(model.name), "server", None)  # where its requests go; None: nowhere
        return Admissions(links, (AttemptLines(self.trace, self.task_id, server),))

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
            answering = [o for o in done if self.answers(o.node, self.program.roles[self.nodes[o.node].role], o.text)]
            if answering and self.best is None:
                self.best = answering[0]
            raise next((f for f in failures if isinstance(f, TaskOverbilled)), failures[0])
        return done
