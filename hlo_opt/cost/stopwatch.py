"""Seconds spent on one kind of work, counted as it goes: the measured model's timing,
which a search's clock leaves out and reads between the compiles of a batch
(`hlo_opt.deadline`)."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class Stopwatch:
    def __init__(self) -> None:
        self.spent = 0.0                      # seconds, the runs done
        self._since: float | None = None      # when the run under way began

    def read(self) -> float:
        """Seconds spent, the run under way included."""
        since = self._since
        return self.spent + (0.0 if since is None else time.perf_counter() - since)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The time within is spent; a run within a run is counted once."""
        if self._since is not None:
            yield
            return
        self._since = time.perf_counter()
        try:
            yield
        finally:
            self.spent += time.perf_counter() - self._since
            self._since = None
