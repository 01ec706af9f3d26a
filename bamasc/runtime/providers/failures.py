"""HTTP failures as ProviderErrors: error statuses with their Retry-After, and calls that got no complete answer."""

from __future__ import annotations

from collections.abc import Mapping

from bamasc.runtime.providers.base import RETRYABLE_KINDS, ProviderError
from bamasc.metering.rate_headers import parse_retry_after, rate_headers
from bamasc.metering.replies import surely_unbilled

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
        outcome_unknown=not surely_unbilled(status),
        status=status,
        rate_headers=rate_headers(headers),
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


def _transport_names(error: BaseException) -> set[str]:
    """The class names, bases included, of the exceptions in `error`'s cause chain that say what the wire did.

    The SDKs' aiohttp adapter re-raises every aiohttp connection error as
    httpx's ConnectTimeout, a connection dropped after the request was sent
    included; where aiohttp's own exception is in the chain, it alone is believed.
    """
    chain = list(cause_chain(error))
    raised = [link for link in chain if type(link).__module__.partition(".")[0] == "aiohttp"] or chain
    return {cls.__name__ for link in raised for cls in type(link).__mro__}


def cause_chain(error: BaseException):
    """`error`, then what it was raised from or during, and so on down (each exception once)."""
    seen = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _innermost(error: BaseException) -> BaseException:
    chain = list(cause_chain(error))
    return chain[-1]


_HTTP_MODULES = frozenset({"httpx", "httpx2", "httpcore", "httpcore2", "h11", "aiohttp"})


def is_transport_error(error: BaseException) -> bool:
    """Whether `error` came from the HTTP stack itself (httpx, httpx2, httpcore, h11, aiohttp or a socket)."""
    module = type(error).__module__.split(".")[0]
    return module in _HTTP_MODULES or isinstance(error, ConnectionError)

