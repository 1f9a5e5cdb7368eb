"""The cost model: how long a Graph takes on this device.

- `partition`: the graph split into the kernels XLA fuses it into;
- `layouts`: the memory order XLA CPU keeps each value in between kernels;
- `residency`: which kernel operands the program reads from main memory each call;
- `measure`: timing a small program here (jitted microbenchmarks);
- `cache`: the on-disk JSON cache of those timings;
- `analytic`: a calibrated roofline, for tests and as fallback;
- `memory`: page faults of buffers past malloc's mmap line, a per-call cost no kernel shows;
- `model`: `Measured` / `Analytic` cost models; `cost = model.cost(graph, frozen=...)`;
- `price`: `Price(model, frozen)`, that as the search takes it.
"""
from hlo_opt.cost.model import Analytic, Cost, CostModel, KernelCost, Measured, make
from hlo_opt.cost.price import Price

__all__ = ["Analytic", "Cost", "CostModel", "KernelCost", "Measured", "Price", "make"]
