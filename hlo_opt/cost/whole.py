"""Short programs timed whole (Collage's move: measure the region, not its parts).

Kernels do not add up: XLA CPU runs independent ones side by side and their fixed costs
overlap: NasRNN's eighty 1x512 @ 512x512 dots summed to 2.4 ms while the program ran in
1.8 ms, and the sum ranked its merge variants wrongly (merging each `x@W + h@U` pair:
1.08x predicted, 0.79x measured). A program that runs under `BELOW` is compiled and
timed itself (and cached by its digest): one compile per candidate graph, affordable
exactly when the program is short. Whether it does is read off its kernels, or, when
they sum to a few times that, off one timing of the first program of its signature.

Each is timed against a reference: the first program of the same signature (inputs,
outputs, frozen set — what equivalent graphs share) that this object priced. A
candidate's seconds are the reference's times the median ratio of the two timed back to
back (`pairing.ratio`), so that machine drift between two measurements does not decide
which of two graphs is faster.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable

import jax
from hlo_opt import deadline
from hlo_opt.cost import measure, pairing
from hlo_opt.cost.cache import Cache
from hlo_opt.cost.stopwatch import Stopwatch
from hlo_opt.frozen import split
from hlo_opt.ir import Graph

logger = logging.getLogger("hlo_opt")

BELOW = 5e-3      # seconds under which the program is timed whole
PROBE = 4.0       # kernels summing under PROBE x BELOW: the first program of a signature
                  # is timed whole once, to see if it is short
SAMPLE = 10e-3    # each sample of a reference timed whole runs at least this long
ROUNDS = 7        # paired rounds per candidate (`pairing.ratio`, its turns of
                  # `pairing.TURN`): NasRNN against itself read sd 0.018 in 7 10 ms
                  # samples, against another variant 5-10% in 7 or 15; 21 rounds ranked
                  # its 24 variants no better (three fresh pricings each, `docs/history.md`)


def signature(graph: Graph, frozen: Iterable[int]) -> tuple:
    """What equivalent graphs share: input and output types, the frozen set."""
    return (tuple(n.types for n in graph.inputs), tuple(v.type for v in graph.outputs),
            tuple(sorted(set(frozen))))


class Programs:
    """The short programs one cost model timed whole, by signature; their timings in
    the model's `cache`, the time spent on them on its `watch`."""

    def __init__(self, cache: Cache, watch: Stopwatch, *, below: float = BELOW,
                 repeats: int = 5, options: dict | None = None):
        self.cache, self.watch, self.below = cache, watch, below
        self.repeats, self.options = repeats, options or {}
        self.timed = 0          # programs timed (cache misses)
        self.references: dict[tuple, list] = {}   # signature -> [(graph, frozen), compiled, s]
        self.summed: set[tuple] = set()            # signatures whose graphs are summed

    def known(self, graph: Graph, frozen: Iterable[int]) -> bool:
        """Whether graphs of this one's signature are already known to be timed whole."""
        return signature(graph, frozen) in self.references

    def seconds(self, graph: Graph, frozen: Iterable[int], summed: float) -> float | None:
        """The graph's seconds timed whole, or None where its kernels' sum (`summed`)
        stands.

        The first graph of a signature decides for all: graphs of one signature are all
        timed whole or all summed. Mixed, a candidate whose kernels sum just under
        `below` was timed whole against an original that was summed, and SRU's merged
        variants (summed 3.9 ms, run 5.0 ms) read 2x faster than the original (summed
        7.9 ms, run 4.6 ms)."""
        if graph.effects or any(n.deps for n in graph.nodes):
            return None
        frozen = tuple(sorted(set(frozen)))
        sig = signature(graph, frozen)
        if sig in self.summed:
            return None
        ref = self.references.get(sig)
        if ref is None and summed >= PROBE * self.below:
            self.summed.add(sig)
            return None
        # Keyed by the graph and frozen set, not by the per-call program they make:
        # making it to look it up was half the pricing of a warm search.
        key = f"whole:{graph.digest}:{frozen}"
        seconds = self.cache.get(key)
        if seconds is not None:
            if ref is None:
                return self._first(sig, graph, frozen, float(seconds), summed)
            return float(seconds)
        deadline.check()
        try:
            with self.watch.running():       # making the program is a cold price's cost too
                seconds = self._time(graph, frozen, ref)
        except deadline.OutOfTime:
            raise
        except Exception as err:  # noqa: BLE001 - the kernel sum still stands
            logger.debug("hlo_opt: cannot time the program whole (%s); summing its "
                         "kernels", err)
            return None
        self.cache.put(key, seconds)
        self.timed += 1
        return float(seconds) if ref else self._first(sig, graph, frozen, seconds, summed)

    def _time(self, graph: Graph, frozen: tuple, ref: list | None) -> float:
        program = split(graph, frozen).runtime
        if ref is None:
            return measure.time_whole(program, repeats=self.repeats, min_sample=SAMPLE,
                                      options=self.options)
        # Each compiled here, not in `ratio`'s first turn: there a compile is the call
        # left out, leaving that turn one call to read (read as a call, it once made
        # NasRNN's dots split in eight 1.22x, not 0.96x).
        if ref[1] is None:
            ref[1] = measure.compiled(split(*ref[0]).runtime, options=self.options)
            jax.block_until_ready(ref[1][0](*ref[1][1]))
        overhead = measure.dispatch_overhead()
        fn, args = measure.compiled(program, options=self.options)
        jax.block_until_ready(fn(*args))
        try:
            deadline.check()
            ratio = pairing.ratio(fn, args, *ref[1], rounds=ROUNDS)
        finally:
            measure.release(fn)
        return max((ref[2] + overhead) * ratio - overhead, measure.EPSILON)

    def _first(self, sig, graph, frozen, seconds: float, summed: float) -> float | None:
        """The first graph of a signature, timed whole: the reference of all that follow
        if it is short, as a program (its kernels may sum longer: XLA CPU runs short
        independent ones side by side, and SRU's summed to 5.9 ms where it ran in 4.0);
        else the signature is summed."""
        if summed >= self.below and seconds >= self.below:
            self.summed.add(sig)
            return None
        self.references[sig] = [(graph, frozen), None, seconds]
        return seconds
