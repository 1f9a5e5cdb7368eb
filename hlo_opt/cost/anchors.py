"""Anchors: dots and convs timed before, timed again with a later batch, so that the
batch's new dots and convs are put on the scale of the earlier ones.

This machine runs in spells longer than a batch: eight cold dots of BERT's shapes timed
in twelve batches read 4-6% apart (sd of log) from batch to batch, of which 3.9% moved
all eight together and 1.2-3.2% each alone (`/tmp/s31/var.py`, 2-core AMD VM). A
candidate's new kernels are timed in a later batch than the ones they replace, and
BERT's dots split in two columns were priced 6-14% dearer than whole, where in one batch
they read 1-5% dearer and ran in the program 0-3%. So a batch with new contraction
kernels also times again up to `COUNT` of those priced before (the costliest under
`LONGEST`), and the new ones' seconds are divided by `scale` of the anchors: put on the
scale of the kernels priced before, whether that batch ran slower or faster, by half
of what the anchors read (`TRUST`): the anchors carry noise of their own.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import numpy as np

COUNT = 3           # anchors timed again with each batch
LONGEST = 5e-3      # ... each at most this long a call
TRUST = 0.5         # the share of the anchors' reading taken (`scale`): half, in logs


class Anchors:
    """The contraction kernels one cost model has priced: timing key -> (program, cold
    inputs, seconds), and how many scalings each one's seconds are from a batch that
    was not scaled (`depth`).

    The anchors picked are the shallowest, not the costliest of all: each scaling adds
    its anchors' noise, and a batch anchored on kernels that were themselves scaled
    carries theirs too. Picked by cost alone, the newest forms (priced dearest) became
    the anchors, and one fresh pricing of ResNeXt-50's 24 variants chained seven
    scalings deep, its scale drifting from 0.97 to 0.55 while the first batch's own
    kernels, timed again, read 0.77-1.01 (`docs/history.md`)."""

    def __init__(self):
        self._known: dict[str, tuple] = {}
        self._depth: dict[str, int] = {}

    def record(self, timing: str, program, cold: tuple[int, ...], seconds: float) -> None:
        self._known[timing] = program, cold, float(seconds)

    def scaled(self, timings: Iterable[str], anchors: Sequence[tuple]) -> None:
        """`timings` were put on the scale of `anchors` (`pick`'s, none: not scaled)."""
        depth = 1 + max((self._depth.get(t, 0) for t, *_ in anchors), default=-1)
        self._depth.update(dict.fromkeys(timings, depth))

    def pick(self, exclude: Collection[str]) -> list[tuple]:
        """Up to `COUNT` of the kernels recorded, none in `exclude`: (timing key,
        program, cold inputs, seconds then), the shallowest, the costliest of those,
        under `LONGEST`."""
        known = [(t, *a) for t, a in self._known.items() if t not in exclude and a[2] <= LONGEST]
        return sorted(known, key=lambda a: (self._depth.get(a[0], 0), -a[3]))[:COUNT]


def scale(anchors: Sequence[tuple[float | Exception, float]]) -> float:
    """How much slower (or faster) this batch ran than the anchors' batches: the median
    of (seconds now / seconds then) over the anchors that ran, raised to `TRUST`
    (below), or 1 if none ran; under 1 when the anchors' batches ran slow. Both ways:
    scaled up only (until 2026-11-29), a batch whose anchors had been timed in a slow
    spell left its new kernels on a faster scale
    than the ones they replace, so every new form leaned cheap: twelve fresh pricings
    of BERT with every dot in two read 0.80-1.11x the original (median 0.96; sd of log
    0.099), scaled both ways 0.92-1.12x (median 1.02; 0.045); it runs level; and its
    24 fidelity variants priced twice agreed at 0.15 one way, 0.69 both ways
    (`docs/history.md`).

    Taken `TRUST` of the way, in logs (the square root of the median): a kernel timed
    again reads its earlier timing within its own noise, not the batch's spell alone.
    On the Intel host (2026-12-04) one batch's three anchors disagreed with one another
    by an sd of 3% (BERT's dots) to 8-11% (the CNNs' convs) in log, and of the spread of
    the batches' scales 0-53% was left once the noise of a median of three such
    readings was taken out: what they read of a batch's own spell was at most half of
    it. Replayed from logged timings both ways, 54 fresh pricings of five models:
    SqueezeNet's prices steadier and ranked nearer the measured order in both sets of
    pricings (Spearman median 0.908 -> 0.933, 0.915 -> 0.927), ResNet-50's and
    ResNeXt-50's level, BERT's a little lower (0.807 -> 0.800, 0.819 -> 0.814),
    Inception-v3's lower in one set and higher in the other (`docs/history.md`)."""
    ratios = [now / then for now, then in anchors if not isinstance(now, Exception)]
    return float(np.median(ratios)) ** TRUST if ratios else 1.0
