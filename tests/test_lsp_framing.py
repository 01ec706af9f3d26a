"""The language server's framing, without pygls: whole messages however the input is cut, and after any lie
or garbage the next well-formed message still comes through."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bamasc.lsp.framing import MAX_HEADER_BYTES, MAX_KEPT_GARBAGE, MAX_MESSAGE_BYTES, Frame, Framer, request_in
from tests.lsp_wire import OVER_THE_LIMIT, PIECES, READABLE, framed, lies

TEXTS = st.one_of(st.text(max_size=40), st.sampled_from(["Content-Length: 5\r\n\r\n", '"}', "{", "\\", "µ$ 😀"]))
BODIES = st.builds(
    lambda msg_id, text: json.dumps(
        {"jsonrpc": "2.0", "id": msg_id, "method": "workspace/symbol", "params": {"query": text}}, ensure_ascii=False
    ).encode(),
    st.integers(0, 10**9),
    TEXTS,
)
GARBAGE = st.one_of(st.binary(max_size=80), st.lists(st.sampled_from(PIECES), max_size=12).map(b"".join))
CUTS = st.lists(st.integers(1, 40), max_size=30)  # the sizes the input arrives in; the rest comes last


def frames(data: bytes, cuts: list[int] = ()) -> list[Frame]:
    framer, found, at = Framer(), [], 0
    for size in cuts:
        found += framer.feed(data[at : at + size])
        at += size
    return found + framer.feed(data[at:])


def parses(body: bytes) -> bool:
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(st.lists(BODIES, min_size=1, max_size=4), CUTS, st.sampled_from([b"", b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n"]))
def test_well_formed_messages_come_out_whole_however_cut(bodies, cuts, fields):
    data = b"".join(framed(body, fields=fields) for body in bodies)
    assert frames(data, cuts) == [Frame(body) for body in bodies]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BODIES, BODIES, st.sampled_from(sorted(lies(b"{}"))), CUTS)
def test_after_each_lie_the_next_message_comes_through(lied, good, kind, cuts):
    found = frames(lies(lied)[kind] + framed(good), cuts)
    assert found[-1] == Frame(good)
    # Before it, what is refused: a frame that seems whole (a body shorter than the lie) is no JSON.
    assert all(frame.problem or not parses(frame.body) for frame in found[:-1]), found


@settings(max_examples=200, deadline=None)
@given(GARBAGE, BODIES, CUTS)
def test_after_any_garbage_the_next_message_comes_through(garbage, good, cuts):
    assert frames(garbage + framed(good), cuts)[-1] == Frame(good)


def test_a_request_in_a_lying_frame_keeps_its_id():
    body = json.dumps({"jsonrpc": "2.0", "id": 41, "method": "textDocument/hover", "params": {}}).encode()
    for kind in READABLE:
        refused = [frame for frame in frames(lies(body)[kind] + framed(b"{}")) if frame.problem]
        assert refused, kind
        assert [request_in(frame.body)["id"] for frame in refused if request_in(frame.body)] == [41], kind


def test_the_limit_is_the_one_the_lies_test():
    assert OVER_THE_LIMIT == MAX_MESSAGE_BYTES + 1


def test_a_huge_length_allocates_nothing_and_what_follows_is_read_as_it_comes():
    framer = Framer()
    refused = framer.feed(framed(b"", b"999999999999"))
    assert [frame.problem for frame in refused] == ["Content-Length '999999999999' is over the limit of 67108864 bytes"]
    chunk = b"x" * 65536
    for _ in range(64):  # 4 MiB of a body that was never going to be read
        framer.feed(chunk)
        assert len(framer.buffer) <= MAX_HEADER_BYTES and len(framer.garbage) <= MAX_KEPT_GARBAGE
    good = framed(b'{"jsonrpc": "2.0", "method": "initialized", "params": {}}')
    assert framer.feed(good)[-1] == Frame(good.split(b"\r\n\r\n", 1)[1])
