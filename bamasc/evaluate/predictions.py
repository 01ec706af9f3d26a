"""Model outputs to score, read from JSONL: one `prediction` a line, keyed by its task id."""

from __future__ import annotations

from bamasc.rows import read_jsonl


class PredictionError(ValueError):
    """A predictions row that cannot be read; the message names the file and line."""


def read_predictions(path: str, skip_bad: bool = False) -> tuple[dict[str, str | None], list[str]]:
    """Predictions by id: `id` or `task_id`, else the row's 1-based line number; `prediction` text or null."""
    predictions: dict[str, str | None] = {}

    def read(row, number: int, where: str) -> None:
        if not isinstance(row, dict):
            raise PredictionError(f"{where}: a row must be a JSON object")
        if "prediction" not in row:
            raise PredictionError(f"{where}: field 'prediction' is missing")
        value = row["prediction"]
        if isinstance(value, bool) or not isinstance(value, (str, int, float, type(None))):
            raise PredictionError(f"{where}: field 'prediction' must be text, a number or null")
        key = str(next((row[f] for f in ("id", "task_id") if row.get(f) is not None), number))
        if key in predictions:
            raise PredictionError(f"{where}: a second prediction for id {key!r}")
        predictions[key] = None if value is None else str(value)

    _, problems = read_jsonl(path, read, PredictionError, skip_bad)
    return predictions, problems
