"""Text no request can carry (a lone surrogate): stopped before anything is reserved, charged nothing, sent nowhere.

A lone surrogate (U+D800 to U+DFFF) is a valid Python string, a valid JSON
`\\ud800` escape, and what a command's argument holds for a byte that is not
UTF-8, but no UTF-8 request body can hold it: the SDKs fail to encode it and
send nothing. Each case runs against a local server of the provider's wire
format, for OpenAI and Anthropic alike, and checks the ledger, the trace and
what reached the server.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from bamasc.cli import main
from bamasc.plan.compile import compile_file
from bamasc.runtime.execute import ExecOptions, Task
from bamasc.runtime.providers import make_provider
from bamasc.runtime.providers.base import Message, ProviderError
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.workers import run_tasks
from tests.helpers.runtime import KEY, charged, program_for, task_lines
from tests.runtime.servers import anthropic_server, openai_server, reply  # noqa: F401 (fixtures)

POLICY = RetryPolicy(max_attempts=4, base_delay=0.0, max_delay=0.0, jitter=0.0, timeout=5.0)
TASK = "What is 40 plus 2?"

# High surrogates (first and last), low ones (first and last), and the one a command's
# argument holds for the byte 0xFF, which is not UTF-8 (Python's surrogateescape).
SURROGATES = ("\ud800", "\udbff", "\udc00", "\udfff", "\udcff")
PLACES = ("start", "middle", "end")


def placed(text: str, surrogate: str, place: str) -> str:
    """`text` with `surrogate` at its start, in its middle or at its end."""
    at = {"start": 0, "middle": len(text) // 2, "end": len(text)}[place]
    return text[:at] + surrogate + text[at:]


def code_point(surrogate: str) -> str:
    return f"U+{ord(surrogate):04X}"


CASES = [pytest.param(surrogate, place, id=f"{code_point(surrogate)}-{place}")
         for surrogate in SURROGATES for place in PLACES]


@pytest.fixture(params=["openai", "anthropic"])
def wire(request, tmp_path, monkeypatch):
    server = request.getfixturevalue(f"{request.param}_server")
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    plan, program = program_for(tmp_path, request.param, server.base_url)
    return server, plan, program, tmp_path


def run_task(tmp_path, plan, program, task: str):
    """One task as `bamasc exec` runs it, its trace written to a file: its result and the trace's records."""
    trace = tmp_path / "trace.jsonl"
    options = ExecOptions(trace_path=str(trace), retry=POLICY)
    (result,), _, _ = asyncio.run(run_tasks(plan, program, None, [Task("t1", task)], options))
    records = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert charged(str(trace)) == pytest.approx(result.cost)  # every reservation the trace opened is closed
    return result, records


def calls_in(records: list[dict]) -> list[dict]:
    return [record for record in records if record["type"] == "call"]


@pytest.mark.parametrize("surrogate, place", CASES)
def test_a_task_that_cannot_be_encoded_is_charged_nothing_and_blamed_on_its_text(wire, surrogate, place):
    server, plan, program, tmp_path = wire
    task = placed(TASK, surrogate, place)
    result, records = run_task(tmp_path, plan, program, task)
    assert result.status == "error"
    assert result.error.startswith("the task's text holds a lone surrogate")
    assert f"({code_point(surrogate)} at character {task.index(surrogate) + 1})" in result.error
    assert "UTF-8" in result.error and "no call was made" in result.error
    assert "remote" not in result.error and "malformed" not in result.error  # not the provider's doing
    assert result.cost == 0 and result.calls == 0
    assert [record["type"] for record in records] == ["task"]  # no attempt was admitted: nothing reserved or kept
    assert (records[0]["status"], records[0]["cost"], records[0]["error"]) == ("error", 0, result.error)
    assert server.requests == []


MODEL = """
model remote {{
  provider = {provider}
  name     = "{name}"
  base_url = "{base_url}"
  api_key  = env("BAMASC_TEST_KEY")
  price    {{ input = 0.5  output = 2.0 }}
  tier     = 1
}}
"""
# Two calls, the second sent the first's reply.
CHAIN = """
role Solver {
  max_output = 64
  prompt     = "Solve: {{task}} {{previous?}}"
}
topology two {
  slot solver : Solver [2..2]
  flow { answer chain solver(task) }
}
system s {
  models     = [remote]
  topologies = [two]
  budget     = 1000
  answer     = number
}
"""
SINGLE = """
role Solver {
  max_output = 64
  prompt     = "Solve: {{task}}"
}
topology single {
  slot solver : Solver [1..1]
  flow { answer solver(task) }
}
system s {
  models     = [remote]
  topologies = [single]
  budget     = 1000
  answer     = number
}
"""


