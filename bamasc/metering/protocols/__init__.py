"""The wire protocols the proxy speaks, one registered `WireProtocol` each (protocols/base.py says what one does).

A new protocol is one module with its subclass, plus one `register(...)`
line below; the proxy serves each registered protocol's routes for the models
whose provider record names its `api` (bamasc/provider_registry.py).
"""

from __future__ import annotations

from bamasc.metering.protocols.base import Asked, Counts, StreamReader, WireError, WireProtocol  # noqa: F401
from bamasc.metering.protocols.chat import ChatCompletions
from bamasc.metering.protocols.messages import Messages, check_betas  # noqa: F401
from bamasc.metering.protocols.responses import Responses

_PROTOCOLS: list[WireProtocol] = []


def register(protocol: WireProtocol) -> WireProtocol:
    """Serve `protocol` from now on; a route another protocol has taken already is a ValueError."""
    taken = {route for known in _PROTOCOLS for route in known.routes}
    if taken & set(protocol.routes):
        raise ValueError(f"protocol {protocol.name!r}: routes {sorted(taken & set(protocol.routes))} are taken")
    _PROTOCOLS.append(protocol)
    return protocol


def protocols() -> tuple[WireProtocol, ...]:
    """Every registered protocol, in the order they were registered."""
    return tuple(_PROTOCOLS)


CHAT = register(ChatCompletions())
MESSAGES = register(Messages())
RESPONSES = register(Responses())
