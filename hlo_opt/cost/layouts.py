"""Which values XLA's CPU backend keeps in a convolution's own memory layout.

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
program 10-13% over its run. `relaid` marks the values that cross kernels in the conv's
layout; `partition.isolate` hands them to and takes them from the timed conv in that
layout, so the conv is timed as the program runs it.

The weights' copies are made every call (the weights are the program's parameters), and
the timed conv makes its weight's copy too. XLA schedules them first, so they are all
live at once: ResNeXt-50's NCHW program has a 102.7 MiB temp buffer, its weights 95 MiB
of it, and faults 26286 pages in each call. `memory.py` counts them in the temp buffer
(`weight_copies`) and prices the faults at the rate XLA pays, measured on such copies.
"""
from __future__ import annotations

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


def relaid(graph: Graph, kernels: Sequence) -> list[dict[Value, Perm]]:
    """For each kernel, the values it reads or writes that the program keeps in a conv's
    order, with that order: a conv's activation or result whose other ends (its maker,
    all its readers) are convs wanting the same order or kernels that take any (loop
    kernels, reductions other than pooling); recorded for the convs' kernels only (the
    others run as fast in either order)."""
    maker: dict[Value, int] = {v: i for i, k in enumerate(kernels) for v in k.outputs}
    readers: dict[Value, list[tuple[int, Node, int]]] = {}
    for i, k in enumerate(kernels):
        inside = set(k.nodes)
        for n in k.nodes:
            for slot, v in enumerate(n.inputs):
                if v.node not in inside:
                    readers.setdefault(v, []).append((i, n, slot))
    outputs = set(graph.outputs)

    def takes_any(i: int) -> bool:
        k = kernels[i]
        return k.kind == "loop" or (
            k.kind == "reduce" and not any(ops.get(n.op).kind == ops.WINDOW for n in k.nodes))

    def wants(i: int, node: Node, slot: int) -> Perm | None:
        """The order kernel `i` wants the value read by `node`'s input `slot` in: a conv's
        own for its activation; None for any; () for the logical one."""
        if node.op == "conv_general_dilated" and kernels[i].kind == "contract":
            return _conv_orders(node)[0] if slot == 0 else ()
        return None if takes_any(i) else ()

    out: list[dict[Value, Perm]] = [{} for _ in kernels]
    for v, i in maker.items():
        node = v.node
        if v in outputs or v not in readers:
            continue
        made = _conv_orders(node)[2] if node.op == "conv_general_dilated" else (
            None if takes_any(i) else ())
        orders = {wants(j, n, s) for j, n, s in readers[v]} | {made}
        orders.discard(None)
        if len(orders) != 1:
            continue
        (perm,) = orders
        if perm and not _identity(perm):
            for j in {i, *(j for j, _, _ in readers[v])}:
                if is_conv(kernels[j]):
                    out[j][v] = perm
    return out


def is_conv(kernel) -> bool:
    return kernel.kind == "contract" and any(n.op == "conv_general_dilated"
                                             for n in kernel.nodes)


def weight_copies(kernels: Sequence, precomputed: Sequence[bool]) -> int:
    """Bytes of the weight copies XLA makes each call: the weights of the convs run per
    call that are not already in the conv's order."""
    return sum(n.inputs[1].type.nbytes for k, pre in zip(kernels, precomputed) if not pre
               for n in k.nodes
               if n.op == "conv_general_dilated" and not _identity(_conv_orders(n)[1]))
