"""A real consumer prices the export as bamasc charged it: a run's spans sent to Arize Phoenix, its cost read back.

Phoenix prices each `chat` span itself, from `gen_ai.request.model`, `gen_ai.provider.name` and the token
counts, with its own price table. It pins other versions than the test extra's, so it lives in a virtualenv
of its own, `.venv-phoenix` at the repository root, which .ci/run makes:

    python3 -m venv .venv-phoenix && .venv-phoenix/bin/pip install arize-phoenix

The test starts `phoenix serve` on loopback ports with its working directory (its SQLite database) in a
temporary directory, telemetry and external resources off, and skips, saying why, without the virtualenv.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time

import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="the export needs the otel extra")
httpx = pytest.importorskip("httpx", reason="the test reads Phoenix's API over httpx (the test extra)")

from bamasc.cli import main  # noqa: E402
from tests.conftest import ROOT  # noqa: E402

PHOENIX = os.environ.get("BAMASC_PHOENIX", os.path.join(ROOT, ".venv-phoenix", "bin", "phoenix"))
GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
STARTUP_S = 300  # a loaded machine: Phoenix migrates its database and builds its app before it answers
MICRO = 1_000_000
COST = """{ projects { edges { node { name traceCount
    costSummary { prompt { cost tokens } completion { cost tokens } total { cost tokens } } } } } }"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    """The base URL of a Phoenix server of this test's own (its collector and its API share the port)."""
    if not os.access(PHOENIX, os.X_OK):
        pytest.skip(f"no Arize Phoenix at {PHOENIX} (.ci/run makes it: "
                    "python3 -m venv .venv-phoenix && .venv-phoenix/bin/pip install arize-phoenix)")
    home = tmp_path_factory.mktemp("phoenix")
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PHOENIX_", "OTEL_"))}
    env.update(PHOENIX_WORKING_DIR=str(home), PHOENIX_HOST="127.0.0.1", PHOENIX_PORT=str(port),
               PHOENIX_GRPC_PORT=str(free_port()), PHOENIX_TELEMETRY_ENABLED="false",
               PHOENIX_ALLOW_EXTERNAL_RESOURCES="false", HOME=str(home))
    with open(home / "phoenix.log", "wb") as log:
        server = subprocess.Popen([PHOENIX, "serve"], cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        give_up = time.monotonic() + STARTUP_S
        while not healthy(base):
            if server.poll() is not None or time.monotonic() > give_up:
                tail = (home / "phoenix.log").read_text(errors="replace")[-3000:]
                pytest.fail(f"phoenix serve did not start (exit {server.poll()}):\n{tail}")
            time.sleep(0.5)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def project(base: str) -> dict | None:
    reply = httpx.post(f"{base}/graphql", json={"query": COST}, timeout=10)
    reply.raise_for_status()
    edges = reply.json()["data"]["projects"]["edges"]
    return next((edge["node"] for edge in edges if edge["node"]["name"] == "default"), None)


def priced(base: str, traces: int) -> dict:
    """The default project once it holds `traces` traces and a cost for them (Phoenix prices spans as it stores them)."""
    give_up = time.monotonic() + 120
    while True:
        found = project(base)
        if found and found["traceCount"] >= traces and found["costSummary"]["total"]["cost"] is not None:
            return found
        if time.monotonic() > give_up:
            pytest.fail(f"Phoenix holds no priced trace of the {traces} sent: {found}")
        time.sleep(0.5)


def mini_plan(tmp_path) -> str:
    """examples/gsm8k.bam with its DeepSeek model swapped for gpt-4.1-mini under the alias `gpt41_mini`: two OpenAI
    models, both in Phoenix's price table, named in the .bam by aliases that are not the vendor's ids."""
    text = open(GSM8K, encoding="utf-8").read()
    deepseek = ('  base_url = "https://api.deepseek.com"\n  api_key  = env("DEEPSEEK_API_KEY")\n'
                '  name     = "deepseek-chat"\n  price    = catalog("deepseek/deepseek-chat")\n')
    assert deepseek in text
    text = text.replace(deepseek, '  name     = "gpt-4.1-mini"\n  price    = catalog("openai/gpt-4.1-mini")\n')
    path = tmp_path / "mini.bam"
    path.write_text(text.replace("deepseek_v3", "gpt41_mini"), encoding="utf-8")
    return str(path)


def test_phoenix_prices_the_exported_run_at_bamascs_charge(phoenix, tmp_path, capsys):
    bam, trace = mini_plan(tmp_path), tmp_path / "run.jsonl"
    dataset = tmp_path / "tasks.jsonl"
    dataset.write_text('{"id": "a", "question": "What is 2+3?"}\n{"id": "b", "question": "What is 6 times 7?"}\n')
    # The offline fake answers in the models' place (no key, no network) and is charged at their prices.
    assert main(["exec", bam, "--fake", "verbose", "--dataset", str(dataset), "--trace", str(trace)]) == 0
    assert main(["trace", "export", str(trace), "--otlp", phoenix]) == 0  # the base URL: /v1/traces is added
    assert capsys.readouterr().out.endswith(f"spans sent to {phoenix}/v1/traces\n")

    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    calls = [line for line in lines if line["type"] == "call"]
    assert {call["model_id"] for call in calls} == {"gpt-4.1-mini", "gpt-4.1-nano"}  # both models answered
    charged = sum(call["charged"] for call in calls)  # µ$
    assert charged == pytest.approx(sum(line["cost"] for line in lines if line["type"] == "task"))
    found = priced(phoenix, traces=2)
    summary = found["costSummary"]
    assert summary["prompt"]["tokens"] == sum(call["prompt_tokens"] for call in calls)
    assert summary["completion"]["tokens"] == sum(call["completion_tokens"] for call in calls)
    # Phoenix's cost, USD, is bamasc's charge to the µ$ (its prices are the catalogue's for these models).
    assert summary["total"]["cost"] * MICRO == pytest.approx(charged, abs=1e-3)
    assert charged > 100  # a run that cost something: $0.00 would have been the alias bug
