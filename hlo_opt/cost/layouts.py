"""The memory order XLA's CPU backend keeps each value in: a conv's own, and what follows.

XLA CPU runs every convolution as a library kernel (`ynn_fusion`) on channels-last data:
batch, spatial..., feature for the activation and the result; spatial..., in, out for
the weight. A conv written NCHW / OIHW is given those layouts by XLA's layout
assignment, and the layouts spread forward to what can take any layout: an elementwise
loop fusion, a reduction fused into its input loop. Transposing copies are left where a
layout is fixed: the program's parameters (the input image, every weight, each call)
and results, pooling (`reduce-window`) and concatenates, which keep the logical order,
and an elementwise op whose operands come in two orders. In SqueezeNet's NCHW program
(26 convs) the copies are 27 of parameters, 2 on each side of its 3 max-pools and 8
that are its fire modules' concatenates; none between a conv, its relu and the next conv.
A concatenate that one conv alone reads is that copy: XLA writes it in the conv's order
(`_for_one_conv`). Priced logical, six of SqueezeNet's eight and the conv after each
paid a transposing copy apiece, and those convs, timed so, 0.39-0.76 ms against 0.17-0.29
channels-last: the original priced 1.21x its run where the relaid network priced 0.98x.

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
    logical one, decided forward, by the value's maker: a parameter's is logical; a
    conv's result is in the conv's order; what pooling, a dot, a reduction, a reshape, a
    concatenate (but one a single conv reads, `_for_one_conv`) or an opaque op makes is
    logical; a transpose's result is its operand's
    order permuted (so that it is a bitcast); an elementwise op's (or a slice's, pad's)
    is its operands' order where all of those that have one agree, and logical where
    they do not; a broadcast or an iota has none of its own (it is made in whatever
    order its reader wants). The program's results are written logical.

    So a conv, its relu and the next conv keep the conv's order, and a pair of
    transposes around a relu moves no data; but an add of a conv's result and a value
    in the logical order (a parameter, a pool's result, a concatenate) is logical, and
    the conv's result is copied into it; so is an elementwise op that reads a value
    pooling or a reduction reads too (`_beside_logical_readers`). Probed on 46 small
    NCHW programs against the compiled HLO, these orders are XLA's for every add, relu,
    multiply and concatenate but three that are the program's result, which XLA makes
    in the conv's order and copies (`tests/test_layouts.py` keeps five). Spread from
    the nearest fixed value both ways, as until 2026-12-03, 31 of the 46 had one laid
    out otherwise, and NASNet-A's separable convs whose result is added to the pooled cell
    input were priced as one YNNPACK call where XLA runs a conv, a dot and two copies
    (`library.py`, `docs/history.md`)."""
    users = graph.users()
    order = _forward(graph, users, set())
    forced = _beside_logical_readers(graph, users, order)
    if forced:
        order = _forward(graph, users, forced)
    for v in graph.outputs:
        order[v] = logical(v)
    return {v: p for v, p in order.items() if not _identity(p)}


def _forward(graph: Graph, users, forced: set[Value]) -> dict[Value, Perm]:
    """Each value's order from its maker's (see `memory_orders`); `forced` logical. A
    transpose is a bitcast where its readers take that order; read by a conv, a dot or
    a reshape that wants another (`_wanted`), it is the copy into the first one's: a
    weight relaid for a conv is then made in the conv's order, and computed once where
    the weight is frozen, not copied again inside the conv's kernel on every call."""
    order: dict[Value, Perm] = {n.out(): logical(n.out()) for n in graph.inputs}
    for node in graph.nodes:
        if node.op == "input" or node.op in ANY_ORDER:
            continue
        kind = ops.get(node.op).kind
        if node.op == "conv_general_dilated":
            order[node.out()] = _conv_orders(node)[2]
        elif node.op == "concatenate" and (conv_order := _for_one_conv(node.out(), users)):
            order[node.out()] = conv_order
        elif node.op == "transpose":
            wanted = _wanted(node.out(), users.get(node, ()))
            if node.inputs[0] in order:
                bitcast = bitcast_order(node.params["permutation"], order[node.inputs[0]])
                order[node.out()] = bitcast if not wanted or bitcast in wanted else wanted[0]
            elif wanted:
                order[node.out()] = wanted[0]
        elif kind == ops.ELEMENTWISE or node.op in PASS_ON:
            for out in node.outputs:
                seen = {order[v] for v in node.inputs if v in order and _carries(node, v, out)}
                if out in forced or len(seen) > 1:
                    order[out] = logical(out)
                elif seen:
                    order[out] = seen.pop()
        elif kind != ops.SOURCE:
            order.update((out, logical(out)) for out in node.outputs)
    return order


