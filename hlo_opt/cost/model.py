"""Graph cost = the sum of its kernels' costs, each measured (and cached) or estimated.

Contract: `CostModel.cost(graph, frozen=...)` returns a `Cost` whose `total` is the
predicted seconds of one run of the graph on this device, and whose `kernels` say where
that time goes. Kernels that depend only on frozen inputs (weights at inference) and
constants cost nothing: they are computed once, not per call.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

import jax

from hlo_opt.cost import analytic, measure
from hlo_opt.cost.cache import Cache
from hlo_opt.cost.partition import Kernel, isolate, partition
from hlo_opt.frozen import weight_only
from hlo_opt.ir import Graph

logger = logging.getLogger("hlo_opt")


@dataclasses.dataclass(frozen=True)
class KernelCost:
    kernel: Kernel
    seconds: float          # per run; 0 when precomputed
    precomputed: bool       # depends only on frozen inputs and constants


@dataclasses.dataclass(frozen=True)
class Cost:
    total: float
    kernels: tuple[KernelCost, ...]

    def breakdown(self, top: int = 10) -> list[tuple[str, float]]:
        """The costliest kernels, as (ops joined by '+', seconds)."""
        ranked = sorted(self.kernels, key=lambda k: -k.seconds)[:top]
        return [("+".join(n.op for n in k.kernel.nodes), k.seconds) for k in ranked]


def device_header() -> dict:
    device = jax.devices()[0]
    return {"device": device.device_kind, "platform": device.platform, "jax": jax.__version__}


class CostModel:
    """Prices kernels; `cost` partitions a graph and sums."""

    platform = "cpu"
    _seen: dict | None = None

    def kernel_seconds(self, kernel: Kernel) -> float:
        raise NotImplementedError

    def _price(self, kernel: Kernel) -> float:
        """`kernel_seconds`, remembered by the kernel's node objects: graphs met in a
        search share every node their rewrite left alone, so most of a candidate's
        kernels were priced with its parent."""
        if self._seen is None:
            self._seen = {}
        key = (kernel.nodes, kernel.inputs, kernel.outputs)
        if key not in self._seen:
            self._seen[key] = self.kernel_seconds(kernel)
        return self._seen[key]

    def cost(self, graph: Graph, frozen: Iterable[int] = ()) -> Cost:
        fixed = weight_only(graph, frozen)
        kernels = partition(graph, epilogue_fusion=self.platform == "gpu")
        priced = []
        for kernel in kernels:
            pre = all(v.node in fixed for v in kernel.inputs)
            priced.append(KernelCost(kernel, 0.0 if pre else self._price(kernel), pre))
        self.done()
        return Cost(sum(k.seconds for k in priced), tuple(priced))

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

    def __init__(self, cache_dir=None, *, repeats: int = 5, min_sample: float = 2e-3,
                 fallback: Analytic | None = None):
        header = device_header()
        self.platform = header["platform"]
        self.cache = Cache("kernels", {**header, "method": measure.METHOD}, cache_dir)
        self.repeats, self.min_sample = repeats, min_sample
        self._fallback = fallback
        self._cache_dir = cache_dir
        self.measured = 0       # kernels timed (cache misses) by this object

    def fallback(self) -> Analytic:
        if self._fallback is None:
            self._fallback = Analytic.calibrated(self._cache_dir)
        return self._fallback

    def kernel_seconds(self, kernel: Kernel) -> float:
        if kernel.kind == "free":
            return 0.0
        if any(n.deps for n in kernel.nodes) or not kernel.outputs:
            return self.fallback().kernel_seconds(kernel)
        program = isolate(kernel)
        seconds = self.cache.get(program.digest)
        if seconds is None:
            try:
                seconds = measure.time_graph(program, repeats=self.repeats,
                                             min_sample=self.min_sample)
            except Exception as err:  # noqa: BLE001 - price it, don't fail the search
                logger.debug("hlo_opt: cannot time kernel %s alone (%s); using the "
                             "roofline", [n.op for n in kernel.nodes], err)
                return self.fallback().kernel_seconds(kernel)
            self.cache.put(program.digest, seconds)
            self.measured += 1
        return float(seconds)

    def done(self) -> None:
        self.cache.flush()


def make(name: str = "measured", cache_dir=None) -> CostModel:
    """The cost model called `name` ("measured" or "analytic")."""
    if name == "measured":
        return Measured(cache_dir)
    if name == "analytic":
        return Analytic.calibrated(cache_dir)
    raise ValueError(f"unknown cost model {name!r}; use 'measured' or 'analytic'")
