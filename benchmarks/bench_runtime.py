"""Interpreter overhead: calls through bamasc against a bare loop of SDK calls, same local server.

    python benchmarks/bench_runtime.py [--calls 1000] [--repeats 3]

(a) Per-call overhead: the same number of chat-completion calls, one at a
    time, made by a bare loop of `openai` SDK calls and by `bamasc`'s dataset
    runner (template: one call per task; budget guard, prompt rendering,
    trace file, answer extraction included). Target: under 2 ms per call.
(b) Throughput: a 1000-task dataset at concurrency 64 against a server that
    waits 50 ms before each reply. Target: within 1.5x of calls x 50 ms / 64.
    Each side's client CPU time per call is printed too: above 50 ms / 64 =
    0.78 ms, a client in one process cannot keep 64 calls in flight.
Both sides make the same SDK request as bamasc's provider (the client's `post`
over the SDK's aiohttp transport); (b) also times bare loops of
`chat.completions.create`, over aiohttp and over the SDK's default httpx
transport, for reference.
Every figure is the median of --repeats runs, the sides interleaved. The
server speaks the OpenAI wire protocol on 127.0.0.1 (asyncio, stdlib only) in
a process of its own, and takes little CPU from the client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def serve(delay: float):
    """The server in its own process, so it does not share the client's interpreter lock."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    ports = context.Queue()
    process = context.Process(target=_serve_forever, args=(delay, ports), daemon=True)
    process.start()
    return process, ports.get(timeout=30)


def _serve_forever(delay: float, ports) -> None:
    async def listen():
        server = await asyncio.start_server(lambda r, w: _answer(r, w, delay), "127.0.0.1", 0, backlog=512)
        ports.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(listen())


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Every request on one keep-alive connection, as a real API serves them, until the client closes it."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = json.loads(await reader.readexactly(length))
            if delay:
                await asyncio.sleep(delay)
            payload = json.dumps(
                {
                    "id": "chatcmpl-bench",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "#### 42"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16},
                }
            ).encode()
            # Headers and body in one write: split writes meet the client's delayed ACK, ~40 ms each.
            status = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
            writer.write(status.encode() + payload)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass  # the client closed the connection
    finally:
        writer.close()


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
    from bamasc.plan.compile import compile_file

    path = os.path.join(folder, "bench.bam")
    with open(path, "w") as handle:
        handle.write(SOURCE.format(base_url=base_url))
    return compile_file(path)


async def bare_loop(
    base_url: str, calls: int, concurrency: int, *, call: str = "post", transport: str = "aiohttp"
) -> tuple[float, float]:
    """Seconds and client CPU seconds for `calls` SDK calls, `concurrency` at a time, after one to warm up.

    call="post" is the request bamasc's provider makes (the SDK's `post`, body
    as given, decoded JSON back); call="create" is `chat.completions.create`.
    """
    import openai

    http_client = openai.DefaultAioHttpClient() if transport == "aiohttp" else None
    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=30, http_client=http_client)
    limit = asyncio.Semaphore(concurrency)

    async def one(i):
        request = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"Solve: task {i}"}], "max_tokens": 64}
        async with limit:
            if call == "post":
                reply = await client.post("/chat/completions", body=request, cast_to=object)
                return reply["choices"][0]["message"]["content"]
            reply = await client.chat.completions.create(**request)
            return reply.choices[0].message.content

    await one(-1)  # warm the connection
    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(i) for i in range(calls)))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    await client.close()
    return elapsed, cpu


def bamasc_run(compiled, calls: int, concurrency: int, folder: str) -> tuple[float, float]:
    """Seconds and client CPU seconds for `calls` one-call tasks through `run_tasks`, trace file included."""
    from bamasc.runtime.execute import ExecOptions, Task
    from bamasc.runtime.workers import run_tasks

    tasks = [Task(f"t{i}", f"task {i}") for i in range(calls)]
    trace = os.path.join(folder, f"trace-{concurrency}.jsonl")
    if os.path.exists(trace):
        os.remove(trace)  # each run writes a trace of its own
    options = ExecOptions(concurrency=concurrency, trace_path=trace)
    warm = ExecOptions(concurrency=1, trace_path=None)
    asyncio.run(run_tasks(compiled.plan, compiled.program, "s", [Task("warm", "task")], warm))
    start, cpu = time.perf_counter(), time.process_time()
    results, _, _ = asyncio.run(run_tasks(compiled.plan, compiled.program, "s", tasks, options))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert all(r.status == "ok" for r in results), {r.status for r in results}
    return elapsed, cpu


def medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    """The median seconds and the median CPU seconds of (seconds, CPU seconds) runs."""
    return statistics.median(run[0] for run in runs), statistics.median(run[1] for run in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ["BENCH_KEY"] = "bench"
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        fast, port = serve(0.0)
        base_url = f"http://127.0.0.1:{port}/v1"
        compiled = compile_for(base_url, folder)
        bare_runs, our_runs = [], []
        for _ in range(args.repeats):
            bare_runs.append(asyncio.run(bare_loop(base_url, args.calls, 1)))
            our_runs.append(bamasc_run(compiled, args.calls, 1, folder))
        (bare, _), (mine, _) = medians(bare_runs), medians(our_runs)
        print(f"(a) {args.calls} sequential calls, median of {args.repeats}: bare SDK loop {bare:.2f} s "
              f"({bare / args.calls * 1000:.2f} ms/call), bamasc {mine:.2f} s ({mine / args.calls * 1000:.2f} ms/call); "
              f"overhead {(mine - bare) / args.calls * 1000:.2f} ms per call (target < 2 ms)")
        fast.terminate()

        slow, port = serve(0.05)
        base_url = f"http://127.0.0.1:{port}/v1"
        compiled = compile_for(base_url, folder)
        ideal = args.calls * 0.05 / 64
        bare_runs, our_runs, create_runs, httpx_runs = [], [], [], []
        for _ in range(args.repeats):
            bare_runs.append(asyncio.run(bare_loop(base_url, args.calls, 64)))
            our_runs.append(bamasc_run(compiled, args.calls, 64, folder))
            create_runs.append(asyncio.run(bare_loop(base_url, args.calls, 64, call="create")))
            httpx_runs.append(asyncio.run(bare_loop(base_url, args.calls, 64, call="create", transport="httpx")))
        to_ms_per_call = 1000 / args.calls  # from CPU seconds for all calls

        def summary(runs) -> str:
            seconds, cpu = medians(runs)
            return f"{seconds:.2f} s ({seconds / ideal:.2f}x, {cpu * to_ms_per_call:.2f} ms CPU/call)"

        print(f"(b) {args.calls} tasks at concurrency 64, server waits 50 ms, median of {args.repeats}: "
              f"ideal {ideal:.2f} s, bare SDK loop {summary(bare_runs)}, "
              f"bamasc {summary(our_runs)}; target <= 1.5x")
        print(f"    for reference, bare loops of chat.completions.create: over aiohttp {summary(create_runs)}, "
              f"over the SDK's default httpx transport {summary(httpx_runs)}")
        slow.terminate()
    print(f"load average (1 min): {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
