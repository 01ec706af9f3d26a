"""Agent frameworks on an operator's key: LangGraph's prebuilt ReAct agent and the OpenAI Agents SDK, each with a tool,
run again and again in one scope until the key's `scope_budget` is spent, against an upstream that bills its own tokens.

A key with `on_exhausted: "answer"` ends every run with an answer (the last ones saying the budget is spent); one
with `"refuse"` ends a run with the 402, raised by the framework as an API error. Either way the upstream's own bill
for the scope stays within the key's `scope_budget`, and the proxy charged exactly that bill.
"""

from __future__ import annotations

import random
import warnings

import httpx
import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")
openai = pytest.importorskip("openai", reason="the openai SDK is not installed (the openai extra)")

from tests.proxy.helpers import ThreadProxy, config_text  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402

ADMIN = "admin-token-for-tests"
PRICE_IN, PRICE_OUT = 0.4, 1.6  # gpt-4.1-mini's, as config_text declares them
WORDS = 10  # an answer's words: below the proxy's least useful cap (16), so no forwarded answer is ever cut short
CAP = 200  # the output cap each framework asks for: a reservation is the prompt's bound and 200 tokens
RUNS = 40  # more runs than any budget below pays for


@pytest.fixture(scope="module")
def upstream():
    server = Upstream(output=WORDS).start()
    yield server
    server.stop()


@pytest.fixture
def proxy(upstream, tmp_path, monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", "upstream-key")
    path = tmp_path / "proxy.bam"
    path.write_text(config_text(upstream.url, budget=None, suffixes=("", "-toolcall")), encoding="utf-8")
    server = ThreadProxy(str(path), trace=str(tmp_path / "trace.jsonl"), admin=ADMIN,
                         keys=str(tmp_path / "keys.jsonl"))
    yield server
    server.stop()


def _key(proxy, **fields) -> str:
    made = httpx.post(f"{proxy.url}/v1/admin/keys", json=fields, timeout=30,
                      headers={"authorization": f"Bearer {ADMIN}"})
    assert made.status_code == 201, made.text
    return made.json()["key"]


def _billed(calls) -> float:
    return sum(call["prompt"] * PRICE_IN + call["completion"] * PRICE_OUT for call in calls if call["billed"])


def _charged(proxy, key: str, scope: str) -> float:
    view = httpx.get(f"{proxy.url}/v1/scopes/{scope}", headers={"authorization": f"Bearer {key}"}, timeout=30).json()
    assert view["held"] == 0, view
    return view["charged"]


def _budgets(seed: int) -> list[float]:
    """A family of scope budgets, each paying for a few runs (a run is two calls of at most ~350 µ$ reserved)."""
    rng = random.Random(seed)
    return [float(rng.randrange(500, 2500, 50)) for _ in range(2)]


# ------------------------------------------------------------------------------------------ the two frameworks


def _react_agent(proxy, key: str, scope: str, ran: list):
    """LangGraph's prebuilt ReAct agent on the key, with one tool; `ask(question)` -> the last message's text."""
    pytest.importorskip("langgraph", reason="langgraph is not installed (the test extra)")
    pytest.importorskip("langchain_openai", reason="langchain-openai is not installed (the test extra)")
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    @tool
    def lookup() -> str:
        """Find the fact the question needs."""
        ran.append(1)
        return "forty-two"

    model = ChatOpenAI(model="gpt-4.1-mini-toolcall", base_url=f"{proxy.url}/v1", api_key=key, max_retries=0,
                       max_tokens=CAP, default_headers={"X-Bamasc-Task": scope})
    with warnings.catch_warnings():  # moved to `langchain.agents` in LangGraph 1.0; the prebuilt one is what is tried
        warnings.simplefilter("ignore")
        agent = create_react_agent(model, [lookup])

    def ask(question: str) -> str:
        messages = agent.invoke({"messages": [("user", question)]})["messages"]
        return messages[-1].content

    return ask


def _agents_sdk(proxy, key: str, scope: str, ran: list):
    """The OpenAI Agents SDK on the key (the Responses API), with one function tool; `ask(question)` -> its output."""
    agents = pytest.importorskip("agents", reason="the OpenAI Agents SDK is not installed (the test extra)")
    client = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0,
                                default_headers={"X-Bamasc-Task": scope})

    @agents.function_tool
    def lookup() -> str:
        """Find the fact the question needs."""
        ran.append(1)
        return "forty-two"

    agents.set_tracing_disabled(True)
    model = agents.OpenAIResponsesModel(model="gpt-4.1-mini", openai_client=client)
    agent = agents.Agent(name="asker", instructions="answer with the tool", tools=[lookup], model=model,
                         model_settings=agents.ModelSettings(max_tokens=CAP))

    def ask(question: str) -> str:
        return agents.Runner.run_sync(agent, question).final_output

    return ask