def _wanted(v: Value, readers) -> list[Perm]:
    """The orders `v`'s readers read it in where they fix one: a conv's activation or
    weight order, the logical order of a dot, pooling, a reshape (`_fixed_reader`)."""
    out = []
    for u in readers:
        for i, w in enumerate(u.inputs):
            if w != v:
                continue
            if u.op == "conv_general_dilated" and i < 2:
                out.append(_conv_orders(u)[i])
            elif _fixed_reader(u):
                out.append(logical(v))
    return out


def _for_one_conv(v: Value, users) -> Perm | None:
    """The order one conv reads `v` in, where `v`'s one reader is that conv (reading it
    as its activation alone) or a transpose whose one reader is: XLA then fuses the
    concatenate that makes `v` with the copy into the conv's order and writes it there
    (SqueezeNet's fire modules but those before a pool, in NCHW or wrapped for an NHWC
    conv), or through an elementwise op of it alone that one conv reads (ResNeXt-50's
    split groups: concatenate, relu, 1x1 conv). Read by more (a pool and a conv, two
    convs, a relu and the result), a concatenate is made logical and copied for the conv
    (`tests/test_layouts.py`). None otherwise."""
    readers = users.get(v.node, ())
    if len(readers) != 1:
        return None
    (reader,) = readers
    if reader.op == "conv_general_dilated":
        hits = [i for i, w in enumerate(reader.inputs) if w == v]
        return _conv_orders(reader)[0] if hits == [0] else None
    if reader.op == "transpose":
        wanted = _for_one_conv(reader.out(), users)
        perm = reader.params["permutation"]
        return None if wanted is None else tuple(perm[d] for d in wanted)
    if _passes_alone(reader, v):
        return _for_one_conv(reader.out(), users)
    return None


def _passes_alone(node: Node, v: Value) -> bool:
    """Whether `node` is an elementwise op of `v` alone (its other operands scalars or
    broadcasts), of `v`'s shape: a relu between a concatenate and its one conv, which
    XLA fuses into the concatenate's loop with the copy into the conv's order."""
    return ops.get(node.op).kind == ops.ELEMENTWISE and \
        node.out().type.shape == v.type.shape and all(
            w == v or not w.type.shape or w.node.op in ANY_ORDER for w in node.inputs)


def _fixed_reader(node: Node) -> bool:
    """Whether `node` reads its operands in the logical order whatever they come in."""
    return node.op != "conv_general_dilated" and node.op not in ANY_ORDER and \
        node.op not in PASS_ON and node.op != "transpose" and \
        ops.get(node.op).kind not in (ops.ELEMENTWISE, ops.SOURCE)


