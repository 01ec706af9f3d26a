"""`report.html` and `/ui` in a real headless browser (Debian's chromium, driven by Playwright): no console error,
no request leaving the page, the totals shown equal to the trace's, for an exec, a serve and a proxy trace; trace
text shown as text; a client key shown its own scopes only."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip(f"no chromium at {CHROMIUM} (apt install chromium; .ci/run installs it)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the test extra)")
pytest.importorskip("plotly", reason="the report extra (plotly) is not installed")
pytest.importorskip("starlette", reason="the serve and proxy extras (starlette, uvicorn) are not installed")

from bamasc.cli import main  # noqa: E402
from tests.proxy.helpers import TOKEN as PROXY_TOKEN  # noqa: E402
from tests.proxy.helpers import ThreadProxy, config_text  # noqa: E402
from tests.proxy.upstream import Upstream  # noqa: E402
from tests.serve.harness import TOKEN as SERVE_TOKEN  # noqa: E402
from tests.serve.harness import Server, compiled_plan  # noqa: E402
from tests.conftest import ROOT  # noqa: E402

LAUNCH = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
          "--disable-component-update", "--no-first-run"]
ADMIN = "admin-token-for-ui-tests"
EVIL_SCOPE = "<img/src=x/onerror=window.__pwned=1>"  # a scope name a client may send: printable, no spaces
WAIT_MS = 60_000  # how long a page may take to draw on a loaded machine (a bound, not a measurement)


def off_the_loop(function, *args, **kwargs):
    """`function(...)` in a thread of its own: Playwright's sync API holds an event loop in this one, and the CLI
    and the proxy's set-up run their own."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(function, *args, **kwargs).result()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH, headless=True)
        yield launched
        launched.close()


def expected_totals(*paths: str) -> dict:
    """The trace's own sums, made here from the raw lines: what the page must show."""
    spent = held = 0.0
    refused = 0
    open_: dict[str, float] = {}
    statuses: dict[str, str] = {}
    for path in paths:
        for line in open(path, encoding="utf-8"):
            record = json.loads(line)
            if record["type"] == "reserve":
                open_[(path, record["id"])] = record["reserved"]
            elif record["type"] in ("call", "tool"):
                spent += record["charged"]
                refused += record["type"] == "call" and record.get("skipped") is True
                open_.pop((path, record.get("id")), None)
            elif record["type"] == "task":
                statuses[(path, record["task_id"])] = record["status"]
    return {"spent": spent, "held": sum(open_.values()), "refused": refused, "tasks": len(statuses)}


class Checked:
    """A page whose console errors and outside requests are collected (and each outside request refused)."""

    def __init__(self, browser, origin: str | None):
        self.problems: list[str] = []
        self.context = browser.new_context()
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", lambda message: message.type == "error" and self.problems.append(message.text))
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.origin = origin

    def _route(self, route) -> None:
        url = route.request.url
        inside = url.startswith("file://") if self.origin is None else url.startswith(self.origin + "/")
        if inside:
            route.continue_()
        else:
            self.problems.append(f"request left the page: {url}")
            route.abort()

    def open(self, url: str) -> None:
        self.page.goto(url)
        # Selectors, not a JavaScript predicate: the live page's policy forbids the eval one would need.
        self.page.wait_for_selector("body[data-rendered]", state="attached", timeout=WAIT_MS)

    def shown(self, name: str) -> float:
        return float(self.page.get_attribute(f"#total-{name}", "data-value"))

    def text(self, name: str) -> str:
        return self.page.text_content(f"#total-{name}")

    def close(self) -> list[str]:
        self.context.close()
        return self.problems


def assert_shows(checked: Checked, expected: dict) -> None:
    assert checked.shown("spent") == pytest.approx(expected["spent"], abs=1e-5)
    assert checked.text("spent") == f"{expected['spent']:.2f} µ$"
    assert checked.shown("held") == pytest.approx(expected["held"], abs=1e-5)
    assert checked.shown("refused") == expected["refused"]
    assert checked.shown("tasks") == expected["tasks"]


