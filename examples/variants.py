"""Hand-made equivalent variants of a captured graph, for the cost-fidelity benchmark.

Three families, the moves the search will make (issue: rules) done here by hand:
- layout: an NCHW conv becomes transpose -> NHWC/HWIO conv -> transpose (the kernel's
  transpose is weight-only, so free once weights are frozen);
- merge: dots that share their left operand become one dot on concatenated weights,
  then slices (TASO's merged matmul; QKV in BERT, the gates of SRU and NasRNN);
- split dots: the merge backwards, `x @ W` as k dots on column slices of W, concatenated,
  at a random share of the dots (where dots share operands: BERT, SRU, NasRNN);
- weights N x K: the search's finishing move (`search.layout.weights_nk`), a frozen
  matmul weight read N x K, at a random share of the dots of the original or of a merge
  or split variant (BERT's search takes it at all 48 of its dots);
- pair: `x @ a + h @ b` becomes `concat(x, h) @ concat(a; b)` (NasRNN's gate pairs);
- split: a grouped conv becomes k convs on channel slices, concatenated;
- rules: the search's own conv moves, by the verified rules: the network relaid out in
  NHWC (`search.layout.relayout`), then 1x1 convs as matmuls, 3x3 convs as im2col,
  depthwise convs as taps, each at a random share of its matches — the decisions the
  search prices (Inception-v3's im2col among them); and SRU's narrowing and
  vectorising moves (`search.narrow`), each taken or not.
Each transform returns a new Graph computing the same function.
"""
from __future__ import annotations

import random
from collections.abc import Sequence

from jax.lax import ConvDimensionNumbers

from hlo_opt.ir import Graph, Node, Value, replace
from hlo_opt.ops import make
from hlo_opt.rules.library import ALL
from hlo_opt.search import layout, narrow

NCHW = ConvDimensionNumbers((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3))
NHWC = ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
MAX_SPLIT = 20
CONV_MOVES = ("conv1x1-as-dot", "strided-conv1x1-as-dot", "conv3x3-as-im2col",
              "depthwise-conv3x3-as-taps")
SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)


def _slice(value: Value, axis: int, start: int, stop: int) -> Value:
    shape = value.type.shape
    begin = tuple(start if i == axis else 0 for i in range(len(shape)))
    end = tuple(stop if i == axis else n for i, n in enumerate(shape))
    return make("slice", [value], start_indices=begin, limit_indices=end, strides=None).out()


# -- layout --------------------------------------------------------------------------------

def nchw_convs(graph: Graph) -> list[Node]:
    return [n for n in graph.nodes if n.op == "conv_general_dilated"
            and n.params["dimension_numbers"] == NCHW]


def to_nhwc(graph: Graph, convs: Sequence[Node]) -> Graph:
    subst = {}
    for conv in convs:
        x = make("transpose", [conv.inputs[0]], permutation=(0, 2, 3, 1)).out()
        w = make("transpose", [conv.inputs[1]], permutation=(2, 3, 1, 0)).out()
        y = make("conv_general_dilated", [x, w],
                 **dict(conv.params.items(), dimension_numbers=NHWC)).out()
        subst[conv.out()] = make("transpose", [y], permutation=(0, 3, 1, 2)).out()
    return replace(graph, subst)


def weights_nk(graph: Graph, fixed: Sequence[int], rng: random.Random) -> tuple[str, Graph]:
    """`dot-weight-to-nk` at a random share (a half or more) of its frozen matches."""
    rule, found = layout.frozen_kn(graph, ALL, fixed)
    if not found:
        return "", graph
    share = rng.choice(SHARES[2:]) if len(found) > 1 else 1.0
    new, _ = rule.apply_all(graph, rng.sample(found, max(1, round(share * len(found)))))
    return f"nk-{share:.0%}", new


# -- merge ---------------------------------------------------------------------------------

def plain_dots(graph: Graph) -> list[Node]:
    """Dots x @ W: W 2-D and contracted on its first axis, no batch dims."""
    return [n for n in graph.nodes if n.op == "dot_general" and len(n.inputs[1].type.shape) == 2
            and n.params["dimension_numbers"][0][1] == (0,)
            and not n.params["dimension_numbers"][1][0]]


def dot_groups(graph: Graph) -> list[list[Node]]:
    """Dots x @ W_i (W 2-D, no batch dims) sharing x and their params, in groups of >= 2."""
    groups: dict[tuple, list[Node]] = {}
    for n in plain_dots(graph):
        groups.setdefault((n.inputs[0], n.params.key), []).append(n)
    return [g for g in groups.values() if len(g) > 1]