FRAMEWORKS = {"langgraph-react": _react_agent, "openai-agents": _agents_sdk}


# ------------------------------------------------------------------------------------------ the tests


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_answering_key_ends_every_run_with_an_answer_and_the_bill_stays_within_its_scope_budget(
        framework, proxy, upstream):
    for number, budget in enumerate(_budgets(seed=len(framework))):
        key = _key(proxy, name=f"{framework}-answer-{number}", scope_budget=budget, on_exhausted="answer")
        scope, ran = f"ticket-{number}", []
        ask = FRAMEWORKS[framework](proxy, key, scope, ran)
        before = len(upstream.calls)
        answers = []
        for _ in range(RUNS):
            answers.append(ask("what is the fact?"))  # never raises: a spent budget is an answer too
            if "budget" in answers[-1]:
                break
        spent = [answer for answer in answers if "budget" in answer]
        assert spent, f"{framework}: {RUNS} runs never spent a budget of {budget:g} µ$"
        assert answers[0].split() == ["word"] * WORDS  # the first run was answered by the model, after its tool
        assert all(answer.split() == ["word"] * WORDS for answer in answers[:-1])
        assert "spent" in spent[0] and scope in spent[0]
        assert ran, f"{framework} never called its tool through the proxy"
        # A run's first call has a shorter prompt than its second (which holds the tool's output), so it may still
        # fit where the second did not: the runs go on answering that the budget is spent until one forwards nothing.
        for _ in range(RUNS):
            forwarded = len(upstream.calls)
            assert "budget" in ask("what is the fact?")
            if len(upstream.calls) == forwarded:
                break
        assert len(upstream.calls) == forwarded, f"{framework}: the scope never stopped forwarding"
        billed = _billed(upstream.calls[before:])
        assert 0 < billed <= budget + 1e-6, (framework, budget, billed)
        assert _charged(proxy, key, scope) == pytest.approx(billed)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_refusing_key_ends_a_run_with_the_402_raised_as_an_api_error(framework, proxy, upstream):
    budget = _budgets(seed=7 + len(framework))[0]
    key = _key(proxy, name=f"{framework}-refuse", scope_budget=budget)  # on_exhausted: "refuse", the default
    ran: list = []
    ask = FRAMEWORKS[framework](proxy, key, "ticket-r", ran)
    before = len(upstream.calls)
    refused, answered = None, 0
    for _ in range(RUNS):
        try:
            answer = ask("what is the fact?")
        except openai.APIStatusError as error:
            refused = error
            break
        assert answer.split() == ["word"] * WORDS
        answered += 1
    assert answered >= 1 and ran
    assert refused is not None and refused.status_code == 402, refused
    assert refused.body["type"] == "budget_exceeded" and "ticket-r" in refused.message
    billed = _billed(upstream.calls[before:])
    assert 0 < billed <= budget + 1e-6, (framework, budget, billed)
    assert _charged(proxy, key, "ticket-r") == pytest.approx(billed)
