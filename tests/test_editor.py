"""The editor files: the TextMate grammar (valid, its keywords the grammar's, its scopes on real lines) and the VS Code extension.

A small TextMate tokenizer runs the grammar's rules on sample lines: at each
position the rule matching earliest wins (the first listed on a tie), and a
begin/end rule scopes everything up to its end, through its own rules. That is
how editors apply the grammar, for the single- and multi-line rules it uses.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, ROOT

TEXTMATE = os.path.join(ROOT, "editors", "textmate", "bam.tmLanguage.json")
VSCODE = os.path.join(ROOT, "editors", "vscode")
ROOTS = ("meta.", "comment.", "string.", "keyword.", "constant.", "entity.", "variable.", "support.", "punctuation.")


def _load(path: str):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


GRAMMAR = _load(TEXTMATE)


def _rules(node):
    """Every rule object of the grammar (top level, repository, nested)."""
    for rule in node.get("patterns", []):
        yield rule
        yield from _rules(rule)


def _all_rules():
    yield from _rules(GRAMMAR)
    for entry in GRAMMAR["repository"].values():
        yield from _rules(entry)


def _scopes(rule) -> list[str]:
    names = [rule[key] for key in ("name",) if key in rule]
    for key in ("captures", "beginCaptures", "endCaptures"):
        names += [capture["name"] for capture in rule.get(key, {}).values()]
    return names


def grammar_keywords() -> set[str]:
    """The quoted words of grammars/bam.lark's rules: the language's (contextual) keywords. A terminal's
    words (the units `tokens` and `s`, read only after a number) are not among them."""
    with open(os.path.join(ROOT, "grammars", "bam.lark"), encoding="utf-8") as handle:
        lines = [line for line in handle if not line.lstrip().startswith("//") and not re.match(r"[A-Z_]+(\.\d+)?:", line)]
    return set(re.findall(r'"([a-z_]+)"', "".join(lines)))


def grammar_units() -> set[str]:
    """The words of the grammar's unit terminals (`TOKENS: "tokens"`)."""
    with open(os.path.join(ROOT, "grammars", "bam.lark"), encoding="utf-8") as handle:
        return set(re.findall(r'^[A-Z_]+: "([a-z]+)"$', handle.read(), flags=re.MULTILINE))


# ---------------------------------------------------------------- the grammar file


def test_the_grammar_is_valid_and_self_consistent():
    assert GRAMMAR["scopeName"] == "source.bam" and GRAMMAR["fileTypes"] == ["bam"]
    for rule in _all_rules():
        if "include" in rule:
            assert rule["include"].lstrip("#") in GRAMMAR["repository"], rule["include"]
        for key in ("match", "begin", "end"):
            if key in rule:
                re.compile(rule[key])  # the subset used is common to Oniguruma and Python
        for scope in _scopes(rule):
            assert scope.startswith(ROOTS) and scope.endswith(".bam"), scope
    used = {scope for rule in _all_rules() for scope in _scopes(rule)}
    for needed in ("comment.line.double-slash.bam", "comment.line.number-sign.bam", "string.quoted.triple.bam",
                   "string.quoted.double.bam", "variable.other.placeholder.bam", "constant.numeric.bam",
                   "keyword.other.unit.bam", "support.function.bam", "entity.name.type.bam",
                   "variable.other.property.bam", "keyword.declaration.bam"):
        assert needed in used, needed


def test_its_keywords_are_the_grammars():
    found = set()
    for rule in _all_rules():
        match = re.fullmatch(r"\\b\(([a-z_|]+)\)\\b", rule.get("match", ""))
        if match and rule.get("name", "").startswith("keyword."):
            found |= set(match.group(1).split("|"))
    assert grammar_keywords() >= {"model", "flow", "max_steps", "approved"}
    assert found == grammar_keywords()


def test_its_units_are_the_grammars():
    found = set()
    for rule in _all_rules():
        match = re.fullmatch(r"\(\?<=\[0-9\]\)\\s\*\(([a-z|]+)\)\\b", rule.get("match", ""))
        if match and rule.get("name", "") == "keyword.other.unit.bam":
            found |= set(match.group(1).split("|"))
    assert found == grammar_units() == {"tokens", "s"}


# ---------------------------------------------------------------- the grammar on real lines


def _candidates(patterns):
    for rule in patterns:
        if "include" in rule:
            yield from _candidates(GRAMMAR["repository"][rule["include"].lstrip("#")]["patterns"])
        else:
            yield rule


