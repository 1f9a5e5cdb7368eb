"""The regrouping move: the grouped convs of one shape (a ResNeXt stage) split into 2^j
convs of fewer groups, each made dense with a block-diagonal kernel, j chosen by price.

XLA's CPU backend runs a grouped conv far below its FLOPs, and a dense conv of 32x
the FLOPs can be faster; how many pieces pay depends on the shape. Measured on the
2-core CPU (each form jitted alone, median of 7; 32 groups, 3x3 kernel):

    channels, size   grouped   1 dense   4 dense   8 dense   16 dense   32 convs
    256 at 28x28      4.2 ms    7.2 ms    3.2 ms    2.0 ms    1.9 ms     2.4 ms
    512 at 14x14      1.9 ms    9.1 ms    2.8 ms    1.8 ms    1.0 ms     1.2 ms
    1024 at 7x7       1.5 ms   34.7 ms    4.7 ms    3.2 ms    1.4 ms     1.2 ms

The forms on the way there (one or two halvings) cost more than the grouped conv, so a
search that takes one rule at a time, or one rule at all matches of a shape, stops
before the pieces pay. `regroup` takes the whole way for one family: `grouped-conv-
halve` j times at all its matches and then at all the pieces', `grouped-conv-to-dense`
at the pieces, the nested concats flattened and each chain of slices made one. Every
step is a verified rule, so each form is an equivalent graph; the search prices them
and keeps the cheapest.

Depthwise convs (one input channel per group) are left out: a dense form multiplies
their work by the channel count, and they have their own move (`depthwise-conv3x3-as-
taps`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from hlo_opt.ir import Graph, Node
from hlo_opt.rules.lang import Rule
from hlo_opt.rules.library.conv import CONV
from hlo_opt.search.layout import saturate

HALVE, DENSE = "grouped-conv-halve", "grouped-conv-to-dense"
TIDY = ("concat-flatten", "slice-of-slice")
MAX_PIECES = 16     # 32 pieces priced at most 0.35 ms under 16 on any ResNeXt family
                    # (16 ms over on one), and were the slowest forms to price cold
                    # (1.0-2.0 s each)
SLACK = 0.01        # a form priced this much above the best so far ends the family's forms


def signature(node: Node) -> tuple:
    """What makes two convs one family: their params and the types they read and write."""
    return node.params, tuple(v.type for v in node.inputs), node.types


def families(graph: Graph, rules: Sequence[Rule]) -> list[tuple]:
    """The signatures of the graph's grouped convs that are not depthwise, in graph
    order, each once; none when `rules` lack the two grouped-conv rules."""
    if not {HALVE, DENSE} <= {r.name for r in rules}:
        return []
    found: list[tuple] = []
    for node in graph.nodes:
        if node.op == CONV and node.params["feature_group_count"] > 1 and not _depthwise(node) \
                and signature(node) not in found:
            found.append(signature(node))
    return found


def cheapest(graph: Graph, rules: Sequence[Rule], price: Callable[[Graph], float],
             stop: Callable[[], bool] = lambda: False) -> tuple[Graph, list[str]]:
    """(graph with each family in its cheapest form, rule names applied). Forms are
    priced from the most pieces down, and a family's pricing ends at the first form
    `SLACK` above the best so far: on ResNeXt the prices fall, then rise, as the pieces
    get fewer, and each form priced cold costs a compile or two."""
    applied: list[str] = []
    for family in families(graph, rules):
        best, names = graph, []
        for j in halvings(family):
            if stop():           # before the form is made: making one takes up to a second
                return best, applied + names
            made = regroup(graph, rules, family, j)
            if made is None:
                continue
            form, taken = made
            if price(form) < price(best):
                best, names = form, taken
            elif price(form) > price(best) * (1 + SLACK):
                break
        graph, applied = best, applied + names
    return graph, applied


def halvings(family: tuple) -> range:
    """The halvings j of the family's forms (2^j dense convs), from the most pieces (up
    to `MAX_PIECES`, at most one per group) to one."""
    groups = family[0]["feature_group_count"]
    most = 0
    while 2 ** (most + 1) <= min(groups, MAX_PIECES) and groups % 2 ** (most + 1) == 0:
        most += 1
    return range(most, -1, -1)


def regroup(graph: Graph, rules: Sequence[Rule], family: tuple, halvings: int
            ) -> tuple[Graph, list[str]] | None:
    """(graph with the family's convs halved `halvings` times and each piece made
    dense, rule names applied), or None when a halving finds nothing to split."""
    by_name = {r.name: r for r in rules}
    halve, dense = by_name[HALVE], by_name[DENSE]
    members, applied = {family}, []
    for _ in range(halvings):
        found = [m for m in halve.matches(graph) if signature(m.roots[0].node) in members]
        before = _conv_signatures(graph)
        graph, taken = halve.apply_all(graph, found)
        if not taken:
            return None
        applied += [HALVE] * taken
        members = _conv_signatures(graph) - before      # the pieces
    found = [m for m in dense.matches(graph) if signature(m.roots[0].node) in members]
    graph, taken = dense.apply_all(graph, found)
    applied += [DENSE] * taken
    graph, flat = saturate(graph, [by_name[n] for n in TIDY if n in by_name])
    return (graph, applied + flat) if applied else None


def _conv_signatures(graph: Graph) -> set[tuple]:
    return {signature(n) for n in graph.nodes if n.op == CONV}


def _depthwise(node: Node) -> bool:
    dn = node.params["dimension_numbers"]
    return node.inputs[1].type.shape[dn.rhs_spec[1]] == 1
