"""Values between the candidate's jail and the tests' jail: plain data over pipes, and each side's loop.

The candidate's process (`serve`) runs the test imports, the candidate and
the test setup code, then answers requests: the value of a global name, a
call, an attribute, truth, length, items. The tests' process (`judge`) runs
the dataset's asserts against `Remote` stand-ins for the candidate's names.
Nothing but plain data crosses: None, bools, ints, floats, complex numbers,
strings, bytes, ranges, lists, tuples, dicts, sets and frozensets
(subclasses travel as their base type), iterators as their items, and any
other object as a
numbered reference that stays on the candidate's side. The tests' side
decodes only these, into objects of its own, so no object of the
candidate's is ever compared there and an always-equal `__eq__` compares
nothing; whatever bytes the candidate writes are at most a value it chose to
return.

Each message is a 4-byte big-endian length and JSON; objects are tagged
({"t": [...]} a tuple, {"d": [[k, v], ...]} a dict, {"r": n} a reference, ...).
"""

from __future__ import annotations

import builtins
import json
import os

MAX_MESSAGE = 4 * 2**20  # bytes of one message; a larger reply is a failed item
MAX_DEPTH = 200  # nesting of one value
MAX_ITEMS = 10**6  # items an iterator may yield into one value

_TAGS = {"t": tuple, "s": set, "fs": frozenset}
# Exceptions the candidate raises arrive as these builtins (tests may expect one); others, and
# those that steer control flow (SystemExit, StopIteration, ...), arrive as CandidateError.
_PASSED_ON = frozenset(
    name for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, Exception)
    and not issubclass(value, (StopIteration, StopAsyncIteration, Warning))
)


class WireError(Exception):
    """A message that is not plain data, is too large or too deep."""


class CandidateGone(Exception):
    """The candidate's process has ended (its pipe reached its end)."""


class CandidateError(Exception):
    """An exception the candidate raised whose kind is not passed on as itself."""


# ---------------------------------------------------------------- messages


def send(fd: int, message) -> None:
    data = json.dumps(message, separators=(",", ":")).encode("ascii")
    if len(data) > MAX_MESSAGE:
        raise WireError(f"a message of {len(data)} bytes is over the limit of {MAX_MESSAGE}")
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(fd, view) :]


def receive(fd: int) -> bytes:
    """One message's JSON; CandidateGone at the end of the pipe."""
    size = int.from_bytes(_read_exactly(fd, 4), "big")
    if size > MAX_MESSAGE:
        raise WireError(f"a message of {size} bytes is over the limit of {MAX_MESSAGE}")
    return _read_exactly(fd, size)


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise CandidateGone("the other process ended")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ---------------------------------------------------------------- values


