"""Property tests: `bamasc lint` survives any mangling of valid sources and never raises.

Mutations start from the shipped examples and stdlib templates: tokens (split
on whitespace and punctuation) deleted, duplicated, swapped or replaced; random
and non-UTF-8 bytes inserted; the file cut short; and inputs of about 1 MB.
Whatever the input, linting returns diagnostics with known codes and spans,
every renderer accepts them, and the command line exits 0, 1 or 2.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bamasc.cli import main
from bamasc.diagnostics import CODES, ERROR, WARNING, render_github, render_json, render_sarif, render_text
from bamasc.lint import lint_paths
from tests.conftest import EXAMPLES, STDLIB

SEEDS = {path: Path(path).read_bytes() for path in EXAMPLES + STDLIB}
TOKEN = re.compile(rb"\s+|\w+|[^\w\s]")
# Pieces of the language to splice in, so mutants reach the checks and not only the parser.
VOCABULARY = [
    b"{", b"}", b"[", b"]", b"(", b")", b"=", b",", b":", b"..", b"*", b"+", b"-", b"<=", b"$",
    b"\xc2\xb5$", b"$/Mtok", b'"', b'"""', b"//", b"#", b"\n", b" ", b"0", b"-1", b"1.5", b"1e9",
    b"model", b"role", b"topology", b"system", b"import", b"slot", b"require", b"flow", b"answer",
    b"count", b"tier", b"chain", b"parallel", b"vote", b"refine", b"plan", b"max_steps", b"task",
    b"{{task}}", b"{{", b"}}", b'env("X")', b'"std/linear"', b'"std/nope"', b'"main.bam"',
]
WORD = re.compile(rb"\w+")
WORDS = sorted({word for seed in SEEDS.values() for word in WORD.findall(seed)} | {b"0", b"-1", b"1.5", b"99999"})
# Weighted: renames keep most files parseable; byte-level edits mostly stop the parser.
EDITS = ["rename"] * 6 + ["delete", "duplicate", "swap", "replace", "splice", "splice", "insert_bytes", "not_utf8", "truncate"]
NOT_UTF8 = [b"\xff", b"\x80", b"\xc3", b"\xc3(", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe9", b"\xfe\xff"]

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LARGE = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def token_mutants(draw) -> bytes:
    """A seed file with a few token-level edits."""
    tokens = TOKEN.findall(SEEDS[draw(st.sampled_from(sorted(SEEDS)))])
    for _ in range(draw(st.integers(1, 4))):
        if not tokens:
            break
        i = draw(st.integers(0, len(tokens) - 1))
        edit = draw(st.sampled_from(EDITS))
        if edit == "rename":  # word for word: the file usually still parses, so the checks run
            words = [k for k, token in enumerate(tokens) if WORD.fullmatch(token)]
            if words:
                tokens[draw(st.sampled_from(words))] = draw(st.sampled_from(WORDS))
        elif edit == "delete":
            del tokens[i]
        elif edit == "duplicate":
            tokens.insert(i, tokens[i])
        elif edit == "swap":
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif edit == "replace":
            tokens[i] = draw(st.sampled_from(tokens))
        elif edit == "splice":
            tokens.insert(i, draw(st.sampled_from(VOCABULARY)))
        elif edit == "insert_bytes":
            tokens.insert(i, draw(st.binary(min_size=1, max_size=4)))
        elif edit == "not_utf8":
            tokens.insert(i, draw(st.sampled_from(NOT_UTF8)))
        else:
            del tokens[i:]
    return b"".join(tokens)


@st.composite
def byte_mutants(draw) -> bytes:
    """A seed file cut at any byte (even inside 'µ'), or with raw bytes written over or into it."""
    data = bytearray(SEEDS[draw(st.sampled_from(sorted(SEEDS)))])
    at = draw(st.integers(0, len(data)))
    edit = draw(st.sampled_from(["truncate", "insert", "overwrite"]))
    if edit == "truncate":
        return bytes(data[:at])
    chunk = draw(st.one_of(st.binary(min_size=1, max_size=16), st.sampled_from(NOT_UTF8)))
    if edit == "insert":
        data[at:at] = chunk
    else:
        data[at : at + len(chunk)] = chunk
    return bytes(data)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def lint_survives(path) -> None:
    """The properties every input must have, whatever it contains."""
    result = lint_paths([str(path)])
    for diagnostic in result.diagnostics:
        assert diagnostic.code in CODES
        assert diagnostic.severity in (ERROR, WARNING)
        assert diagnostic.span is not None and diagnostic.span.line >= 1 and diagnostic.span.col >= 1
    render_text(result.diagnostics, result.sources, limit=50)
    json.loads(render_json(result.diagnostics, result.files))
    json.loads(render_sarif(result.diagnostics))
    render_github(result.diagnostics)

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["lint", str(path)])
    assert code in (0, 1, 2)
    assert code == (1 if any(d.severity == ERROR for d in result.diagnostics) else 0)