def _beside_logical_readers(graph: Graph, users, order: dict[Value, Perm]) -> set[Value]:
    """The results of elementwise ops that read a value which pooling, a reduction or a
    dot also reads (in the logical order) while the value is kept in another: XLA gives
    them the logical order, and copies the value for them (as probed on small programs,
    `tests/test_layouts.py`; NASNet-A's `sep(y) + y`, with `y` pooled too, is added
    logical). The value itself keeps its order."""
    forced: set[Value] = set()
    for node in graph.nodes:
        readers = users.get(node, ())
        for v in node.outputs:
            if v not in order or _identity(order[v]) or not any(
                    _fixed_reader(u) and ops.get(u.op).kind in LOGICAL_READERS and
                    v in u.inputs for u in readers):
                continue
            forced.update(out for u in readers if ops.get(u.op).kind == ops.ELEMENTWISE
                          and v in u.inputs for out in u.outputs if _carries(u, v, out))
    return forced


def _carries(node: Node, operand: Value, out: Value) -> bool:
    """Whether `node` passes `operand`'s order on to `out` (a same-shape elementwise
    operand; any operand of a same-rank layout op)."""
    return operand.type.shape == out.type.shape or (
        node.op in PASS_ON and len(operand.type.shape) == len(out.type.shape))


def copied(node: Node, index: int, orders: dict[Value, Perm]) -> bool:
    """Whether XLA copies `node`'s operand `index` into another order to read it."""
    v = node.inputs[index]
    return _read_order(node, index, orders) != orders.get(v, logical(v))


def _read_order(node: Node, index: int, orders: dict[Value, Perm]) -> Perm:
    """The order `node` reads its operand `index` in: a conv's activation and weight in
    the conv's; what an elementwise or layout op passes on, in its result's; the rest
    logical. Where it is not the operand's own (`orders`), XLA copies it first."""
    v = node.inputs[index]
    if node.op == "conv_general_dilated" and index < 2:
        return _conv_orders(node)[index]
    kind = ops.get(node.op).kind
    if (kind == ops.ELEMENTWISE or node.op in PASS_ON) and _carries(node, v, node.out()):
        return orders.get(node.out(), logical(node.out()))
    if node.op == "transpose":
        perm = node.params["permutation"]
        return tuple(perm[d] for d in orders.get(node.out(), logical(node.out())))
    return logical(v)


PASS_ON = frozenset({"split", "slice", "pad", "rev", "dynamic_slice",
                     "dynamic_update_slice"})   # same rank, the operands' order kept
ANY_ORDER = frozenset({"broadcast_in_dim", "iota"})   # read in whatever order they come
LOGICAL_READERS = (ops.WINDOW, ops.REDUCE, ops.CONTRACT)   # pooling, reductions, dots:
# an elementwise op beside one reads the value logical too (`_beside_logical_readers`)


def logical(v: Value) -> Perm:
    """The logical order of `v`'s dims, outermost first."""
    return tuple(range(len(v.type.shape)))


def bitcast_order(permutation: Perm, operand: Perm) -> Perm:
    """The memory order of a transpose's result (`permutation`) that makes it a bitcast
    of its operand kept in `operand`'s."""
    back = inverse(permutation)
    return tuple(back[d] for d in operand)


def inverse(perm: Perm) -> Perm:
    """The permutation that undoes `perm`."""
    return tuple(sorted(range(len(perm)), key=perm.__getitem__))


def relaid(graph: Graph, kernels: Sequence, orders: dict[Value, Perm] | None = None
           ) -> list[dict[Value, Perm]]:
    """For each kernel, the values it reads or writes that the program keeps in another
    memory order than the logical one (`memory_orders`, or `orders` if given), with that
    order: the kernel, timed alone, is handed them and hands them on so."""
    orders = memory_orders(graph) if orders is None else orders
    return [{v: orders[v] for v in (*k.inputs, *k.outputs) if v in orders}
            for k in kernels]


def weight_copies(kernels: Sequence, precomputed: Sequence[bool]) -> int:
    """Bytes of the weight copies XLA makes each call: the weights of the convs run per
    call that are not already in the conv's order."""
    return sum(n.inputs[1].type.nbytes for k, pre in zip(kernels, precomputed) if not pre
               for n in k.nodes
               if n.op == "conv_general_dilated" and not _identity(_conv_orders(n)[1]))
