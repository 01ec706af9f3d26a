"""Screenshots of the spend page for docs/report.md: docs/images/report.png and docs/images/ui.png.

A proxy (in this process, on its local ledger) forwards calls of three client
keys in two teams to a local upstream that bills what it writes, a call
every PACE_S seconds, so the spend line and the keys' and teams' one-minute
windows have some time to cover; one key's scopes run out and are refused. `bamasc report` draws its trace, and the live
`/ui` is opened with the admin token; Debian's chromium, driven by Playwright
as in the tests, takes both pictures. Offline: nothing leaves the machine.

    python benchmarks/screenshots.py [--out docs/images]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import httpx  # noqa: E402

from bamasc.cli import main  # noqa: E402
from tests.proxy.helpers import ThreadProxy, config_text  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
LAUNCH = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
          "--disable-component-update", "--no-first-run"]
ADMIN = "admin-token-for-screenshots"
PACE_S = 0.25  # between calls: about ten seconds of traffic in all
WINDOW = "1m"  # the keys' and teams' budget windows
# (key, team, scope ceiling µ$, scopes, calls per scope, output cap)
KEYS = (("support-bot", "support", 2_000, ("ticket-101", "ticket-102", "ticket-103", "ticket-104"), 4, 300),
        ("triage", "support", 400, ("ticket-101", "ticket-107"), 5, 200),
        ("research-agent", "research", 20_000, ("survey-1", "survey-2"), 6, 800))


def traffic(folder: str) -> tuple[ThreadProxy, Upstream]:
    upstream = Upstream(output=600).start()
    os.environ["UPSTREAM_KEY"] = "upstream-key"
    config = os.path.join(folder, "proxy.bam")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(config_text(upstream.url, budget=100_000))
    proxy = ThreadProxy(config, total=60_000, trace=os.path.join(folder, "proxy.jsonl"), admin=ADMIN,
                        keys=os.path.join(folder, "keys.jsonl"))
    admin = {"authorization": f"Bearer {ADMIN}"}
    for team in {key[1] for key in KEYS}:
        httpx.post(f"{proxy.url}/v1/admin/teams", headers=admin, timeout=30,
                   json={"name": team, "budgets": [{"amount": 40_000, "per": WINDOW}]}).raise_for_status()
    for name, team, ceiling, scopes, calls, cap in KEYS:
        made = httpx.post(f"{proxy.url}/v1/admin/keys", headers=admin, timeout=30,
                          json={"name": name, "team": team, "scope_budget": ceiling,
                                "budgets": [{"amount": 25_000, "per": WINDOW}]})
        made.raise_for_status()
        secret = made.json()["key"]
        for scope in scopes:
            for number in range(calls):
                model = "gpt-4.1-mini" if number % 3 else "claude-haiku-4-5"
                path = "/v1/chat/completions" if model.startswith("gpt") else "/v1/messages"
                body = {"model": model, "max_tokens": cap, "messages": [{"role": "user", "content": "words " * 40}]}
                time.sleep(PACE_S)
                httpx.post(proxy.url + path, json=body, timeout=60,
                           headers={"authorization": f"Bearer {secret}", "x-bamasc-task": scope,
                                    "anthropic-version": "2023-06-01"} if not model.startswith("gpt") else
                           {"authorization": f"Bearer {secret}", "x-bamasc-task": scope})
    return proxy, upstream


def shoot(out: str) -> None:
    from playwright.sync_api import sync_playwright

    out = os.path.abspath(out)
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        proxy, upstream = traffic(folder)
        try:
            report = os.path.join(folder, "report.html")
            os.chdir(folder)  # the page names the trace as given: proxy.jsonl
            assert main(["report", os.path.basename(proxy.ledger.trace.path), "-o", report, "--total-budget", "60000",
                         "--title", "bamasc spend report: a proxy's minute"]) == 0
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH, headless=True)
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                for url, name in ((f"file://{report}", "report.png"), (f"{proxy.url}/ui#token={ADMIN}", "ui.png")):
                    page.goto(url)
                    page.wait_for_selector("body[data-rendered]", state="attached", timeout=60_000)
                    page.screenshot(path=os.path.join(out, name), full_page=True)
                    print(f"wrote {os.path.join(out, name)}")
                browser.close()
        finally:
            proxy.stop()
            upstream.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("docs", "images"))
    shoot(parser.parse_args().out)
