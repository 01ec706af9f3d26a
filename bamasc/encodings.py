"""Which OpenAI encoding counts a model's prompt: known to lint (to check `tokenizer`) and to the runtime (to count)."""

from __future__ import annotations

# Model families by id prefix, checked in order; an id matches a family when it
# is the prefix itself or the prefix followed by "-" (dated snapshots, -mini,
# -turbo). Anything else gets no exact count: a wrong encoding could undercount.
OPENAI_FAMILIES = (
    ("gpt-4o", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-5", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
    ("gpt-35", "cl100k_base"),
)
ENCODINGS = ("cl100k_base", "o200k_base")


def encoding_for(model_id: str | None) -> str | None:
    """The OpenAI encoding of a model id or an encoding name, or None when it is not an OpenAI model.

    A fine-tuned model (`ft:`) keeps its base model's encoding; a gateway's
    vendor prefix (`openai/gpt-4o`, as LiteLLM and OpenRouter name models)
    names the same model.
    """
    if not model_id:
        return None
    name = model_id.strip().lower()
    if name in ENCODINGS:
        return name
    name = name.removeprefix("ft:").removeprefix("openai/")
    for prefix, encoding in OPENAI_FAMILIES:
        if name == prefix or name.startswith(prefix + "-"):
            return encoding
    return None


def counting_tokenizer(model_id: str, declared: str | None, official_endpoint: bool) -> str | None:
    """What names the tokenizer that counts a model's prompt exactly: its declared `tokenizer`, else its id at
    OpenAI's own API only. Behind another server an id like `gpt-4o-mini` may be any model (one that counted a
    token per byte was billed five times its bound), so it names none and the prompt is bounded safely."""
    return declared or (model_id if official_endpoint else None)
