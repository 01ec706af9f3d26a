"""A support desk's system for the thread tests, and the answers the offline fake gives each turn.

The fake's echo reply to a prompt that asks for nothing in particular is
`fake reply <the first 8 hex digits of the SHA-256 of the prompt>`, so a
turn's answer says exactly which prompt the provider was sent: the tests
compute the prompt each turn should get (its text and the earlier turns as
history) and compare the digests.
"""

from __future__ import annotations

import hashlib
import json
import os

HISTORY_CAP = 400  # bytes, so tokens, of history a call shows
PROMPT = "Ticket so far:\n{{history}}\nThe customer writes: {{task}}"

DESK = """\
model clerk {
  provider = fake
  name     = "clerk"
  price    { input = 1.0  output = 4.0 }
  tier     = 1
LATENCY
}

role Agent {
  max_output = 64
  history    = %d
  prompt     = "Ticket so far:\\n{{history}}\\nThe customer writes: {{task}}"
}

topology single {
  slot agent : Agent [1..1]
  flow { answer agent(task) }
}

system desk {
  models      = [clerk]
  topologies  = [single]
  budget      = 2000
  task_tokens = 100
}
""" % HISTORY_CAP

TURNS = (
    "Order 1001 arrived with a cracked screen.",
    "I sent the photos you asked for; they show the box was dented.",
    "Can I get a refund instead of a replacement? — grüße",
    "Thanks, please send the label to my address on file.",
)


def desk_source(folder: str, latency_s: float | None = None) -> str:
    """The desk system written to `folder`/desk.bam; with `latency_s`, every fake reply takes that long."""
    latency = "" if latency_s is None else f"  latency {{ first_token = {latency_s}  per_token = 0.000001 }}"
    path = os.path.join(folder, "desk.bam")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(DESK.replace("LATENCY", latency))
    return path


def history_of(turns: list[tuple[str, str]]) -> str:
    """`{{history}}` after `turns` ((text, answer) pairs), as docs/language.md (Threads) says it is written."""
    return "\n\n".join(f"Turn {number}\nCustomer: {text}\nAnswer: {answer}"
                       for number, (text, answer) in enumerate(turns, start=1))


def prompt_of(text: str, earlier: list[tuple[str, str]]) -> str:
    """The prompt a turn's call should send: the history cut to its last HISTORY_CAP bytes."""
    history = history_of(earlier).encode("utf-8")[-HISTORY_CAP:].decode("utf-8", "ignore")
    return PROMPT.replace("{{history}}", history).replace("{{task}}", text)


def expected_answers(texts=TURNS) -> list[str]:
    """The fake's answer to each turn, each prompt holding the turns before it."""
    answers: list[str] = []
    for text in texts:
        answers.append(expected_answers_after(list(zip(texts, answers)), text))
    return answers


def expected_answers_after(earlier: list[tuple[str, str]], text: str) -> str:
    """The fake's answer to `text` after the turns `earlier` ((text, answer as the history shows it) pairs)."""
    prompt = prompt_of(text, earlier)
    return "fake reply " + hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:8]


def trace_lines(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def trace_threads(path: str) -> dict[str, list[dict]]:
    """The turn lines of the trace, by thread."""
    found: dict[str, list[dict]] = {}
    for line in trace_lines(path):
        if line["type"] == "turn":
            found.setdefault(line["thread_id"], []).append(line)
    return found


def trace_spend(path: str, task_ids) -> float:
    """µ$ the trace holds for those tasks: call and tool charges, and each reservation without its call in full."""
    wanted = set(task_ids)
    charged, held = 0.0, {}
    for line in trace_lines(path):
        if line.get("task_id") not in wanted:
            continue
        if line["type"] == "reserve":
            held[line["id"]] = line["reserved"]
        elif line["type"] in ("call", "tool"):
            charged += line["charged"]
            held.pop(line.get("id"), None)
    return charged + sum(held.values())
