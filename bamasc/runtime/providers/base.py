"""The provider protocol: chat messages in, one completion with its usage out, and the errors a call ends with."""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

from bamasc.words import show

ROLES = ("system", "user", "assistant")

ERROR_KINDS = ("rate_limited", "server", "timeout", "connection", "malformed", "client", "auth", "not_found")
RETRYABLE_KINDS = frozenset({"rate_limited", "server", "timeout", "connection", "malformed"})

# The most bytes a reply body may hold, error bodies included. A chat reply of
# the largest output cap any provider offers (about 128k tokens) is under 2 MiB
# of JSON; anything bigger is no answer to the call, and reading it whole
# would let one server take the client's memory.
MAX_BODY_BYTES = 8 * 1024 * 1024

# A gateway that answers 502 or 504 may have passed the request on to a model
# that ran it to the end; every other status means the provider did not bill.
GATEWAY_STATUSES = frozenset({502, 504})


@dataclass(frozen=True, slots=True)
class Message:
    role: str  # system | user | assistant
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"message role must be one of {', '.join(ROLES)}, not {self.role!r}")


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    prompt_tokens: int  # as the provider reports them: what it bills
    completion_tokens: int
    finish_reason: str | None = None


def usage_tokens(usage: object, field: str, *, provider: str, model: str, optional: bool = False) -> int:
    """`usage[field]` as a token count: a JSON integer, not negative; anything else makes the reply malformed.

    Floats, strings and booleans are refused rather than coerced: a count
    given as `19.99`, `"15"`, `true` or `Infinity` is not what any provider
    bills, and a coerced guess could charge less than was spent. `optional`
    fields may be missing or null (zero).
    """
    value = usage.get(field) if isinstance(usage, dict) else None
    if value is None and optional and isinstance(usage, dict):
        return 0
    if type(value) is not int or value < 0:
        shown = "missing" if value is None else show(value)
        raise malformed_error(
            provider=provider, model=model, detail=f"usage.{field} is {shown}, not a token count"
        )
    return value


@dataclass(frozen=True, slots=True)
class Decoding:
    """How a model samples its reply, sent with every call.

    The default asks for greedy decoding (temperature 0): the most
    reproducible output a provider offers. The APIs' own default, 1.0, makes
    two runs of one plan disagree. None leaves a setting to the provider.
    """

    temperature: float | None = 0.0
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()


GREEDY = Decoding()


class ProviderError(Exception):
    """One failed attempt at a call, classified for the retry loop and the budget guard.

    `retryable` says whether the same call may succeed if tried again;
    `outcome_unknown` says whether the provider may have run (and billed) the
    call anyway, so the guard must keep the whole reservation for it.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        retryable: bool | None = None,
        retry_after: float | None = None,
        outcome_unknown: bool = False,
        status: int | None = None,
    ) -> None:
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown provider error kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.retryable = kind in RETRYABLE_KINDS if retryable is None else retryable
        self.retry_after = retry_after
        self.outcome_unknown = outcome_unknown
        self.status = status

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __repr__(self) -> str:
        return (
            f"ProviderError({self.message!r}, kind={self.kind!r}, retryable={self.retryable}, "
            f"retry_after={self.retry_after}, outcome_unknown={self.outcome_unknown}, status={self.status})"
        )

    def __reduce__(self):
        return (
            _rebuild_error,
            (self.message, self.kind, self.retryable, self.retry_after, self.outcome_unknown, self.status),
        )


def _rebuild_error(message, kind, retryable, retry_after, outcome_unknown, status) -> ProviderError:
    return ProviderError(
        message, kind=kind, retryable=retryable, retry_after=retry_after, outcome_unknown=outcome_unknown, status=status
    )


@runtime_checkable
class Provider(Protocol):
    """One model endpoint. `complete` makes exactly one attempt; retries belong to the caller."""

    name: str  # the model's name in the .bam source

    async def complete(
        self, messages: list[Message], max_tokens: int, *, timeout: float, decoding: Decoding = GREEDY
    ) -> Completion: ...

    def count_prompt_tokens(self, messages: list[Message]) -> int | None: ...

    async def aclose(self) -> None: ...


async def post_json(
    client, sdk, path: str, body: dict, *, provider: str, model: str, timeout: float, secret: str | None, base_error
):
    """POST `body` through an official SDK client; the decoded JSON reply, or a classified ProviderError.

    The client's documented `post` applies its key, headers, timeout and error
    classes as the typed methods (`chat.completions.create`,
    `messages.create`) do, but sends the body as given and hands back the
    decoded JSON. The typed methods spend about 0.4 ms a call checking plain
    dicts against the request's declared types and 0.15 ms building typed
    response objects: a third of the client's CPU per call at concurrency 64.
    `base_error` is the SDK's root exception class.
    """
    try:
        # The SDK's timeout bounds each read; the outer one bounds the whole call.
        async with asyncio.timeout(timeout):
            return await client.post(path, body=body, cast_to=object, options={"timeout": timeout})
    except Exception as error:
        failure = sdk_error(
            error, sdk, provider=provider, model=model, timeout=timeout, secret=secret, base_error=base_error
        )
        if failure is None:
            raise
        raise failure from None


def aiohttp_client(sdk, base_url: str | None):
    """The SDK's aiohttp-backed HTTP client for `base_url`.

    aiohttp parses HTTP in C: a call costs about a third less CPU than over the
    SDKs' default httpx transport. Building the client loads the CA bundle into
    a TLS context (about 20 ms). A plain-http base URL (a local server) gets a
    TLS context that trusts no certificate instead: nothing is loaded, and an
    https address it might be sent to fails verification rather than going
    unchecked.
    """
    hooks = {"response": [_cap_body]}
    if base_url is not None and urlsplit(base_url).scheme == "http":
        return sdk.DefaultAioHttpClient(verify=_trusting_nothing(), event_hooks=hooks)
    return sdk.DefaultAioHttpClient(event_hooks=hooks)


class BodyTooLarge(Exception):
    """A reply body longer than MAX_BODY_BYTES; raised while it is read, so no more of it is."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the body is longer than {limit:,} bytes")


