"""Kernel partition: split a Graph into the kernels XLA will run.

The cost of a program is not the sum of its ops: XLA fuses. The rules below follow what
XLA's fusion passes do, closely enough that costing each kernel alone and summing comes
out near the whole program's time (the fidelity benchmark checks how near):

1. **Loop kernels.** Elementwise ops, layout ops (reshape, broadcast, transpose,
   concatenate, slice, pad, ...) and indexing ops (gather, dynamic slices) fuse with
   their producers and consumers of the same kinds into one loop kernel, which reads its
   inputs and writes its outputs once (XLA's loop fusion; the MXNet pointwise-fusion
   RFC's point). A lone transpose or concat is therefore a copy kernel, and one next to
   elementwise work folds into it.
2. **Reductions and pooling** (`reduce_*`, `reduce_window_*`, `argmax`) take their
   fusible producers in (XLA's input fusion) and end their kernel: consumers start anew.
3. **Contractions** (`dot_general`, `conv_general_dilated`) are kernels of their own — a
   library call on CPU. On GPU, XLA also fuses an elementwise epilogue (bias add,
   activation) into the GEMM/conv, so there a contraction's elementwise consumers join it.
4. **Opaque ops** are kernels of their own. Sources (`input`, `const`) are in no kernel.
5. Kernels stay convex: two groups are merged only if no path leaves the merged set and
   comes back (that would be a cycle between kernels, which XLA refuses too), counting
   paths that pass through another kernel: a kernel is one unit, so a path into it at
   one node and out of it at another, independent one is a path through it.
6. A kernel of only `reshape` / `squeeze` is a bitcast in row-major memory: it moves no
   data and is marked `free`. Likewise an output of a kernel that is a bitcast of
   another of its outputs, or of what it reads, is that value's buffer in the program,
   not a second write: it is one of the kernel's `views`, and its isolated program does
   not hand it on (`ports`).
7. **Conv layouts (CPU).** XLA CPU keeps a conv's activation and result in its own
   channels-last order through the loops around it, and makes a transpose a bitcast
   where it can; with `conv_layouts` the values that cross kernels in another order
   than the logical one are marked (`layouts.py`) and `isolate` hands them over in that
   order: an NCHW conv is timed without the two copies the whole program does not make,
   a loop between transposes without the transposes (one with slices or concatenates
   built on the memory order's axes, where XLA would not cancel them).
8. **Library fusions (CPU, YNNPACK's elementwise fusions only).** Under
   `compile_options.YNN_ELTWISE` XLA hands a conv or dot and the elementwise ops around
   it to YNNPACK as one call before it fuses loops; with `library_fusion` those groups
   (`library.py`) are kernels first, and loops do not join them.
"""
from __future__ import annotations

import dataclasses
import graphlib
import hashlib
from collections.abc import Sequence

from hlo_opt import ops
from hlo_opt.cost import layouts, library
from hlo_opt.cost.layouts import inverse, logical
from hlo_opt.ir import Graph, Node, Value, copy_nodes
from hlo_opt.params import Params
from hlo_opt.ops.table import CONTRACT, ELEMENTWISE, INDEX, LAYOUT, OPAQUE, REDUCE, SOURCE, WINDOW

