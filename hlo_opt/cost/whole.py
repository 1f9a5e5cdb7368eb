"""Short programs timed whole (Collage's move: measure the region, not its parts).

Kernels do not add up: XLA CPU runs independent ones side by side and their fixed costs
overlap: NasRNN's eighty 1x512 @ 512x512 dots summed to 2.4 ms while the program ran in
1.8 ms, and the sum ranked its merge variants wrongly (merging each `x@W + h@U` pair:
1.08x predicted, 0.79x measured). A program is compiled and timed itself (and cached by
its digest) when it is short: one compile per candidate graph, affordable exactly then.
"Short" is read off the graph, not off the machine: its run-time kernels under the
platform's fixed roofline (`analytic.FIXED`, the same numbers on any host) sum under
`BELOW`. Read off a timing of the first program of its signature, as it was until
2026-12-05, the choice was a lottery wherever a program ran near the line: on a slow AMD
host NasRNN ran in 4.7-5.1 ms against a 5 ms line, three fresh pricings of four summed
its kernels, and those priced its dots split in eight 0.52-0.58x the original, where the
fourth, timed whole, priced them 0.99x and they ran 1.03x (`docs/history.md`). The fixed
roofline reads 8.5 ms for NasRNN, 12.3 for SRU and 40 for SqueezeNet, which run in 2.0,
2.8 and 12 ms on the 2-core Intel host: the line at 20 ms keeps the choices the 5 ms
line made there.

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
from hlo_opt.cost import analytic, measure, pairing
from hlo_opt.cost.cache import Cache
from hlo_opt.cost.partition import Kernel
from hlo_opt.cost.stopwatch import Stopwatch
from hlo_opt.frozen import split
from hlo_opt.ir import Graph

logger = logging.getLogger("hlo_opt")

BELOW = 20e-3     # fixed-roofline seconds under which the program is timed whole
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
                 repeats: int = 5, options: dict | None = None, platform: str = "cpu"):
        self.cache, self.watch, self.below = cache, watch, below
        self.repeats, self.options, self.platform = repeats, options or {}, platform
        self.timed = 0          # programs timed (cache misses)
        self.references: dict[tuple, list] = {}   # signature -> [(graph, frozen), compiled, call s]
        self.summed: set[tuple] = set()            # signatures whose graphs are summed

    def known(self, graph: Graph, frozen: Iterable[int]) -> bool:
        """Whether graphs of this one's signature are already known to be timed whole."""
        return signature(graph, frozen) in self.references

    def seconds(self, graph: Graph, frozen: Iterable[int],
                kernels: Iterable[Kernel]) -> float | None:
        """The graph's seconds timed whole, or None where the sum of its run-time
        `kernels` stands.

        The first graph of a signature decides for all (`rough`): graphs of one
        signature are all timed whole or all summed. Mixed, a candidate whose kernels
        sum just under `below` was timed whole against an original that was summed, and
        SRU's merged variants (summed 3.9 ms, run 5.0 ms) read 2x faster than the
        original (summed 7.9 ms, run 4.6 ms)."""
        if graph.effects or any(n.deps for n in graph.nodes):
            return None
        frozen = tuple(sorted(set(frozen)))
        sig = signature(graph, frozen)
        if sig in self.summed:
            return None
        ref = self.references.get(sig)
        if ref is None and rough(kernels, self.platform) >= self.below:
            self.summed.add(sig)
            return None
        # Keyed by the graph and frozen set, not by the per-call program they make:
        # making it to look it up was half the pricing of a warm search.
        key = f"whole:{graph.digest}:{frozen}"
        seconds = self.cache.get(key)
        if seconds is None:
            deadline.check()
            try:
                with self.watch.running():   # making the program is a cold price's cost too
                    seconds = self._time(graph, frozen, ref)
            except deadline.OutOfTime:
                raise
            except Exception as err:  # noqa: BLE001 - the kernel sum still stands
                logger.debug("hlo_opt: cannot time the program whole (%s); summing its "
                             "kernels", err)
                return None
            self.cache.put(key, seconds)
            self.timed += 1
        if ref is None:     # its call's seconds, the empty call's cost put back
            self.references[sig] = [(graph, frozen), None,
                                    float(seconds) + measure.dispatch_overhead()]
        return float(seconds)

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
        fn, args = measure.compiled(program, options=self.options)
        jax.block_until_ready(fn(*args))
        try:
            deadline.check()
            ratio = pairing.ratio(fn, args, *ref[1], rounds=ROUNDS)
        finally:
            measure.release(fn)
        return measure.net(ref[2] * ratio)


def rough(kernels: Iterable[Kernel], platform: str = "cpu") -> float:
    """The kernels' seconds under the platform's fixed roofline (`analytic.FIXED`): how
    long a program is, the same on any host of it and in any process."""
    fixed = analytic.FIXED.get(platform, analytic.FIXED["gpu"])
    return sum(fixed.kernel_seconds(k) for k in kernels)
