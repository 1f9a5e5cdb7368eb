"""A whole-graph move's change of price, shared out among the shapes of its matches.

The sweep tries a rule at all its matches, then at all those of each shape
(`core.everywhere`), and each try rewrites and prices the whole graph: its tries grew
with the shapes and each with the graph (Inception-v3 small at 4 C blocks: 41 tries of
a 284-node graph, 30 at one shape). Where the graph's price is its kernels' sum, the
all-matches try already shows what each shape changes. The kernels that changed form
groups: a kernel before and one after are in the same group where they hold the same
node, or the node and its rebuild (`Built.images`). A group that holds the nodes of one
shape's matches, or the nodes built for them, is that shape's. `by_shape` sums each
shape's groups; a shape whose groups gain too little is not given a whole-graph try of
its own. A group that holds the nodes of several shapes (their matches read one
kernel's output, which each rewrite reshapes) gives each of them its change if it
gained, nothing if it lost. That misses a shape that gains where another, in the same
kernel, loses more; those shapes once all got tries, and most of the sweep's shape
tries were theirs (Inception-v3 small at 4 C blocks: 7 of 9 shapes of `conv1x1-as-dot`
shared a kernel with another; the 5 tries at them changed the price by 0-1.4 us, under
the 1.5 us a move must gain). Without them: the same graphs found on the zoo, full and
small, and the scaling configs (analytic and measured); 24-57% fewer tries under the
analytic cost (Inception 4 C blocks 22 -> 11, BERT 20 -> 10, NASNet-A 49 -> 21), as
many under the measured one.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from networkx.utils import UnionFind

from hlo_opt.cost import Cost
from hlo_opt.ir import Node
from hlo_opt.rules.lang import Built, Match


def by_shape(before: Cost, after: Cost, built: Built, matches: Sequence[Match],
             shape_of: Callable[[Match], tuple], slack: float) -> dict[tuple, float]:
    """shape -> the change of price (seconds) of its groups of kernels, from `before` to
    `after` (the graph rewritten at every match in `matches`; `built`: what
    `Rule.apply_all` made). Empty where the change cannot be shared out: a price timed
    whole, or one that moved by more than `slack` outside those groups (page faults, a
    fusion changed further off). A shape is left out where one of its matches was not
    taken. A group holding several shapes' nodes adds its change to each where it
    gained, nothing where it lost (see the module doc)."""
    if before.whole or after.whole:
        return {}
    shape = {id(m): shape_of(m) for m in matches}
    owner: dict[Node, set[tuple]] = defaultdict(set)
    for m in matches:
        for n in m.nodes:
            owner[n].add(shape[id(m)])
    for m, made in built.made:
        for n in made:
            owner[n].add(shape[id(m)])
    taken = {id(m) for m, _ in built.made}
    unsure = {shape[id(m)] for m in matches if id(m) not in taken}
    origin = {new: old for old, new in built.images.items()}
    kernels = [(-k.seconds, k.kernel.nodes) for k in before.kernels] + \
        [(k.seconds, [origin.get(n, n) for n in k.kernel.nodes]) for k in after.kernels]
    group = UnionFind(range(len(kernels)))
    first: dict[Node, int] = {}
    for i, (_, nodes) in enumerate(kernels):
        for n in nodes:
            group.union(first.setdefault(n, i), i)
    change: dict[int, float] = defaultdict(float)
    shapes: dict[int, set[tuple]] = defaultdict(set)
    for i, (seconds, nodes) in enumerate(kernels):
        root = group[i]
        change[root] += seconds
        for n in nodes:
            if n in owner:
                shapes[root] |= owner[n]
    out: dict[tuple, float] = defaultdict(float)
    rest = after.total - before.total
    for root, seconds in change.items():
        if not shapes[root]:
            continue
        rest -= seconds
        mine = min(seconds, 0.0) if len(shapes[root]) > 1 else seconds
        for s in shapes[root]:
            out[s] += mine
    if abs(rest) > slack:
        return {}
    return {s: d for s, d in out.items() if s not in unsure}

