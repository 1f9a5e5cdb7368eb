"""Graph cost = the sum of its kernels' costs, each measured (and cached) or estimated,
plus the page faults of its buffers past malloc's mmap line (`memory.py`).

Each kernel is timed as the program runs it: its values in the memory order the program
keeps them in (`layouts.py`), its parameters read from main memory where the program's
overflow the last-level cache (`residency.py`).

Contract: `CostModel.cost(graph, frozen=...)` returns a `Cost` whose `total` is the
predicted seconds of one run of the graph on this device, and whose `kernels` say where
that time goes. Kernels that depend only on frozen inputs (weights at inference) and
constants cost nothing: they are computed once, not per call.

Short programs are timed whole (`whole.py`), and sibling dots and convs as one
program (`siblings.py`).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import platform
from collections.abc import Iterable, Sequence

import jax
from hlo_opt import compile_options, deadline
from hlo_opt.cost import (analytic, anchors, fault_rates, layouts, measure, memory, residency,
                          siblings, whole)
from hlo_opt.cost.cache import Cache
from hlo_opt.cost.partition import Kernel, isolate, partition, ports, structure
from hlo_opt.cost.stopwatch import Stopwatch
from hlo_opt.frozen import weight_only
from hlo_opt.ir import Graph

logger = logging.getLogger("hlo_opt")

# Rounds each batch of kernels is timed in (`measure.least_in_rounds`), the least read.
# A price is shared by every kernel of its structure, so one reading's noise moves a
# whole model: BERT's 48 weight dots are priced as five units (`siblings.py`). With five
# rounds, one fresh pricing put BERT's output and FFN dots split in four columns 6-23%
# dearer than whole, where four batches of both side by side read them -1-4% dearer and
# the program with every dot split ran 3.7% slower, its concatenations included (the
# ae224df run). Fresh pricings of BERT's 24 fidelity variants against the five Intel
# runs' measurements pooled: seven with 5 rounds ranked them at 0.904-0.946 (median
# 0.911) and priced the splits a median 2.3% too dear; three with 20, 0.927-0.947
# (0.931) and 1.1% (`docs/history.md`). The cost is cold pricing's time: in a full run,
# ResNet-50's kernels 19.1 s (12.9 with 5), BERT's 3.4 (1.7), NASNet-A's 46.8 (21.0).
REPEATS = 20

# Kernels timed in one batch under a search's deadline (`Measured.prepare`): what a
# stopped pricing loses at most. Each batch has its fixed costs (a wake-up per round):
# Inception-v3's layout move, 76 new kernels, priced in 12.0-12.3 s as one batch, in
# 12.5-14.3 s by 32 and 14.2-15.3 s by 16 (three interleaved rounds, AMD EPYC host,
# 2026-12-06); NASNet-A's took about 0.5 s a kernel there, so 32 is about 16 s, under
# the 20 s a cold 10 s search has (in a slow hour 20.1 s: stopped, all lost). Batches
# held to 5 s of timing at the model's rate so far (8-10 kernels; a4cd21a-0fd0e2d, then
# reverted) kept more of NASNet-A's in a fast hour, but their fixed costs cost
# ResNet-50's first search its layout move in one of three first processes and in a
# zoo run (30 kernels in 20 s, against 37 in 14 s by 32; `docs/history.md`).
CHUNK = 32


@dataclasses.dataclass(frozen=True)
class KernelCost:
    kernel: Kernel
    seconds: float          # per run; 0 when precomputed
    precomputed: bool       # depends only on frozen inputs and constants


@dataclasses.dataclass(frozen=True)
class Cost:
    total: float
    kernels: tuple[KernelCost, ...]
    whole: bool = False     # `total` is the per-call program timed whole, not the sum
    faults: float = 0.0     # of `total`: page faults of buffers past malloc's mmap line

    def breakdown(self, top: int = 10) -> list[tuple[str, float]]:
        """The costliest kernels, as (ops joined by '+', seconds)."""
        ranked = sorted(self.kernels, key=lambda k: -k.seconds)[:top]
        return [("+".join(n.op for n in k.kernel.nodes), k.seconds) for k in ranked]


def device_header() -> dict:
    """What a timing is valid for. On a CPU jax names the device "cpu" whatever the
    processor, so the host's processor, core count and last-level cache are part of it:
    a cache directory that outlives its machine (a home directory, a VM moved to another
    host, as this project's was from an AMD to an Intel host; two VMs that both call
    themselves "AMD EPYC" need not share a cache size) must not price kernels by
    another's. The cache's size also decides which operands the model times cold
    (`residency.py`)."""
    device = jax.devices()[0]
    header = {"device": device.device_kind, "platform": device.platform, "jax": jax.__version__}
    if device.platform == "cpu":
        info = cpuinfo()
        family = " ".join(f"{k} {info[k]}" for k in ("cpu family", "model", "stepping")
                          if k in info)
        header["host"] = (f"{cpu_model()} x{os.cpu_count()}" + (f" ({family})" if family else "")
                          + f", LLC {residency.last_level_cache() >> 10} KiB")
    return header


def cpuinfo() -> dict[str, str]:
    """The first processor's fields in Linux's /proc/cpuinfo (empty elsewhere)."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                info[key.strip()] = value.strip()
    except OSError:
        pass
    return info


