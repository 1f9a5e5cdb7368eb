"""A cost model's price of graphs with some inputs frozen, in the form the search takes."""
from __future__ import annotations

from collections.abc import Iterable

from hlo_opt.cost.model import Cost, CostModel
from hlo_opt.ir import Graph


class Price:
    """`model`'s price of a graph whose inputs `fixed` are frozen, as the search takes
    it: called, the predicted seconds; `breakdown`, the whole `Cost` (the search's
    sweep reads where a move's price changed)."""

    def __init__(self, model: CostModel, fixed: Iterable[int] = ()):
        self.model, self.fixed = model, tuple(fixed)

    def __call__(self, graph: Graph) -> float:
        return self.breakdown(graph).total

    def breakdown(self, graph: Graph) -> Cost:
        return self.model.cost(graph, self.fixed)
