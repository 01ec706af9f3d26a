"""What the /metrics tests share: promtool's verdict on a scrape, and a scrape read as {(name, labels): value}."""

from __future__ import annotations

import shutil
import subprocess

import pytest

PROMTOOL = shutil.which("promtool")
# Debian's `prometheus` package installs it (.ci/run does); without it the format is not checked by Prometheus.
NO_PROMTOOL = "promtool is not installed (apt-get install prometheus): the exposition format is not checked"


def promtool_check(text: str) -> None:
    """`promtool check metrics` on `text`: it must exit 0 and print no lint problem."""
    if PROMTOOL is None:
        pytest.skip(NO_PROMTOOL)
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and not checked.stdout.strip() and not checked.stderr.strip(), \
        f"promtool check metrics exited {checked.returncode}:\n{checked.stdout}{checked.stderr}\n---\n{text}"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, keyed by its name and sorted labels (parsed by Prometheus's own client)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def total(found: dict, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    return sum(value for (sample, pairs), value in found.items()
               if sample == name and set(labels.items()) <= set(pairs))


def series(found: dict, name: str, label: str) -> set[str]:
    """The values `label` takes among `name`'s samples."""
    return {dict(pairs)[label] for (sample, pairs), _ in found.items() if sample == name and label in dict(pairs)}