def tokenize(text: str) -> list[tuple[str, str]]:
    """(text, innermost scope) for every scoped piece of `text`, line by line."""
    out: list[tuple[str, str]] = []
    stack: list[dict] = []  # open begin/end rules
    for line in text.split("\n"):
        pos = 0
        while pos <= len(line):
            patterns = stack[-1].get("patterns", []) if stack else GRAMMAR["patterns"]
            best = None
            for rule in _candidates(patterns):
                found = re.compile(rule.get("match") or rule["begin"]).search(line, pos)
                if found and (best is None or found.start() < best[1].start()):
                    best = (rule, found)
            end = re.compile(stack[-1]["end"]).search(line, pos) if stack else None
            if end and (best is None or end.start() <= best[1].start()):
                out.append((line[end.start():end.end()], stack[-1]["name"]))
                for index, capture in sorted(stack[-1].get("endCaptures", {}).items()):
                    out.append((end.group(int(index)), capture["name"]))
                stack.pop()
                pos = max(end.end(), pos + 1) if end.end() == end.start() else end.end()
                continue
            if best is None or best[1].end() == best[1].start():
                break
            rule, found = best
            if "begin" in rule:
                out.append((found.group(), rule["name"]))
                for index, capture in sorted(rule.get("beginCaptures", {}).items()):
                    out.append((found.group(int(index)), capture["name"]))
                stack.append(rule)
            else:
                groups = rule.get("captures", {})
                if "name" in rule:
                    out.append((found.group(), rule["name"]))
                for index, capture in sorted(groups.items()):
                    if found.group(int(index)) is not None:
                        out.append((found.group(int(index)), capture["name"]))
            pos = found.end()
    return out


def scope_of(text: str, piece: str) -> list[str]:
    return [scope for found, scope in tokenize(text) if found == piece]


def test_declarations_attributes_calls_and_units():
    line = 'model deepseek_v3 { api_key = env("K")  price { input = 0.27 $/Mtok  output = 1_000 }  budget = 16 µ$ }'
    assert scope_of(line, "model") == ["keyword.declaration.bam"]
    assert scope_of(line, "deepseek_v3") == ["entity.name.type.bam"]
    assert scope_of(line, "api_key") == ["variable.other.property.bam"]
    assert scope_of(line, "env") == ["support.function.bam"]
    assert scope_of(line, '"') == ["string.quoted.double.bam", "punctuation.definition.string.begin.bam",
                                   "string.quoted.double.bam", "punctuation.definition.string.end.bam"]
    assert scope_of(line, "price") == ["entity.other.attribute-name.block.bam"]
    assert scope_of(line, "0.27") == ["constant.numeric.bam"] == scope_of(line, "1_000")
    assert scope_of(line, "$/Mtok") == ["keyword.other.unit.bam"] == scope_of(line, "µ$")


def test_a_range_of_output_caps():
    line = "role R { max_output = 128..384 }"
    assert scope_of(line, "128") == ["constant.numeric.bam"] == scope_of(line, "384")
    assert scope_of(line, "..") == ["keyword.operator.range.bam"]


def test_an_attribute_named_like_a_keyword_is_an_attribute():
    assert scope_of('  system = "You are terse."', "system") == ["variable.other.property.bam"]
    assert scope_of("system s {", "system") == ["keyword.declaration.bam"]


def test_topologies_and_flows():
    text = "topology t {\n  slot executor : Executor [1..3]\n  require count(executor, tier = 1) <= 2\n" \
           "  flow { answer refine executor(task) with critic until approved }\n}"
    assert scope_of(text, "slot") == ["keyword.other.slot.bam"]
    assert scope_of(text, "Executor") == ["entity.name.type.role.bam"]
    assert scope_of(text, "..") == ["keyword.operator.range.bam"]
    assert scope_of(text, "count") == ["keyword.other.bam"] == scope_of(text, "tier")
    assert scope_of("model m { tier = 1 }", "tier") == ["variable.other.property.bam"]
    assert scope_of(text, "<=") == ["keyword.operator.comparison.bam"]
    for word in ("answer", "refine", "with", "until", "approved"):
        assert scope_of(text, word) == ["keyword.control.flow.bam"], word
    assert scope_of(text, "flow") == ["keyword.declaration.bam"]


def test_strings_comments_and_placeholders():
    text = 'role r {  // a role\n  prompt = """\n    Solve {{task}} #1 // not a comment\n    {{previous?}}\n    """ # done\n' \
           '  system = "say \\"hi\\" {{task}}"\n}'
    pieces = tokenize(text)
    assert ("// a role", "comment.line.double-slash.bam") in pieces
    assert ("# done", "comment.line.number-sign.bam") in pieces
    assert scope_of(text, "{{task}}") == ["variable.other.placeholder.bam"] * 2
    assert scope_of(text, "{{previous?}}") == ["variable.other.placeholder.bam"]
    assert not [piece for piece, scope in pieces if scope.startswith("comment") and "not a comment" in piece]
    assert scope_of(text, '\\"') == ["constant.character.escape.bam"] * 2
    assert scope_of(text, '"""').count("string.quoted.triple.bam") == 2


def test_every_example_tokenizes_to_known_scopes():
    for path in EXAMPLES:
        with open(path, encoding="utf-8") as handle:
            pieces = tokenize(handle.read())
        assert pieces and all(scope.startswith(ROOTS) for _, scope in pieces)


