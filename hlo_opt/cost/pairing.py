"""Two programs timed back to back: the ratio of their speeds, read where both drift together.

On a shared machine the speed of one program drifts by tens of percent within a minute;
timed in alternating rounds, two programs drift together and their ratio stays. The cost
model times a candidate whole against its signature's reference this way (`ratio`, by
least calls), and the pipeline chooses compile options and keeps or drops its result
by it (`paired`, by the mean of a sample's calls). Calls are timed by `measure`, after
`measure.warm_up`.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import jax
import numpy as np

from hlo_opt import deadline
from hlo_opt.cost import measure

TURN = 0.05        # `ratio`: seconds each program runs at its turn, its least call read,
TURN_CALLS = 64    # ... or this many calls, if fewer (NasRNN's and SRU's variants make 10-50)
SETTLE = 0.01      # `paired`: seconds of untimed calls before each sample of a shorter program
DECIDED_AFTER = 3          # `paired` with `decide`: rounds before it may stop early,
DECIDED_MARGIN = 0.1       # when every ratio is this far beyond the decision, one side


def settle(fn: Callable, args, seconds: float) -> None:
    """Untimed calls of `fn(*args)` for `seconds`, at least one."""
    end = time.perf_counter() + seconds
    jax.block_until_ready(fn(*args))
    while time.perf_counter() < end:
        jax.block_until_ready(fn(*args))


def ratio(fn: Callable, args, ref: Callable, ref_args, *, rounds: int = 7,
          turn: float = TURN, most: int = TURN_CALLS) -> float:
    """Median over `rounds` of (least call of `fn`) / (least call of `ref`), the two run
    back to back in alternating order, each for `turn` seconds at its turn or `most`
    calls if fewer (`measure.least_call`: every call timed, the first after the switch
    left out; a 0.05 ms program's turn is 3 ms, not 50: a search prices hundreds of
    such programs, and the test suite's searches ran on course for 40 minutes). On a
    shared machine the speed of the same program drifts by tens of percent within a
    minute (a three-dot program read 2.8 ms, then 4.5 ms, in one process on the 2-core
    VM); a pair timed together drifts together, and the ratio stays.

    The least call of a turn, as the fidelity benchmark reads a program run again and
    again (`cost_fidelity.round_robin`), not the mean of 10 ms of calls after 10 ms of
    settling (`paired`'s samples, as the cost model read them until 2026-12-02): a
    short program switched to every few calls reads slower than it runs, and NasRNN's
    original, dozens of small dots on both threads, most so. Against the fidelity
    benchmark's measure of NasRNN's and SRU's 24 variants (16 rounds of least calls of
    0.5 s turns), two fresh pricings each, 7 rounds of 50 ms turns ranked NasRNN's at
    Spearman 0.90 and 0.95 (10 ms means: 0.72, 0.80) and SRU's at 0.92 and 0.94
    (0.71, 0.81), the two pricings agreed at 0.86 and 0.90 (0.75, 0.76), and NasRNN's
    speed-up error's median was 13-16% (35-44%), for 0.4-1.7 s more a variant (AMD host,
    `docs/history.md`). Turns of 0.2 s with the first half untimed halved that error and
    ranked no better, for twice the time.

    Each round starts with `deadline.check`, as each sample of `measure.least_in_rounds`
    does: a short candidate's pairing begun just before a search's limit otherwise ran
    all its rounds after it. Both programs should be compiled already: a compile is the
    first call of a turn, left out, but it leaves that turn one call."""
    measure.warm_up()
    ratios = []
    for r in range(rounds):
        deadline.check()        # a search's limit can pass mid-pairing: no round after it
        if r % 2:
            theirs = measure.least_call(ref, ref_args, turn, most)
            ours = measure.least_call(fn, args, turn, most)
        else:
            ours = measure.least_call(fn, args, turn, most)
            theirs = measure.least_call(ref, ref_args, turn, most)
        ratios.append(ours / theirs)
    return float(np.median(ratios))


def paired(fn: Callable, args, ref: Callable, ref_args, *, rounds: int = 7,
           min_sample: float = 10e-3, decide: float | None = None,
           warm: bool = False) -> tuple[float, float]:
    """(`ratio`, the median seconds per call of `ref` over the same rounds): one timing
    serves both, where a second would cost NASNet-A's 0.8 s program seconds more.

    With `decide` (a ratio the caller compares against), the rounds stop after
    `DECIDED_AFTER` when every ratio so far lies beyond it by `DECIDED_MARGIN` on the
    same side: NASNet-A's optimised program read 0.35x in every round, and the other
    four rounds were 6 s of a 72 s first call. A round off by 10% in the same direction
    three times running is rare (NasRNN's short program, the noisiest, read a standard
    deviation of 0.09 against itself); a closer case runs every round.

    `warm`: both have run on arguments like these already (verify ran them), so the
    first calls, timed to choose the sample size, are a round of their own when they
    are a sample long: 1.5 s of NASNet-A's first call. Otherwise each runs once untimed
    first: a first call compiles, and a compile read as a call made every sample one
    unsettled call (two fresh 0.13 ms programs were timed one call a sample, where 10 ms
    of calls were asked). measure_final timed so where verify had not run the two: a
    frozen-weight program the search left as it was, or `verify=False`.

    A program shorter than `SETTLE` runs `SETTLE` seconds untimed before each sample:
    switched to from the other, a short program runs slow for its first calls, and
    more so the faster one. SRU (4.3 ms a call steady) read 5.96, 5.09, 4.87 ms in
    its first three calls after another variant's, 4.41 at the 21st; its dots split
    in two, 4.11 ms at the first and 2.76 at the 21st (2.55 steady). Paired without
    settling, that split read 1.30-1.35x the original; settled 0.03 s, 1.53-1.65x, and
    0.01 s (7 rounds, as cheap as 15 unsettled), 1.69-1.75x; run alone for 60 calls
    after 10, 1.65-1.66x (`/tmp/s19/paired_settle.py`, `bias.py`, 2-core VM).

    Each round starts with `deadline.check`, as each sample of `measure.least_in_rounds` does:
    a short candidate's pairing (about 0.2 s) begun just before a search's limit
    otherwise ran all its rounds after it."""
    measure.warm_up()
    pairs = ((fn, args), (ref, ref_args))
    if not warm:
        for f, a in pairs:
            measure.per_call(f, a, 1)                               # compiles: not read
    first = [measure.per_call(f, a, 1) for f, a in pairs]          # the warm-up calls, timed
    once = max(first)
    ratios, refs = [], []
    if once < min_sample:     # short: time a call properly to choose how many make a sample
        once = max(min(measure.per_call(f, a, 1) for _ in range(2)) for f, a in pairs)
    elif warm:
        ratios, refs = [first[0] / first[1]], [first[1]]
    number = max(1, int(min_sample / max(once, 1e-9)))
    rest = SETTLE if once < SETTLE else 0.0

    def sample(f, a):
        if rest:
            settle(f, a, rest)
        return measure.per_call(f, a, number)
    for r in range(len(ratios), rounds):
        deadline.check()        # a search's limit can pass mid-pairing: no round after it
        if r % 2:
            theirs = sample(ref, ref_args)
            ours = sample(fn, args)
        else:
            ours = sample(fn, args)
            theirs = sample(ref, ref_args)
        ratios.append(ours / theirs)
        refs.append(theirs)
        if decide is not None and len(ratios) >= DECIDED_AFTER and (
                max(ratios) < decide * (1 - DECIDED_MARGIN) or
                min(ratios) > decide * (1 + DECIDED_MARGIN)):
            break
    return float(np.median(ratios)), float(np.median(refs))
