"""A search's time limit, as the cost model sees it while it prices a candidate.

First-time timing cannot be known before it is done: on an empty cache one candidate of
Inception-v3, 30-odd kernels new, took 10 s to price after steps of 0.7 s, and carried
its search to 13.7 s of 10. A guess made before timing (new kernels x mean seconds per
timing) refused Inception-v3's layout move, its 2x. So the search says only whether its
limit has passed (`stop_when`, set by `search.core.Priced`), and the cost model checks
between the compiles it is about to do (`check`): past the limit, pricing the candidate
stops with `OutOfTime`, and the search, out of time, ends with what it has.
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

_PAST: contextvars.ContextVar[Callable[[], bool] | None] = \
    contextvars.ContextVar("hlo_opt_past", default=None)


class OutOfTime(Exception):
    """Raised by `check` once the limit of the search pricing the graph has passed."""


@contextlib.contextmanager
def stop_when(past: Callable[[], bool] | None) -> Iterator[None]:
    """Within, `check` raises once `past()` is true (None: never)."""
    token = _PAST.set(past)
    try:
        yield
    finally:
        _PAST.reset(token)


def active() -> bool:
    """Whether a search's limit is being watched (within `stop_when`, not None)."""
    return _PAST.get() is not None


def check() -> None:
    """Called before each first-time compile and timing."""
    past = _PAST.get()
    if past is not None and past():
        raise OutOfTime("the search's time limit has passed")
