"""Real frameworks pointed at `bamasc proxy`: LangGraph (langchain-openai) in this environment, AutoGen in its own.

AutoGen pins protobuf 5 and the OpenTelemetry exporter of the test extra needs
protobuf 6, so AutoGen lives in a virtualenv of its own: `.venv-autogen` at the
repository root (`.ci/run` makes it), or the interpreter named by
BAMASC_AUTOGEN_PYTHON. The examples of docs/proxy.md run as written, with the
test proxy's address and token put in.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")

from tests.conftest import ROOT  # noqa: E402
from tests.proxy.helpers import TOKEN, ThreadProxy, charged_per_scope, config_text  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402

DOC = os.path.join(ROOT, "docs", "proxy.md")
AUTOGEN_PYTHON = os.environ.get("BAMASC_AUTOGEN_PYTHON", os.path.join(ROOT, ".venv-autogen", "bin", "python"))


def doc_example(heading: str) -> str:
    text = open(DOC, encoding="utf-8").read()
    section = text.split(f"## {heading}\n", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def pointed(code: str, proxy) -> str:
    return code.replace("http://127.0.0.1:8787", proxy.url).replace('"PROXY_TOKEN"', f'"{TOKEN}"')


@pytest.fixture(scope="module")
def upstream():
    server = Upstream(output=2000).start()
    yield server
    server.stop()


@pytest.fixture
def proxy(upstream, tmp_path, monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", "upstream-key")
    path = tmp_path / "proxy.bam"
    path.write_text(config_text(upstream.url), encoding="utf-8")
    server = ThreadProxy(str(path), trace=str(tmp_path / "trace.jsonl"))
    yield server
    server.stop()


def test_the_langgraph_example_runs_and_the_budget_ends_the_graph_with_an_api_error(proxy, tmp_path, capsys):
    pytest.importorskip("langgraph", reason="langgraph is not installed (the test extra)")
    pytest.importorskip("langchain_openai", reason="langchain-openai is not installed (the test extra)")
    import openai

    code = pointed(doc_example("LangGraph"), proxy)
    exec(compile(code, "docs/proxy.md", "exec"), {})
    assert len(capsys.readouterr().out.split()) > 100  # the long answer came back through the graph
    ended = None
    for _ in range(5):
        try:
            exec(compile(code, "docs/proxy.md", "exec"), {})
        except openai.APIStatusError as problem:
            ended = problem
            break
    assert ended is not None and ended.status_code == 402 and "ticket-42" in ended.message
    proxy.stop()
    assert 0 < charged_per_scope([str(tmp_path / "trace.jsonl")])["ticket-42"] <= 556


def test_the_autogen_example_runs_and_the_budget_ends_the_agent_with_an_api_error(proxy, tmp_path):
    if not os.path.exists(AUTOGEN_PYTHON):
        pytest.skip(f"no AutoGen virtualenv at {AUTOGEN_PYTHON} (.ci/run makes it: "
                    "python3 -m venv .venv-autogen && .venv-autogen/bin/pip install autogen-agentchat 'autogen-ext[openai]')")
    code = pointed(doc_example("AutoGen"), proxy)
    first = subprocess.run([AUTOGEN_PYTHON, "-c", code], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert len(first.stdout.split()) > 100
    runs = [subprocess.run([AUTOGEN_PYTHON, "-c", code], capture_output=True, text=True, timeout=300) for _ in range(3)]
    ended = [run for run in runs if run.returncode != 0]
    assert ended and "openai.APIStatusError: Error code: 402" in ended[0].stderr
    assert "bamasc proxy: scope 'ticket-42'" in ended[0].stderr
    proxy.stop()
    assert 0 < charged_per_scope([str(tmp_path / "trace.jsonl")])["ticket-42"] <= 556