async def _cap_body(response) -> None:
    """Response hook: refuse a declared length over the cap at once, and stop reading any other body at it.

    The hook runs when the headers have arrived and before the SDK reads the
    body, so the wrapped stream is what every later read goes through.
    """
    declared = response.headers.get("content-length", "")
    if declared.strip().isdigit() and int(declared) > MAX_BODY_BYTES:
        await response.aclose()
        raise BodyTooLarge(MAX_BODY_BYTES)
    response.stream = _capped_stream(response.stream, MAX_BODY_BYTES)


def _capped_stream(stream, limit: int):
    # The HTTP library checks that a body is its own AsyncByteStream type,
    # whose module (httpx or httpx2) depends on the SDK release.
    base = next(cls for cls in type(stream).__mro__ if cls.__name__ == "AsyncByteStream")
    return _capped_class(base)(stream, limit)


@functools.cache
def _capped_class(base: type) -> type:
    class CappedStream(base):
        def __init__(self, inner, limit: int) -> None:
            self.inner = inner
            self.limit = limit

        async def __aiter__(self):
            total = 0
            async for chunk in self.inner:
                total += len(chunk)
                if total > self.limit:
                    raise BodyTooLarge(self.limit)
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    return CappedStream


@functools.cache
def _trusting_nothing():
    import ssl

    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # checks hostnames and certificates, trusts no CA