def cpu_model() -> str | None:
    """The host processor's name (Linux's /proc/cpuinfo, else `platform.processor`)."""
    return cpuinfo().get("model name") or platform.processor() or None


class CostModel:
    """Prices kernels; `cost` partitions a graph and sums."""

    platform = "cpu"
    library_fusion = False      # kernels as YNNPACK's elementwise fusions (`library.py`)
    side_by_side = False        # sibling dots and convs priced together (`siblings.py`)
    _seen: dict | None = None

    def kernel_seconds(self, kernel: Kernel) -> float:
        raise NotImplementedError

    def _price(self, kernel: Kernel) -> float:
        """`kernel_seconds`, remembered by the kernel's structure (`partition.structure`):
        graphs met in a search share most kernels, so most of a candidate's kernels were
        priced with its parent."""
        if self._seen is None:
            self._seen = {}
        key = structure(kernel)
        if key not in self._seen:
            self._seen[key] = self.kernel_seconds(kernel)
        return self._seen[key]

    def cost(self, graph: Graph, frozen: Iterable[int] = ()) -> Cost:
        fixed = weight_only(graph, frozen)
        kernels = partition(graph, epilogue_fusion=self.platform == "gpu",
                            conv_layouts=self.platform == "cpu",
                            library_fusion=self.library_fusion)
        pre = [all(v.node in fixed for v in kernel.inputs) for kernel in kernels]
        if self.platform == "cpu":
            kernels = [dataclasses.replace(k, cold=c) if c else k for k, c in
                       zip(kernels, residency.cold(graph, kernels, pre, fixed))]
        summed = not self.timed_whole(graph, frozen)
        side = summed and self.side_by_side and self.platform == "cpu"
        units = siblings.groups(kernels, [not side or p or not _runs_alone(k)
                                          for k, p in zip(kernels, pre)])
        merged = {u[0]: siblings.merge([kernels[i] for i in u]) for u in units if not pre[u[0]]}
        if summed:
            self.prepare(list(merged.values()))
        price, each = self._price if summed else self.estimate, {}
        for u in (u for u in units if not pre[u[0]]):
            each.update(dict.fromkeys(u, price(merged[u[0]]) / len(u)))
        priced = [KernelCost(k, each.get(i, 0.0), p) for i, (k, p) in enumerate(zip(kernels, pre))]
        faults = 0.0
        if self.platform == "cpu":
            faults = memory.seconds(graph, memory.temp_bytes(graph, kernels, pre),
                                    layouts.weight_copies(kernels, pre),
                                    self.fault_per_byte, self.fresh_page_per_byte)
        total = sum(k.seconds for k in priced) + faults
        timed = self.whole_seconds(graph, frozen, [k for k, p in zip(kernels, pre) if not p])
        self.done()
        if timed is not None:
            return Cost(timed, tuple(priced), whole=True)
        return Cost(total, tuple(priced), faults=faults)

    def fault_per_byte(self) -> float:
        """Seconds per byte of faulting in XLA's weight copies (`fault_rates.py`)."""
        return fault_rates.DEFAULT_FAULT

    def fresh_page_per_byte(self) -> float:
        """Seconds per byte of any other fresh page: XLA's threads'
        (`fault_rates.fresh_rate`)."""
        return fault_rates.DEFAULT_FRESH

    def prepare(self, kernels: Sequence[Kernel]) -> None:
        """Called with the kernels `cost` is about to price: a model may time them together."""

    def whole_seconds(self, graph: Graph, frozen: Iterable[int],
                      kernels: Sequence[Kernel]) -> float | None:
        """The graph's time measured as one program where the sum of its run-time
        `kernels` is not trusted."""
        return None

    def timed_whole(self, graph: Graph, frozen: Iterable[int]) -> bool:
        """Whether graphs like this one (same inputs, outputs, frozen set) are already
        known to be timed whole: their kernels are then only a breakdown."""
        return False

    def estimate(self, kernel: Kernel) -> float:
        """A kernel's seconds for the breakdown only: `_price` unless overridden."""
        return self._price(kernel)

    def done(self) -> None:
        """Called after each graph: persist what was learned."""