def encode(value, refer, depth: int = 0):
    """`value` as JSON-ready plain data; `refer(obj)` numbers any other object (or raises TypeError)."""
    if depth > MAX_DEPTH:
        raise WireError("a value nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    deeper = depth + 1
    if kind is list:
        return [encode(item, refer, deeper) for item in value]
    if kind is tuple:
        return {"t": [encode(item, refer, deeper) for item in value]}
    if kind is dict:
        return {"d": [[encode(k, refer, deeper), encode(v, refer, deeper)] for k, v in value.items()]}
    if kind is set:
        return {"s": [encode(item, refer, deeper) for item in value]}
    if kind is frozenset:
        return {"fs": [encode(item, refer, deeper) for item in value]}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    if kind is bytes:
        return {"b": value.decode("latin-1")}
    if kind is range:
        return {"rg": [value.start, value.stop, value.step]}
    for base in (bool, int, float, str, list, tuple, dict, set, frozenset, complex, bytes):
        if isinstance(value, base):  # a Counter as a dict, a namedtuple as a tuple, an IntEnum as an int
            return encode(base(value), refer, depth)
    if hasattr(kind, "__next__") and hasattr(kind, "__iter__"):  # a generator, map, zip, ...
        items = []
        for item in value:
            if len(items) >= MAX_ITEMS:
                raise WireError(f"an iterator yielded more than {MAX_ITEMS} items")
            items.append(encode(item, refer, deeper))
        return {"it": items}
    return {"r": refer(value)}


def decode(data: bytes, resolve):
    """The plain value a message holds; `resolve(n)` turns reference n into an object."""

    def tagged(obj: dict):
        if len(obj) != 1:
            raise WireError("an object with other than one tag")
        ((tag, body),) = obj.items()
        if tag in _TAGS and type(body) is list:
            return _TAGS[tag](body)
        if tag == "d" and type(body) is list and all(type(pair) is list and len(pair) == 2 for pair in body):
            return dict(body)
        if tag == "it" and type(body) is list:
            return iter(body)
        if tag == "c" and type(body) is list and len(body) == 2 and all(type(part) in (int, float) for part in body):
            return complex(body[0], body[1])
        if tag == "b" and type(body) is str:
            return body.encode("latin-1")
        if tag == "rg" and type(body) is list and len(body) == 3 and all(type(part) is int for part in body) and body[2]:
            return range(*body)
        if tag == "r" and type(body) is int:
            return resolve(body)
        raise WireError(f"an unknown or malformed tag {tag[:20]!r}")

    try:
        return json.loads(data.decode("ascii"), object_hook=tagged)
    except WireError:
        raise
    except (ValueError, TypeError, RecursionError, MemoryError, UnicodeDecodeError) as problem:
        raise WireError(f"not plain data: {type(problem).__name__}: {str(problem)[:200]}") from None


# ---------------------------------------------------------------- the candidate's side


def serve(job: dict, requests: int, replies: int) -> None:
    """Load the candidate, say whether it loaded, then answer the tests' requests until they end."""
    import sys
    import traceback

    namespace = {"__name__": "__main__", "__builtins__": builtins}
    objects: list = []

    def refer(value) -> int:
        objects.append(value)
        return len(objects) - 1

    def failure(problem: BaseException) -> list:
        try:
            return ["raise", str(type(problem).__name__), str(problem)[:500]]
        except BaseException:  # an exception of its own whose text cannot be had
            return ["raise", "Exception", "an exception that cannot be shown"]

    def flush() -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass

    try:
        for name, text in (("<test imports>", job["imports"]), ("main.py", job["candidate"]),
                           ("<test setup>", job["setup"])):
            if text.strip():
                exec(compile(text, name, "exec"), namespace)
        greeting = ["ready"]
    except BaseException as problem:  # its own code raised, SystemExit included: it did not load
        greeting = failure(problem)
        try:
            traceback.print_exc()
        except BaseException:  # its stderr may be full or closed
            pass
    flush()
    try:
        send(replies, greeting)
    except OSError:
        return
    if greeting[0] != "ready":
        return
    while True:
        try:
            request = decode(receive(requests), objects.__getitem__)
        except CandidateGone:
            return
        try:
            reply = _answer(request, namespace)
            message = reply if reply[0] != "ok" else ["ok", encode(reply[1], refer)]
        except BaseException as problem:
            message = failure(problem)
        flush()
        try:
            try:
                send(replies, message)
            except (WireError, ValueError) as problem:  # too large, or an int too long to write
                send(replies, failure(problem))
        except OSError:  # the tests have ended
            return


def _answer(request, namespace: dict) -> list:
    what = request[0]
    if what == "get":
        return ["ok", namespace[request[1]]] if request[1] in namespace else ["missing"]
    target = request[1]  # a reference, already resolved to the object
    if what == "call":
        return ["ok", target(*request[2], **request[3])]
    if what == "attr":
        return ["ok", getattr(target, request[2])]
    if what == "bool":
        return ["ok", bool(target)]
    if what == "len":
        return ["ok", len(target)]
    if what == "iter":
        return ["ok", list(target)]
    if what == "item":
        return ["ok", target[request[2]]]
    if what == "contains":
        return ["ok", request[2] in target]
    raise WireError(f"unknown request {what!r}")


# ---------------------------------------------------------------- the tests' side


class Link:
    """The tests' end of the pipes to the candidate."""

    def __init__(self, requests: int, replies: int) -> None:
        self.requests = requests
        self.replies = replies

    def greeting(self) -> None:
        """Return once the candidate has loaded; raise what it raised while loading."""
        reply = self._receive()
        if reply != ["ready"]:
            raise self._raised(reply)

    def ask(self, what: str, *operands):
        def refer(value) -> int:
            if type(value) is Remote:
                return value._ref
            raise TypeError(f"a {type(value).__name__} cannot be passed to the candidate (only plain data)")

        send(self.requests, [what, *[encode(operand, refer) for operand in operands]])
        reply = self._receive()
        if reply == ["missing"]:
            raise NameError(f"the candidate defines no {operands[0]!r}")
        if type(reply) is list and len(reply) == 2 and reply[0] == "ok":
            return reply[1]
        raise self._raised(reply)

    def _receive(self):
        return decode(receive(self.replies), lambda ref: Remote(self, ref))

    @staticmethod
    def _raised(reply) -> BaseException:
        if not (type(reply) is list and len(reply) == 3 and reply[0] == "raise"
                and type(reply[1]) is str and type(reply[2]) is str):
            return WireError("the candidate's reply is not a message of this protocol")
        name, message = reply[1][:100], reply[2][:500]
        error = getattr(builtins, name)(message) if name in _PASSED_ON else CandidateError(f"{name}: {message}")
        error.raised_by_candidate = True
        return error


class Remote:
    """An object that stays in the candidate's process: it can be called, passed back, asked for
    attributes, truth, length, items; it equals nothing but itself."""

    __slots__ = ("_link", "_ref")

    def __init__(self, link: Link, ref: int) -> None:
        self._link = link
        self._ref = ref

    def __call__(self, *args, **kwargs):
        return self._link.ask("call", self, list(args), kwargs)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._link.ask("attr", self, name)

    def __bool__(self) -> bool:
        return self._link.ask("bool", self)

    def __len__(self) -> int:
        return self._link.ask("len", self)

    def __iter__(self):
        items = self._link.ask("iter", self)
        if type(items) is not list:
            raise CandidateError("the candidate's object gave no list of items")
        return iter(items)

    def __getitem__(self, key):
        return self._link.ask("item", self, key)

    def __contains__(self, item) -> bool:
        found = self._link.ask("contains", self, item)
        if type(found) is not bool:
            raise CandidateError("the candidate's object answered `in` with no bool")
        return found

    def __repr__(self) -> str:
        return f"<the candidate's object #{self._ref}>"


def judge(job: dict, link: Link) -> tuple[str, str]:
    """(verdict, detail) of the asserts against the candidate: passed, failed, error or memory."""
    import ast

    namespace = {"__name__": "__tests__", "__builtins__": builtins}
    try:
        if job["imports"].strip():
            exec(compile(job["imports"], "<test imports>", "exec"), namespace)
        trees = [ast.parse(test, f"<test {number}>") for number, test in enumerate(job["tests"], 1)]
    except BaseException as problem:
        return "error", f"the dataset's tests do not run: {type(problem).__name__}: {problem}"
    stored = {node.id for tree in trees for node in ast.walk(tree)
              if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)}
    # Trusted names win: builtins and the test imports are never the candidate's.
    wanted = sorted({node.id for tree in trees for node in ast.walk(tree)
                     if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
                    - stored - set(namespace) - set(dir(builtins)))
    try:
        link.greeting()
    except BaseException as problem:
        return _verdict_of(problem, "while it loaded")
    number = 0
    try:
        for name in wanted:
            try:
                namespace[name] = link.ask("get", name)
            except NameError:
                pass  # the test then fails with a NameError of its own
        for number, (test, tree) in enumerate(zip(job["tests"], trees), 1):
            exec(compile(tree, f"<test {number}>", "exec"), namespace)
    except AssertionError as problem:
        if number and not getattr(problem, "raised_by_candidate", False):
            text = " ".join(job["tests"][number - 1].split())[:200]
            return "failed", f"AssertionError: test {number}: {text}" + (f" ({problem})" if str(problem) else "")
        return _verdict_of(problem, f"in test {number}")
    except BaseException as problem:
        return _verdict_of(problem, f"in test {number}" if number else "before the tests")
    return "passed", ""


def _verdict_of(problem: BaseException, where: str) -> tuple[str, str]:
    if isinstance(problem, CandidateGone):
        return "error", f"the candidate's process ended ({where})"
    by_candidate = getattr(problem, "raised_by_candidate", False)
    if isinstance(problem, MemoryError):
        if by_candidate:
            return "memory", f"MemoryError under the memory limit ({where})"
        return "error", "the tests' process ran out of memory (the candidate's reply was too large)"
    source = "the candidate raised " if by_candidate else ""
    return "error", f"{source}{type(problem).__name__}: {str(problem)[:300]} ({where})"
