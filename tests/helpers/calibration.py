"""What the calibrated prompt bound's tests and benchmark share.

- `openai_count`: a chat request's prompt tokens as OpenAI's format frames it,
  counted with the model's real encoding (bpe-openai, offline);
- `QuarterProvider`: an `exec` provider whose tokenizer is not known, billing a
  token per 4 UTF-8 bytes (about what BPE emits for English);
- `react_until_refused`: LangGraph's prebuilt ReAct agent (langchain-openai)
  run again and again in one proxy scope until the proxy answers 402;
- `exec_loop`: one `exec` task whose tool loop outlasts its budget.
"""

from __future__ import annotations

import asyncio
import json
import warnings

# The special tokens of OpenAI's chat format around each message (<|im_start|>, <|im_sep|>, <|im_end|>) and the
# reply's priming (<|im_start|>assistant<|im_sep|>): each one token, never merged with the text beside it.
FRAME_TOKENS = 3
PRIMING_TOKENS = 3


def openai_count(encode, messages: list[dict], tools: list | None = None, merged: bool = False) -> int:
    """Prompt tokens of a chat request (`messages` in the wire's form, `tools` its function specs) as OpenAI's chat
    format frames it, `encode` the model's encoding (text -> tokens). Each message is its role, its text, each tool
    call's recipient (`to=functions.NAME`) and arguments, and the id it answers, between special tokens; the specs
    are a system section of their own (`namespace functions` around their JSON). `merged`: each message's text
    fields are encoded as one text, so tokens may merge across them."""
    total = PRIMING_TOKENS
    sections = []
    if tools:
        sections.append(["system", "namespace functions {" + json.dumps(tools, ensure_ascii=False) + "}"])
    for message in messages:
        parts = [message["role"], message.get("content") or ""]
        for call in message.get("tool_calls") or ():
            parts += ["to=functions." + call["function"]["name"], call["function"]["arguments"]]
        if message.get("tool_call_id"):
            parts.append(message["tool_call_id"])
        sections.append(parts)
    for parts in sections:
        texts = ["\n".join(parts)] if merged else parts
        total += FRAME_TOKENS + sum(len(encode(text)) for text in texts if text)
    return total


def encoder(name: str):
    """The `encode_ordinary` of OpenAI encoding `name`, or None without bpe-openai."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import bpe_openai

            return bpe_openai.get_encoding(name).encode_ordinary
    except Exception:
        return None


# ------------------------------------------------------------------------------------------ exec


class QuarterProvider:
    """A fake model (runtime/providers/fake.py) whose tokenizer bamasc does not know, billing its prompt a token
    per 4 UTF-8 bytes (rounded up) of what the fake counts a token a byte."""

    def __init__(self, name: str, mode: str = "verbose", seed: int = 0):
        from bamasc.runtime.providers.fake import FakeProvider

        self.inner = FakeProvider(name, mode=mode, seed=seed)
        self.name = name

    def count_prompt_tokens(self, messages) -> None:
        return None  # not known: the guard bounds it by its bytes

    async def complete(self, messages, max_tokens, **options):
        from bamasc.records import replace

        completion = await self.inner.complete(messages, max_tokens, **options)
        return replace(completion, prompt_tokens=-(-completion.prompt_tokens // 4))


def loop_source(rounds: int = 40, result: int = 200) -> tuple[str, str]:
    """(a .bam source, its tools' module): one fake model, one tool answering `result` bytes, and a role that may
    call it for `rounds` rounds of one call."""
    source = (
        'tool look {\n  python = "calib_tools:look"\n  description = "Look something up"\n'
        '  parameters = """{"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}"""\n'
        f'  max_result = {result} tokens\n  timeout = 5 s\n}}\n'
        'model m {\n  provider = fake\n  name = "m"\n  price { input = 0.4  output = 1.6 }\n  tier = 1\n}\n'
        f'role Agent {{\n  tools = [look]\n  max_tool_rounds = {rounds}\n  max_tool_calls = 1\n  max_output = 32\n'
        '  prompt = "Answer it with the tool, again and again: {{task}}"\n}\n'
        'topology t {\n  slot agent : Agent [1..1]\n  flow { answer agent(task) }\n}\n'
        'system s {\n  models = [m]\n  topologies = [t]\n  budget = 100000000\n  task_tokens = 40\n}\n'
    )
    return source, f"def look(q: str):\n    return 'r' * {result}\n"


def exec_loop(folder, budget: float, calibrated: bool = True, rounds: int = 40, result: int = 200):
    """One task of `loop_source`'s system on a QuarterProvider with `budget` µ$: (its TaskResult, its guard). With
    `calibrated` False the task remembers no billed prompt, so every prompt keeps its byte bound (the old bound)."""
    from bamasc.metering.guard import BudgetGuard
    from bamasc.plan.compile import compile_file
    from bamasc.runtime.interpreter import TaskRun
    from bamasc.runtime.retry import RetryPolicy
    from bamasc.runtime.tools import ToolSet

    source, code = loop_source(rounds, result)
    (folder / "calib_tools.py").write_text(code)
    (folder / "calib.bam").write_text(source)
    compiled = compile_file(str(folder / "calib.bam"))
    assert compiled.plan is not None, [d.message for d in compiled.diagnostics]
    system = compiled.plan.systems[0]
    (template,) = [t for t in system.templates if t.feasible]
    program = compiled.program

    async def main():
        guard = BudgetGuard(budget)
        async with ToolSet(program.tools.values(), base_dir=str(folder)) as tools:
            run = TaskRun(program, system, template, {"m": QuarterProvider("m")}, guard, "t", "t" * 40, None,
                          RetryPolicy(max_attempts=1, base_delay=0.0, max_delay=0.0, timeout=30.0), tools=tools)
            if not calibrated:
                from bamasc.metering.calibrate import Calibration

                run.calibration = Calibration(per_scope=0)
            return await run.run(), guard

    return asyncio.run(main())


# ------------------------------------------------------------------------------------------ the proxy


# An agent's instructions: about 300 tokens, as the upstream counts them (the agent of the budget's report).
INSTRUCTIONS = " ".join(["You are a careful assistant. Look up every fact with the tool before you answer, quote "
                         "it exactly, and answer in a few words; never guess."] * 9)


def react_until_refused(url: str, token: str, scope: str, budget: float, runs: int = 200) -> int:
    """Ask LangGraph's prebuilt ReAct agent (one tool) through the proxy at `url`, in scope `scope` of `budget` µ$,
    until the proxy refuses a call with 402; returns how many runs answered. Any other error is raised."""
    import openai
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    @tool
    def lookup() -> str:
        """Find the fact the question needs."""
        return "forty-two"

    model = ChatOpenAI(model="gpt-4.1-mini-quarter-toolcall", base_url=f"{url}/v1", api_key=token, max_retries=0,
                       max_tokens=200, default_headers={"X-Bamasc-Task": scope, "X-Bamasc-Budget": f"{budget:g}"})
    with warnings.catch_warnings():  # moved to `langchain.agents` in LangGraph 1.0; the prebuilt one is what is tried
        warnings.simplefilter("ignore")
        agent = create_react_agent(model, [lookup])
    for answered in range(runs):
        try:
            agent.invoke({"messages": [("system", INSTRUCTIONS), ("user", "What is the fact? Look it up.")]})
        except openai.APIStatusError as problem:
            if problem.status_code != 402:
                raise
            return answered
    raise AssertionError(f"{runs} runs and the scope's budget of {budget:g} µ$ was never spent")
