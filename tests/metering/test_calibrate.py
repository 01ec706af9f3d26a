"""Prompt bounds calibrated by what was billed (metering/calibrate.py): never below the true count, never matched by a
prompt that does not extend the billed one exactly, learned only from a settle within its bound, and kept small.

The property runs over OpenAI's real encodings (bpe-openai, offline) and
random multi-turn tool conversations, through both homes of a prompt: the
proxy's wire protocol (chat completions) and `exec`'s messages.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bamasc.metering.admission import Attempt
from bamasc.metering.calibrate import CALIBRATION_MARGIN_TOKENS, Calibration, Learn, prompt_of
from bamasc.metering.protocols import CHAT, MESSAGES, RESPONSES
from bamasc.prices import Usage
from bamasc.runtime.providers.base import Message, ToolCall
from bamasc.runtime.tokens import calibrated_prompt, safe_prompt_bound, specs_tokens
from bamasc.runtime.tools import ToolSpec
from tests.helpers.calibration import encoder, openai_count

ENCODINGS = {name: encoder(name) for name in ("cl100k_base", "o200k_base")}

# Pieces that make BPE merge and split in every way: words, spaces, digits, punctuation, newlines, special-token
# text, scripts of several bytes a character.
PIECES = ["the", " the", "  ", "\n", "\n\n", "123", "4567", "don't", "'s", "<|", "|>", "<|im_end|>", "é", "日本語",
          "🙂", "{", "}", '"q"', ":", ",", "...", "\t", "ab", "Z", "-", "_", "http://x.y/z?a=1"]
texts = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=24).map("".join),
    st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40),
)
names = st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True)
ids = st.from_regex(r"call_[A-Za-z0-9]{1,20}", fullmatch=True)


@st.composite
def tool_conversations(draw):
    """(tool specs, the prompts a tool loop sends: each the one before it and what came back)."""
    tools = draw(st.lists(st.tuples(names, texts), min_size=1, max_size=3, unique_by=lambda tool: tool[0]))
    messages = ([Message("system", draw(texts))] if draw(st.booleans()) else []) + [Message("user", draw(texts))]
    prompts = [list(messages)]
    for _ in range(draw(st.integers(1, 5))):
        if draw(st.booleans()):
            calls = tuple(ToolCall(draw(ids), draw(st.sampled_from([name for name, _ in tools])),
                                   json.dumps({"q": draw(texts)}, ensure_ascii=draw(st.booleans())))
                          for _ in range(draw(st.integers(1, 3))))
            new = [Message("assistant", draw(texts), tool_calls=calls)]
            new += [Message("tool", draw(texts), tool_call_id=call.id) for call in calls]
        else:
            new = [Message("assistant", draw(texts)), Message("user", draw(texts))]
        messages = messages + new
        prompts.append(list(messages))
    return tools, prompts


def wire(message: Message) -> dict:
    """A message as chat completions carries it."""
    out = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [{"id": call.id, "type": "function",
                              "function": {"name": call.name, "arguments": call.arguments}} for call in message.tool_calls]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    return out


PARAMETERS = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def wire_tools(tools) -> list[dict]:
    return [{"type": "function", "function": {"name": name, "description": text, "parameters": PARAMETERS}}
            for name, text in tools]


def true_count(encode, messages: list[dict], tools: list[dict]) -> int:
    """What an OpenAI model bills, framing each message apart or merging its fields into one text, whichever is more."""
    return max(openai_count(encode, messages, tools), openai_count(encode, messages, tools, merged=True))


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=tool_conversations())
def test_the_calibrated_bound_is_never_below_the_true_count(encoding, conversation):
    encode = ENCODINGS[encoding]
    if encode is None:
        pytest.skip("bpe-openai is not installed (the tokenizers extra)")
    tools, prompts = conversation
    specs = tuple(ToolSpec(name, text, PARAMETERS, name) for name, text in tools)
    proxy, runtime = Calibration(), Calibration()
    for messages in prompts:
        sent = [wire(message) for message in messages]
        true = true_count(encode, sent, wire_tools(tools))
        # The proxy: the wire body, its byte bound, calibrated by what this scope's earlier prompts were billed.
        body = {"model": "gpt-4.1-mini", "messages": sent, "tools": wire_tools(tools), "max_tokens": 64}
        prompt, safe = CHAT.prompt(body), CHAT.prompt_bound(body)
        bound = proxy.bound("scope", "m", prompt, safe)
        assert true <= bound <= safe
        proxy.learn("scope", "m", prompt, true)
        # exec: a tool loop's round, its messages and specs bounded as the guard bounds them.
        prompt, safe = calibrated_prompt(messages, specs), safe_prompt_bound(messages) + specs_tokens(specs)
        bound = runtime.bound("task", "m", prompt, safe)
        assert true <= bound <= safe
        runtime.learn("task", "m", prompt, true)


def _loop(rounds: int, result: str = "forty-two " * 20) -> list[list[dict]]:
    """The prompts of a ReAct loop: a question, then each round a tool call and its result."""
    messages = [{"role": "system", "content": "You answer with the tools. " * 10}, {"role": "user", "content": "Q?"}]
    prompts = [list(messages)]
    for number in range(rounds):
        call = {"id": f"call_{number}", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        messages = messages + [{"role": "assistant", "content": None, "tool_calls": [call]},
                               {"role": "tool", "tool_call_id": f"call_{number}", "content": result}]
        prompts.append(list(messages))
    return prompts


TOOLS = wire_tools([("lookup", "Find the fact the question needs, in the encyclopaedia of facts. " * 4)])


def test_a_loop_round_is_bounded_by_the_last_bill_and_what_is_new():
    calibration = Calibration()
    prompts = _loop(4)
    for number, messages in enumerate(prompts):
        body = {"model": "m", "messages": messages, "tools": TOOLS}
        prompt, safe = CHAT.prompt(body), CHAT.prompt_bound(body)
        bound = calibration.bound("s", "m", prompt, safe)
        if number:
            new = [json.dumps(m, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
                   for m in messages[len(prompts[number - 1]):]]
            assert bound == 100 * number + sum(len(text) + 8 for text in new) + CALIBRATION_MARGIN_TOKENS
            assert bound < safe / 2
        else:
            assert bound == safe
        calibration.learn("s", "m", prompt, 100 * (number + 1))


@pytest.mark.parametrize("protocol, body", [
    (CHAT, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}),
    (MESSAGES, {"model": "m", "system": "be brief", "messages": [{"role": "user", "content": "hi"}]}),
    (RESPONSES, {"model": "m", "instructions": "be brief", "input": [{"role": "user", "content": "hi"}]}),
])
def test_every_protocol_calibrates_an_extension_and_nothing_else(protocol, body):
    calibration = Calibration()
    calibration.learn("s", "m", protocol.prompt(body), 10)
    field = protocol.items_field
    grown = {**body, field: body[field] + [{"role": "assistant", "content": "ho"}, {"role": "user", "content": "hu"}]}
    assert calibration.bound("s", "m", protocol.prompt(grown), 10 ** 6) < 10 + 200
    changed = {name: value for name, value in grown.items() if name not in ("tools", "system", "instructions")}
    assert calibration.bound("s", "m", protocol.prompt(changed), 10 ** 6) == 10 ** 6  # another context
    # The output cap and streaming are not the prompt.
    assert calibration.bound("s", "m", protocol.prompt({**grown, "stream": True, "max_tokens": 9}), 10 ** 6) < 10 ** 6


# ------------------------------------------------------------------------------------------ a client gaming it


@st.composite
def forged_extensions(draw):
    """(a prompt sent and billed, a longer one that does not extend it: an earlier message changed, dropped,
    moved or added before its end, or the tools changed)."""
    prompts = _loop(draw(st.integers(1, 4)), result=draw(texts))
    earlier = draw(st.integers(0, len(prompts) - 2))
    billed, later = prompts[earlier], [dict(m) for m in prompts[-1]]
    tools = TOOLS
    where = draw(st.integers(0, len(billed) - 1))
    how = draw(st.sampled_from(["edit", "drop", "swap", "insert", "key", "tools", "role"]))
    if how == "edit":
        text = later[where].get("content") or ""
        later[where]["content"] = draw(texts.filter(lambda new: new != text))
    elif how == "drop":
        del later[where]
    elif how == "swap":
        assume(len(billed) > 1 and where + 1 < len(later) and later[where] != later[where + 1])
        later[where], later[where + 1] = later[where + 1], later[where]
    elif how == "insert":
        later.insert(where, {"role": "user", "content": draw(texts)})
    elif how == "key":
        later[where]["name"] = draw(names)
    elif how == "role":
        later[where]["role"] = "developer" if later[where]["role"] != "developer" else "system"
    else:
        tools = wire_tools([("lookup", draw(texts.filter(lambda new: new != TOOLS[0]["function"]["description"])))])
    return billed, later, tools


@settings(max_examples=100, deadline=None)
@given(forged=forged_extensions())
def test_a_prompt_that_differs_before_its_end_never_matches(forged):
    billed, later, tools = forged
    calibration = Calibration()
    calibration.learn("s", "m", CHAT.prompt({"model": "m", "messages": billed, "tools": TOOLS}), 1)
    body = {"model": "m", "messages": later, "tools": tools}
    assert calibration.bound("s", "m", CHAT.prompt(body), 10 ** 9) == 10 ** 9


def test_a_bill_calibrates_its_own_scope_and_model_only():
    calibration = Calibration()
    first, second = _loop(1)
    calibration.learn("s", "m", CHAT.prompt({"model": "m", "messages": first}), 1)
    grown = CHAT.prompt({"model": "m", "messages": second})
    assert calibration.bound("s", "m", grown, 10 ** 6) < 10 ** 6
    assert calibration.bound("other", "m", grown, 10 ** 6) == 10 ** 6
    assert calibration.bound("s", "other", grown, 10 ** 6) == 10 ** 6


def test_an_item_boundary_cannot_be_moved():
    """Two items whose bytes, joined, equal one item's are not that item: each item is hashed apart."""
    calibration = Calibration()
    calibration.learn("s", "m", prompt_of(b"c", [(b"ab", 2), (b"c", 1)]), 1)
    assert calibration.bound("s", "m", prompt_of(b"c", [(b"a", 1), (b"bc", 2), (b"d", 1)]), 99) == 99
    assert calibration.bound("s", "m", prompt_of(b"", [(b"cab", 3), (b"c", 1), (b"d", 1)]), 99) == 99
    assert calibration.bound("s", "m", prompt_of(b"c", [(b"ab", 2), (b"c", 1), (b"d", 5)]), 99) == \
        1 + 5 + CALIBRATION_MARGIN_TOKENS


