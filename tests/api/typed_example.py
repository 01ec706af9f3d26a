"""A user's script on the public API, type-checked by `mypy --strict` in test_typed.py (never run by pytest)."""

from __future__ import annotations

import asyncio

import bamasc


def cheapest_ok(results: list[bamasc.Result]) -> float:
    costs = [result.cost for result in results if result.ok]
    return min(costs) if costs else 0.0


def worst_case(plan: bamasc.Plan) -> float:
    return plan.bound  # a plan always has one: no `None` to rule out


def describe(template: bamasc.Template) -> str:
    seats = ", ".join(f"{seat.slot}[{seat.instance}]={seat.model}" for seat in template.binding)
    bound = "infeasible" if template.bound is None else f"{template.bound:.1f} µ$"
    return f"{template.name}: {bound} ({seats})"


async def main(path: str) -> None:
    try:
        program: bamasc.Program = bamasc.load(path)
    except bamasc.BamError as problem:
        codes: list[str] = [d.code for d in problem.diagnostics]
        print(problem.code, codes, problem.exit_code)
        return
    warnings: tuple[bamasc.Diagnostic, ...] = program.diagnostics
    plan: bamasc.Plan = program.compile(system=program.systems[0], budget=2000)
    bound: float = worst_case(plan)
    print(len(warnings), bound, [describe(t) for t in plan.templates])
    plan.save("plan.json")
    plan = bamasc.Plan.load("plan.json")
    fake: bamasc.providers.Providers = bamasc.providers.fake("verbose", latency_s=0.0)
    result: bamasc.Result = await plan.run("ticket text", provider=fake, budget=1500.0, deadline=10.0)
    answer: str | None = result.answer
    calls: tuple[bamasc.Call, ...] = result.calls
    print(answer, result.cost, result.bound, result.status, result.template, len(calls))
    result = plan.run_sync("ticket text", provider=fake)
    async for event in plan.stream("ticket text", provider=fake):
        if isinstance(event, bamasc.CallStarted):
            print(event.node, event.reserved)
        elif isinstance(event, bamasc.CallSettled):
            print(event.call.charged)
        elif isinstance(event, bamasc.ToolCalled):
            print(event.name, event.charged)
        else:
            done: bamasc.TaskDone = event
            print(done.result.status)
    tasks: list[str | bamasc.Task] = ["a", bamasc.Task("b", "text")]
    results = await plan.run_batch(tasks, concurrency=16, total_budget=200_000, trace="t.jsonl", provider=fake)
    print(cheapest_ok(results))
    async with plan.session(total_budget=10_000, provider=fake) as session:
        one: bamasc.Result = await session.run("text", budget=1000)
        state: bamasc.BudgetState = session.budget
        print(one.status, state.left)
    try:
        await plan.run("x", budget=1e9)
    except bamasc.BudgetError as problem:
        print(problem.message)
    except (bamasc.PlanError, bamasc.TraceError, bamasc.ProviderError, bamasc.UsageError):
        pass


if __name__ == "__main__":
    asyncio.run(main("support.bam"))
