"""The exported spans speak the GenAI semantic conventions: vendor model ids, a provider on every span, what the
reply said of itself, where the request went; a fact the trace lacks is left out, never made up."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

pytest.importorskip("opentelemetry.sdk.trace")

from bamasc.cli import main  # noqa: E402
from bamasc.metering.guard import BudgetGuard  # noqa: E402
from bamasc.plan.compile import compile_file  # noqa: E402
from bamasc.records import replace  # noqa: E402
from bamasc.runtime.interpreter import TaskRun  # noqa: E402
from bamasc.runtime.otel import build_spans, read_records  # noqa: E402
from bamasc.runtime.providers.fake import FakeProvider  # noqa: E402
from bamasc.runtime.retry import RetryPolicy  # noqa: E402
from bamasc.runtime.trace import TraceWriter  # noqa: E402
from tests.conftest import ROOT  # noqa: E402

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
NO_WAIT = RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0, timeout=5.0)
# What each kind of line names that a trace written before they were kept does not.
NEW_KEYS = ("provider", "model_id", "server_address", "server_port", "response_id", "response_model",
            "finish_reason", "call_id")


class Vendor(FakeProvider):
    """A fake that answers as a vendor's server would: an id and a dated model in each reply, sent to a host."""

    server = ("api.example.test", 8443)

    def __init__(self, name, model_id, **options):
        super().__init__(name, **options)
        self.model_id = model_id
        self.replies = 0

    async def complete(self, messages, max_tokens, **options):
        completion = await super().complete(messages, max_tokens, **options)
        self.replies += 1
        return replace(completion, response_id=f"chatcmpl-{self.name}-{self.replies}",
                       response_model=f"{self.model_id}-2025-04-14")


@pytest.fixture(scope="module")
def compiled():
    return compile_file(GSM8K)


@pytest.fixture(scope="module")
def vendor_trace(compiled, tmp_path_factory):
    """A real trace of two tasks on the star and linear templates, answered by `Vendor`s, one attempt failing."""
    plan, program = compiled.plan, compiled.program
    system = plan.systems[0]
    path = str(tmp_path_factory.mktemp("conventions") / "vendor.jsonl")
    writer = TraceWriter(path)
    for task_id, template, options in (("star", "star", {}), ("flaky", "linear", dict(fail_rate=0.5, seed=1))):
        providers = {name: Vendor(name, program.models[name].model_id, **options)
                     for name in program.systems["gsm8k"].models}
        run = TaskRun(program, system, system.template(template), providers, BudgetGuard(system.budget), task_id,
                      "What is 6 times 7?", writer, NO_WAIT)
        result = asyncio.run(run.run())
        writer.task({"task_id": task_id, "answer": result.answer, "cost": round(result.cost, 6),
                     "budget": result.budget, "bound": round(result.bound, 6), "template": result.template,
                     "overran": result.overran, "status": result.status, "error": result.error, "calls": result.calls})
    writer.close()
    return path


