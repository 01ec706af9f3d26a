"""Where the proxy forwards each declared model (`Upstream`) and what it runs with (`Settings`)."""

from __future__ import annotations

import time

from starlette.requests import Request

from bamasc.metering.calibrate import Calibration
from bamasc.metering.protocols import WireProtocol
from bamasc.provider_registry import at_vendor, endpoint

# Request headers passed on upstream (the client's own key never is; `anthropic-beta` only once checked).
_PASSED = ("anthropic-version", "anthropic-beta", "openai-organization", "openai-project")


class Upstream:
    """A declared model the proxy forwards to: where (its provider record's base URL, or its own), with which key,
    at which prices."""

    def __init__(self, model, key: str | None, api: str):
        self.model = model
        self.key = key
        self.api = api  # the wire API its server speaks (its provider record's `protocol`)
        base = (endpoint(model) or "").rstrip("/")
        if api == "anthropic" and base.endswith("/v1"):
            base = base[: -len("/v1")]
        self.base = base
        self.official = api == "openai" and at_vendor(model)

    def url(self, protocol: WireProtocol) -> str:
        return self.base + protocol.upstream_path

    def headers(self, request: Request) -> dict[str, str]:
        # A compressed reply could be neither read for its usage nor passed on as it is (its encoding header is not).
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        for name in _PASSED:
            if name in request.headers:
                headers[name] = request.headers[name]
        if self.api == "anthropic":
            headers.setdefault("anthropic-version", "2023-06-01")
            if self.key:
                headers["x-api-key"] = self.key
        elif self.key:
            headers["authorization"] = f"Bearer {self.key}"
        return headers


class Settings:
    def __init__(self, upstreams: dict[tuple[str, str], Upstream], default_budget: float | None, token: bytes | None,
                 max_body: int = 32 << 20, timeout: float = 600.0, exact=None, limiter=None, request_s: float = 30.0,
                 keys=None, admin_token: bytes | None = None, clock=time.time):
        self.upstreams = upstreams  # (wire API, name the client may use) -> Upstream
        self.limiter = limiter  # a runtime.limiter.RateLimiter pacing each upstream key, or None
        self.default_budget = default_budget
        self.token = token
        self.max_body = max_body
        self.timeout = timeout
        self.request_s = request_s  # seconds a request's body may take to arrive (408 past them)
        self.exact = exact  # exact prompt counter for OpenAI families (runtime/tokens.py), or None
        self.keys = keys  # the client keys and teams (metering/keys.py, redis_keys.py), or None: no keys
        self.admin_token = admin_token  # the token of /v1/admin/ (None: no admin routes)
        self.clock = clock  # the time that picks each budget window
        self.declared_teams: list = []  # the config's `team` and `key` declarations, put in the store at start
        self.declared_keys: list = []  # (KeyPolicy, secret)
        self.calibration = Calibration()  # what recent prompts of each scope were billed (metering/calibrate.py)
