"""Budget used: prompt bounds calibrated by what was billed, against the byte bound, on both surfaces.

    python benchmarks/bench_calibrate.py [--budgets 1500,3000,6000] [--bytes-only]

Against an upstream that bills a token per 4 UTF-8 bytes (tests/proxy/
upstream.py, `-quarter`; so a byte bound is four times each bill):

- proxy: LangGraph's prebuilt ReAct agent (langchain-openai, one tool) run
  again and again in one scope of each budget until the proxy answers 402;
- exec: one task whose tool loop (up to 40 rounds of one call, a 200-byte
  result each) outlasts each budget, on a model whose tokenizer is not known.

Each line is the share of the budget charged when the scope or the task
stopped (never above 100%). `--bytes-only` runs with no billed prompt
remembered (every prompt keeps its byte bound); the figures before
calibration existed come from running this script on the commit before it
(the helpers touch nothing that commit lacks).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(ROOT)  # after PYTHONPATH: a checkout named there is the one measured

from tests.helpers.calibration import exec_loop, react_until_refused  # noqa: E402
from tests.proxy.helpers import TOKEN, ThreadProxy, config_text  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402


def proxy_used(budgets, bytes_only: bool) -> list[tuple[float, int, float]]:
    """(budget, runs answered, % charged) of the ReAct agent in one fresh scope per budget."""
    upstream = Upstream(output=10).start()
    folder = pathlib.Path(tempfile.mkdtemp())
    (folder / "proxy.bam").write_text(config_text(upstream.url, budget=None, suffixes=("-quarter-toolcall",)))
    os.environ.setdefault("UPSTREAM_KEY", "upstream-key")
    proxy = ThreadProxy(str(folder / "proxy.bam"))
    if bytes_only:
        from bamasc.metering.calibrate import Calibration

        proxy.settings.calibration = Calibration(per_scope=0)
    rows = []
    try:
        for number, budget in enumerate(budgets):
            runs = react_until_refused(proxy.url, TOKEN, f"bench-{number}", budget)
            charged = proxy.scope(f"bench-{number}")["charged"]
            rows.append((budget, runs, 100 * charged / budget))
    finally:
        proxy.stop()
        upstream.stop()
    return rows


def exec_used(budgets, bytes_only: bool) -> list[tuple[float, str, float]]:
    """(budget, the task's status, % charged) of the tool loop's task at each budget."""
    rows = []
    for budget in budgets:
        result, guard = exec_loop(pathlib.Path(tempfile.mkdtemp()), budget, calibrated=not bytes_only)
        rows.append((budget, f"{result.status}{' (answered)' if result.answer else ''}", 100 * guard.charged / budget))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="1500,3000,6000", help="scope and task budgets, µ$, comma-separated")
    parser.add_argument("--exec-budgets", default="4000,8000,16000", help="the exec task's budgets, µ$")
    parser.add_argument("--bytes-only", action="store_true", help="remember no billed prompt (the byte bound)")
    args = parser.parse_args()
    budgets = [float(value) for value in args.budgets.split(",")]
    for budget, runs, used in proxy_used(budgets, args.bytes_only):
        print(f"proxy  LangGraph ReAct  budget {budget:8.0f} µ$  {runs:3d} runs  used {used:5.1f}%")
    for budget, status, used in exec_used([float(value) for value in args.exec_budgets.split(",")], args.bytes_only):
        print(f"exec   tool loop        budget {budget:8.0f} µ$  {status:16s}  used {used:5.1f}%")


if __name__ == "__main__":
    main()