class Analytic(CostModel):
    def __init__(self, roofline: analytic.Roofline = analytic.DEFAULT):
        self.roofline = roofline
        self.platform = roofline.platform

    @classmethod
    def calibrated(cls, cache_dir=None) -> "Analytic":
        return cls(analytic.calibrate(device_header(), cache_dir))

    def kernel_seconds(self, kernel: Kernel) -> float:
        return self.roofline.kernel_seconds(kernel)


class Measured(CostModel):
    """Each distinct kernel is timed once on this device and cached on disk; kernels that
    cannot run alone (effects) or fail to, fall back to the roofline."""
    side_by_side = True

    def __init__(self, cache_dir=None, *, repeats: int | None = None, min_sample: float = 2e-3,
                 fallback: Analytic | None = None, whole_below: float = whole.BELOW,
                 compiler_options: compile_options.Options | None = None):
        header = device_header()
        self.platform = header["platform"]
        # timed compiled as the program will be; a cache file per set (`compile_options`)
        self.options = dict(compiler_options or {})
        if self.options:
            header["options"] = compile_options.label(self.options)
        self.library_fusion = self.platform == "cpu" and self.options == compile_options.YNN_ELTWISE
        self.cache = Cache("kernels", {**header, "method": measure.METHOD}, cache_dir)
        # read at construction, not at import, so a test session may time in fewer rounds
        repeats = REPEATS if repeats is None else repeats
        self.repeats, self.min_sample = repeats, min_sample
        self._fallback = fallback
        self._cache_dir = cache_dir
        self.measured = 0       # kernels timed (cache misses) by this object
        self._watch = Stopwatch()   # seconds spent timing them all (`measuring`)
        self.whole = whole.Programs(self.cache, self._watch, below=whole_below,
                                    repeats=repeats, options=self.options,
                                    platform=self.platform)
        self._estimates: dict[tuple, float] = {}    # `estimate`, by `structure`
        self._isolated: dict[tuple, Graph] = {}     # `prepare`'s programs, until priced
        self._failed: set[str] = set()              # programs that would not run alone
        self._anchors = anchors.Anchors()           # dots and convs priced (`prepare`)
        self._rates: dict = {}                      # `memory`'s fault rates, once calibrated

    @property
    def measuring(self) -> float:
        """Seconds spent timing, the timing under way included (`Stopwatch`): counted
        only once a batch was done, the 11 s of Inception-v3's layout move read as 11 s
        of search, and the deadline stopped its pricing half done."""
        return self._watch.read()

    @measuring.setter
    def measuring(self, seconds: float) -> None:
        self._watch.spent = seconds

    def fault_per_byte(self) -> float:
        return self._calibrated(fault_rates.calibrate)

    def fresh_page_per_byte(self) -> float:
        return self._calibrated(fault_rates.fresh_rate)

    def _calibrated(self, calibrate) -> float:
        """`calibrate`'s rate, timed the first time as a kernel is (6 s and 1 s)."""
        if calibrate not in self._rates:
            with self._watch.running():
                self._rates[calibrate] = calibrate(device_header(), self._cache_dir)
        return self._rates[calibrate]

    def fallback(self) -> Analytic:
        if self._fallback is None:
            self._fallback = Analytic.calibrated(self._cache_dir)
        return self._fallback

    def prepare(self, kernels: Sequence[Kernel]) -> None:
        """Times the kernels not timed yet, compiled all first, then run back to back
        (`measure.time_graphs`: a kernel timed right after its own compile reads slow).

        Dots and convs are timed on the scale of those timed before them
        (`anchors.py`): a batch with any also times again a few this object priced
        before, and its new ones' seconds divided by how much slower (or faster) those ran.

        Under a search's deadline the kernels are timed in batches of `CHUNK`, each
        written to disk before the next begins, so that a pricing the deadline stops
        leaves what it timed to the next search (`pipeline.cut_short`: the next process
        searches again "with those timings cached"). As one batch, NASNet-A's layout move
        needed more first-time timing than a 10 s search is given, was dropped whole at
        the deadline in every process, and the second search's result was stored
        without it: the original program, where a search that finishes runs 2.5x."""
        todo: dict[str, tuple] = {}
        added: list[str] = []
        for kernel in kernels:
            key = structure(kernel)
            if kernel.kind == "free" or not _runs_alone(kernel) or key in self._isolated \
                    or (self._seen is not None and key in self._seen):
                continue
            program = self._isolated[key] = isolate(kernel)
            timing = _timing(program, kernel)
            if self.cache.get(timing) is None:
                todo.setdefault(timing, (program, _cold(kernel), kernel.kind == "contract"))
                added.append(key)
        if not todo:
            return
        items = list(todo.items())
        size = CHUNK if deadline.active() else len(items)
        again = self._anchors.pick(todo) if any(c for *_, c in todo.values()) else []
        ran: list = []
        try:
            for start in range(0, len(items), size):
                ran = self._time_batch(dict(items[start:start + size]), again, ran)
                again = []
                if start + size < len(items):
                    self.done()
        except deadline.OutOfTime:
            for key in added:      # isolated again when next priced; the timed are cached
                self._isolated.pop(key, None)
            self.done()
            raise

    def _time_batch(self, todo: dict[str, tuple], again: list, ran: list) -> list:
        """Times `todo` (timing key -> (program, cold inputs, a contraction?)) as one
        batch into the cache, its contractions on the scale of the anchors `again`
        timed with it, or (none) of those that `ran` with an earlier batch of the same
        pricing: the anchors are timed once a pricing, as they were when it was one
        batch (a pricing's batches follow one another). Returns the anchors that ran."""
        batch = list(todo.values()) + [(p, cold, False) for _, p, cold, _ in again]
        with self._watch.running():
            timed = measure.time_graphs([p for p, *_ in batch], repeats=self.repeats,
                                        min_sample=self.min_sample, options=self.options,
                                        cold=[c for _, c, _ in batch])
        if again:
            ran = [(now, anchor) for now, anchor in zip(timed[len(todo):], again)
                   if not isinstance(now, Exception)]
        scale = anchors.scale([(now, then) for now, (*_, then) in ran])
        self._anchors.scaled([t for t, (*_, c) in todo.items() if c], [a for _, a in ran])
        for digest, seconds, (*_, contract) in zip(todo, timed, todo.values()):
            if isinstance(seconds, Exception):
                self._failed.add(digest)
                logger.debug("hlo_opt: cannot time kernel %s alone (%s); using the "
                             "roofline", digest, seconds)
            else:
                self.cache.put(digest, seconds / scale if contract else seconds)
                self.measured += 1
        return ran

    def kernel_seconds(self, kernel: Kernel) -> float:
        if kernel.kind == "free":
            return 0.0
        if not _runs_alone(kernel):
            return self.fallback().kernel_seconds(kernel)
        program = self._isolated.pop(structure(kernel), None) or isolate(kernel)
        timing = _timing(program, kernel)
        if timing in self._failed:
            return self.fallback().kernel_seconds(kernel)
        seconds = self.cache.get(timing)
        if seconds is None:
            try:
                with self._watch.running():
                    seconds = measure.time_graph(program, repeats=self.repeats,
                                                 min_sample=self.min_sample,
                                                 options=self.options, cold=_cold(kernel))
            except deadline.OutOfTime:
                raise
            except Exception as err:  # noqa: BLE001 - price it, don't fail the search
                logger.debug("hlo_opt: cannot time kernel %s alone (%s); using the "
                             "roofline", [n.op for n in kernel.nodes], err)
                return self.fallback().kernel_seconds(kernel)
            self.cache.put(timing, seconds)
            self.measured += 1
        if kernel.kind == "contract":
            self._anchors.record(timing, program, _cold(kernel), seconds)
        return float(seconds)

    @property
    def programs(self) -> int:
        """Whole programs timed (cache misses) by this object."""
        return self.whole.timed

    def timed_whole(self, graph: Graph, frozen: Iterable[int]) -> bool:
        return self.whole.known(graph, frozen)

    def estimate(self, kernel: Kernel) -> float:
        """The cached timing, else the roofline: timing a new kernel of a program that
        is timed whole anyway (a compile and a measurement per kernel) bought NasRNN's
        search nothing but fewer candidates in its time."""
        key = structure(kernel)
        if self._seen is not None and key in self._seen:
            return self._seen[key]
        if key not in self._estimates:          # isolating a kernel to look it up took
            self._estimates[key] = self._lookup(kernel)   # half of a part's pricing
        return self._estimates[key]

    def _lookup(self, kernel: Kernel) -> float:
        if kernel.kind == "free":
            return 0.0
        if _runs_alone(kernel):
            seconds = self.cache.get(_timing(isolate(kernel), kernel))
            if seconds is not None:
                return float(seconds)
        return self.fallback().kernel_seconds(kernel)

    def whole_seconds(self, graph: Graph, frozen: Iterable[int],
                      kernels: Sequence[Kernel]) -> float | None:
        return self.whole.seconds(graph, frozen, kernels)

    def done(self) -> None:
        """Writes what was timed to disk, counted as timing: a flush reads, merges and
        rewrites the whole file (50 ms at 12,000 entries), and left on the search's
        clock it made a cold search stop at 523 of NasRNN's graphs where a warm one
        reaches 841."""
        with self._watch.running():
            self.cache.flush()