def merge_dots(graph: Graph, dots: Sequence[Node]) -> Graph:
    w = make("concatenate", [d.inputs[1] for d in dots], dimension=1).out()
    y = make("dot_general", [dots[0].inputs[0], w], **dict(dots[0].params.items())).out()
    subst, offset, last = {}, 0, len(y.type.shape) - 1
    for d in dots:
        width = d.inputs[1].type.shape[1]
        subst[d.out()] = _slice(y, last, offset, offset + width)
        offset += width
    return replace(graph, subst)


def split_dots(graph: Graph, dots: Sequence[Node], k: int) -> Graph:
    """Each `x @ W` of `dots` as k dots on column slices of W, concatenated (the merge
    read backwards)."""
    subst = {}
    for dot in dots:
        x, w = dot.inputs
        cols = w.type.shape[1]
        parts = [make("dot_general", [x, _slice(w, 1, j * cols // k, (j + 1) * cols // k)],
                      **dict(dot.params.items())).out() for j in range(k)]
        last = len(dot.out().type.shape) - 1
        subst[dot.out()] = make("concatenate", parts, dimension=last).out()
    return replace(graph, subst)


def _plain_dot(value: Value) -> bool:
    """`value` is `x @ W`: a dot of 2-D operands contracting x's last axis with W's first."""
    n = value.node
    return (n.op == "dot_general" and len(n.inputs[0].type.shape) == 2
            and len(n.inputs[1].type.shape) == 2
            and n.params["dimension_numbers"] == (((1,), (0,)), ((), ())))


def dot_pairs(graph: Graph) -> list[Node]:
    """The adds `x @ a + h @ b` whose two dots (same params, read by nothing else) can
    become one dot on concatenated operands."""
    readers: dict[Value, int] = {}
    for n in graph.nodes:
        for v in n.inputs:
            readers[v] = readers.get(v, 0) + 1
    for v in graph.outputs:
        readers[v] = readers.get(v, 0) + 1
    return [n for n in graph.nodes if n.op == "add" and len(n.inputs) == 2
            and all(_plain_dot(v) and readers[v] == 1 for v in n.inputs)
            and n.inputs[0].node.params.key == n.inputs[1].node.params.key
            and n.inputs[0].type == n.inputs[1].type == n.out().type]


def merge_pair(graph: Graph, add: Node) -> Graph:
    (x, a), (h, b) = (v.node.inputs for v in add.inputs)
    xh = make("concatenate", [x, h], dimension=1).out()
    ab = make("concatenate", [a, b], dimension=0).out()
    params = dict(add.inputs[0].node.params.items())
    return replace(graph, {add.out(): make("dot_general", [xh, ab], **params).out()})


# -- split ---------------------------------------------------------------------------------

def grouped_convs(graph: Graph) -> list[Node]:
    return [n for n in nchw_convs(graph) if n.params["feature_group_count"] > 1]


def split_conv(graph: Graph, conv: Node, k: int) -> Graph:
    groups = conv.params["feature_group_count"]
    x, w = conv.inputs
    cin, cout = x.type.shape[1], w.type.shape[0]
    parts = []
    for j in range(k):
        xs = _slice(x, 1, j * cin // k, (j + 1) * cin // k)
        ws = _slice(w, 0, j * cout // k, (j + 1) * cout // k)
        parts.append(make("conv_general_dilated", [xs, ws],
                          **dict(conv.params.items(), feature_group_count=groups // k)).out())
    return replace(graph, {conv.out(): make("concatenate", parts, dimension=1).out()})


# -- rules ---------------------------------------------------------------------------------

def _by_name(names) -> list:
    rules = {r.name: r for r in ALL}
    return [rules[n] for n in names]


def relaid(graph: Graph) -> Graph | None:
    """The whole network in NHWC, its transposes cancelled (the search's layout move)."""
    found = layout.relayout(graph, ALL)
    return None if found is None else found[0]


def conv_moves(graph: Graph, rng: random.Random) -> tuple[str, Graph]:
    """Each conv move of the search applied at a random share of its matches."""
    taken = []
    for rule in _by_name(CONV_MOVES):
        found = rule.matches(graph)
        share = rng.choice(SHARES)
        picked = rng.sample(found, round(share * len(found)))
        if picked:
            graph, _ = rule.apply_all(graph, picked)
            taken.append(f"{rule.name}-{share:.0%}")
    return "+".join(taken) or "none", graph


def sequence_moves(graph: Graph) -> list[tuple[str, Graph]]:
    """SRU's narrowing and vectorising moves, one or both."""
    out, g = [], graph
    for name, move in (("narrow", narrow.narrow), ("vectorize", narrow.vectorize)):
        found = move(graph, ALL)
        if found is not None:
            out.append((name, found[0]))
        found = move(g, ALL)
        g = g if found is None else found[0]
    if g is not graph:
        out.append(("narrow+vectorize", g))
    return out


def _merged(graph: Graph, rng: random.Random) -> tuple[str, Graph]:
    """Dot groups merged: a random share of the groups, random members of each."""
    groups, sizes = dot_groups(graph), []
    for _ in range(max(1, round(rng.choice((0.25, 0.5, 0.75, 1.0)) * len(groups)))):
        current = dot_groups(graph)
        if not current:
            break
        group = rng.choice(current)
        size = rng.choice([n for n in (2, 3, 4, 8) if n <= len(group)] + [len(group)])
        graph = merge_dots(graph, sorted(rng.sample(group, size), key=group.index))
        sizes.append(size)
    return f"merge-{len(sizes)}-groups-of-{max(sizes)}", graph


def _paired(graph: Graph, rng: random.Random) -> tuple[str, Graph]:
    """A random share of the dot pairs merged."""
    pairs = len(dot_pairs(graph))
    for _ in range(max(1, round(rng.choice((0.25, 0.5, 1.0)) * pairs))):
        graph = merge_pair(graph, rng.choice(dot_pairs(graph)))
    return f"pair-{pairs - len(dot_pairs(graph))}", graph


def _split(graph: Graph, rng: random.Random) -> tuple[str, Graph]:
    """A random share of the dots split in k column pieces (the merge backwards)."""
    k, share = rng.choice((2, 4, 8)), rng.choice((0.25, 0.5, 1.0))
    dots = [d for d in plain_dots(graph) if d.inputs[1].type.shape[1] % k == 0]
    picked = rng.sample(dots, max(1, round(share * len(dots)))) if dots else []
    return f"split-{share:.0%}-of-dots-in-{k}", split_dots(graph, picked, k)


# -- a family of variants -----------------------------------------------------------------

def variants(graph: Graph, count: int = 24, seed: int = 0, fixed: Sequence[int] = ()
             ) -> list[tuple[str, Graph]]:
    """Up to `count` distinct variants of `graph` (the original first), drawn from the
    families that apply to it; `fixed`: the inputs that are frozen weights (the N x K
    family needs them)."""
    rng = random.Random(seed)
    out: dict[str, tuple[str, Graph]] = {graph.digest: ("original", graph)}

    def add(name: str, g: Graph) -> None:
        if g.digest not in out:
            out[g.digest] = (f"{name} #{len(out)}", g)

    # Splitting every one of many grouped convs (NASNet's ~100 depthwise convs) would
    # make graphs of thousands of convs; the family is for ResNeXt-like models.
    for k in (2, 4, 8, 32) if len(grouped_convs(graph)) <= MAX_SPLIT else ():
        g = graph
        while True:      # split each originally grouped conv once (new ones have fewer groups)
            todo = [c for c in grouped_convs(g) if c.params["feature_group_count"] in
                    {n.params["feature_group_count"] for n in grouped_convs(graph)}
                    and c.params["feature_group_count"] % k == 0]
            if not todo:
                break
            g = split_conv(g, todo[0], k)
        if g is not graph:
            add(f"split-groups-{k}", g)
    for name, g in sequence_moves(graph):
        add(name, g)
    splits = [(name, g) for name, g in out.values()]
    starts = [(n, g) for n, g in (("", graph), ("nhwc+", relaid(graph))) if g is not None]
    movable = any(r.matches(g) for r in _by_name(CONV_MOVES) for _, g in starts)
    convs = nchw_convs(graph)
    groups = dot_groups(graph)
    pairs = dot_pairs(graph)
    turnable = bool(layout.frozen_kn(graph, ALL, fixed)[1])
    attempts = 0
    while len(out) < count and attempts < 20 * count:
        attempts += 1
        name, g = rng.choice(splits)
        if movable and len(out) % 2:      # half the convolutional variants
            start, g = rng.choice(starts)
            name, moved = conv_moves(g, rng)
            add(f"rules:{start}{name}", moved)
            continue
        if convs:
            frac = rng.choice((0.1, 0.25, 0.5, 0.75, 0.9, 1.0))
            chosen = nchw_convs(g)
            picked = chosen if frac == 1.0 else rng.sample(chosen, max(1, int(frac * len(chosen))))
            add(f"{name}+nhwc-{frac:.0%}", to_nhwc(g, picked))
        families = [f for f, ok in ((_merged, groups), (_paired, pairs), (_split, groups)) if ok]
        dotted = [("", graph)]      # the original and this round's dot variant
        if families:                # one dot family a round, each as likely
            name, made = rng.choice(families)(g, rng)
            add(name, made)
            dotted.append((name + "+", made))
        if turnable and rng.random() < 0.5:
            base, made = rng.choice(dotted)
            name, made = weights_nk(made, fixed, rng)
            if name:
                add(base + name, made)
        if not convs and not groups and not pairs and not movable and not turnable:
            break
    return list(out.values())[:count]