# ---------------------------------------------------------------- the VS Code extension


def test_the_vscode_extension_declares_the_language_grammar_and_server():
    package = _load(os.path.join(VSCODE, "package.json"))
    (language,) = package["contributes"]["languages"]
    assert language["id"] == "bam" and language["extensions"] == [".bam"]
    (grammar,) = package["contributes"]["grammars"]
    assert grammar["language"] == "bam" and grammar["scopeName"] == GRAMMAR["scopeName"]
    # The extension ships its own copy (a packaged extension holds only its folder); it must not drift.
    assert _load(os.path.join(VSCODE, grammar["path"])) == GRAMMAR
    configuration = _load(os.path.join(VSCODE, language["configuration"]))
    assert configuration["comments"]["lineComment"] == "//"
    assert ["{", "}"] in configuration["brackets"] and ["[", "]"] in configuration["brackets"]
    assert "vscode-languageclient" in package["dependencies"]
    assert "onLanguage:bam" in package["activationEvents"]
    with open(os.path.join(VSCODE, package["main"]), encoding="utf-8") as handle:
        script = handle.read()
    assert '"lsp"' in script and "TransportKind.stdio" in script
    assert not os.path.exists(os.path.join(VSCODE, "node_modules"))


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_the_extension_script_is_valid_javascript():
    subprocess.run(["node", "--check", os.path.join(VSCODE, "extension.js")], check=True)


# ---------------------------------------------------------------- Neovim, as docs/editor.md sets it up

# Each Lua form of docs/editor.md, told by the call it rests on, and the Neovim it needs.
NEOVIM_FORMS = {"vim.lsp.enable(": (0, 11), "vim.lsp.start(": (0, 8), "vim.lsp.start_client(": (0, 7)}
# Waits until the server's diagnostics reach the buffer, then writes what Neovim sees and quits.
NEOVIM_CHECK = """
vim.wait(60000, function() return #vim.diagnostic.get(0) > 0 end, 100)
local names = {}
local clients = vim.lsp.get_clients and vim.lsp.get_clients({ bufnr = 0 }) or vim.lsp.buf_get_clients(0)
for _, client in pairs(clients) do table.insert(names, client.name) end
local found = vim.diagnostic.get(0)
vim.fn.writefile({vim.bo.filetype, vim.bo.commentstring, table.concat(names, ","),
                  found[1] and found[1].message or ""}, vim.env.BAMASC_NVIM_OUT)
vim.cmd("qa!")
"""


def _neovim_version() -> tuple[int, int] | None:
    if shutil.which("nvim") is None:
        return None
    first = subprocess.run(["nvim", "--version"], capture_output=True, text=True, timeout=30).stdout.split("\n")[0]
    match = re.match(r"NVIM v(\d+)\.(\d+)", first)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _lua_forms() -> dict[str, str]:
    with open(os.path.join(ROOT, "docs", "editor.md"), encoding="utf-8") as handle:
        blocks = re.findall(r"```lua\n(.*?)```", handle.read(), flags=re.DOTALL)
    return {call: next(block for block in blocks if call in block) for call in NEOVIM_FORMS}


@pytest.mark.parametrize("call", sorted(NEOVIM_FORMS))
def test_the_neovim_forms_attach_the_server(tmp_path, call):
    """Each form docs/editor.md gives, on a Neovim new enough for it: the buffer is a `bam` buffer with
    `//` comments, and the server attaches and publishes the diagnostics of a broken file."""
    version = _neovim_version()
    if version is None:
        pytest.skip("Neovim is not installed (apt-get install neovim)")
    if version < NEOVIM_FORMS[call]:
        pytest.skip(f"the {call}...) form needs Neovim {'.'.join(map(str, NEOVIM_FORMS[call]))}, this is {version}")
    config = tmp_path / "init.lua"
    config.write_text(_lua_forms()[call], encoding="utf-8")
    check = tmp_path / "check.lua"
    check.write_text(NEOVIM_CHECK, encoding="utf-8")
    broken = tmp_path / "broken.bam"
    broken.write_text("model m {\n", encoding="utf-8")
    out = tmp_path / "seen.txt"
    shim = tmp_path / "bin"  # `bamasc` as the docs' `cmd` names it: this checkout's
    shim.mkdir()
    (shim / "bamasc").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m bamasc "$@"\n', encoding="utf-8")
    (shim / "bamasc").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}", "BAMASC_NVIM_OUT": str(out),
           "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), "XDG_CONFIG_HOME": str(tmp_path),
           "XDG_DATA_HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path)}
    subprocess.run(["nvim", "--headless", "--clean", "-u", str(config), "-c", f"luafile {check}", str(broken)],
                   cwd=tmp_path, env=env, capture_output=True, timeout=120)
    filetype, comments, clients, message = out.read_text(encoding="utf-8").split("\n")[:4]
    assert (filetype, comments, clients) == ("bam", "// %s", "bamasc")
    assert message  # the server's syntax error for the unclosed block
