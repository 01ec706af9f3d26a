"""The metering core's cost per call, in CPU time, beside another source tree of bamasc in the same run.

    python benchmarks/bench_metering.py [--calls 1000] [--repeats 5] [--baseline DIR]

(a) `exec`: one-call tasks run one at a time by the dataset runner (budget
    guard, admission chain, prompt rendering, trace file, answer extraction)
    against a local OpenAI-style server that answers at once; the CPU time of
    the process running them, per call. Target: within 1.1x of the baseline.
(b) `bamasc proxy`: chat completions of 16 output tokens through the proxy
    (its own process, with a trace) to the honest upstream of the proxy's
    tests (tests/proxy/upstream.py, its own process); the proxy process's CPU
    time per call (user + system, /proc). Target: within 1.2x of the baseline.

Each tree runs in processes of its own (PYTHONPATH set to it). The sides
alternate run by run, and every figure is the median of --repeats runs.
`--baseline DIR` is a checkout of the tree to compare with (for example
`git worktree add ../base <commit>`); without it only this tree is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

# The child that measures (a), run with the tree under test first on its path: it imports nothing from this file's tree.
_EXEC_CHILD = r"""
import asyncio, json, os, sys, tempfile, time
from bamasc.plan.compile import compile_file
from bamasc.runtime.execute import ExecOptions, Task
from bamasc.runtime.workers import run_tasks

port, calls = int(sys.argv[1]), int(sys.argv[2])
source = '''
model remote {
  provider = openai
  name     = "gpt-4o-mini"
  base_url = "http://127.0.0.1:%d/v1"
  api_key  = env("BENCH_KEY")
  price    { input = 0.15  output = 0.60 }
  tier     = 1
}
role Solver {
  max_output = 64
  prompt     = "Solve: {{task}}"
}
topology single {
  slot solver : Solver [1..1]
  flow { answer solver(task) }
}
system s { models = [remote] topologies = [single] budget = 1000 answer = number }
''' % port
folder = tempfile.mkdtemp()
path = os.path.join(folder, "bench.bam")
open(path, "w").write(source)
compiled = compile_file(path)
warm = ExecOptions(concurrency=1, trace_path=None)
asyncio.run(run_tasks(compiled.plan, compiled.program, "s", [Task("warm", "task")], warm))
options = ExecOptions(concurrency=1, trace_path=os.path.join(folder, "trace.jsonl"))
tasks = [Task(f"t{i}", f"task {i}") for i in range(calls)]
began = time.process_time()
results, _, _ = asyncio.run(run_tasks(compiled.plan, compiled.program, "s", tasks, options))
cpu = time.process_time() - began
assert all(result.status == "ok" for result in results), {result.status for result in results}
print(json.dumps({"cpu_ms_per_call": cpu / calls * 1000}))
"""


def _env(tree: str, **extra) -> dict:
    return {**os.environ, "PYTHONPATH": tree, "BENCH_KEY": "bench", **extra}


def exec_cpu(tree: str, port: int, calls: int) -> float:
    done = subprocess.run([sys.executable, "-c", _EXEC_CHILD, str(port), str(calls)], cwd=tree, env=_env(tree),
                          capture_output=True, text=True, timeout=1800, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["cpu_ms_per_call"]


def proxy_cpu(trees: dict[str, str], calls: int, repeats: int) -> dict[str, list[float]]:
    """CPU ms per call of each tree's proxy, `repeats` rounds of `calls` calls each, the trees alternating."""
    import openai

    from bench_proxy import cpu_per_call, start
    from tests.proxy.helpers import TOKEN, config_text, free_port

    folder = tempfile.mkdtemp()
    up_port = free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    config = os.path.join(folder, "proxy.bam")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(config_text(upstream))
    env = {"UPSTREAM_KEY": "k", "PROXY_TOKEN": TOKEN}
    servers = [start([sys.executable, "-m", "tests.proxy.upstream", str(up_port), "2000"], f"{upstream}/bill", env)]
    proxies = {}
    try:
        for name, tree in trees.items():
            port = free_port()
            servers.append(start([sys.executable, "-m", "bamasc", "proxy", "--config", config, "--port", str(port),
                                  "--token-env", "PROXY_TOKEN", "--trace", os.path.join(folder, f"{name}.jsonl")],
                                 f"http://127.0.0.1:{port}/healthz", env, tree))
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=TOKEN, max_retries=0,
                                   default_headers={"X-Bamasc-Task": "bench", "X-Bamasc-Budget": "1e9"})
            proxies[name] = (servers[-1], client)
        return cpu_per_call(proxies, calls, repeats)
    finally:
        for server in servers:
            server.terminate()
            server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", metavar="DIR", help="another bamasc source tree to measure beside this one")
    args = parser.parse_args()
    trees = {"this tree": ROOT}
    if args.baseline:
        trees["baseline"] = os.path.abspath(args.baseline)
    from bench_runtime import serve

    server, port = serve(0.0)
    try:
        execs = {name: [] for name in trees}
        for _ in range(args.repeats):
            for name, tree in trees.items():
                execs[name].append(exec_cpu(tree, port, args.calls))
    finally:
        server.terminate()
    proxies = proxy_cpu(trees, args.calls, args.repeats)
    print(f"CPU ms per call, median of {args.repeats} runs of {args.calls} calls (min..max)")
    print("| surface | " + " | ".join(trees) + (" | this / baseline |" if args.baseline else " |"))
    print("|---|" + "---:|" * (len(trees) + (1 if args.baseline else 0)))
    for label, figures in (("exec (one-call tasks, trace)", execs), ("proxy (chat completions, trace)", proxies)):
        cells = [f"{statistics.median(figures[name]):.3f} ({min(figures[name]):.3f}..{max(figures[name]):.3f})"
                 for name in trees]
        ratio = ""
        if args.baseline:
            ratio = f" | {statistics.median(figures['this tree']) / statistics.median(figures['baseline']):.3f}"
        print(f"| {label} | " + " | ".join(cells) + ratio + " |")


if __name__ == "__main__":
    main()