# ------------------------------------------------------------------------------------------ what it learns from


def _attempt(bound: int):
    class Model:
        name = "m"

    return Attempt(None, None, Model(), 1, bound, 64, 30.0)


@pytest.mark.parametrize("usage, error, learned", [
    (Usage(50, 10), None, True),
    (None, None, False),  # the outcome is unknown: the hold was kept
    (Usage(50, 10), "overbilled: m billed 90 completion tokens for a cap of 64", False),
    (Usage(101, 10), None, False),  # more prompt than the bound: overbilling, whatever the ledger said
])
def test_only_a_settle_within_its_bound_is_learned(usage, error, learned):
    calibration = Calibration()
    prompt = CHAT.prompt({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    attempt = _attempt(100)
    attempt.error = error
    asyncio.run(Learn(calibration, "s", prompt).settle(attempt, usage))
    assert len(calibration) == (1 if learned else 0)


def test_the_same_prompt_billed_twice_keeps_the_larger_count():
    calibration = Calibration()
    prompt = prompt_of(b"", [(b"a", 1)])
    calibration.learn("s", "m", prompt, 40)
    calibration.learn("s", "m", prompt, 30)
    assert len(calibration) == 1
    assert calibration.bound("s", "m", prompt, 999) == 40 + CALIBRATION_MARGIN_TOKENS


def test_memory_keeps_the_most_recent_per_scope_and_the_most_recent_scopes():
    calibration = Calibration(per_scope=3, scopes=5)
    prompts = [prompt_of(b"", [(str(number).encode(), 1)]) for number in range(10)]
    for prompt in prompts:
        calibration.learn("s", "m", prompt, 1)
    assert len(calibration) == 3
    assert [calibration.bound("s", "m", prompt, 99) < 99 for prompt in prompts] == [False] * 7 + [True] * 3
    for scope in range(20):
        calibration.learn(f"scope-{scope}", "m", prompts[0], 1)
    assert len(calibration) == 5
    assert calibration.bound("s", "m", prompts[9], 99) == 99  # the least recently used scope went first
    assert calibration.bound("scope-19", "m", prompts[0], 99) < 99
    nothing = Calibration(per_scope=0)
    nothing.learn("s", "m", prompts[0], 1)
    assert len(nothing) == 0 and nothing.bound("s", "m", prompts[0], 99) == 99
