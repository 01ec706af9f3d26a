"""A copy of the GSM8K system that selects its topology with a trained policy (`select = policy(...)`)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers import ROOT

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")


def policy_bam(tmp_path, reward: str = "", topologies: str = "linear, star, feedback, planner") -> str:
    text = Path(GSM8K).read_text(encoding="utf-8")
    text = text.replace("select       = strongest", 'select       = policy("policies/gsm8k.msgpack")' + reward)
    text = text.replace("topologies   = [linear, star, feedback, planner]", f"topologies   = [{topologies}]")
    path = tmp_path / "gsm8k.bam"
    path.write_text(text, encoding="utf-8")
    return str(path)
