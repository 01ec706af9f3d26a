"""Spans on the wire: OTLP/HTTP export to a collector (its URL made from a base URL), and OTLP/JSON.

The SDK (the `otel` extra) is imported by the functions that encode or send
spans, never when this module loads.
"""

from __future__ import annotations

import json
import logging
import re

from bamasc.runtime.otel import INSTALL_HINT, ExportError, OtelMissing

TRACES_PATH = "/v1/traces"  # the OTLP/HTTP traces endpoint under a collector's base URL


def spans_json(spans: list) -> str:
    """The spans as OTLP/JSON (an ExportTraceServiceRequest): the SDK's protobuf encoding in the
    protobuf JSON mapping, with trace and span ids as hex, as OTLP/JSON writes them."""
    from google.protobuf.json_format import MessageToDict

    try:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    except ImportError:
        raise OtelMissing(INSTALL_HINT) from None
    data = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource in data.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _hex(span[key])
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _hex(base64_text: str) -> str:
    import base64

    return base64.b64decode(base64_text).hex()


def traces_url(url: str) -> str:
    """The OTLP/HTTP traces endpoint of `url`: a collector's base URL (`http://host:4318`, with or without a
    trailing `/`) gets `/v1/traces`; a URL that already ends in `/v1/traces` is kept. Anything else (another
    scheme, no host, a bad port, another path, a query or fragment) is an ExportError that says what to give,
    raised before a run whose spans go there."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        # `port` raises ValueError for one out of range or not a number.
        usable = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port is None or parts.port > 0)
    except ValueError:
        usable = False
    if not usable:
        raise ExportError(f"cannot export the spans to {url}: not an http:// or https:// URL with a host and port "
                          f"(e.g. http://127.0.0.1:4318, a collector's base URL)")
    if parts.query or parts.fragment or parts.path.rstrip("/") not in ("", TRACES_PATH):
        raise ExportError(f"cannot export the spans to {url}: give the collector's base URL (e.g. "
                          f"{parts.scheme}://{parts.netloc}) or its traces endpoint ({parts.scheme}://{parts.netloc}"
                          f"{TRACES_PATH}), not the path {parts.path + ('?' if parts.query else '') + parts.query!r}")
    base = url.split("#", 1)[0].rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def export_otlp(spans: list, url: str, timeout: float | None = None) -> None:
    """Send the spans to the OTLP/HTTP collector at `url` (its base URL or its traces endpoint, `traces_url`);
    ExportError if it did not take them."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import SpanExportResult
    except ImportError:
        raise OtelMissing(INSTALL_HINT) from None
    url = traces_url(url)
    if not spans:
        return
    # The exporter logs its failures; they are caught here and told once, as one message.
    heard = _Heard()
    logger = logging.getLogger("opentelemetry")
    saved = logger.propagate, logger.level
    logger.addHandler(heard)
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    try:
        exporter = OTLPSpanExporter(endpoint=url, timeout=timeout)
        try:
            result = exporter.export(spans)
        finally:
            exporter.shutdown()
    except Exception as problem:  # a malformed URL, refused before any request
        raise ExportError(f"cannot export the spans to {url}: {problem}") from None
    finally:
        logger.removeHandler(heard)
        logger.propagate = saved[0]
        logger.setLevel(saved[1])
    if result is not SpanExportResult.SUCCESS:
        cause = heard.os_reason() or _connect_problem(url) or heard.first()
        reason = f": {cause}" if cause else ""
        raise ExportError(f"cannot export the spans to {url} (is an OTLP/HTTP collector listening there?){reason}")


class _Heard(logging.Handler):
    """Keeps what the exporter logged, to name the cause of a failed export in one line."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.messages.append(record.getMessage())
        except Exception:
            pass

    def os_reason(self) -> str | None:
        """The operating system's reason (`[Errno 111] Connection refused`), if one was logged."""
        for message in self.messages:
            found = _OS_REASON.search(message)
            if found:
                return found.group(0)
        return None

    def first(self) -> str | None:
        return self.messages[0].splitlines()[0][:300] if self.messages else None


def _connect_problem(url: str) -> str | None:
    """Why a TCP connection to the URL's host and port fails, or None: the exporter gives up
    without logging the cause when its timeout leaves no room for a retry."""
    import socket
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with socket.create_connection((parts.hostname, port), timeout=2):
            return None
    except (OSError, ValueError, TypeError) as problem:
        if isinstance(problem, OSError) and problem.errno is not None:
            return f"[Errno {problem.errno}] {problem.strerror}"
        return str(problem) or None


_OS_REASON = re.compile(r"\[Errno -?\d+\] [^\"')]+")
