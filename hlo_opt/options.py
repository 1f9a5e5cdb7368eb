"""The options `hlo_opt.jit` takes beside jax.jit's, validated once when a function is
wrapped, and `HLO_OPT_DISABLE`, read then too."""
from __future__ import annotations

import dataclasses
import os
from typing import Any

from hlo_opt.cost import CostModel


SEARCHES = ("auto", "backtracking", "sampling", "greedy")
COSTS = ("measured", "analytic")


def disabled() -> bool:
    """True when `HLO_OPT_DISABLE` is set (to anything but "" or "0"); read when a
    function is wrapped."""
    return os.environ.get("HLO_OPT_DISABLE", "") not in ("", "0")


@dataclasses.dataclass(frozen=True)
class Options:
    """Optimisation options; the same names are accepted by `jit` and `optimize`."""

    alpha: float = 1.05
    budget: int | None = None
    time_limit: float | None = None
    search: str = "auto"
    cost: Any = "measured"          # "measured", "analytic" or a cost.CostModel
    rules: Any = None
    verify: bool = True
    measure_final: bool = True
    split_threshold: int = 30
    cache_dir: str | None = None

    def validate(self, name: str) -> "Options":
        problems = []
        if not self.alpha >= 1.0:
            problems.append(f"alpha must be >= 1.0, got {self.alpha!r}")
        if self.search not in SEARCHES:
            problems.append(f"search must be one of {SEARCHES}, got {self.search!r}")
        if not isinstance(self.cost, CostModel) and self.cost not in COSTS:
            problems.append(f"cost must be one of {COSTS} or a CostModel, got {self.cost!r}")
        if self.budget is not None and self.budget < 0:
            problems.append(f"budget must be >= 0, got {self.budget!r}")
        if self.time_limit is not None and self.time_limit < 0:
            problems.append(f"time_limit must be >= 0, got {self.time_limit!r}")
        if self.split_threshold < 2:
            problems.append(f"split_threshold must be >= 2, got {self.split_threshold!r}")
        if problems:
            raise ValueError(f"hlo_opt.jit({name}): " + "; ".join(problems))
        return self


OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(Options))