def report_of(tmp_path, *traces: str) -> str:
    out = tmp_path / "report.html"
    assert off_the_loop(main, ["report", *traces, "-o", str(out)]) == 0
    return out.as_uri()


def check_report(browser, tmp_path, *traces: str) -> Checked:
    checked = Checked(browser, None)
    checked.open(report_of(tmp_path, *traces))
    assert_shows(checked, expected_totals(*traces))
    return checked


@pytest.fixture(scope="module")
def exec_trace(tmp_path_factory):
    folder = tmp_path_factory.mktemp("exec")
    trace = str(folder / "exec.jsonl")
    dataset = os.path.join(ROOT, "tests", "fixtures", "datasets", "gsm8k.jsonl")
    code = off_the_loop(main, ["exec", os.path.join(ROOT, "examples", "gsm8k.bam"), "--fake", "echo", "--dataset", dataset,
                 "--trace", trace])
    assert code in (0, 1, 3), code
    return trace


def test_the_report_of_an_exec_trace(browser, exec_trace, tmp_path):
    checked = check_report(browser, tmp_path, exec_trace)
    assert checked.page.locator("#dearest tr.task").count() > 0
    assert checked.page.locator("#chart-timeline .main-svg").count() > 0  # Plotly drew
    assert checked.page.get_attribute("#chart-timeline", "data-axis") == "time"
    assert "time (UTC)" in checked.page.locator("#chart-timeline").inner_text()
    assert checked.page.text_content("#timeline-note") == ""
    assert checked.close() == []


def test_the_report_of_a_trace_without_times_draws_line_order_and_says_so(browser, exec_trace, tmp_path):
    older = tmp_path / "older.jsonl"  # the same trace as a bamasc before `at` wrote it
    older.write_text("".join(json.dumps({name: value for name, value in json.loads(line).items() if name != "at"}) + "\n"
                             for line in open(exec_trace, encoding="utf-8")), encoding="utf-8")
    checked = check_report(browser, tmp_path, str(older))
    assert checked.page.get_attribute("#chart-timeline", "data-axis") == "line"
    assert "records no times" in checked.page.text_content("#timeline-note")
    assert checked.close() == []


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve")
    trace = str(folder / "serve.jsonl")
    server = Server(compiled_plan(str(folder)), "--fake", "echo", "--trace", trace)
    try:
        for number in range(3):
            answer = httpx.post(f"{server.url}/v1/tasks", headers=server.headers, timeout=60,
                                json={"task": f"What is {number} + 2?"})
            assert answer.status_code == 200, answer.text
        yield server, trace
    finally:
        server.stop()


def test_ui_on_serve_is_live_and_behind_its_token(browser, served, tmp_path):
    server, trace = served
    checked = Checked(browser, server.url)
    checked.open(f"{server.url}/ui#token={SERVE_TOKEN}")
    assert_shows(checked, expected_totals(trace))
    assert "token=" not in checked.page.url  # taken out of the address bar
    before = checked.shown("attempts")
    answer = httpx.post(f"{server.url}/v1/tasks", headers=server.headers, timeout=60, json={"task": "What is 9 + 2?"})
    assert answer.status_code == 200
    # The page polls, and redraws as the call settles.
    checked.page.wait_for_selector(f"#total-attempts:not([data-value='{before:g}'])", state="attached",
                                   timeout=WAIT_MS)
    assert checked.shown("attempts") > before
    final = expected_totals(trace)  # the task has answered: its lines are all written
    checked.page.wait_for_selector(f"#total-tasks[data-value='{final['tasks']}']", state="attached", timeout=WAIT_MS)
    assert_shows(checked, final)
    assert checked.close() == []

    stranger = Checked(browser, server.url)
    stranger.page.goto(f"{server.url}/ui#token=not-the-token")
    stranger.page.wait_for_selector("#login:not([hidden])", timeout=WAIT_MS)
    assert stranger.page.get_attribute("body", "data-rendered") is None
    assert httpx.get(f"{server.url}/ui/summary.json", timeout=30).status_code == 401
    problems = stranger.close()
    assert all("401" in problem for problem in problems), problems  # the browser logs the refused poll, only that


