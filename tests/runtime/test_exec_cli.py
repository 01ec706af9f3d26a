"""`bamasc exec` as a user meets it: exit codes, keys only for bound models, resume of failed tasks, the ledger."""

from __future__ import annotations

import json

import pytest

from bamasc.cli import main
from tests.runtime.servers import anthropic_server, openai_server, reply, status  # noqa: F401 (fixtures)
from tests.helpers.runtime import KEY

TWO_MODELS = """
model cheap {{
  provider = openai
  name     = "gpt-4o-mini"
  base_url = "{base_url}"
  api_key  = env("BAMASC_TEST_KEY")
  price    {{ input = 0.1  output = 0.4 }}
  tier     = 2
}}
model pricey {{
  provider = anthropic
  name     = "claude-opus-4"
  api_key  = env("BAMASC_KEY_NOBODY_SET")
  price    {{ input = 15  output = 75 }}
  tier     = 1
}}
role Solver {{
  max_output = 64
  prompt     = "Solve: {{{{task}}}}"
}}
topology single {{
  slot solver : Solver [1..1]
  flow {{ answer solver(task) }}
}}
system s {{
  models     = [cheap, pricey]
  topologies = [single]
  budget     = 100
  answer     = number
}}
"""


@pytest.fixture
def setup(openai_server, tmp_path, monkeypatch):
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    monkeypatch.delenv("BAMASC_KEY_NOBODY_SET", raising=False)
    source = tmp_path / "two.bam"
    source.write_text(TWO_MODELS.format(base_url=openai_server.base_url))
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "task": f"What is {i} plus 1?"}) + "\n" for i in range(3)))
    return openai_server, str(source), str(data), tmp_path


def test_only_the_models_the_plan_binds_need_a_key(setup, capsys):
    server, source, data, _ = setup
    server.script(reply("#### 1"))  # the budget leaves no room for the pricey model
    assert main(["exec", source, "--task", "What is 0 plus 1?"]) == 0
    out = capsys.readouterr().out
    assert "answer: 1" in out and "pricey" not in out.split("call")[0]


def test_exec_fails_when_every_task_fails_and_resume_runs_them_again(setup, capsys):
    server, source, data, tmp_path = setup
    trace = tmp_path / "trace.jsonl"
    server.script(*[status(401)] * 3)  # a bad key: every task ends in error
    args = ["exec", source, "--dataset", data, "--trace", str(trace), "--retries", "0"]
    assert main(args) == 1
    assert "error 3" in capsys.readouterr().out
    server.script(*[reply("#### 5")] * 3)  # the key is fixed
    assert main(args + ["--resume"]) == 0
    out = capsys.readouterr().out
    assert "tasks run: 3" in out and "ok 3" in out
    finals = {}
    for line in trace.read_text().splitlines():
        record = json.loads(line)
        if record["type"] == "task":
            finals.setdefault(record["task_id"], []).append(record["status"])
    assert finals == {f"q{i}": ["error", "ok"] for i in range(3)}  # the last task line is the outcome
    assert main(args + ["--resume"]) == 0
    assert "nothing to run: all 3 tasks are finished" in capsys.readouterr().out


def test_a_trace_that_is_the_dataset_is_refused(setup, capsys):
    _, source, data, _ = setup
    before = open(data).read()
    assert main(["exec", source, "--dataset", data, "--trace", data]) == 2
    assert "is the dataset itself" in capsys.readouterr().err
    assert open(data).read() == before


@pytest.mark.parametrize("where", ["missing-folder/trace.jsonl", "."])
def test_a_trace_that_cannot_be_written_is_refused_before_any_call(setup, capsys, where):
    server, source, data, tmp_path = setup
    assert main(["exec", source, "--dataset", data, "--trace", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err
    assert "cannot write the trace" in err and "Traceback" not in err
    assert not server.requests


def test_a_server_message_with_newlines_stays_on_one_ledger_row(setup, capsys):
    server, source, _, _ = setup
    body = {"error": {"message": "bad request:\nline two\n\tline three", "type": "invalid_request_error"}}
    server.script(status(400, body=body))
    assert main(["exec", source, "--task", "What is 1 plus 1?"]) == 1
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("solver[0]")]
    assert "bad request: line two line three" in row


def test_skipped_calls_add_no_tokens_to_the_summary():
    from bamasc.runtime.execute import Summary

    summary = Summary()
    base = {"role": "Solver", "model": "cheap", "completion_tokens": 0, "charged": 0.0}
    summary.add({**base, "skipped": True, "prompt_tokens": 500})  # a bound, never sent
    summary.add({**base, "skipped": False, "prompt_tokens": 30, "completion_tokens": 4, "charged": 4.6})
    assert summary.by_role == {"Solver": [1, 30, 4, 4.6]} and summary.by_model == {"cheap": [1, 30, 4, 4.6]}


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "soon"])
def test_a_timeout_that_is_no_duration_is_a_usage_error(setup, capsys, value):
    _, source, _, _ = setup
    with pytest.raises(SystemExit) as stopped:
        main(["exec", source, "--task", "x", "--timeout", value])
    assert stopped.value.code == 2 and "need seconds above 0" in capsys.readouterr().err


def test_resume_without_a_trace_is_a_usage_error(setup, capsys):
    server, source, data, _ = setup
    assert main(["exec", source, "--dataset", data, "--resume"]) == 2
    assert "--resume needs --trace" in capsys.readouterr().err
    assert not server.requests  # nothing was run (and paid) again


def test_a_clamped_attempt_is_marked_in_the_ledger_even_when_it_failed():
    from bamasc.runtime.report import ledger_table

    call = {"node": "solver[0]@0.call", "model": "cheap", "attempt": 1, "prompt_tokens": 9, "completion_tokens": 0,
            "reserved": 12.0, "charged": 12.0, "skipped": False, "clamped": True,
            "error": "timeout: remote model 'cheap' timed out after 5 s waiting for the answer"}
    (row,) = ledger_table([call]).splitlines()[2:]
    assert row.rstrip().endswith("clamped; timeout: remote model 'cheap' timed out after 5 s waiting for the answer")