def scrub(text: str, secret: str | None) -> str:
    """`text` with every occurrence of `secret` masked, for messages built from server replies."""
    if secret and len(secret) >= 4:
        return text.replace(secret, "***")
    return text


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date), or `retry-after-ms`.

    Returns None when there is no usable header. A date in the past gives 0.
    """
    if not headers:
        return None
    lowered = {key.lower(): value for key, value in headers.items()}
    milliseconds = lowered.get("retry-after-ms")
    if milliseconds is not None:
        try:
            value = float(milliseconds) / 1000.0
        except ValueError:
            value = None
        if value is not None and math.isfinite(value) and value >= 0:
            return value
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None or when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
        return max(0.0, seconds)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def error_for_status(
    status: int,
    *,
    provider: str,
    model: str,
    detail: str = "",
    headers: Mapping[str, str] | None = None,
) -> ProviderError:
    """The ProviderError for an HTTP error status that the provider answered with."""
    if status == 429:
        kind, what = "rate_limited", "rate limited (HTTP 429)"
    elif status in (401, 403):
        kind, what = "auth", f"refused the credentials (HTTP {status})"
    elif status == 404:
        kind, what = "not_found", "does not know this model or endpoint (HTTP 404)"
    elif status == 408:
        kind, what = "timeout", "timed out waiting for the request (HTTP 408)"
    elif status == 529:
        kind, what = "server", "is overloaded (HTTP 529)"
    elif status >= 500:
        kind, what = "server", f"failed with a server error (HTTP {status})"
    else:
        kind, what = "client", f"rejected the request (HTTP {status})"
    retryable = kind in RETRYABLE_KINDS
    retry_after = parse_retry_after(headers) if retryable else None
    message = f"{provider} model '{model}' {what}"
    if detail:
        message += f": {detail}"
    if retry_after is not None:
        message += f" (retry after {retry_after:g} s)"
    return ProviderError(
        message,
        kind=kind,
        retryable=retryable,
        retry_after=retry_after,
        outcome_unknown=status in GATEWAY_STATUSES,
        status=status,
    )


# Names of the transport exceptions (httpx, httpx2, httpcore, aiohttp), or of
# their bases, raised before any byte of the request left: the provider cannot
# have seen the call.
_NOT_SENT = frozenset(
    {"ConnectError", "ConnectTimeout", "PoolTimeout", "UnsupportedProtocol", "InvalidURL"}  # httpx, httpcore
    | {"ClientConnectorError", "ConnectionTimeoutError", "NonHttpUrlClientError"}  # aiohttp
)


def transport_error(
    error: BaseException,
    *,
    provider: str,
    model: str,
    timeout: float | None = None,
    timed_out: bool = False,
) -> ProviderError:
    """The ProviderError for a call that got no complete HTTP answer: a timeout or a broken connection.

    The cause chain tells a refused connection (never sent, outcome known)
    from one that broke after the request was sent (outcome unknown).
    """
    names = _transport_names(error)
    sent = not (names & _NOT_SENT)
    timed_out = timed_out or any("Timeout" in name for name in names)
    if timed_out:
        limit = f" after {timeout:g} s" if timeout is not None else ""
        stage = "waiting for the answer" if sent else "connecting"
        return ProviderError(
            f"{provider} model '{model}' timed out{limit} {stage}",
            kind="timeout",
            outcome_unknown=sent,
        )
    cause = _innermost(error)
    what = "the connection broke after the request was sent" if sent else "could not connect"
    reason = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    return ProviderError(
        f"{provider} model '{model}': {what} ({reason[:300]})",
        kind="connection",
        outcome_unknown=sent,
    )


def malformed_error(*, provider: str, model: str, detail: str) -> ProviderError:
    """The call reached the model and came back unusable: it may well be billed."""
    return ProviderError(
        f"{provider} model '{model}' sent a malformed response: {detail}",
        kind="malformed",
        outcome_unknown=True,
    )


def _transport_names(error: BaseException) -> set[str]:
    """The class names, bases included, of the exceptions in `error`'s cause chain that say what the wire did.

    The SDKs' aiohttp adapter re-raises every aiohttp connection error as
    httpx's ConnectTimeout, a connection dropped after the request was sent
    included; where aiohttp's own exception is in the chain, it alone is believed.
    """
    chain = list(_cause_chain(error))
    raised = [link for link in chain if type(link).__module__.partition(".")[0] == "aiohttp"] or chain
    return {cls.__name__ for link in raised for cls in type(link).__mro__}


def _cause_chain(error: BaseException):
    seen = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _first_link(error: BaseException, kind: type) -> BaseException:
    return next(link for link in _cause_chain(error) if isinstance(link, kind))


def _innermost(error: BaseException) -> BaseException:
    chain = list(_cause_chain(error))
    return chain[-1]


def sdk_error(
    error: BaseException,
    sdk,
    *,
    provider: str,
    model: str,
    timeout: float,
    secret: str | None,
    base_error: type | None = None,
) -> ProviderError | None:
    """The ProviderError for an exception out of a Stainless-generated SDK call (`openai`, `anthropic`).

    `sdk` is the SDK module; both name their exceptions alike. Any other
    exception of the SDK's `base_error` class is a client error. Returns None
    for an exception that is no provider failure (a bug to let through).
    """
    if any(isinstance(link, BodyTooLarge) for link in _cause_chain(error)):
        return malformed_error(provider=provider, model=model, detail=str(_first_link(error, BodyTooLarge)))
    if isinstance(error, TimeoutError):  # the caller's overall deadline
        return transport_error(error, provider=provider, model=model, timeout=timeout, timed_out=True)
    if isinstance(error, sdk.APIStatusError):
        return error_for_status(
            error.status_code,
            provider=provider,
            model=model,
            detail=_detail(error, secret),
            headers=error.response.headers,
        )
    if isinstance(error, sdk.APITimeoutError):  # what timed out, if anything, is in the cause chain
        return transport_error(error, provider=provider, model=model, timeout=timeout)
    if isinstance(error, sdk.APIConnectionError):
        return transport_error(error, provider=provider, model=model, timeout=timeout)
    if isinstance(error, sdk.APIResponseValidationError):
        return malformed_error(provider=provider, model=model, detail=_detail(error, secret))
    if isinstance(error, json.JSONDecodeError):
        return malformed_error(provider=provider, model=model, detail=f"the body is not JSON ({error.msg})")
    if isinstance(error, (RecursionError, ValueError, UnicodeError)):
        # Raised while decoding the body: nesting too deep for the parser, an
        # integer longer than Python converts, bytes that are not UTF-8.
        return malformed_error(provider=provider, model=model, detail=f"the body cannot be decoded ({type(error).__name__})")
    if is_transport_error(error):  # raised while the SDK read a body it did not wrap
        return transport_error(error, provider=provider, model=model, timeout=timeout)
    if base_error is not None and isinstance(error, base_error):
        return ProviderError(f"{provider} model '{model}' failed: {scrub(str(error), secret)}", kind="client")
    return None


_HTTP_MODULES = frozenset({"httpx", "httpx2", "httpcore", "httpcore2", "h11", "aiohttp"})


def is_transport_error(error: BaseException) -> bool:
    """Whether `error` came from the HTTP stack itself (httpx, httpx2, httpcore, h11, aiohttp or a socket)."""
    module = type(error).__module__.split(".")[0]
    return module in _HTTP_MODULES or isinstance(error, ConnectionError)


def _detail(error: BaseException, secret: str | None) -> str:
    """The server's own error message when its body has one, else the SDK's; never the key."""
    body = getattr(error, "body", None)
    message = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else None
    if not isinstance(message, str) or not message:
        message = getattr(error, "message", None) or str(error) or type(error).__name__
    return scrub(str(message), secret)[:500]
