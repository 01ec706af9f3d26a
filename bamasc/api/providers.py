"""Providers a run may be given instead of the models' own: the offline fake and recorded cassettes.

`plan.run(task, provider=bamasc.providers.fake("verbose"))` answers every
model offline, as `bamasc exec --fake verbose` does; `cassette(path)` plays
recorded calls back, as `--cassette` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bamasc.api.errors import UsageError

MODES = ("echo", "verbose", "random")


@dataclass(frozen=True)
class Providers:
    """Which providers answer a run's calls (made with `fake` or `cassette`)."""

    kind: str  # fake | cassette
    mode: str | None = None  # fake: echo | verbose | random
    latency_s: float | None = None  # fake: seconds each reply takes; None: what each model's `latency` declares
    seed: int = 0  # fake: the seed of "random" choices
    path: str | None = None  # cassette: the JSONL file
    record: bool = False  # cassette: append real calls to it instead of playing it back

    @property
    def offline(self) -> bool:
        """No call reaches a provider's servers, so no rate limit applies."""
        return self.kind == "fake" or not self.record


def fake(mode: str = "echo", *, latency_s: float | None = None, seed: int = 0) -> Providers:
    """The offline fake provider for every model: "echo" (short shaped answers), "verbose" (every
    reply at its full output cap, critics rejecting: the worst case) or "random" (seeded choices).

    `latency_s`: seconds every reply takes (default: the model's declared `latency`, else none).
    """
    if mode not in MODES:
        raise UsageError(f"fake mode must be one of {', '.join(MODES)}, not {mode!r}")
    if latency_s is not None and not (math.isfinite(latency_s) and 0 <= latency_s <= 3600):
        raise UsageError(f"latency_s must be seconds from 0 to 3600, not {latency_s!r}")
    return Providers("fake", mode=mode, latency_s=latency_s, seed=seed)


def cassette(path: str, *, record: bool = False) -> Providers:
    """Recorded calls played back offline (a call not on the cassette is an error naming it), or,
    with `record`, the models' own providers with every call appended to the cassette."""
    return Providers("cassette", path=path, record=record)


def exec_fields(providers: Providers | None) -> dict[str, Any]:
    """The ExecOptions fields that choose these providers, as the command line's options would."""
    if providers is None:
        return {}
    if not isinstance(providers, Providers):
        raise UsageError(
            f"provider must be made by bamasc.providers.fake(...) or bamasc.providers.cassette(...), not {type(providers).__name__}"
        )
    if providers.kind == "cassette":
        return {"cassette": providers.path, "record": providers.record}
    if providers.latency_s is None and providers.seed == 0:
        return {"fake_mode": providers.mode}  # exactly `--fake MODE`
    return {"fake_mode": providers.mode, "providers": _FakeFactory(providers)}


class _FakeFactory:
    """Makes each model's fake provider with the latency and seed asked for."""

    offline = True

    def __init__(self, providers: Providers) -> None:
        self.providers = providers

    def __call__(self, model: Any) -> Any:
        from bamasc.runtime.providers.fake import FakeProvider

        latency = self.providers.latency_s
        if latency is None:
            declared = getattr(model, "latency", None)
            delays = {} if declared is None else {
                "first_token_s": declared.first_token_s, "per_output_token_s": declared.per_output_token_s
            }
        else:
            delays = {"first_token_s": latency}
        return FakeProvider(model.name, mode=self.providers.mode or "echo", seed=self.providers.seed, **delays)