def test_the_report_of_a_serve_trace(browser, served, tmp_path):
    assert check_report(browser, tmp_path, served[1]).close() == []


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    folder = tmp_path_factory.mktemp("proxy")
    upstream = Upstream(output=200).start()
    os.environ["UPSTREAM_KEY"] = "upstream-key"
    config = folder / "proxy.bam"
    config.write_text(config_text(upstream.url, budget=100_000), encoding="utf-8")
    proxy = off_the_loop(ThreadProxy, str(config), trace=str(folder / "proxy.jsonl"), admin=ADMIN, keys=str(folder / "keys.jsonl"))
    try:
        keys = {}
        for name, ceiling, budgets in (("alpha", 100_000, [{"amount": 1_000_000, "per": "1d"}]), ("beta", 150, [])):
            made = httpx.post(f"{proxy.url}/v1/admin/keys", headers={"authorization": f"Bearer {ADMIN}"},
                              json={"name": name, "scope_budget": ceiling, "budgets": budgets}, timeout=30)
            assert made.status_code == 201, made.text
            keys[name] = made.json()["key"]
        for key, scope in ((keys["alpha"], "ticket-1"), (keys["alpha"], "ticket-2"), (keys["beta"], EVIL_SCOPE)):
            for _ in range(3):
                httpx.post(f"{proxy.url}/v1/chat/completions", timeout=60,
                           headers={"authorization": f"Bearer {key}", "x-bamasc-task": scope},
                           json={"model": "gpt-4.1-mini", "max_tokens": 100,
                                 "messages": [{"role": "user", "content": "words"}]})
        yield proxy, keys
    finally:
        proxy.stop()
        upstream.stop()


def test_ui_on_the_proxy_shows_the_admin_everything_and_escapes_trace_text(browser, proxied):
    proxy, _ = proxied
    trace = proxy.ledger.trace.path
    expected = expected_totals(trace)
    assert expected["refused"] > 0  # beta's scope ran out: its refusals are on the page
    checked = Checked(browser, proxy.url)
    checked.open(f"{proxy.url}/ui#token={ADMIN}")
    assert_shows(checked, expected)
    reasons = checked.page.locator("#refusals td.why").all_text_contents()
    assert reasons and all("left of its budget" in reason for reason in reasons)
    assert EVIL_SCOPE in checked.page.locator("#refusals").inner_text()  # shown as text...
    assert checked.page.evaluate("window.__pwned") is None  # ...and never run
    assert checked.page.locator("img").count() == 0
    # alpha's day window, over time against its limit
    assert checked.page.locator("#windows-over-time:not([hidden]) #chart-windows .main-svg").count() > 0
    assert "key:alpha:1d@" in checked.page.locator("#chart-windows").inner_text()
    assert checked.close() == []


def test_a_key_sees_only_its_own_scopes_at_ui(browser, proxied):
    proxy, keys = proxied
    mine = httpx.get(f"{proxy.url}/ui/summary.json", headers={"authorization": f"Bearer {keys['alpha']}"},
                     timeout=30).json()
    assert "beta" not in json.dumps(mine) and "img" not in json.dumps(mine)
    assert {task["task_id"] for task in mine["dearest"]} == {"alpha ticket-1", "alpha ticket-2"}
    assert httpx.get(f"{proxy.url}/ui/summary.json", headers={"authorization": "Bearer bk-forged"},
                     timeout=30).status_code == 401
    checked = Checked(browser, proxy.url)
    checked.open(f"{proxy.url}/ui#token={keys['alpha']}")
    assert checked.shown("spent") == pytest.approx(mine["totals"]["spent"], abs=1e-5)
    assert checked.shown("refused") == 0
    page = checked.page.content()
    assert "beta" not in page and "img/src" not in page
    assert checked.close() == []


def test_the_report_of_a_proxy_trace(browser, proxied, tmp_path):
    checked = check_report(browser, tmp_path, proxied[0].ledger.trace.path)
    assert checked.page.evaluate("window.__pwned") is None and checked.page.locator("img").count() == 0
    assert checked.close() == []