def lines(path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def exported(tmp_path, trace, *extra) -> list[dict]:
    out = tmp_path / "spans.json"
    assert main(["trace", "export", str(trace), "-o", str(out), *extra]) == 0
    data = json.loads(out.read_text())
    return [span for resource in data["resourceSpans"] for scope in resource["scopeSpans"] for span in scope["spans"]]


def attributes(span: dict) -> dict:
    found = {}
    for pair in span.get("attributes", []):
        (kind, value), = pair["value"].items()
        found[pair["key"]] = [next(iter(v.values())) for v in value.get("values", [])] if kind == "arrayValue" else value
    return found


def operation(span: dict) -> str:
    return attributes(span)["gen_ai.operation.name"]


@pytest.mark.parametrize("with_plan", [False, True], ids=["without --plan", "with --plan"])
def test_every_span_names_its_provider_and_the_vendors_model_id(tmp_path, compiled, vendor_trace, with_plan):
    spans = exported(tmp_path, vendor_trace, *(["--plan", GSM8K] if with_plan else []))
    vendor_ids = {model.model_id for model in compiled.program.models.values()}
    aliases = set(compiled.program.models)
    assert {operation(span) for span in spans} == {"invoke_workflow", "invoke_agent", "chat"}
    for span in spans:
        a = attributes(span)
        assert a["gen_ai.provider.name"] == "openai", span["name"]
        if operation(span) in ("chat", "invoke_agent"):
            assert a["gen_ai.request.model"] in vendor_ids and a["gen_ai.request.model"] not in aliases
        if operation(span) == "chat":
            assert span["name"] == f"chat {a['gen_ai.request.model']}"
            assert compiled.program.models[a["bamasc.model"]].model_id == a["gen_ai.request.model"]
        if operation(span) == "invoke_workflow":
            assert span["name"] == f"invoke_workflow {a['gen_ai.workflow.name']}"
            assert a["gen_ai.workflow.name"] == a["bamasc.template"] in ("star", "linear")
    # Nothing of bamasc's own under the conventions' names.
    assert not {key for span in spans for key in attributes(span)
                if not key.startswith(("gen_ai.", "server.", "error.", "bamasc."))}
    assert not {key for span in spans for key in attributes(span) if key.startswith("gen_ai.usage.cost")}


def test_a_chat_span_carries_the_reply_and_the_server_of_its_call_line(tmp_path, vendor_trace):
    calls = [line for line in lines(vendor_trace) if line["type"] == "call"]
    settled = [call for call in calls if call["error"] is None]
    failed = [call for call in calls if call["error"] is not None]
    assert settled and failed
    # The trace line holds what the reply said; a failed attempt has no reply.
    assert all(call["response_id"].startswith("chatcmpl-") and call["response_model"].endswith("-2025-04-14")
               and call["finish_reason"] in ("stop", "length") for call in settled)
    assert not any("response_id" in call or "finish_reason" in call for call in failed)
    assert all((call["server_address"], call["server_port"]) == Vendor.server for call in calls)
    chats = {attributes(span)["bamasc.reservation"]: span for span in exported(tmp_path, vendor_trace)
             if operation(span) == "chat"}
    for call in calls:
        a = attributes(chats[call["id"]])
        assert (a["server.address"], int(a["server.port"])) == Vendor.server
        if call["error"] is None:
            assert a["gen_ai.response.id"] == call["response_id"]
            assert a["gen_ai.response.model"] == call["response_model"]
            assert a["gen_ai.response.finish_reasons"] == [call["finish_reason"]]
        else:
            assert not {"gen_ai.response.id", "gen_ai.response.model", "gen_ai.response.finish_reasons"} & set(a)
            assert a["error.type"] == call["error"].split(":")[0]
    assert len({attributes(span)["gen_ai.response.id"] for span in chats.values()
                if "gen_ai.response.id" in attributes(span)}) == len(settled)


def test_an_older_trace_exports_without_what_it_does_not_hold(tmp_path, compiled, vendor_trace):
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps({k: v for k, v in line.items() if k not in NEW_KEYS}) + "\n"
                           for line in lines(vendor_trace)))
    spans = exported(tmp_path, old)
    for span in spans:
        a = attributes(span)
        assert not {"gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.id", "gen_ai.response.model",
                    "gen_ai.response.finish_reasons", "server.address", "server.port"} & set(a), span["name"]
        if operation(span) == "chat":
            assert span["name"] == "chat" and a["bamasc.model"] in compiled.program.models  # the alias, as bamasc's
    # The program names the provider and the vendor's id again; what only the run saw stays out.
    for span in exported(tmp_path, old, "--plan", GSM8K):
        a = attributes(span)
        assert a["gen_ai.provider.name"] == "openai"
        if operation(span) == "chat":
            assert a["gen_ai.request.model"] == compiled.program.models[a["bamasc.model"]].model_id
            assert "gen_ai.response.id" not in a and "server.address" not in a


def test_lines_that_lie_about_their_facts_do_not_break_the_export(tmp_path, vendor_trace):
    hostile = tmp_path / "hostile.jsonl"
    values = [None, 7, "", ["x"], {"a": 1}, "x" * 5000, -1, 70000, True]
    rewritten = []
    for number, line in enumerate(lines(vendor_trace)):
        if line["type"] == "call":
            for offset, key in enumerate(NEW_KEYS):
                line[key] = values[(number + offset) % len(values)]
        rewritten.append(json.dumps(line) + "\n")
    hostile.write_text("".join(rewritten))
    spans = build_spans(read_records(str(hostile)))
    for span in spans:
        a = span.attributes
        port = a.get("server.port")
        assert port is None or (type(port) is int and 0 < port < 65536)
        for key in ("gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.id", "server.address"):
            assert key not in a or (isinstance(a[key], str) and a[key])
