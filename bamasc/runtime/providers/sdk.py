"""Calls through the Stainless-generated SDKs (`openai`, `anthropic`): the HTTP client, the POST, and their exceptions.

Each SDK module is passed in by the provider that owns it; nothing here imports one.
"""

from __future__ import annotations

import asyncio
import functools
import json
from urllib.parse import urlsplit

from bamasc.runtime.providers.base import ProviderError
from bamasc.runtime.providers.failures import cause_chain, error_for_status, is_transport_error, transport_error
from bamasc.runtime.providers.reply import malformed_error
from bamasc.metering.rate_headers import rate_headers
from bamasc.secrets import redact

# The most bytes a reply body may hold, error bodies included. A chat reply of
# the largest output cap any provider offers (about 128k tokens) is under 2 MiB
# of JSON; anything bigger is no answer to the call, and reading it whole
# would let one server take the client's memory.
MAX_BODY_BYTES = 8 * 1024 * 1024


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

    Returns the JSON and the reply's rate-limit headers. The headers come the
    way the SDKs' `with_raw_response` gets them: the raw-response request
    header makes `post` return the response wrapper, whose `parse` decodes
    the body exactly as a plain `post` would.
    """
    options = {"timeout": timeout, "headers": {_raw_response_header(sdk): "raw"}}
    try:
        # The SDK's timeout bounds each read; the outer one bounds the whole call.
        async with asyncio.timeout(timeout):
            response = await client.post(path, body=body, cast_to=object, options=options)
            return await response.parse(), tuple(rate_headers(response.headers).items())
    except Exception as error:
        failure = sdk_error(
            error, sdk, provider=provider, model=model, timeout=timeout, secret=secret, base_error=base_error
        )
        if failure is None:
            raise
        raise failure from None


def _raw_response_header(sdk) -> str:
    """The request header the SDK's `with_raw_response` sets (both SDKs name it alike)."""
    constants = getattr(sdk, "_constants", None)
    return getattr(constants, "RAW_RESPONSE_HEADER", "X-Stainless-Raw-Response")


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
    too_large = next((link for link in cause_chain(error) if isinstance(link, BodyTooLarge)), None)
    if too_large is not None:
        return malformed_error(provider=provider, model=model, detail=str(too_large))
    unencodable = next((link for link in cause_chain(error) if isinstance(link, UnicodeEncodeError)), None)
    if unencodable is not None:
        return unsent_error(unencodable, provider=provider, model=model)
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


def unsent_error(error: UnicodeEncodeError, *, provider: str, model: str) -> ProviderError:
    """The ProviderError for a request the SDK could not encode: a lone surrogate in its JSON body (or a header
    that is not ASCII).

    The SDK encodes the request before it opens a connection, so nothing was
    sent and nothing billed (its reservation goes back), and a retry would fail alike.
    """
    found = error.object[error.start : error.start + 1] if isinstance(error.object, str) else ""
    # Only a surrogate's code point is shown: another character may be one of the key's, in a header.
    shown = f"U+{ord(found):04X}, " if found and "\ud800" <= found <= "\udfff" else ""
    return ProviderError(
        f"{provider} model '{model}': the request holds text that cannot be encoded as {error.encoding.upper()} "
        f"({shown}{error.reason}), so it was not sent",
        kind="client",
    )


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


def scrub(text: str, secret: str | None) -> str:
    """`text` with `secret` and anything key-shaped masked, plain, base64 or URL-encoded, for messages built
    from server replies (a server may echo the key it was sent, encoded)."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, "***")
    return redact(text, (secret,) if secret else ())


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
