"""Reproducible subsets of a dataset: task-id ranges, a seeded sample, a sample stratified by a field.

Every sampler keeps the items it is given in a fixed order and draws without
replacement, so the same file, options and seed give the same subset on any
machine. Each shuffle is the one the BAMAS reference uses for that subset: a
plain sample is Python's `random.Random(seed).shuffle` of the items in file
order (after any id ranges), as the reference draws its GSM8K training tasks;
a stratified sample is NumPy's `default_rng(seed).permutation`, as the
reference's MATH loader shuffles before it takes each level's share.
docs/paper.md shows how to reproduce both by hand.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# The BAMAS reference's seeds: its training subsets, and its stratified MATH test subset.
SAMPLE_SEED = 42
STRATIFY_SEED = 888


# The tasks the reference trains its policy on, drawn from each kind's published training data
# (docs/paper.md, "Training tasks"): GSM8K's train.jsonl shuffled with Python's random, seed 42, the
# first 500; MBPP's training ids; MATH's train split, 1,000 stratified by level as its test subset.
PAPER_TRAINING = {
    "gsm8k": {"size": 500},
    "mbpp": {"ids": ((601, 974),)},
    "math": {"size": 1000, "stratify": "level"},
}


class SampleError(ValueError):
    """Sampling options the dataset cannot satisfy, or that do not parse."""


@dataclass(frozen=True)
class Sampling:
    size: int | None = None  # keep this many items (after the id ranges); None: all of them
    seed: int | None = None  # the shuffle's seed; None: STRATIFY_SEED when stratified, else SAMPLE_SEED
    stratify: str | None = None  # draw `size` proportionally to this field's values
    ids: tuple[tuple[int, int], ...] = ()  # inclusive task-id ranges to keep; () keeps every id

    def shuffle_seed(self) -> int:
        if self.seed is not None:
            return self.seed
        return STRATIFY_SEED if self.stratify else SAMPLE_SEED

    def describe(self) -> str:
        """The options as one phrase, for a note beside the results."""
        parts = []
        if self.ids:
            parts.append("ids " + ",".join(f"{low}-{high}" for low, high in self.ids))
        if self.size is not None:
            how = f"stratified by {self.stratify}" if self.stratify else "sampled"
            parts.append(f"{self.size} {how} with seed {self.shuffle_seed()}")
        return ", ".join(parts) or "every item"


def paper_training(kind: str) -> Sampling:
    """The reference's training subset of a `kind` dataset's training data."""
    return Sampling(**PAPER_TRAINING[kind])


def parse_ids(text: str) -> tuple[tuple[int, int], ...]:
    """`11-510` or `11-510,601-974` (inclusive; `7` alone is `7-7`) as ranges; SampleError when malformed."""
    ranges = []
    for part in text.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        high = high if dash else low
        if not (low.strip().isdigit() and high.strip().isdigit()):
            raise SampleError(f"not an id range: {part!r} (write A-B with whole numbers, e.g. 11-510)")
        low_id, high_id = int(low), int(high)
        if low_id > high_id:
            raise SampleError(f"the id range {part} runs backwards: write {high_id}-{low_id}")
        ranges.append((low_id, high_id))
    return tuple(ranges)


def in_ranges(items: list, ranges: tuple[tuple[int, int], ...], id_of) -> list:
    """The items whose id is a whole number in one of `ranges`, in file order; every id of every
    range must be in the file (SampleError names the missing ones)."""
    if not ranges:
        return list(items)
    merged = _merged(ranges)
    present = {int(key) for key in map(str, map(id_of, items)) if key.isdigit()}
    inside = sorted(n for n in present if any(low <= n <= high for low, high in merged))
    # Counted, not listed: a range may be far larger than any file (1-1000000000).
    missing = sum(high - low + 1 for low, high in merged) - len(inside)
    if missing:
        raise SampleError(f"{missing} id{'s' if missing > 1 else ''} of the ranges "
                          f"{','.join(f'{a}-{b}' for a, b in ranges)} not in the dataset: {_first_missing(merged, inside)}")
    return [item for item in items
            if str(id_of(item)).isdigit() and any(low <= int(id_of(item)) <= high for low, high in merged)]


def _merged(ranges) -> list[tuple[int, int]]:
    """Overlapping or touching ranges joined, in order."""
    out: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def _first_missing(merged, inside: list[int], shown: int = 5) -> str:
    """The first few ids of the ranges that the file lacks, and how many more there are."""
    present, found, total = set(inside), [], sum(high - low + 1 for low, high in merged) - len(inside)
    for low, high in merged:
        n = low
        while n <= high and len(found) < shown:
            if n not in present:
                found.append(n)
            n += 1
    more = total - len(found)
    return ", ".join(map(str, found)) + (f" and {more} more" if more else "")


def shuffled(items: list, seed: int) -> list:
    """A new list: `items` in the order `random.Random(seed).shuffle` leaves them."""
    order = list(items)
    random.Random(seed).shuffle(order)
    return order


def sample(items: list, size: int, seed: int) -> list:
    """The first `size` items of the seeded shuffle."""
    _check_size(size, len(items))
    return shuffled(items, seed)[:size]


def quotas(counts: dict[str, int], size: int) -> dict[str, int]:
    """The reference's shares of `size` in proportion to `counts` (given in order of first appearance):
    each value gets int(count / total * size), computed in floating point as the reference does, and
    what those leave over all goes to the value with the largest share (the first such on a tie).
    Where that is more than the value holds, the excess goes on to the next largest share (the
    reference would return fewer items). They sum to `size`."""
    total = sum(counts.values())
    shares = {value: int(count / total * size) for value, count in counts.items()}
    left = size - sum(shares.values())
    # sorted is stable: equal shares keep the order of first appearance, as max() picks the first.
    for value in sorted(shares, key=lambda value: -shares[value]):
        extra = min(left, counts[value] - shares[value])
        shares[value] += extra
        left -= extra
    return shares


def permuted(items: list, seed: int) -> list:
    """A new list: `items` in the order `numpy.random.default_rng(seed).permutation` leaves them."""
    import numpy as np  # installed with matplotlib and highspy; loaded only for a stratified sample

    return [items[index] for index in np.random.default_rng(seed).permutation(len(items))]


def stratified(items: list, size: int, key, seed: int) -> list:
    """`size` items drawn proportionally to `key(item)`'s values, as the reference draws MATH's subsets:
    the seeded NumPy permutation, the shares of `quotas` (values in order of first appearance), then
    each value's first items in that order. The result holds the values one after another, in order
    of first appearance, each in permuted order (the order of the reference's subset file)."""
    _check_size(size, len(items))
    order = permuted(items, seed)
    groups: dict[str, list] = {}
    for item in order:
        groups.setdefault(key(item), []).append(item)
    wanted = quotas({value: len(group) for value, group in groups.items()}, size)
    return [item for value, group in groups.items() for item in group[: wanted[value]]]


def select(items: list, sampling: Sampling, id_of=lambda item: item.id, field_of=None) -> list:
    """Apply `sampling` to `items`: id ranges first, then the sample, stratified by
    `field_of(item, name)` (default `field_value`)."""
    kept = in_ranges(items, sampling.ids, id_of)
    if sampling.stratify and sampling.size is None:
        raise SampleError("a stratified sample needs its size: give --sample N with --stratify")
    if sampling.size is None:
        return kept
    if not sampling.stratify:
        return sample(kept, sampling.size, sampling.shuffle_seed())
    field_of = field_of or field_value
    return stratified(kept, sampling.size, lambda item: field_of(item, sampling.stratify), sampling.shuffle_seed())


# What a dataset item can be stratified by (MATH's `type` is an item's `subject`); a task row of
# `collect` can be stratified by any field of its row.
ITEM_FIELDS = {"level": "level", "subject": "subject", "type": "subject"}


def field_value(item, name: str) -> str:
    """`name` of a dataset item (ITEM_FIELDS) or of a task's row, as text; SampleError where it has none."""
    row = getattr(item, "row", None)
    if isinstance(row, dict):
        value = row.get(name)
    elif name in ITEM_FIELDS:
        value = getattr(item, ITEM_FIELDS[name])
    else:
        raise SampleError(f"cannot stratify by {name!r}: a dataset item has {', '.join(ITEM_FIELDS)}")
    if value is None or isinstance(value, (dict, list)) or not str(value).strip():
        raise SampleError(f"item {item.id!r} has no {name!r} to stratify by")
    return str(value)


def _check_size(size: int, available: int) -> None:
    if size < 1:
        raise SampleError(f"a sample needs at least 1 item, not {size}")
    if size > available:
        raise SampleError(f"cannot draw {size} items without replacement from {available}")
