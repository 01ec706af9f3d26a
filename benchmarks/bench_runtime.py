"""Interpreter overhead: calls through bamasc against a bare loop of SDK calls, same local server.

    python benchmarks/bench_runtime.py [--calls 1000]

(a) Per-call overhead: the same number of chat-completion calls, one at a
    time, made by a bare loop of `openai` SDK calls and by `bamasc`'s dataset
    runner (template: one call per task; budget guard, prompt rendering,
    trace file, answer extraction included). Target: under 2 ms per call.
(b) Throughput: a 1000-task dataset at concurrency 64 against a server that
    waits 50 ms before each reply. Target: within 1.5x of calls x 50 ms / 64.
Both use an OpenAI wire-protocol server on 127.0.0.1 (threaded, stdlib only),
in a process of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _serve_forever(delay: float, ports) -> None:
    server = _make_server(delay)
    ports.put(server.server_address[1])
    server.serve_forever()


def serve(delay: float):
    """The server in its own process, so it does not share the client's interpreter lock."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    ports = context.Queue()
    process = context.Process(target=_serve_forever, args=(delay, ports), daemon=True)
    process.start()
    return process, ports.get(timeout=30)


def _make_server(delay: float) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real API
        # Buffer the reply and send headers and body in one write (flushed after
        # each request): split writes meet the client's delayed ACK, ~40 ms each.
        wbufsize = 1 << 16
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if delay:
                time.sleep(delay)
            payload = json.dumps(
                {
                    "id": "chatcmpl-bench",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "#### 42"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 40, "completion_tokens": 4, "total_tokens": 44},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 512  # read when the socket starts listening

    return Server(("127.0.0.1", 0), Handler)


SOURCE = """
model remote {{
  provider = openai
  name     = "gpt-4o-mini"
  base_url = "{base_url}"
  api_key  = env("BENCH_KEY")
  price    {{ input = 0.15  output = 0.60 }}
  tier     = 1
}}
role Solver {{
  max_output = 64
  prompt     = "Solve: {{{{task}}}}"
}}
topology single {{
  slot solver : Solver [1..1]
  flow {{ answer solver(task) }}
}}
system s {{ models = [remote] topologies = [single] budget = 1000 answer = number }}
"""


def compile_for(base_url: str, folder: str):
    from bamasc.compiler import compile_file

    path = os.path.join(folder, "bench.bam")
    with open(path, "w") as handle:
        handle.write(SOURCE.format(base_url=base_url))
    return compile_file(path)


async def bare_loop(base_url: str, calls: int, concurrency: int) -> float:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=30)
    limit = asyncio.Semaphore(concurrency)

    async def one(i):
        async with limit:
            await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": f"Solve: task {i}"}], max_tokens=64
            )

    await one(-1)  # warm the connection
    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(calls)))
    elapsed = time.perf_counter() - start
    await client.close()
    return elapsed


def bamasc_run(compiled, calls: int, concurrency: int, folder: str) -> float:
    from bamasc.runtime.execute import ExecOptions, Task, run_tasks

    tasks = [Task(f"t{i}", f"task {i}") for i in range(calls)]
    options = ExecOptions(concurrency=concurrency, trace_path=os.path.join(folder, f"trace-{concurrency}.jsonl"))
    warm = ExecOptions(concurrency=1, trace_path=None)
    asyncio.run(run_tasks(compiled.plan, compiled.program, "s", [Task("warm", "task")], warm))
    start = time.perf_counter()
    results, _, _ = asyncio.run(run_tasks(compiled.plan, compiled.program, "s", tasks, options))
    elapsed = time.perf_counter() - start
    assert all(r.status == "ok" for r in results), {r.status for r in results}
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ["BENCH_KEY"] = "bench"
    with tempfile.TemporaryDirectory() as folder:
        fast, port = serve(0.0)
        base_url = f"http://127.0.0.1:{port}/v1"
        compiled = compile_for(base_url, folder)
        bare_times, ours = [], []
        for _ in range(args.repeats):
            bare_times.append(asyncio.run(bare_loop(base_url, args.calls, 1)))
            ours.append(bamasc_run(compiled, args.calls, 1, folder))
        bare, mine = min(bare_times), min(ours)
        print(f"(a) {args.calls} sequential calls, best of {args.repeats}: bare SDK loop {bare:.2f} s "
              f"({bare / args.calls * 1000:.2f} ms/call), bamasc {mine:.2f} s ({mine / args.calls * 1000:.2f} ms/call); "
              f"overhead {(mine - bare) / args.calls * 1000:.2f} ms per call (target < 2 ms)")
        fast.terminate()

        slow, port = serve(0.05)
        base_url = f"http://127.0.0.1:{port}/v1"
        compiled = compile_for(base_url, folder)
        ideal = args.calls * 0.05 / 64
        bare64 = asyncio.run(bare_loop(base_url, args.calls, 64))
        ours64 = bamasc_run(compiled, args.calls, 64, folder)
        print(f"(b) {args.calls} tasks at concurrency 64, server waits 50 ms: ideal {ideal:.2f} s, "
              f"bare SDK {bare64:.2f} s ({bare64 / ideal:.2f}x), bamasc {ours64:.2f} s ({ours64 / ideal:.2f}x; target <= 1.5x)")
        slow.terminate()


if __name__ == "__main__":
    main()