FUSIBLE = frozenset({ELEMENTWISE, LAYOUT, INDEX})
ROOTS = frozenset({REDUCE, WINDOW})
BITCASTS = frozenset({"reshape", "squeeze"})
_STRENGTH = ("loop", "reduce", "contract")


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One fused kernel: its nodes (in graph order), the values it reads from outside and
    the values it hands on (to other kernels or the graph's outputs)."""

    nodes: tuple[Node, ...]
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    kind: str          # "loop", "reduce", "contract", "opaque" or "free"
    relaid: tuple[tuple[Value, tuple[int, ...]], ...] = ()   # (value, memory order) it
    # reads or writes in a conv's order, not the logical one (`layouts.py`; CPU only)
    cold: tuple[Value, ...] = ()   # inputs it reads from main memory (`residency.py`)
    views: tuple[tuple[Value, Value], ...] = ()    # (output, the output or input whose
    # buffer it is, through bitcasts): a value XLA makes no copy of (`_views`)

    def __len__(self) -> int:
        return len(self.nodes)


def _kind(node: Node) -> str:
    return "input" if node.op == "input" else ops.get(node.op).kind


class _Groups:
    """Union of node groups with a convexity check that walks the groups downstream of a
    candidate union. Each group keeps the children of its nodes outside it, so the walk
    reads those, not every node of a group that grows as it merges: a 966-node NASNet-A
    graph from the sweep took 200 ms a partition when each check walked the groups'
    nodes, and takes 12 ms."""

    def __init__(self, graph: Graph):
        self.bit = {node: 1 << i for i, node in enumerate(graph.nodes)}
        self.parents = {node: node.parents() for node in graph.nodes}
        self.children: dict[Node, list[Node]] = graph.users()
        self.members: dict[int, list[Node]] = {}
        self.mask: dict[int, int] = {}
        self.of: dict[Node, int] = {}
        self.kind: dict[int, str] = {}
        self.below: dict[int, set[Node]] = {}     # children outside the group
        self._next = 0

    def new(self, node: Node, kind: str) -> int:
        gid = self._next
        self._next += 1
        self.members[gid], self.mask[gid], self.kind[gid] = [node], self.bit[node], kind
        self.below[gid] = set(self.children.get(node, ()))
        self.of[node] = gid
        return gid

    def convex(self, mask: int, below: set[Node]) -> bool:
        """No path leaves `mask` and comes back, a path through another group counted
        as through one unit: `exp(x)` and `exp(x) + sin(y) @ w2` fused, and
        `tanh(exp(x) @ w)` and `sin(y)` fused (by their sum), are each convex on their
        nodes, and the two kernels feed each other through the dots. `below`: the set's
        children outside it. Every node a path could pass through is grouped already
        (contractions and opaque ops are groups of one; nodes not grouped yet come later
        in graph order, and none of them leads back into the set)."""
        seen: set[int] = set()
        todo = [self.of[c] for c in below if c in self.of]
        while todo:           # the groups downstream of the set
            gid = todo.pop()
            if gid in seen:
                continue
            seen.add(gid)
            for c in self.below[gid]:
                if self.bit[c] & mask:
                    return False
                if c in self.of and self.of[c] not in seen:
                    todo.append(self.of[c])
        return True

    def try_merge(self, gid: int, other: int) -> bool:
        """Move group `other` into `gid` if the union stays convex; the union's kind is
        the stronger of the two (contract > reduce > loop)."""
        mask = self.mask[gid] | self.mask[other]
        below = {c for g in (gid, other) for c in self.below[g] if not self.bit[c] & mask}
        if not self.convex(mask, below):
            return False
        for node in self.members[other]:
            self.of[node] = gid
        self.members[gid].extend(self.members.pop(other))
        self.mask[gid], self.below[gid] = mask, below
        self.kind[gid] = max(self.kind[gid], self.kind.pop(other), key=_STRENGTH.index)
        del self.mask[other], self.below[other]
        return True


def partition(graph: Graph, *, epilogue_fusion: bool = False,
              conv_layouts: bool = False, library_fusion: bool = False) -> list[Kernel]:
    """The kernels of `graph`, producers first. `epilogue_fusion`: contractions absorb
    their elementwise consumers (XLA on GPU). `conv_layouts`: mark the values that cross
    kernels in the memory order XLA CPU keeps them in (`layouts.py`). `library_fusion`:
    YNNPACK's elementwise fusions are kernels first (`library.py`; XLA CPU under
    `compile_options.YNN_ELTWISE`)."""
    groups = _Groups(graph)
    orders = layouts.memory_orders(graph) if conv_layouts else None
    sealed = _library_groups(graph, groups, orders) if library_fusion else set()
    for node in graph.nodes:
        kind = _kind(node)
        if kind in ("input", SOURCE) and node.op != "iota" or node in groups.of:
            continue
        if kind in FUSIBLE or node.op == "iota" or kind in ROOTS:
            gid = groups.new(node, "reduce" if kind in ROOTS else "loop")
            for parent in groups.parents[node]:
                other = groups.of.get(parent)
                if other is None or other == gid or other in sealed:
                    continue
                joinable = groups.kind[other] == "loop" or (
                    epilogue_fusion and groups.kind[other] == "contract" and kind == ELEMENTWISE)
                if joinable and groups.try_merge(other, gid):
                    gid = other
        else:
            groups.new(node, "contract" if kind == CONTRACT else "opaque"
                       if kind == OPAQUE else "loop")
    kernels = _kernels(graph, groups)
    if conv_layouts:
        # (built, not `dataclasses.replace`d: that was 9% of a partition, under cProfile)
        kernels = [Kernel(k.nodes, k.inputs, k.outputs, k.kind,
                          tuple((v, kept[v]) for v in k.inputs + k.outputs if v in kept))
                   if kept else k for k, kept in zip(kernels, layouts.relaid(graph, kernels,
                                                                             orders))]
    outputs = set(graph.outputs)
    return [Kernel(k.nodes, k.inputs, k.outputs, k.kind, k.relaid, k.cold, views)
            if (views := _views(k, outputs)) else k for k in kernels]


def _views(kernel: Kernel, graph_outputs: set[Value]) -> tuple[tuple[Value, Value], ...]:
    """The kernel's outputs that are bitcasts (`BITCASTS`, through its own nodes) of
    another of its outputs or of a value it reads, each with that value: XLA makes the
    bitcast no copy, and the value's consumers read the one buffer. Of outputs that view
    one value inside that is not itself handed on, the first in `ports`' order is the
    one written. Not a view: a graph output (a buffer of its own), nor a value held in
    another memory order than the logical one, where a reshape moves data.
    ResNeXt-50 in NHWC, its 1x1 convs as dots: each block's `add+relu` hands on its
    result and the reshape of it the next dot reads. Timed as two outputs, the kernel
    read 1.03-1.14 ms, against 0.34 for the same add+relu with one; the 36 of them
    priced that network 1.4% dearer than with convs, where it ran 0.3% dearer
    (`docs/history.md`)."""
    if kernel.kind == "free" or not any(v.node.op in BITCASTS for v in kernel.outputs):
        return ()
    inside, relaid = set(kernel.nodes), dict(kernel.relaid)

    def viewed(v: Value) -> Value:
        while v.node in inside and v.node.op in BITCASTS:
            v = v.node.inputs[0]
        return v

    written = {v: v for v in kernel.outputs if v.node.op not in BITCASTS}
    views = []
    for v in _sorted_outputs(kernel):
        base = viewed(v)
        if base is v or v in graph_outputs or v in relaid or base in relaid:
            continue
        if base.node in inside and base not in written:
            written[base] = v
        else:
            views.append((v, written.get(base, base)))
    return tuple(views)


def _library_groups(graph: Graph, groups: _Groups, orders: dict | None) -> set[int]:
    """Groups `library.groups`' fusions (contractions in them make them "contract"
    kernels) and returns their ids: loop kernels do not join them."""
    sealed = set()
    for members in library.groups(graph, groups.children, orders):
        kinds = {_kind(n) for n in members}
        gid = groups.new(members[0], "contract" if CONTRACT in kinds else "loop")
        for node in members[1:]:
            groups.try_merge(gid, groups.new(node, "loop"))
        sealed.add(gid)
    return sealed


def _kernels(graph: Graph, groups: _Groups) -> list[Kernel]:
    users: dict[Value, set[int]] = {}
    for node in graph.nodes:
        for v in node.inputs:
            users.setdefault(v, set()).add(groups.of.get(node, -1))
    graph_outputs = set(graph.outputs)
    # Kernels in a topological order of the kernel DAG (acyclic because groups are
    # convex), ties broken by graph order.
    first = {g: min(n._seq for n in members) for g, members in groups.members.items()}
    deps = graphlib.TopologicalSorter()
    for gid in sorted(groups.members, key=first.get):
        deps.add(gid, *sorted({groups.of[p] for n in groups.members[gid] for p in groups.parents[n]
                               if p in groups.of and groups.of[p] != gid}, key=first.get))
    kernels = []
    for gid in deps.static_order():
        nodes = tuple(sorted(groups.members[gid], key=lambda n: n._seq))
        inside = set(nodes)
        inputs = tuple(dict.fromkeys(v for n in nodes for v in n.inputs
                                     if v.node not in inside))
        outputs = tuple(v for n in nodes for v in n.outputs
                        if v in graph_outputs or (u := users.get(v)) and (len(u) > 1 or
                                                                          gid not in u))
        kind = groups.kind[gid]
        if all(n.op in BITCASTS for n in nodes):
            kind = "free"
        kernels.append(Kernel(nodes, inputs, outputs, kind))
    return kernels


def ports(kernel: Kernel) -> tuple[tuple[Value, ...], tuple[Value, ...]]:
    """The values the kernel reads (constants left out) and writes (what it hands on, but
    its `views`: the program reads those from the buffers they view), in an order set by
    its structure alone, not by the order its nodes were made in: its outputs by a hash
    of what computes them, blind to which value an input is, and its inputs in the
    order a walk from those outputs, operands in order, first meets them.

    The isolated program's digest is its timing's cache key. In the kernels' own order,
    one reduce kernel met in two graphs of a search made two programs and was timed
    twice (19.6 and 22.7 us). The kernels met in three searches of Inception's 4 C
    blocks made 506 programs, 37 of them another's up to that order; now 469.
    (Left: a program whose edge transposes, added for relaid values, match a kernel's
    own transposes in another kernel: 2 of ResNet-8's 132.)"""
    views = {v for v, _ in kernel.views}
    outputs = [v for v in _sorted_outputs(kernel) if v not in views]
    inside = set(kernel.nodes)
    inputs: dict[Value, None] = {}
    seen: set[Node] = set()
    todo = list(reversed(outputs))
    while todo:
        v = todo.pop()
        if v.node not in inside:
            if v.node.op != "const":
                inputs[v] = None
        elif v.node not in seen:
            seen.add(v.node)
            todo.extend(reversed(v.node.inputs))
    inputs.update((v, None) for v in kernel.inputs if v.node.op != "const")
    return tuple(inputs), tuple(outputs)


def _sorted_outputs(kernel: Kernel) -> list[Value]:
    """The kernel's outputs ordered by a hash of what computes them (`ports`)."""
    relaid, cold = dict(kernel.relaid), set(kernel.cold)
    shape: dict[Node, str] = {}

    def name(v: Value) -> str:
        if v.node in shape:
            return f"{shape[v.node]}:{v.index}"
        if v.node.op == "const":
            return v.node.digest
        return f"in {v.type} {relaid.get(v)} {v in cold}"

    for n in kernel.nodes:                    # (producers first)
        text = "|".join([n.op, n.params.key, ";".join(map(str, n.types)),
                         ",".join(map(name, n.inputs))])
        shape[n] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return sorted(kernel.outputs, key=lambda v: (name(v), str(relaid.get(v))))


def isolate(kernel: Kernel) -> Graph:
    """The kernel as a program of its own: one input per value it reads (constants are
    copied in, as XLA sees them), its outputs as outputs, both in the order of `ports`.
    A value in `kernel.relaid` is read and written in its memory order (a transpose
    inside, which XLA folds into the conv's own layout), as the whole program hands it
    over."""
    order = dict(kernel.relaid)
    env: dict[Value, Value] = {v: Node("const", (), v.node.params, v.node.types).out()
                               for v in kernel.inputs if v.node.op == "const"}
    reads, outputs = ports(kernel)
    inputs = [Node("input", (), Params(index=i), (dataclasses.replace(
        v.type, shape=_moved(v.type.shape, order.get(v))),)) for i, v in enumerate(reads)]
    in_order = _in_memory_order(kernel, dict(zip(reads, inputs)), outputs, order, dict(env))
    if in_order is not None:
        return in_order
    for v, node in zip(reads, inputs):
        perm = order.get(v)
        env[v] = node.out() if perm is None else ops.make(
            "transpose", [node.out()], permutation=inverse(perm)).out()
    copy_nodes(kernel.nodes, env, outside_deps=False)
    return Graph(inputs, [env[v] if v not in order else
                          ops.make("transpose", [env[v]], permutation=order[v]).out()
                          for v in outputs])


def _moved(shape: tuple[int, ...], perm) -> tuple[int, ...]:
    """`shape` in the memory order `perm` (itself where None)."""
    return shape if perm is None else tuple(shape[d] for d in perm)


def _in_memory_order(kernel: Kernel, inputs: dict[Value, Node], outputs, order,
                     env) -> Graph | None:
    """A loop with slices or concatenates built on its values' memory order, where it
    can be: its ops elementwise, slices, concatenates and transposes; each op's operands
    (but rank-0 ones) in one memory order, its axes moved to that order; a transpose
    none at all, its result in the order that makes it a bitcast (as `layouts` gives
    it); and what it hands on in the order the program keeps it in. Built in the
    logical order between transposes, a relu and two channel slices of a 1x128x56x56
    value in NHWC order compiled to slices written in a {2,1,3,0} layout, then copied:
    0.564 ms, against 0.113 on the channels-last axis (XLA cancels the transposes around
    an elementwise op, not around a slice; `docs/history.md`, ResNeXt-50's split groups).
    The same loop written between a NHWC conv's transposes (a split group of a network
    made channels-last by the layout rule) is a slice of the conv's result in the
    program."""
    if kernel.kind != "loop" or not any(n.op in ("slice", "concatenate") for n in kernel.nodes):
        return None     # XLA cancels the transposes around elementwise ops itself
    if not order and not any(n.op == "transpose" for n in kernel.nodes):
        return None     # all logical: the program is the kernel's own
    if any(v.type.shape for v in kernel.inputs if v.node.op == "const") or any(
            n.deps or len(n.types) != 1 or (n.op not in ("slice", "concatenate", "transpose")
                                            and ops.get(n.op).kind != ELEMENTWISE)
            for n in kernel.nodes):
        return None
    at = {v: order.get(v, logical(v)) for v in inputs}     # each value's memory order
    env.update({v: node.out() for v, node in inputs.items()})
    for n in kernel.nodes:
        perms = {at[v] for v in n.inputs if v.type.shape}
        if len(perms) != 1:
            return None
        (perm,) = perms
        if n.op == "transpose":
            env[n.out()] = env[n.inputs[0]]
            at[n.out()] = layouts.bitcast_order(n.params["permutation"], perm)
            continue
        params = dict(n.params.items())
        if n.op == "slice":
            for k in ("start_indices", "limit_indices"):
                params[k] = _moved(params[k], perm)
            if params.get("strides") is not None:
                params["strides"] = _moved(params["strides"], perm)
        elif n.op == "concatenate":
            params["dimension"] = perm.index(params["dimension"])
        made = ops.make(n.op, [env[v] for v in n.inputs], **params).out()
        if made.type.shape != _moved(n.out().type.shape, perm):
            return None
        env[n.out()], at[n.out()] = made, perm
    if any(at[v] != order.get(v, logical(v)) for v in outputs):
        return None
    return Graph(list(inputs.values()), [env[v] for v in outputs])


def links(kernels: Sequence[Kernel]) -> tuple[dict[Value, int], list[set[int]]]:
    """(the index of the kernel that makes each value, for each kernel the indices of
    the kernels that make what it reads)."""
    maker = {v: i for i, k in enumerate(kernels) for v in k.outputs}
    return maker, [{maker[v] for v in k.inputs if v in maker} for k in kernels]


def structure(kernel: Kernel) -> tuple:
    """What a kernel's price reads, without its node objects: each node's op, params,
    types and where its inputs come from (a node of the kernel, a constant, or the
    kernel's n-th input), what it hands on, the layouts and cold inputs at its edges, its
    kind. Equal structures isolate to the same program (`isolate`).

    A rewrite makes new node objects for everything downstream of the change (a node
    holds its inputs), so a key by the objects found few of a candidate's kernels
    priced: pricing Inception's whole-graph candidates isolated 72 kernels a graph
    again, the most of each."""
    at = {n: i for i, n in enumerate(kernel.nodes)}
    reads = {v: i for i, v in enumerate(kernel.inputs)}

    def ref(v: Value) -> tuple:
        if v.node in at:
            return at[v.node], v.index
        if v.node.op == "const":
            return "const", v.node.params.key, v.node.types
        return "input", reads[v], v.type

    nodes = tuple((n.op, n.params.key, n.types, tuple(map(ref, n.inputs)),
                   tuple(at.get(d, -1) for d in n.deps)) for n in kernel.nodes)
    return (nodes, tuple(map(ref, kernel.outputs)),     # (inputs: in the nodes' refs)
            tuple((ref(v), perm) for v, perm in kernel.relaid),
            tuple(map(ref, kernel.cold)), kernel.kind,
            tuple((ref(v), ref(b)) for v, b in kernel.views))
