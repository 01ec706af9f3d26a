"""The whole budget through the proxy: an agent's prompts bounded by what its scope's earlier prompts were billed.

Against an upstream that bills a token per 4 bytes (so a byte bound is four
times each bill), LangGraph's prebuilt ReAct agent runs again and again in one
scope until the proxy answers 402: the scope stops with at most a tenth of
its budget left, never over it, and the proxy charged exactly the upstream's
bill. An upstream whose counts contradict each other (a tenth of the first
prompt, then the whole of its extension) is caught as overbilling, charged as
it reported, and the scope is closed.
"""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")

from tests.proxy.helpers import PRICES, TOKEN, ThreadProxy, config_text  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402

BUDGET = 3000.0  # µ$: about fifteen runs of the agent


@pytest.fixture(scope="module")
def upstream():
    server = Upstream(output=10).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(upstream, tmp_path_factory):
    path = tmp_path_factory.mktemp("calibrated") / "proxy.bam"
    path.write_text(config_text(upstream.url, budget=None, suffixes=("-quarter-toolcall", "-quarter-lowball")),
                    encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("UPSTREAM_KEY", "upstream-key")
        server = ThreadProxy(str(path))
        yield server
        server.stop()


def _billed(upstream, model: str, since: int) -> float:
    price_in, price_out = PRICES["gpt-4.1-mini"]
    return sum(call["prompt"] * price_in + call["completion"] * price_out
               for call in upstream.calls[since:] if call["billed"] and call["model"] == model)


def test_a_react_agent_spends_at_least_nine_tenths_of_its_scope_and_never_more(proxy, upstream):
    pytest.importorskip("langgraph", reason="langgraph is not installed (the test extra)")
    pytest.importorskip("langchain_openai", reason="langchain-openai is not installed (the test extra)")
    from tests.helpers.calibration import react_until_refused

    before = len(upstream.calls)
    runs = react_until_refused(proxy.url, TOKEN, "react", BUDGET)
    view = proxy.scope("react")
    assert runs > 5 and view["status"] == "open" and view["held"] == 0
    assert BUDGET * 0.9 <= view["charged"] <= BUDGET
    assert view["charged"] == pytest.approx(_billed(upstream, "gpt-4.1-mini-quarter-toolcall", before), abs=1e-6)


def test_an_upstream_whose_counts_contradict_each_other_is_caught_as_overbilling(proxy, upstream):
    model = "gpt-4.1-mini-quarter-lowball"
    before = len(upstream.calls)

    def ask(messages):
        return httpx.post(f"{proxy.url}/v1/chat/completions", timeout=60,
                          json={"model": model, "max_tokens": 16, "messages": messages},
                          headers={"authorization": f"Bearer {TOKEN}", "x-bamasc-task": "lowball",
                                   "x-bamasc-budget": "100000"})

    question = [{"role": "user", "content": "a question of some length, " * 40}]
    assert ask(question).status_code == 200  # billed a tenth of its prompt: the proxy learns that count
    grown = question + [{"role": "assistant", "content": "an answer"}, {"role": "user", "content": "and then?"}]
    assert ask(grown).status_code == 200  # bounded by that count, billed in full: above its bound
    view = proxy.scope("lowball")
    assert view["status"] == "overbilled" and "prompt tokens where" in view["overbilled"]
    assert view["charged"] == pytest.approx(_billed(upstream, model, before), abs=1e-6)  # charged as reported
    assert ask(grown).status_code == 402  # the scope is closed
