"""`GET /metrics` of `bamasc serve` and `bamasc proxy`: what they count, in Prometheus's text format, with bounded labels.

Money comes from the metering core, never worked out here: each call's
charge is the one its admission chain settled (`Attempt.charged`, or the
trace line the chain's events write), turned from µ$ to USD. Every label
takes a bounded set of values, whatever clients send: a model label is a
model the server declares (anything else is `(other)`, and the proxy refuses
an undeclared model before anything is counted), a key label is one of the
first `max_keys` keys seen (later ones share `(other)`), a refusal's reason
is a limit of the metering (metering/refusals.py) or `busy`, and a status
code is an HTTP status. Each server has its own registry, so two apps in one
process never share a series.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, Info, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from bamasc.metering.refusals import Refused
from bamasc.version import __version__

# The text exposition format every Prometheus scrapes (prometheus_client writes it).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OTHER = "(other)"  # the label of every value past a bound: no model or key name can be spelt so
MAX_KEYS = 100  # keys with a series of their own; later keys share `(other)`
TOOLS = "(tools)"  # the model label of tool prices (runtime/tool_loop.py), which no model charges
MICRODOLLARS_PER_USD = 1_000_000
# Seconds: an LLM call takes from tens of milliseconds (a cached or tiny reply) to minutes (a long output).
CALL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
WAIT_BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0)
# Why a request is refused: each limit of the metering (derived from its refusals), or the server is busy (429).
BUSY = "busy"
REASONS = frozenset({kind.limit for kind in Refused.__subclasses__()} | {BUSY})
OUTCOMES = ("settled", "kept", "released", "refused")


class Bounded:
    """The label values a series may take: every declared one, and at most `cap` others in the order first seen;
    any later value is `(other)`."""

    def __init__(self, declared: Iterable[str] = (), cap: int = 0) -> None:
        self.declared = frozenset(declared)
        self.cap = cap
        self.seen: set[str] = set()

    def __call__(self, value: str | None) -> str:
        if value in self.declared or value in self.seen:
            return value
        if value is None or len(self.seen) >= self.cap:
            return OTHER
        self.seen.add(value)
        return value


class Metrics:
    """One server's series: its build, what its calls charged (USD) and how long they took (s), by model, what its
    keys charged, refusals by reason, its ledger's totals when scraped, and its HTTP responses by status code."""

    def __init__(self, models: Iterable[str], keys: Iterable[str] = (), max_keys: int = MAX_KEYS,
                 responses: Tally[int] | None = None) -> None:
        self.registry = CollectorRegistry()
        self.models = Bounded(models)
        self.keys = Bounded(keys, max_keys)
        self.responses: Tally[int] = Tally() if responses is None else responses
        registry = self.registry
        Info("bamasc_build", "The bamasc release serving.", registry=registry).info({"version": __version__})
        self.spent = Counter("bamasc_spent_usd", "USD charged by calls this process ended (the metering's settled "
                             "charge, or the whole hold when the outcome is unknown), by model.", ["model"],
                             registry=registry)
        self.calls = Counter("bamasc_calls", "Calls ended, by model and outcome: settled to usage, kept in full "
                             "(outcome unknown), released (surely not billed), refused (never sent).",
                             ["model", "outcome"], registry=registry)
        self.tokens = Counter("bamasc_tokens", "Tokens of settled calls, by model and kind (prompt, completion).",
                              ["model", "kind"], registry=registry)
        self.duration = Histogram("bamasc_call_duration_seconds", "Seconds from sending a call to its end, by model.",
                                  ["model"], buckets=CALL_BUCKETS, registry=registry)
        self.waits = Histogram("bamasc_rate_wait_seconds", "Seconds calls waited for their provider key's rate "
                               "limit, by model.", ["model"], buckets=WAIT_BUCKETS, registry=registry)
        self.refusals = Counter("bamasc_refusals", "Requests refused (402, 429, 503, or answered by the key's "
                                "`on_exhausted`), by reason: the limit that ran out, or busy.", ["reason"],
                                registry=registry)
        self.key_spent = Counter("bamasc_key_spent_usd", f"USD charged to each client key (the first {max_keys} "
                                 f"seen; later keys share `{OTHER}`).", ["key"], registry=registry)
        self.scraped: dict[str, float | None] = {}  # the ledger's totals (µ$) as the last scrape read them
        self.collectors: list[Callable[[], Iterable[Any]]] = [self._responses, self._ledger]  # read at each scrape
        registry.register(_Scraped(self.collectors))
        for outcome in OUTCOMES:  # every model's series from the start: a rate() sees its first call
            for model in self.models.declared:
                self.calls.labels(model, outcome)
        for reason in sorted(REASONS):
            self.refusals.labels(reason)

    # ------------------------------------------------------------ what a surface tells

    def call(self, model: str, outcome: str, charged: float, seconds: float | None = None, *, key: str | None = None,
             prompt_tokens: int = 0, completion_tokens: int = 0, waited: float | None = None) -> None:
        """One call ended with `outcome`, charged `charged` µ$ (the metering's figure)."""
        label = self.models(model)
        self.calls.labels(label, outcome).inc()
        if charged:
            self.spent.labels(label).inc(charged / MICRODOLLARS_PER_USD)
        if key is not None and charged:
            self.key_spent.labels(self.keys(key)).inc(charged / MICRODOLLARS_PER_USD)
        if outcome == "settled":
            self.tokens.labels(label, "prompt").inc(prompt_tokens)
            self.tokens.labels(label, "completion").inc(completion_tokens)
        if seconds is not None:
            self.duration.labels(label).observe(seconds)
        if waited is not None:
            self.waits.labels(label).observe(waited)

    def refused(self, reason: str) -> None:
        """A request refused: `reason` is a metering limit (a Refused's `limit`) or `busy`."""
        self.refusals.labels(reason if reason in REASONS else OTHER).inc()

    def charged_to_key(self, key: str, charged: float) -> None:
        """`charged` µ$ (the metering's figure) charged to client key `key`."""
        if charged:
            self.key_spent.labels(self.keys(key)).inc(charged / MICRODOLLARS_PER_USD)

    def ledger(self, spent: float, held: float, total: float | None, left: float | None) -> None:
        """The ledger's totals (µ$), read as a scrape starts (the total's two are absent without a total)."""
        self.scraped = {"spent": spent, "held": held, "total": total, "left": None if total is None else left or 0.0}

    def listener(self, key: str | None = None) -> Callable[[str, Any], None]:
        """An admission chain's listener (metering/admission.py) counting each attempt it ends, for client key `key`."""
        def heard(event: str, attempt: Any) -> None:
            if event == "started":
                return
            made = event != "refused"
            usage = attempt.usage if event == "settled" else None
            outcome = {"settled": "settled", "failed": "kept", "released": "released"}.get(event, "refused")
            self.call(attempt.model.name, outcome, attempt.charged if made else 0.0,
                      attempt.latency if made and attempt.sent_at is not None else None, key=key,
                      prompt_tokens=0 if usage is None else usage.prompt_tokens,
                      completion_tokens=0 if usage is None else usage.completion_tokens,
                      waited=attempt.waited if made else None)
            if not made:
                self.refused(attempt.refused_by or OTHER)
        return heard

    def line(self, kind: str, line: dict[str, Any]) -> None:
        """A line of a run's trace (runtime/trace.py writes one per ended attempt, from the chain's events)."""
        if kind == "call":
            made = not line.get("skipped")
            # A settled call's line shows the rates it was charged at (docs/trace.md); a failed one charged its
            # whole reservation (kept) or nothing (released).
            outcome = ("settled" if "rates" in line else "kept" if line.get("charged") else "released") if made \
                else "refused"
            self.call(str(line.get("model")), outcome, float(line.get("charged") or 0.0),
                      line["latency_ms"] / 1000 if made and line.get("latency_ms") is not None else None,
                      prompt_tokens=int(line.get("prompt_tokens") or 0),
                      completion_tokens=int(line.get("completion_tokens") or 0), waited=line.get("rate_wait_s"))
        elif kind == "tool" and line.get("charged"):
            self.spent.labels(TOOLS).inc(float(line["charged"]) / MICRODOLLARS_PER_USD)

    def text(self) -> bytes:
        return generate_latest(self.registry)

    # ------------------------------------------------------------ read at each scrape

    def _responses(self) -> Iterable[Any]:
        family = CounterMetricFamily("bamasc_http_responses", "HTTP responses, by status code (the app's and its "
                                     "connection layer's).", labels=["code"])
        for code, count in sorted(self.responses.items()):
            family.add_metric([str(code)], count)
        yield family

    def _ledger(self) -> Iterable[Any]:
        for name, help_text in LEDGER_GAUGES.items():
            value = self.scraped.get(name)
            if value is not None:
                yield GaugeMetricFamily(f"bamasc_{'ledger' if name in ('spent', 'held') else 'budget'}_{name}_usd",
                                        help_text, value=value / MICRODOLLARS_PER_USD)


LEDGER_GAUGES = {
    "spent": "USD the ledger holds as charged: this process's calls and every earlier run's on the same ledger.",
    "held": "USD held for calls or tasks in flight.",
    "total": "The total budget (--total-budget); absent without one.",
    "left": "What is left of the total budget; absent without one.",
}


class _Scraped:
    """Series read from the server's state as each scrape runs (a registry's custom collector)."""

    def __init__(self, collectors: list[Callable[[], Iterable[Any]]]) -> None:
        self.collectors = collectors

    def describe(self) -> list:
        return []  # the families vary (a total's only with a total): nothing to check against at registration

    def collect(self) -> Iterable[Any]:
        for collector in self.collectors:
            yield from collector()


class CountResponses:
    """ASGI middleware counting every response the app starts, by status code, in `responses`."""

    def __init__(self, app: Any, responses: Tally[int]) -> None:
        self.app, self.responses = app, responses

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted(message: dict) -> None:
            if message["type"] == "http.response.start":
                self.responses[message["status"]] += 1
            await send(message)

        await self.app(scope, receive, counted)