def source_file(tmp_path, provider: str, server, body: str):
    """A .bam file of one model, `remote`, served by `server` in `provider`'s wire format, and `body`."""
    name = "gpt-4o-mini" if provider == "openai" else "claude-3-5-haiku"
    path = tmp_path / "system.bam"
    path.write_text(MODEL.format(provider=provider, name=name, base_url=server.base_url) + body)
    return path


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("surrogate", ["\ud800", "\udc00"], ids=code_point)
def test_a_reply_that_cannot_be_sent_on_is_charged_once_and_not_resent(request, tmp_path, monkeypatch, provider,
                                                                      surrogate):
    """A server's reply may hold a `\\ud800` escape: the next call, which would send it, is stopped unreserved."""
    server = request.getfixturevalue(f"{provider}_server")
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    compiled = compile_file(str(source_file(tmp_path, provider, server, CHAIN)))
    assert compiled.plan is not None, [d.message for d in compiled.diagnostics]
    server.script(reply(f"#### 4{surrogate}2", prompt_tokens=20, completion_tokens=3))
    result, records = run_task(tmp_path, compiled.plan, compiled.program, TASK)
    assert len(server.requests) == 1  # the first call only
    (call,) = calls_in(records)
    assert call["error"] is None and call["charged"] == pytest.approx(0.5 * 20 + 2.0 * 3)
    assert [record["type"] for record in records] == ["reserve", "call", "task"]
    assert result.cost == pytest.approx(call["charged"])
    assert result.status == "error"
    assert "(role 'Solver'): message 1 of the prompt (user) holds a lone surrogate" in result.error
    assert code_point(surrogate) in result.error and "nothing was sent" in result.error


@pytest.mark.parametrize("role", ["system", "user"])
@pytest.mark.parametrize("surrogate, place", CASES)
def test_the_sdk_providers_report_unencodable_text_as_never_sent(wire, role, surrogate, place):
    """The providers' own answer, for a caller that sends without the interpreter's check: a client error,
    not retried, whose reservation goes back (its outcome is known), naming the character and not the server."""
    server, _, program, _ = wire
    provider = make_provider(program.models["remote"])
    messages = [Message(role, placed("Be brief.", surrogate, place))]
    if role == "system":
        messages.append(Message("user", TASK))

    async def go():
        try:
            await provider.complete(messages, 16, timeout=5.0)
        finally:
            await provider.aclose()

    with pytest.raises(ProviderError) as failed:
        asyncio.run(go())
    problem = failed.value
    assert (problem.kind, problem.retryable, problem.outcome_unknown) == ("client", False, False)
    assert "cannot be encoded as UTF-8" in problem.message and code_point(surrogate) in problem.message
    assert "not sent" in problem.message and "malformed" not in problem.message
    assert server.requests == []


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("surrogate", ["\ud800", "\udcff"], ids=code_point)
def test_exec_of_a_task_that_cannot_be_encoded_leaves_no_kept_reservation_in_the_trace(
    request, tmp_path, monkeypatch, capsys, provider, surrogate
):
    """`bamasc exec --task` with a byte that is not UTF-8 (read as U+DCFF) or a lone high surrogate: the trace
    holds the task's line alone, charged 0, and the run exits 1."""
    server = request.getfixturevalue(f"{provider}_server")
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    source = source_file(tmp_path, provider, server, SINGLE)
    trace = tmp_path / "trace.jsonl"
    assert main(["exec", str(source), "--task", placed(TASK, surrogate, "middle"), "--trace", str(trace)]) == 1
    records = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert [record["type"] for record in records] == ["task"]
    assert charged(str(trace)) == 0
    (line,) = task_lines(str(trace))
    assert (line["status"], line["cost"], line["calls"]) == ("error", 0, 0)
    assert line["error"].startswith("the task's text holds a lone surrogate") and code_point(surrogate) in line["error"]
    assert server.requests == []
    assert "status: error (the task's text holds a lone surrogate" in capsys.readouterr().out
