"""A new provider is one record and its class: registered here, it lints, is paced, keyed and priced from
its record, and runs a task through the budget guard, with no other file changed."""

from __future__ import annotations

import subprocess
import sys

import pytest

import bamasc
from bamasc.lint import lint_file, lint_paths
from bamasc.provider_registry import ProviderRecord, lookup, names, register, unregister
from bamasc.records import replace
from bamasc.runtime.providers import api_key
from bamasc.runtime.providers.base import GREEDY, Completion, ProviderError
from tests.api.helpers import SOLVER
from tests.conftest import EXAMPLES, ROOT

TASK = "Tom has 3 apples and buys 4 more. How many apples does he have now?"
KEY = "TOYLLM_API_KEY"


class ToyProvider:
    """Answers every call with one line, billing a prompt by its words (fewer than the guard's bound)."""

    made: list[ToyProvider] = []

    def __init__(self, name: str, key: str):
        self.name, self.key, self.calls = name, key, 0
        ToyProvider.made.append(self)

    def count_prompt_tokens(self, messages) -> int | None:
        return None  # no offline tokenizer: the guard bounds the prompt by its bytes

    async def complete(self, messages, max_tokens, *, timeout, decoding=GREEDY, expect="text") -> Completion:
        self.calls += 1
        words = sum(len(message.content.split()) for message in messages)
        return Completion("#### 7", prompt_tokens=words, completion_tokens=min(3, max_tokens), finish_reason="stop",
                          rate_headers=(("x-ratelimit-limit-requests", "500"),))

    async def aclose(self) -> None:
        pass


TOY = ProviderRecord(
    "toyllm", lambda model, env, cassette: ToyProvider(model.name, api_key(model, env)),
    key_env=KEY, paid=True, rate_headers="x-ratelimit", catalog="deepseek", decoding=("temperature",),
)
SOURCE = SOLVER.replace('provider = fake\n  name     = "steady"', 'provider = toyllm\n  name     = "deepseek-chat"')


@pytest.fixture
def toy():
    register(TOY)
    ToyProvider.made.clear()
    yield TOY
    unregister(TOY.name)


def test_without_its_record_the_provider_is_unknown(write_bam):
    found = lint_paths([write_bam(SOURCE.replace("price    { input = 1.0  output = 4.0 }",
                                                 "price    { input = 0.27  output = 1.1 }"))]).diagnostics
    assert [(d.code, d.message) for d in found][:1] == [("BAM110", "'toyllm' is not a valid provider")]
    assert "toyllm" not in names()


def test_a_model_of_the_toy_provider_lints_and_is_priced_from_its_record(toy, write_bam):
    assert names()[-1] == "toyllm"
    # Its catalogue id is `deepseek`: a hand-written price the catalogue disagrees with warns, naming the entry.
    found = lint_paths([write_bam(SOURCE)]).diagnostics
    assert [(d.code, d.severity) for d in found] == [("BAM409", "warning")]
    assert "'deepseek/deepseek-chat'" in found[0].message
    at_catalogue = SOURCE.replace("input = 1.0  output = 4.0", "input = 0.27  output = 1.1")
    assert lint_paths([write_bam(at_catalogue)]).diagnostics == []
    # It is paid, so a price of zero is an error.
    free = SOURCE.replace("input = 1.0  output = 4.0", "input = 0  output = 0")
    assert [d.code for d in lint_paths([write_bam(free)]).diagnostics] == ["BAM203", "BAM203"]


def test_its_limits_and_key_come_from_its_record(toy, write_bam):
    from bamasc.extras import for_providers
    from bamasc.metering.limiter import rate_key

    _, program, _ = lint_file(write_bam(SOURCE))
    declared = program.models["steady"]
    # Its replies carry rate-limit headers, so its calls are paced without a declared rate_limit.
    assert declared.rate_limit is None and rate_key(declared) is not None
    assert rate_key(replace(declared, provider="fake")) is None  # a provider whose replies carry none
    assert for_providers(["toyllm"]) == []  # its library comes in no optional extra
    # A model that names no api_key reads the record's variable.
    with pytest.raises(ProviderError, match=KEY):
        api_key(declared, {})
    assert api_key(declared, {KEY: "sk-toy"}) == "sk-toy"


def test_a_task_runs_on_it_through_the_guard(toy, write_bam, monkeypatch):
    plan = bamasc.load(write_bam(SOURCE)).compile(system="solver")
    with pytest.raises(bamasc.ProviderError, match=KEY):
        plan.run_sync(TASK)  # no key in its variable: refused before any call
    monkeypatch.setenv(KEY, "sk-toy")
    result = plan.run_sync(TASK)
    assert result.status == "ok" and result.answer == "7"
    assert result.calls and {call.model for call in result.calls} == {"steady"}
    assert all(call.charged <= call.reserved for call in result.calls)
    assert 0 < result.cost <= result.bound <= plan.budget
    made = ToyProvider.made[-1]
    assert made.key == "sk-toy" and made.calls == len(result.calls)
    assert lookup("toyllm") is TOY


def test_linting_loads_no_provider_library():
    """The registry names each provider's library but imports none: linting every example loads no SDK."""
    code = ("import sys; from bamasc.lint import lint_paths; from bamasc.provider_registry import lookup, names; "
            f"lint_paths({EXAMPLES!r}); "
            "sdks = [lookup(n).sdk for n in names() if lookup(n).sdk]; "
            "print(len(sdks), [s for s in sdks if s in sys.modules])")
    shown = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert shown.stdout.strip() == "3 []", shown.stderr  # three libraries named, none loaded