def write(workdir, data: bytes):
    path = workdir / "main.bam"
    path.write_bytes(data)
    return path


# Crashes found while writing these tests, kept as regressions:
# a NUL byte in an import path (os functions raise ValueError),
# deeply nested lists and long operator chains (the transformer recursed past Python's limit),
# a role and a model with no output cap (the budget check divided by nothing it could bound).
@FAST
@given(source=token_mutants())
@example(source=b'import "std/lin\x00ear"\n')
@example(source=b"system s { models = " + b"[" * 5000 + b"]" * 5000 + b" }\n")
@example(source=b"topology t { slot a : A [1..1] require " + b"count(a) + " * 3000 + b"0 <= 3 flow { answer a(task) } }")
@example(
    source=b'import "std/linear"\nmodel m { provider = openai name = "m" price { input = 1 output = 1 } tier = 1 }\n'
    b'role Executor { prompt = "{{task}}" }\nsystem s { models = [m] topologies = [linear] budget = 1625 }\n'
)
def test_token_mutations_never_crash(workdir, source: bytes):
    lint_survives(write(workdir, source))


@FAST
@given(source=byte_mutants())
@example(source=b'import "/dev/zero"\n')
@example(source=b"model m {\n  name = \"caf\xe9\"\n}\n")
def test_byte_mutations_never_crash(workdir, source: bytes):
    lint_survives(write(workdir, source))


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda seed: seed * (1_000_000 // len(seed) + 1), id="valid-file-repeated"),
        pytest.param(lambda seed: (seed * (1_000_000 // len(seed) + 1))[:1_000_000], id="repeated-and-cut"),
        pytest.param(lambda seed: seed + b"\n" + b"// padding\n" * 90_000, id="padded-with-comments"),
        pytest.param(lambda seed: seed.replace(b"{{task}}", b"{{task}} " + b"x" * 1_000_000, 1), id="one-long-prompt"),
        pytest.param(lambda seed: b'role R {\n  prompt = """' + b"never closed\n" * 80_000, id="unterminated-long-string"),
        pytest.param(lambda seed: b"system s { models = " + b"[" * 1_000_000, id="a-million-open-brackets"),
    ],
)
def test_one_megabyte_inputs(workdir, build):
    lint_survives(write(workdir, build(SEEDS[EXAMPLES[0]])))


@LARGE
@given(seed=st.integers(0, 2**32 - 1), text=st.booleans())
def test_one_megabyte_random_blob(workdir, seed: int, text: bool):
    rng = random.Random(seed)
    if text:  # valid UTF-8 made of language pieces, so the parser gets somewhere
        blob = b" ".join(rng.choice(VOCABULARY) for _ in range(250_000))[:1_000_000]
    else:
        blob = rng.randbytes(1_000_000)
    lint_survives(write(workdir, blob))
