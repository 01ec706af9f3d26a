"""Progress of several runs told as one: each run's tasks and spend added to those of the runs before it."""

from __future__ import annotations

from collections.abc import Callable

# progress(done, total, spent, limit): tasks ended and to run, µ$ spent, and the most the runs may spend.
Progress = Callable[[int, int, float, "float | None"], None]


class Stages:
    """Hands each run (a collect, a bench cell) a progress callback of its own and tells `progress` the
    sum: the tasks the earlier runs counted for and what they spent, plus this run's as it goes."""

    def __init__(self, progress: Progress, total: int, limit: float | None = None) -> None:
        self.progress, self.total, self.limit = progress, total, limit
        self.done_before, self.spent_before = 0, 0.0
        self._size: int | None = None  # what the current run counts for, once it ends (None: what it heard)
        self._heard = (0, 0.0)

    def stage(self, size: int | None = None) -> Progress:
        """The callback of the next run, which ends the one before; `size` is how many of the total it
        counts for once it ends, whatever it heard (a run that turned out infeasible runs no task)."""
        self.end()
        self._size = size

        def heard(done: int, total: int, spent: float, limit: float | None = None) -> None:
            self._heard = (done, spent)
            self.progress(self.done_before + done, self.total, self.spent_before + spent, self.limit)

        return heard

    def end(self) -> None:
        """The current run has ended: its tasks and spend join the earlier runs'."""
        done, spent = self._heard
        self.done_before += done if self._size is None else self._size
        self.spent_before += spent
        self._size, self._heard = None, (0, 0.0)
