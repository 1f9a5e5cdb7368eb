"""Flow-based graph split (MetaFlow Algorithm 2), so each search stays small.

A node's capacity is the number of rule matches that pass through it (the match holds
the node, one of its parents and one of its children): cutting there loses those
rewrites. The cheapest vertex cut between the first and last thirds of the graph (by
distance from the outputs) is a max-flow on the node-split graph (networkx). The nodes
on the source side, cut nodes included, form the first part; the rest the second; each
part is a graph of its own, its boundary values its outputs or inputs. Parts are split
again until they have at most `threshold` operations.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence

import networkx as nx

from hlo_opt.ir import Graph, Node, Value, copy_nodes, is_constant, rebase, subgraph
from hlo_opt.params import Params
from hlo_opt.rules.lang import Match, Rule
from hlo_opt.search.core import matches


def capacities(graph: Graph, rules: Sequence[Rule], limits=None) -> dict[Node, int]:
    cap = {n: 0 for n in graph.nodes}
    for _, m in matches(graph, rules, limits):
        inside = m.nodes
        for node in inside:
            if any(p in inside for p in node.parents()) and \
                    any(node in c.parents() for c in inside):
                cap[node] += 1
    return cap


def min_cut(graph: Graph, rules: Sequence[Rule], limits=None) -> tuple[set[Node], set[Node]]:
    """(first part, cut nodes). The first part is closed under ancestors and holds the
    cut nodes, so every edge between the parts runs from the first to the second. With
    `limits` run out, the capacities count only the matches found in time."""
    nodes = [n for n in graph.nodes if n.op != "input"]
    cap = capacities(graph, rules, limits)
    flow = nx.DiGraph()
    third = max(1, len(nodes) // 3)
    nodes = _by_height(graph, nodes)
    for node in nodes:
        # +1: cutting anywhere costs a little, so the cut stays small where nothing matches
        flow.add_edge(("in", node), ("out", node), capacity=cap[node] + 1)
        for v in node.inputs:
            if v.node.op != "input":
                flow.add_edge(("out", v.node), ("in", node))         # uncuttable
    for node in nodes[:third]:
        flow.add_edge("S", ("in", node))
    for node in nodes[-third:]:
        flow.add_edge(("out", node), "T")
    _, (source_side, _) = nx.minimum_cut(flow, "S", "T")
    cut = {n for n in nodes if ("in", n) in source_side and ("out", n) not in source_side}
    first = _ancestors({n for n in nodes if ("in", n) in source_side})
    return first, cut


def _by_height(graph: Graph, nodes: list[Node]) -> list[Node]:
    """`nodes` from the farthest from the outputs to the nearest (longest path down to
    an output or a leaf), ties in graph order. Graph order alone puts work that reads
    only inputs first wherever it is used: in a graph turned NHWC, 33 weight transposes
    were Inception's first third, every one feeding a conv up to the last, and the
    cheapest cut between the thirds held every node, so the graph was never split."""
    height = dict.fromkeys(graph.nodes, 0)
    for node in reversed(graph.nodes):           # consumers come before their parents
        for parent in node.parents():
            height[parent] = max(height[parent], height[node] + 1)
    return sorted(nodes, key=lambda n: -height[n])


def _ancestors(seeds: set[Node]) -> set[Node]:
    out, stack = set(), list(seeds)
    while stack:
        node = stack.pop()
        if node in out or node.op == "input":
            continue
        out.add(node)
        stack.extend(node.parents())
    return out


@dataclasses.dataclass
class Parts:
    first: Graph                 # the graph's inputs it reads -> boundary values
    second: Graph                # its inputs -> the outputs the first part does not compute
    boundary: list[Value]        # first-part values read later (by the second or as outputs)
    first_feeds: list[Value]     # per input of `first`: the graph's input it stands for
    second_feeds: list[Value]    # per input of `second`: a graph input or a boundary value
    produced_first: list[bool]   # per original output: computed in the first part?


def cut(graph: Graph, first_nodes: set[Node]) -> Parts:
    """The two graphs either side of `first_nodes` (ancestor-closed). Constant values
    the second part reads are recomputed there (XLA folds them), not passed across.

    A part takes only the inputs it reads, each keeping its `index` (what a frozen set
    names); the values crossing the cut get indices below all of them. With every input
    of the graph kept, each part of Inception carried all 65 weights of a four-block
    model: a candidate's cost to make and price grew with the whole model, and the
    search time with the square of its size."""
    inputs = [n.out() for n in graph.inputs]
    own = [n.params["index"] for n in graph.inputs]
    if len(set(own)) < len(own):
        own = list(range(len(own)))
    boundary: list[Value] = []
    for node in graph.nodes:
        if node not in first_nodes and node.op != "input":
            boundary += [v for v in node.inputs if v.node in first_nodes and v not in boundary]
    boundary += [v for v in graph.outputs if v.node in first_nodes and v not in boundary]
    crossing = [v for v in boundary if not is_constant(v)]
    fresh = [min(own, default=0) - 1 - j for j in range(len(crossing))]
    by_index = dict(zip(own + fresh, inputs + crossing))
    first, _ = subgraph(boundary, inputs, keep_constants=False, indices=own, used_only=True)
    second, _ = subgraph([v for v in graph.outputs if v.node not in first_nodes],
                         inputs + crossing, keep_constants=False, indices=own + fresh,
                         used_only=True)
    return Parts(first, second, boundary,
                 [by_index[n.params["index"]] for n in first.inputs],
                 [by_index[n.params["index"]] for n in second.inputs],
                 [v.node in first_nodes for v in graph.outputs])


def stitch(original: Graph, parts: Parts, first: Graph, second: Graph,
           part_of: dict[Node, int] | None = None) -> Graph:
    """The whole graph again from (optimised) parts with the same interfaces. With
    `part_of` (node -> the searched part it came from), each copy takes its node's."""
    env = dict(zip([n.out() for n in first.inputs], parts.first_feeds))
    clones = copy_nodes([n for n in first.nodes if n.op != "input"], env)
    made = dict(zip(parts.boundary, [env[v] for v in first.outputs]))
    made.update((n.out(), n.out()) for n in original.inputs)
    env = {a.out(): made[v] for a, v in zip(second.inputs, parts.second_feeds)}
    clones.update(copy_nodes([n for n in second.nodes if n.op != "input"], env))
    if part_of is not None:
        part_of.update((c, part_of[n]) for n, c in clones.items() if n in part_of)
    rest = iter([env[v] for v in second.outputs])
    outputs = [made[v] if early else next(rest)
               for v, early in zip(original.outputs, parts.produced_first)]
    return Graph(original.inputs, outputs)


def spans(part_of: dict[Node, int]) -> Callable[[Match], bool]:
    """Whether a match lies across a cut: its nodes come from two searched parts, or
    one from none (made after the stitch). The parts' searches have met the matches
    inside one part; on ResNet-50, Inception-v3, NasRNN, BERT and SRU the pass across
    the cuts spent its whole budget of 50 graphs on them and took nothing or
    add-commute (0.00-0.18% of the cost: timing noise), 0.35-1.7 s a search."""
    def across(m: Match) -> bool:
        found = {part_of.get(n) for n in m.nodes if n.op != "input"}
        return len(found) > 1 or None in found
    return across


def shape(graph: Graph, fixed: Collection[int] = ()) -> str:
    """The digest of `graph` with each input known by its place, its type and whether
    its index is in `fixed` (a frozen weight, whose work the cost counts as free), not
    by the index itself: equal for two parts that pose the same search (two layers of
    BERT, each reading its own weights; 40 parts of BERT-base were 4 shapes)."""
    return rebase(graph, [Node("input", (), Params(index=i, fixed=n.params["index"] in fixed),
                               n.types) for i, n in enumerate(graph.inputs)]).digest
