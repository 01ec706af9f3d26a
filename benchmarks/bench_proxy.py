"""`bamasc proxy` in front of frameworks: overruns and spend with and without it, and the latency it adds per call.

    python benchmarks/bench_proxy.py [--tasks 50] [--calls 1000]

One honest upstream in its own process (tests/proxy/upstream.py: both wire
protocols, replies of 2,000 words unless the cap is lower, billing exactly the
usage it reports). The proxy runs as `bamasc proxy` in its own process.

Overruns: the same `--tasks` tasks, each a 3-call chain (each answer feeds the
next) with a 556 µ$ budget, through
- the bare OpenAI SDK, checking the spend after each call (stop once it
  reaches the budget), with no `max_tokens` and with `max_tokens` 256;
- LangGraph (langchain-openai), a 3-node graph that stops the same way;
- each of them again through the proxy, budget in the headers, no check of
  their own.
Tasks run one at a time, so each task's bill is the upstream's bill before
and after it.

Latency: `--calls` calls of 16 output tokens at 0 ms upstream latency, direct
and through the proxy, interleaved one by one (sync SDK client, one
connection); the proxy's added latency at p50 and p99.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import httpx  # noqa: E402
import openai  # noqa: E402

from tests.proxy.helpers import PRICES, TOKEN, config_text, free_port  # noqa: E402

BUDGET = 556.0
MODEL = "gpt-4.1-mini"


def bill(upstream: str) -> float:
    tokens = httpx.get(f"{upstream}/bill").json()
    return sum(p * PRICES[MODEL.split("-overbill")[0]][0] + c * PRICES[MODEL][1] for p, c in tokens.values())


def start(command: list[str], url: str, env: dict, tree: str = ROOT) -> subprocess.Popen:
    """`command` run from source tree `tree`, once `url` answers."""
    process = subprocess.Popen(command, cwd=tree, env={**os.environ, **env, "PYTHONPATH": tree},
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(600):
        try:
            httpx.get(url, timeout=1)
            return process
        except httpx.HTTPError:
            time.sleep(0.05)
    raise SystemExit(f"{command[:4]} did not start: {process.stderr.read().decode()[-500:]}")


def sdk_chain(client, upstream: str | None, cap: int | None) -> None:
    """Three calls, each on the last answer; stops once the upstream's bill reaches the budget (after a call)."""
    start_bill = bill(upstream) if upstream else 0.0
    text = "Plan a week of meals for a family of four."
    for _ in range(3):
        extra = {"max_tokens": cap} if cap else {}
        try:
            reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], **extra)
        except openai.APIStatusError:
            return  # the proxy refused: the budget is spent
        text = reply.choices[0].message.content[:300]
        if upstream and bill(upstream) - start_bill >= BUDGET:
            return


def langgraph_chain(base_url: str, headers: dict, upstream: str | None, cap: int | None) -> None:
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph

    llm = ChatOpenAI(model=MODEL, base_url=base_url, api_key=TOKEN, default_headers=headers, max_retries=0,
                     **({"max_tokens": cap} if cap else {}))
    start_bill = bill(upstream) if upstream else 0.0

    def step(state):
        return {"messages": [llm.invoke(state["messages"][-1:])]}

    def more(state):
        over = upstream is not None and bill(upstream) - start_bill >= BUDGET
        return END if over or len(state["messages"]) >= 4 else "step"

    graph = StateGraph(MessagesState).add_node("step", step).add_edge(START, "step")
    graph = graph.add_conditional_edges("step", more).compile()
    try:
        graph.invoke({"messages": [("user", "Plan a week of meals for a family of four.")]})
    except openai.APIStatusError:
        pass


def overruns(upstream: str, proxy: str, tasks: int) -> list[tuple]:
    rows = []
    sides = [("bare SDK", "sdk"), ("LangGraph", "langgraph")]
    for label, kind in sides:
        for cap in (None, 256):
            for through in (False, True):
                costs = []
                for index in range(tasks):
                    headers = {"X-Bamasc-Task": f"{kind}-{cap}-{index}", "X-Bamasc-Budget": f"{BUDGET:g}"}
                    base = f"{proxy}/v1" if through else f"{upstream}/v1"
                    before = bill(upstream)
                    if kind == "sdk":
                        client = openai.OpenAI(base_url=base, api_key=TOKEN, max_retries=0,
                                               default_headers=headers if through else {})
                        sdk_chain(client, None if through else upstream, cap)
                    else:
                        langgraph_chain(base, headers if through else {}, None if through else upstream, cap)
                    costs.append(bill(upstream) - before)
                over = [cost for cost in costs if cost > BUDGET + 1e-6]
                rows.append((label, "none" if cap is None else cap, "proxy" if through else "own check",
                             len(over), tasks, statistics.mean(costs), max(costs), max(costs) / BUDGET))
    return rows


