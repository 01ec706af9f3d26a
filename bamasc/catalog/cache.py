"""The cache of the catalogue's rows, so lint need not load the package: read, checked, and rebuilt when wrong.

The package loads in about 0.1 s, so `bamasc lint` does not import it:
catalog(...) and the check of hand-written prices read an index of every
entry's row kept in the cache folder, rebuilt (from the package) when the
installed data, bamasc or the day changes.

The cache is a copy, never an authority (docs/language.md, "The catalogue
cache"). Each of its files carries a checksum of what it holds, and every row
read is checked (`rows.row_problem`); a file that fails either is ignored,
rebuilt from the package and reported (`take_problems`, lint's BAM411) with
the file, the row and the field.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os

from bamasc.catalog import pinned
from bamasc.catalog.rows import differences, plain, rows_problem, shown
from bamasc.catalog.snapshot import PACKAGE, build_rows, package_date, today

INDEX_FORMAT = 3  # the layout of the cached index: a change rebuilds every cached one
_LOADED: dict = {}  # the index this process read, by its key
_PROBLEMS: list[str] = []  # cache files found wrong (and rebuilt) since take_problems() last took them


def take_problems() -> list[str]:
    """What was found wrong with the cache (each file ignored and rebuilt) since the last call."""
    found = list(_PROBLEMS)
    _PROBLEMS.clear()
    return found


def keep_problem(message: str) -> None:
    if message not in _PROBLEMS:
        _PROBLEMS.append(message)


def index() -> dict | None:
    """{snapshot: [date, estimated], providers: [[id, api_pattern, {model: row}]]} (rows: `to_row`),
    cached per installed data, bamasc release and day.

    The cache holds one small file naming the providers and one file of rows per
    provider, read only when an entry of that provider is asked for: a lint of
    OpenAI and DeepSeek models reads 10 KB, not the 200 KB of every provider.
    Each file holds its key and a checksum of the rest (`_checksum`): one of
    another key is another day's or release's, rebuilt without a word; one
    whose checksum or content is wrong is rebuilt and reported.

    A pinned catalogue (`pinned.py`) is the index when there is one.
    """
    fixed = pinned.index()
    if fixed is not None:
        return fixed
    stamp = data_stamp()
    if stamp is None:
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(os.environ.get("BAMASC_CACHE") or os.path.join(base, "bamasc"), "catalog-index")
    path = os.path.join(folder, "providers.json")
    from bamasc.version import __version__

    key = f"{INDEX_FORMAT}:{__version__}:{stamp}:{today().isoformat()}"
    if _LOADED.get("key") == key:
        return _LOADED
    cached = _read_cached(path, key, _providers_problem)
    if cached is not None:
        _LOADED.clear()
        _LOADED.update(cached, providers=[[id_, pattern, ProviderRows(folder, id_, key)] for id_, pattern in cached["providers"]])
        return _LOADED
    date, estimated = package_date()
    providers = build_rows()
    built = {"key": key, "snapshot": [date.isoformat(), estimated], "providers": providers}
    try:
        os.makedirs(folder, exist_ok=True)
        # The rows first, the list of providers last: a list with this key means its rows are there.
        for id_, _, models in providers:
            _write_cached(os.path.join(folder, f"{id_}.json"), {"key": key, "models": models})
        _write_cached(path, {**built, "providers": [[id_, pattern] for id_, pattern, _ in providers]})
    except OSError:
        pass  # a read-only cache: the index is built again next time
    _LOADED.clear()
    _LOADED.update(built)
    return built


def compare(provider_id: str, model_id: str, expected: list) -> None:
    """Report, and rewrite from the package, a cached row of this entry that differs from `expected`
    (the row the package gives it)."""
    found = index()
    for entry_provider, _, models in found["providers"] if found else ():
        if entry_provider == provider_id and isinstance(models, ProviderRows):
            cached = models.get(model_id)
            if cached is not None and plain(cached) != plain(expected):
                _PROBLEMS.append(f"{_cache_file(models.path)}: row '{model_id}' differs from the {PACKAGE} snapshot "
                                 f"({differences(cached, expected)}); the snapshot's prices are used and the "
                                 "file was rebuilt from it")
                models.rebuild()


def _cache_file(path: str) -> str:
    return f"the catalogue cache file {path}"


def _checksum(value: dict) -> str:
    """The SHA-256 of a cache file's content but its checksum: a file edited after it was written fails it."""
    content = {name: item for name, item in value.items() if name != "sha256"}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _write_cached(path: str, value: dict) -> None:
    temporary = f"{path}.{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump({**value, "sha256": _checksum(value)}, handle)
    os.replace(temporary, path)


