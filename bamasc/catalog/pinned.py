"""A catalogue pinned in a file (`BAMASC_CATALOG`): every price is read from it, whatever genai-prices is installed.

A plan records the snapshot its prices came from, so a new genai-prices
release changes what a compile writes. A team that wants the same plan from
the same sources next month (or tests that compare plans with goldens) pins
the catalogue: `bamasc prices --export FILE` writes every entry's row as
the installed snapshot gives it today, and with `BAMASC_CATALOG=FILE` lint,
compile, exec and `bamasc prices` read that file and never import the package.

The file is an authority, not a cache: one that is damaged or edited is an
error naming the file and the field, never rebuilt. Only exact entries resolve
(an alias is resolved by the package when the file is written, not after).
"""

from __future__ import annotations

import datetime
import json
import os

from bamasc.catalog.rows import rows_problem, shown
from bamasc.catalog.snapshot import CatalogError

ENVIRONMENT = "BAMASC_CATALOG"
FORMAT = 1  # the layout of a pinned file: `export` writes it, `index` accepts only it
_LOADED: dict = {}  # the file this process read, by (path, size, time)


class PinnedCatalogError(CatalogError):
    """The pinned catalogue file cannot be read or is not one `export` writes; the message names the file and field."""


def path() -> str | None:
    """The pinned catalogue's path, or None when the installed package is the catalogue."""
    return os.environ.get(ENVIRONMENT) or None


def index() -> dict | None:
    """The pinned file as the cache's index ({snapshot, providers: [[id, pattern, {model: row}]]}, plus
    package and taken_on), or None when nothing is pinned. Raises PinnedCatalogError for a bad file."""
    pinned = path()
    if pinned is None:
        return None
    try:
        status = os.stat(pinned)
        key = (os.path.abspath(pinned), status.st_size, status.st_mtime_ns)
        if _LOADED.get("key") == key:
            return _LOADED["index"]
        with open(pinned, encoding="utf-8") as handle:
            content = json.load(handle)
    except (OSError, ValueError, RecursionError) as problem:
        raise PinnedCatalogError(f"{ENVIRONMENT}={pinned}: the pinned catalogue cannot be read ({problem})") from None
    problem = _problem(content)
    if problem is not None:
        raise PinnedCatalogError(f"{ENVIRONMENT}={pinned}: {problem}; write it again with "
                                 "`bamasc prices --export FILE`")
    # Each provider's ids by their lower case, built once: a lookup matches as the package's find() does.
    lowered = {provider: {model.lower(): model for model in models} for provider, _, models in content["providers"]}
    _LOADED.update(key=key, index=content, lowered=lowered)
    return content


def row(ref: str) -> tuple[str, list] | None:
    """The entry `provider/model` (letter case aside) and its row in the pinned file, or None when it has none.
    Call after index()."""
    provider, _, model = ref.lower().partition("/")
    found = _LOADED["lowered"].get(provider, {}).get(model)
    if found is None:
        return None
    models = next(models for id_, _, models in _LOADED["index"]["providers"] if id_ == provider)
    return f"{provider}/{found}", models[found]


def has_provider(provider: str) -> bool:
    """Whether the pinned file names `provider` (lower case). Call after index()."""
    return provider in _LOADED["lowered"]


def export(target: str, package_version: str, snapshot: tuple[datetime.date, bool], taken_on: datetime.date,
           providers: list) -> None:
    """Write a pinned catalogue (providers as `snapshot.build_rows` gives them), atomically."""
    content = {
        "format": FORMAT,
        "package": package_version,
        "snapshot": [snapshot[0].isoformat(), snapshot[1]],
        "taken_on": taken_on.isoformat(),
        "providers": providers,
    }
    temporary = f"{target}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(content, handle, indent=0, sort_keys=False)
        handle.write("\n")
    os.replace(temporary, target)


def _problem(content) -> str | None:
    """Why `content` is not a pinned catalogue `export` writes, naming the field; None when it is."""
    if not isinstance(content, dict):
        return f"the file is {shown(content)}, not a JSON object"
    if content.get("format") != FORMAT:
        return f"field 'format' is {shown(content.get('format'))}, not {FORMAT}"
    if not isinstance(content.get("package"), str):
        return f"field 'package' is {shown(content.get('package'))}, not a version string"
    snapshot = content.get("snapshot")
    if not (isinstance(snapshot, list) and len(snapshot) == 2 and _is_date(snapshot[0])
            and isinstance(snapshot[1], bool)):
        return f"field 'snapshot' is {shown(snapshot)}, not [an ISO date, true or false]"
    if not _is_date(content.get("taken_on")):
        return f"field 'taken_on' is {shown(content.get('taken_on'))}, not an ISO date"
    providers = content.get("providers")
    if not isinstance(providers, list):
        return f"field 'providers' is {shown(providers)}, not a list"
    for number, entry in enumerate(providers):
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                and isinstance(entry[1], str) and isinstance(entry[2], dict)):
            return f"field 'providers', entry {number} is {shown(entry)}, not [a provider id, its API's pattern, rows]"
        problem = rows_problem({"models": entry[2]})
        if problem is not None:
            return f"provider '{entry[0]}', {problem}"
    return None


def _is_date(text) -> bool:
    if not isinstance(text, str):
        return False
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True
