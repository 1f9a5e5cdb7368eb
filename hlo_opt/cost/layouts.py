"""The memory order XLA's CPU backend keeps each value in: a conv's own, and what follows.

XLA CPU runs every convolution as a library kernel (`ynn_fusion`) on channels-last data:
batch, spatial..., feature for the activation and the result; spatial..., in, out for
the weight. A conv written NCHW / OIHW is given those layouts by XLA's layout
assignment, and the layouts spread through what can take any layout: an elementwise
loop fusion, a concatenate, a reduction fused into its input loop. Transposing copies
are left only where a layout is fixed: the program's parameters (the input image, every
weight, each call) and results, and pooling (`reduce-window`), which keeps the logical
order. In SqueezeNet's NCHW program (26 convs) the copies are 27 of parameters, 2 on
each side of its 3 max-pools and 8 that are its fire modules' concatenates; none between
a conv, its relu and the next conv.

A conv timed alone with logical-order operands gets a copy on each side that the
program does not have: 1.2-1.8x the conv's time for SqueezeNet's and ResNet's 1x1 and
3x3 convs (0.18 against 0.10 ms, 1.23 against 0.94 ms), which priced SqueezeNet's NCHW
program 10-13% over its run. The same goes for a transpose: XLA gives the value it
makes the order that makes it a bitcast, so NHWC convs with NCHW work between them
(transpose, add, relu, transpose) move no data for the transposes; timed with logical
values between kernels, such loops priced ResNet-50 with each conv wrapped so at 68 ms
(13.5 of it those loops) against 54 ms run. `memory_orders` assigns each value the
order the program keeps it in, propagating from what fixes one as XLA's layout
assignment does; `partition.isolate` hands each kernel's values to and from it in that
order, so the kernel is timed as the program runs it.

The weights' copies are made every call (the weights are the program's parameters), and
the timed conv makes its weight's copy too. XLA schedules them first, so they are all
live at once: ResNeXt-50's NCHW program has a 102.7 MiB temp buffer, its weights 95 MiB
of it, and faults 26286 pages in each call. `memory.py` counts them in the temp buffer
(`weight_copies`) and prices the faults at the rate XLA pays, measured on such copies.
"""
from __future__ import annotations

import collections
from collections.abc import Sequence

from hlo_opt import ops
from hlo_opt.ir import Graph, Node, Value

Perm = tuple[int, ...]


def _conv_orders(node: Node) -> tuple[Perm, Perm, Perm]:
    """The memory order (logical dims, outermost first) XLA CPU gives a conv's
    activation, weight and result."""
    lhs, rhs, out = node.params["dimension_numbers"]
    return ((lhs[0], *lhs[2:], lhs[1]), (*rhs[2:], rhs[1], rhs[0]),
            (out[0], *out[2:], out[1]))


def _identity(perm: Perm) -> bool:
    return perm == tuple(range(len(perm)))


def memory_orders(graph: Graph) -> dict[Value, Perm]:
    """The memory order XLA CPU's layout assignment gives each value that is not in the
    logical one. Fixed, in this priority: the program's parameters and results (logical),
    then what an op makes in its own order (a conv's result in the conv's; pooling, a
    dot, an opaque op: logical), then what an op reads in one (a conv's activation and
    weight in the conv's; a dot's, pooling's, a reshape's operands: logical). The rest take
    the order of the nearest fixed value (breadth first, ties to the first fixed), along
    the ops that pass a layout on: elementwise ops between same-shape operands and
    result, and the same-rank layout ops (a transpose permutes the order, so that it is
    a bitcast; a concatenate, slice, pad keep it). So a transpose between two convs, or
    a pair of transposes around a relu, moves no data, as in the compiled program; a
    value between two fixed orders gets one of them, and the reader or maker of the
    other pays the copy."""
    links: dict[Value, list[tuple[Value, Perm | None]]] = {}   # (neighbour, transpose)

    def link(a: Value, b: Value, perm: Perm | None = None) -> None:
        links.setdefault(a, []).append((b, perm))
        links.setdefault(b, []).append((a, None if perm is None else inverse(perm)))

    fixed: dict[Value, Perm] = {}
    for v in [n.out() for n in graph.inputs] + list(graph.outputs):
        fixed.setdefault(v, _logical(v))
    wants: list[tuple[Value, Perm]] = []
    for node in graph.nodes:
        kind = "input" if node.op == "input" else ops.get(node.op).kind
        if node.op == "conv_general_dilated":
            act, weight, result = _conv_orders(node)
            fixed.setdefault(node.out(), result)
            wants += [(node.inputs[0], act), (node.inputs[1], weight)]
        elif node.op == "transpose":
            link(node.inputs[0], node.out(), node.params["permutation"])
        elif kind == ops.ELEMENTWISE or node.op in PASS_ON:
            for v in node.inputs:
                for out in node.outputs:
                    if v.type.shape == out.type.shape or (
                            node.op in PASS_ON and len(v.type.shape) == len(out.type.shape)):
                        link(v, out)
        elif kind not in (ops.REDUCE, ops.SOURCE, "input") and node.op not in ANY_ORDER:
            wants += [(v, _logical(v)) for v in node.inputs]
            if kind in (ops.WINDOW, ops.CONTRACT, ops.OPAQUE):
                for out in node.outputs:
                    fixed.setdefault(out, _logical(out))
    for v, perm in wants:
        fixed.setdefault(v, perm)
    order = dict(fixed)
    todo = collections.deque(fixed)
    while todo:
        v = todo.popleft()
        for u, perm in links.get(v, ()):
            if u not in order:
                # u = transpose(v, perm): u's dims in v's memory sequence
                order[u] = order[v] if perm is None else tuple(
                    inverse(perm)[d] for d in order[v])
                todo.append(u)
    return {v: p for v, p in order.items() if not _identity(p)}


PASS_ON = frozenset({"concatenate", "split", "slice", "pad", "rev", "dynamic_slice",
                     "dynamic_update_slice"})   # same rank, the operands' order kept
ANY_ORDER = frozenset({"broadcast_in_dim", "iota"})   # read in whatever order they come


def _logical(v: Value) -> Perm:
    return tuple(range(len(v.type.shape)))


def inverse(perm: Perm) -> Perm:
    """The permutation that undoes `perm`."""
    return tuple(sorted(range(len(perm)), key=perm.__getitem__))


def relaid(graph: Graph, kernels: Sequence) -> list[dict[Value, Perm]]:
    """For each kernel, the values it reads or writes that the program keeps in another
    memory order than the logical one (`memory_orders`), with that order: the kernel,
    timed alone, is handed them and hands them on so."""
    orders = memory_orders(graph)
    return [{v: orders[v] for v in (*k.inputs, *k.outputs) if v in orders}
            for k in kernels]


def weight_copies(kernels: Sequence, precomputed: Sequence[bool]) -> int:
    """Bytes of the weight copies XLA makes each call: the weights of the convs run per
    call that are not already in the conv's order."""
    return sum(n.inputs[1].type.nbytes for k, pre in zip(kernels, precomputed) if not pre
               for n in k.nodes
               if n.op == "conv_general_dilated" and not _identity(_conv_orders(n)[1]))
