"""`Report`: what hlo_opt did to one input signature of a function."""
from __future__ import annotations

import dataclasses

from hlo_opt import compile_options
from hlo_opt.ir import Graph


@dataclasses.dataclass(frozen=True)
class Report:
    original: Graph | None
    optimized: Graph | None
    applied: dict[str, int]
    cost_before: float | None       # predicted seconds
    cost_after: float | None
    measured_before: float | None   # measured seconds
    measured_after: float | None
    search_seconds: float
    stop_reason: str | None
    fell_back: bool
    reason: str | None
    source: str | None
    compiler_options: dict = dataclasses.field(default_factory=dict)   # XLA's, chosen by timing
    # stage -> seconds on the search's clock (`Result.stats["phases"]`; empty if cached):
    # `search_seconds` is wall time, with the choice of compile options, the original's
    # first pricing and first-time kernel timing in it too
    search_phases: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def unsearched(cls, original: Graph | None, *, fell_back: bool, reason: str | None = None,
                   source: str | None = None) -> "Report":
        """The report of a program kept as it is, no search run on it."""
        return cls(original=original, optimized=original, applied={}, cost_before=None,
                   cost_after=None, measured_before=None, measured_after=None,
                   search_seconds=0.0, stop_reason=None, fell_back=fell_back, reason=reason,
                   source=source)

    def summary(self) -> str:
        """A human-readable table."""
        def fmt(seconds):
            return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"
        rows = [
            ("nodes", f"{_size(self.original)} -> {_size(self.optimized)}"),
            ("predicted", f"{fmt(self.cost_before)} -> {fmt(self.cost_after)}"),
            ("measured", f"{fmt(self.measured_before)} -> {fmt(self.measured_after)}"),
            ("search", f"{self.search_seconds:.2f} s ({self.stop_reason or '-'})"),
            *([("search stages", " · ".join(f"{k} {v:.2f} s" for k, v in
                                            self.search_phases.items()))]
              if self.search_phases else []),
            ("fell back", f"yes: {self.reason}" if self.fell_back else "no"),
            ("compile options", compile_options.describe(self.compiler_options)),
        ]
        rows += [(f"rule {name}", f"x{count}") for name, count in sorted(self.applied.items())]
        if not self.applied:
            rows.append(("rules applied", "none"))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)

    def to_dot(self) -> str:
        """Graphviz text: the original and optimized graphs side by side; nodes of the
        optimized graph that the original lacks are highlighted."""
        lines = ["digraph hlo_opt {", "  rankdir=TB; node [shape=box, fontsize=10];"]
        before = {n.digest for n in self.original.nodes} if self.original else set()
        for tag, graph in (("before", self.original), ("after", self.optimized)):
            if graph is None:
                continue
            lines.append(f'  subgraph cluster_{tag} {{ label="{tag}";')
            ids = {n: f"{tag}{i}" for i, n in enumerate(graph.nodes)}
            for node in graph.nodes:
                label = node.op if node.op != "opaque" else node.params["primitive"].name
                label += "\\n" + ", ".join(map(str, node.types))
                style = ', style=filled, fillcolor="#ffd27f"' \
                    if tag == "after" and node.digest not in before else ""
                lines.append(f'    {ids[node]} [label="{label}"{style}];')
                for parent in node.parents():
                    lines.append(f"    {ids[parent]} -> {ids[node]};")
            lines.append("  }")
        lines.append("}")
        return "\n".join(lines)


def _size(graph: Graph | None) -> str:
    return "-" if graph is None else str(len(graph))