def _cold(kernel: Kernel) -> tuple[int, ...]:
    """The positions of the kernel's cold inputs among its isolated program's inputs
    (`isolate`: one per input that is not a constant, in the order of `ports`)."""
    if not kernel.cold:
        return ()
    return tuple(i for i, v in enumerate(ports(kernel)[0]) if v in kernel.cold)


def _timing(program: Graph, kernel: Kernel) -> str:
    """The cache key of a kernel's timing: its isolated program, and its cold inputs."""
    cold = _cold(kernel)
    return program.digest if not cold else f"{program.digest}:cold{list(cold)}"


def _runs_alone(kernel: Kernel) -> bool:
    """Whether the kernel can be timed as a program of its own (no effects, outputs)."""
    return bool(kernel.outputs) and not any(n.deps for n in kernel.nodes)


def make(name: str = "measured", cache_dir=None,
         compiler_options: compile_options.Options | None = None) -> CostModel:
    """The cost model called `name` ("measured" or "analytic"); a measured one times
    kernels compiled with `compiler_options`."""
    if name == "measured":
        return Measured(cache_dir, compiler_options=compiler_options)
    if name == "analytic":
        return Analytic.calibrated(cache_dir)
    raise ValueError(f"unknown cost model {name!r}; use 'measured' or 'analytic'")