def _read_cached(path: str, key: str, content_problem) -> dict | None:
    """The cache file at `path` if it is there, of this key, and sound: its content as `content_problem`
    (which names the row and the field) finds it, then its checksum. A file that is not is reported."""
    try:
        with open(path, encoding="utf-8") as handle:
            cached = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as problem:  # (UnicodeDecodeError is a ValueError)
        reason = f"it cannot be read as JSON ({problem})"
    else:
        if isinstance(cached, dict) and "key" in cached and cached["key"] != key:
            return None  # another day's or release's: replaced without a word
        reason = "it is not a JSON object" if not isinstance(cached, dict) else content_problem(cached)
        if reason is None and cached.get("sha256") != _checksum(cached):
            reason = "its content does not match its checksum: it was changed after bamasc wrote it"
            if "models" in cached:
                reason += _changed_rows(path, cached["models"])
        if reason is None:
            return cached
    _PROBLEMS.append(f"{_cache_file(path)}: {reason}; it was ignored and rebuilt from the {PACKAGE} snapshot")
    return None


def _changed_rows(path: str, rows: dict) -> str:
    """The rows of an edited provider file that differ from the package's, as ' (row 'm': input 1 instead of 2)'."""
    provider = os.path.basename(path).removesuffix(".json")
    expected = next((models for id_, _, models in build_rows() if id_ == provider), {})
    changed = [f"row '{model}': {differences(row, expected.get(model))}"
               for model, row in rows.items() if plain(row) != plain(expected.get(model))]
    changed += [f"row '{model}' is missing" for model in expected if model not in rows]
    if not changed:
        return ""
    more = f"; ... and {len(changed) - 3} more" if len(changed) > 3 else ""
    return " (" + "; ".join(changed[:3]) + more + ")"


def _providers_problem(cached: dict) -> str | None:
    """Why the list of providers cannot be used, or None."""
    snapshot = cached.get("snapshot")
    if not (isinstance(snapshot, list) and len(snapshot) == 2 and isinstance(snapshot[1], bool)
            and isinstance(snapshot[0], str) and _is_date(snapshot[0])):
        return f"field 'snapshot' is {shown(snapshot)}, not [an ISO date, true or false]"
    providers = cached.get("providers")
    if not isinstance(providers, list):
        return f"field 'providers' is {shown(providers)}, not a list"
    for number, entry in enumerate(providers):
        if not (isinstance(entry, list) and len(entry) == 2 and _is_name(entry[0]) and isinstance(entry[1], str)):
            return f"field 'providers', entry {number} is {shown(entry)}, not [a provider id, its API's pattern]"
    return None


def _is_date(text: str) -> bool:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _is_name(value) -> bool:
    """A provider id the cache may name a file after: letters, digits, '-', '_' and '.', not starting with '.'."""
    return (isinstance(value, str) and 0 < len(value) <= 100 and not value.startswith(".")
            and value.replace("-", "").replace("_", "").replace(".", "").isalnum() and value.isascii())


class ProviderRows:
    """One provider's {model: row}, read from the cache on first use (rebuilt from the package
    if that file is missing, belongs to another index, or fails its checksum or a row's check)."""

    def __init__(self, folder: str, provider: str, key: str):
        self.path = os.path.join(folder, f"{provider}.json")
        self.provider = provider
        self.key = key
        self.rows: dict | None = None

    def _load(self) -> dict:
        if self.rows is None:
            cached = _read_cached(self.path, self.key, rows_problem)
            if cached is not None:
                self.rows = cached["models"]
            else:
                self.rebuild()
        return self.rows

    def rebuild(self) -> None:
        """The rows from the package, written back over the file (a read-only cache is left as it is)."""
        self.rows = next((models for id_, _, models in build_rows() if id_ == self.provider), {})
        try:
            _write_cached(self.path, {"key": self.key, "models": self.rows})
        except OSError:
            pass

    def get(self, model: str, default=None):
        return self._load().get(model, default)

    def __contains__(self, model: str) -> bool:
        return model in self._load()

    def __getitem__(self, model: str):
        return self._load()[model]


def data_stamp() -> str | None:
    """The installed snapshot's identity (its data file's path, size and time), found on sys.path
    without importing the package (nor importlib.util, which lint does not otherwise load)."""
    import sys

    for folder in sys.path:
        data = os.path.join(folder or ".", "genai_prices", "data.py")
        try:
            status = os.stat(data)
        except OSError:
            continue
        return f"{os.path.abspath(data)}:{status.st_size}:{status.st_mtime_ns}"
    return None


def declared_entry(provider: str, model_id: str, base_url: str | None) -> tuple[str, float, float] | None:
    """The catalogue entry a hand-written model is (`provider`, the catalogue's id of its provider, or
    the one whose API its base_url is, and exactly its model id), with the entry's input and output
    rates; None when there is none."""
    found = index()
    if found is None:
        return None
    import re

    for entry_provider, pattern, models in found["providers"]:
        if base_url is not None:
            try:
                matches = re.match(pattern, base_url) is not None
            except re.error:  # the package's own pattern, so never expected: no entry rather than a crash
                matches = False
        else:
            matches = entry_provider == provider
        if matches:
            row = models.get(model_id.lower())
            return (f"{entry_provider}/{model_id.lower()}", row[0], row[1]) if row and row[0] != "error" else None
    return None
