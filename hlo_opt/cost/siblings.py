"""Sibling kernels: dots or convs of one structure that no path joins, priced together.

XLA CPU runs independent kernels side by side, so a dot's cost in a program falls with
the dots beside it. 64x1024 @ 1024xC dots under YNNPACK off, per dot, on the 2-core AMD
host (`docs/history.md`, "BERT's dots split in 8 to 32 pieces"): C=32 0.199 ms alone,
0.070 among 8 copies (what `measure.time_graphs` times for a short kernel), 0.045 among
the 128 column pieces of one dot; C=512 0.790 alone (too big to copy), 0.713 among 8
pieces. Priced one by one, BERT with every dot in 32 pieces came to 180 ms and ran in
128 (the original: 122 priced, 130 run), and ResNeXt-50 with its grouped convs as 32
plain ones each was priced level with the original and ran 1.19x faster.

So contraction kernels of one structure at one contraction depth (the most dots and
convs on a chain of kernels before it) are timed as one program of all of them, reading
what they share once, and each is priced its share. Two at one contraction depth cannot
reach each other: a chain from one to the other counts the first, a contraction. The
depth counts contractions only, so a loop or copy on one branch (the lone transposes
of a conv relaid out by itself, a tanh before a dot) does not part a kernel from its
siblings, as counting every kernel did (`docs/history.md`, "sibling groups by
contraction depth").
"""
from __future__ import annotations

from collections.abc import Sequence

from hlo_opt.cost.partition import Kernel, links, structure

MOST = 64       # kernels priced together at most (a program of more compiles slowly)


def groups(kernels: Sequence[Kernel], alone: Sequence[bool]) -> list[list[int]]:
    """The kernels' indices in pricing units: each contraction kernel with its siblings,
    at most `MOST` together, and every other kernel by itself. `alone[i]`: kernel i is
    priced by itself (precomputed, or not a program of its own). `kernels` come
    producers first, as `partition` makes them."""
    depth: list[int] = []       # contractions on the longest chain before each kernel
    for producers in links(kernels)[1]:
        depth.append(max((depth[j] + (kernels[j].kind == "contract") for j in producers),
                         default=0))
    units: dict[tuple, list[int]] = {}
    for i, k in enumerate(kernels):
        key = (structure(k), depth[i]) if k.kind == "contract" and not alone[i] else i
        units.setdefault(key, []).append(i)
    return [g[j:j + MOST] for g in units.values() for j in range(0, len(g), MOST)]


def merge(members: Sequence[Kernel]) -> Kernel:
    """The kernels as one (their nodes side by side, shared inputs read once)."""
    if len(members) == 1:
        return members[0]
    return Kernel(tuple(n for k in members for n in k.nodes),
                  tuple(dict.fromkeys(v for k in members for v in k.inputs)),
                  tuple(v for k in members for v in k.outputs), "contract",
                  tuple(dict.fromkeys(r for k in members for r in k.relaid)),
                  tuple(dict.fromkeys(v for k in members for v in k.cold)),
                  tuple(p for k in members for p in k.views))
