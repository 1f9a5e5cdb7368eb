"""The regrouping move: the grouped convs of one shape (a ResNeXt stage) split into 2^j
convs of fewer groups, each made dense with a block-diagonal kernel, j chosen by price;
and the same for the dots of one shape, split into 2^j dots on column slices of the
weight.

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

Dots: XLA's CPU backend runs a dot of few rows on one core, and pieces of it side by
side on several. Measured on the 2-core VM (interleaved, median of 9; pieces on column
slices of the weight, concatenated):

    x, w                          2 pieces   4 pieces   8 pieces   16 pieces
    1x32x1024, 1024x1024 (SRU)     1.38x      1.22x      1.29x      1.36x
    64x1024, 1024x1024 (BERT)      0.83x      0.68x      0.92x      0.64x
    64x1024, 1024x3072             1.06x      1.12x      1.11x      1.14x
    1x512, 512x512 (NasRNN)        0.97x      0.90x      0.86x      0.42x

So dots are priced from the fewest pieces up: where two lose, more rarely win.

Depthwise convs (one input channel per group) are left out: a dense form multiplies
their work by the channel count, and they have their own move (`depthwise-conv3x3-as-
taps`).
"""
from __future__ import annotations

import dataclasses
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
MIN_COLUMNS = 64    # a dot's pieces keep at least this many columns each


@dataclasses.dataclass(frozen=True)
class Kind:
    """What splits into pieces: `halve` splits one in two, `finish` (if any) is then
    applied to every piece; `extent(signature)` is what is divided (groups, columns) and
    `least` the smallest piece. A kind with a finish is priced from the most pieces
    down (none: one finished piece), one without from two pieces up."""
    op: str
    halve: str
    finish: str | None
    extent: Callable[[tuple], int]
    least: int
    member: Callable[[Node], bool]


def _depthwise(node: Node) -> bool:
    dn = node.params["dimension_numbers"]
    return node.inputs[1].type.shape[dn.rhs_spec[1]] == 1


GROUPED = Kind(CONV, HALVE, DENSE, lambda f: f[0]["feature_group_count"], 1,
               lambda n: n.params["feature_group_count"] > 1 and not _depthwise(n))
DOTS = Kind("dot_general", "dot-halve-columns", None, lambda f: f[1][1].shape[-1],
            MIN_COLUMNS, lambda n: True)
KINDS = (GROUPED, DOTS)


def signature(node: Node) -> tuple:
    """What makes two convs (or dots) one family: their params and the types they read
    and write."""
    return node.params, tuple(v.type for v in node.inputs), node.types


def families(graph: Graph, rules: Sequence[Rule], kind: Kind = GROUPED) -> list[tuple]:
    """The signatures of the graph's nodes of `kind` that can be halved at least once
    (grouped convs that are not depthwise; dots whose weight's columns halve into
    pieces of `MIN_COLUMNS` or more), in graph order, each once; none when `rules`
    lack the kind's rules."""
    by_name = {r.name: r for r in rules}
    if kind.halve not in by_name or (kind.finish and kind.finish not in by_name):
        return []
    # a grouped conv of odd groups still has its dense form; a dot must halve
    halvable = None if kind.finish else {m.roots[0].node for m in by_name[kind.halve].matches(graph)}
    found: list[tuple] = []
    for node in graph.nodes:
        if node.op == kind.op and kind.member(node) and signature(node) not in found \
                and (halvable is None or node in halvable) and halvings(signature(node), kind):
            found.append(signature(node))
    return found


def cheapest(graph: Graph, rules: Sequence[Rule], price: Callable[[Graph], float],
             stop: Callable[[], bool] = lambda: False, kinds: Sequence[Kind] = KINDS
             ) -> tuple[Graph, list[str]]:
    """(graph with each family in its cheapest form, rule names applied). A family's
    pricing ends at the first form `SLACK` above the best so far: on ResNeXt, priced
    from the most pieces down, the prices fall, then rise, as the pieces get fewer;
    dots are priced from the fewest up. Each form priced cold costs a compile or two."""
    applied: list[str] = []
    for kind in kinds:
        for family in families(graph, rules, kind):
            best, names = graph, []
            for j in halvings(family, kind):
                if stop():       # before the form is made: making one takes up to a second
                    return best, applied + names
                made = regroup(graph, rules, family, j, kind)
                if made is None:
                    continue
                form, taken = made
                if price(form) < price(best):
                    best, names = form, taken
                elif price(form) > price(best) * (1 + SLACK):
                    break
            graph, applied = best, applied + names
    return graph, applied


def halvings(family: tuple, kind: Kind = GROUPED) -> range:
    """The halvings j of a family's forms (2^j pieces, up to `MAX_PIECES`, each at least
    the kind's least piece): from the most to none for grouped convs (none: one dense
    conv), from one to the most for dots."""
    extent = kind.extent(family)
    most = 0
    while 2 ** (most + 1) <= MAX_PIECES and extent % 2 ** (most + 1) == 0 \
            and extent // 2 ** (most + 1) >= kind.least:
        most += 1
    if kind.finish is None:                 # no halving leaves a dot as it was
        return range(1, most + 1)
    return range(most, -1, -1)


def regroup(graph: Graph, rules: Sequence[Rule], family: tuple, halvings: int,
            kind: Kind = GROUPED) -> tuple[Graph, list[str]] | None:
    """(graph with the family's nodes halved `halvings` times and each piece finished
    (grouped convs made dense), rule names applied), or None when a halving finds
    nothing to split."""
    by_name = {r.name: r for r in rules}
    halve = by_name[kind.halve]
    members, applied = {family}, []
    for _ in range(halvings):
        found = [m for m in halve.matches(graph) if signature(m.roots[0].node) in members]
        before = _signatures(graph, kind.op)
        graph, taken = halve.apply_all(graph, found)
        if not taken:
            return None
        applied += [kind.halve] * taken
        members = _signatures(graph, kind.op) - before      # the pieces
    if kind.finish:
        finish = by_name[kind.finish]
        found = [m for m in finish.matches(graph) if signature(m.roots[0].node) in members]
        graph, taken = finish.apply_all(graph, found)
        applied += [kind.finish] * taken
    graph, flat = saturate(graph, [by_name[n] for n in TIDY if n in by_name])
    return (graph, applied + flat) if applied else None


def _signatures(graph: Graph, op: str) -> set[tuple]:
    return {signature(n) for n in graph.nodes if n.op == op}