def latency(upstream: str, proxy: str, calls: int) -> tuple[list[float], list[float]]:
    direct = openai.OpenAI(base_url=f"{upstream}/v1", api_key=TOKEN, max_retries=0)
    proxied = openai.OpenAI(base_url=f"{proxy}/v1", api_key=TOKEN, max_retries=0,
                            default_headers={"X-Bamasc-Task": "latency", "X-Bamasc-Budget": "1e9"})
    times = {"direct": [], "proxy": []}
    for index in range(calls + 20):
        for name, client in (("direct", direct), ("proxy", proxied)):
            began = time.perf_counter()
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=16)
            if index >= 20:  # warm-up
                times[name].append((time.perf_counter() - began) * 1000)
    return times["direct"], times["proxy"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = open(f"/proc/{pid}/stat", encoding="ascii").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_call(sides: dict, calls: int, repeats: int) -> dict[str, list[float]]:
    """Each side's process CPU ms per call (side -> (proxy process, SDK client)): `repeats` rounds of `calls` chat
    completions of 16 tokens, the sides alternating round by round, after one round that warms every side up."""
    figures = {name: [] for name in sides}
    for round_number in range(repeats + 1):
        for name, (server, client) in sides.items():
            before = cpu_seconds(server.pid)
            for _ in range(calls):
                client.chat.completions.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
            if round_number:
                figures[name].append((cpu_seconds(server.pid) - before) / calls * 1000)
    return figures


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--latency-only", action="store_true", help="skip the overrun rows")
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    up_port, proxy_port = free_port(), free_port()
    upstream, proxy = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{proxy_port}"
    config = os.path.join(folder, "proxy.bam")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(config_text(upstream))
    env = {"UPSTREAM_KEY": "k", "PROXY_TOKEN": TOKEN}
    servers = [start([sys.executable, "-m", "tests.proxy.upstream", str(up_port), "2000"], f"{upstream}/bill", env)]
    servers.append(start([sys.executable, "-m", "bamasc", "proxy", "--config", config, "--port", str(proxy_port),
                          "--token-env", "PROXY_TOKEN", "--trace", os.path.join(folder, "trace.jsonl")],
                         f"{proxy}/healthz", env))
    try:
        began = time.time()
        rows = [] if args.latency_only else overruns(upstream, proxy, args.tasks)
        print(f"{args.tasks} tasks per row, a 3-call chain each, {BUDGET:g} µ$ per task, upstream replies of "
              "2,000 words unless capped")
        print("| framework | max_tokens | budget check | overruns | mean cost µ$ | max cost µ$ | max / budget |")
        print("|---|---:|---|---:|---:|---:|---:|")
        for label, cap, check, over, tasks, mean, top, ratio in rows:
            print(f"| {label} | {cap} | {check} | {over} of {tasks} | {mean:.1f} | {top:.1f} | {ratio:.2f} |")
        cpu_before = cpu_seconds(servers[1].pid)
        direct, proxied = latency(upstream, proxy, args.calls)
        proxy_cpu = (cpu_seconds(servers[1].pid) - cpu_before) / (args.calls + 20) * 1000
        print(f"\nlatency per call, {args.calls} calls each, 16 output tokens, 0 ms upstream latency")
        print("| path | p50 ms | p99 ms |")
        print("|---|---:|---:|")
        for name, values in (("direct", direct), ("through the proxy", proxied)):
            print(f"| {name} | {percentile(values, 0.5):.2f} | {percentile(values, 0.99):.2f} |")
        print(f"| added by the proxy | {percentile(proxied, 0.5) - percentile(direct, 0.5):.2f} | "
              f"{percentile(proxied, 0.99) - percentile(direct, 0.99):.2f} |")
        print(f"\nthe proxy process's CPU time per call: {proxy_cpu:.2f} ms (user + system, /proc)")
        print(f"\n{time.time() - began:.0f} s")
    finally:
        for server in servers:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
