"""The YNNPACK calls XLA CPU makes under `compile_options.YNN_ELTWISE`: which nodes run as
one library fusion, so that the kernel partition keeps them in one kernel.

XLA's library rewriter (`xla/backends/cpu/transforms/library_rewriter.cc`) runs before
its loop fusion. With the ELTWISE fusion type it starts a fusion at each supported
elementwise op, the program's last first, and grows it breadth first: up to an operand
whose users are all in the fusion already, down to the single user of a node that has
one, through every op the library supports, convs and dots included, and through other
library fusions it meets. So a conv and the relu before it and the batch-norm after it
are one call, and a chain relu, depthwise conv, 1x1 conv, scale, shift is one call too
(NASNet-A's separable convs), while a conv whose result has two readers stays XLA's own.

Timed alone in the partition's kernels, such a conv ran as XLA's conv (no elementwise
op to start a fusion), and its neighbours as YNNPACK elementwise calls: the kernels
summed another program than the one run. NASNet-A's variants under the option, before
and after, one run each back to back on the AMD host (`docs/history.md`): the median
error of a variant's priced time 21% and 11%, within 15% of the measured speed-up 57%
and 74% of them, Spearman 0.89 and 0.91.

What XLA takes, probed with the option on jax 0.10.2 (each case's HLO read): an
elementwise op on 4096 floats or more starts a fusion, on 4095 not, nor on integers; a
strided, dilated or grouped conv joins; a dot joins with its lhs contracted on its last
dimension (after XLA folds a transpose of it into the dot, and after the dot decomposer
puts a batched dot's operands in order with copies, which no fusion crosses) and rows
and columns over one; broadcasts and pads join, while concatenates, slices, transposes
and reductions end a fusion. On the zoo's full-size programs (NHWC), the predicted
fusions' convs and dots are XLA's, fusion for fusion, for NASNet-A (94 fusions),
Inception-v3, SqueezeNet, BERT, NasRNN and SRU. ResNet-50's residual chain is one
predicted fusion of 52 convs where XLA makes two of 20 and 31 and leaves one alone, at
a point not found; ResNet-style programs run with YNNPACK off on the hosts measured
(`compile_options`). NCHW programs: a value read in another memory order than it is
kept in (`layouts.memory_orders`) is read through a copy, which ends a fusion. So
NASNet-A's NCHW program is predicted as compiled: 33 fusions of 4 contractions, 37 of
one, 58 of none, and 24 convs and 25 dots of XLA's own (its separable convs added to
the pooled cell input, in the logical order); before the orders were read here, the
prediction fused those 49 into the adds after them (`docs/history.md`).
`tests/test_library.py` checks small cases against the HLO.
"""
from __future__ import annotations

import collections
import math

import jax.numpy as jnp

from hlo_opt.cost import layouts
from hlo_opt.ir import Graph, Node

ELEMENTWISE = frozenset({
    "abs", "add", "add_any", "ceil", "convert_element_type", "div", "erf", "exp", "expm1",
    "floor", "integer_pow", "log", "log1p", "logistic", "max", "min", "mul", "neg", "pow",
    "relu", "round", "rsqrt", "select_n", "sign", "sqrt", "square", "sub", "tanh"})
PASSED = frozenset({"broadcast_in_dim", "reshape", "squeeze", "pad", "eq", "ne", "lt", "le",
                    "gt", "ge"})      # join a fusion, never start one
FLOATS = frozenset(map(jnp.dtype, (jnp.float32, jnp.float64, jnp.bfloat16)))
MIN_ELEMENTS = 4096     # a smaller elementwise op is left to XLA's loops


def groups(graph: Graph, users: dict[Node, list[Node]] | None = None,
           orders: dict | None = None) -> list[list[Node]]:
    """The nodes of each library fusion of `graph` under the ELTWISE fusion type, in the
    order XLA starts them, each in graph order. `users`: `graph.users()`, if the caller
    has it. `orders`: the memory orders XLA CPU keeps values in (`layouts.memory_orders`);
    a value read in another order is read through a copy, which no fusion crosses."""
    users = graph.users() if users is None else users
    outputs = {v.node for v in graph.outputs}
    readers = {n: set(users.get(n, ())) | ({None} if n in outputs else set())
               for n in graph.nodes}            # (None: the program's result tuple)
    for node in graph.nodes:
        for i in _copied(node):       # read through a copy XLA makes: not fused across
            readers[node.inputs[i].node] = readers[node.inputs[i].node] - {node} | {None}
        if orders:
            for i, v in enumerate(node.inputs):
                if v.node in readers and layouts.copied(node, i, orders):
                    readers[v.node] = readers[v.node] - {node} | {None}
    of: dict[Node, int] = {}
    fused: dict[int, set[Node]] = {}
    for start in reversed(graph.nodes):
        if start in of or not _starts(start):
            continue
        gid = id(start)
        fused[gid] = group = {start}
        of[start] = gid
        todo = collections.deque(_neighbours(start, group, readers, up=True, down=True))
        while todo:
            node, up = todo.popleft()
            if node in group:
                continue
            if node in of:              # another library fusion: taken in whole
                other = fused.pop(of[node])
                group |= other
                of.update((n, gid) for n in other)
                continue
            if not supported(node):
                continue
            group.add(node)
            of[node] = gid
            todo.extend(_neighbours(node, group, readers, up=up, down=not up))
    return [sorted(g, key=lambda n: n._seq) for g in fused.values()]


def _neighbours(node: Node, group: set[Node], readers, *, up: bool, down: bool):
    """What XLA would try to fuse next from `node`: operands read only by the group
    (going up), the one reader of a node that has one (going down)."""
    if up:
        for p in dict.fromkeys(v.node for v in node.inputs):
            if p.op not in ("input", "const") and p not in group and \
                    readers[p] <= group | {node}:
                yield p, True
    if down and len(readers[node]) == 1:
        (user,) = readers[node]
        if user is not None and user not in group:
            yield user, False


def _starts(node: Node) -> bool:
    return node.op in ELEMENTWISE and _floats(node) and all(
        math.prod(v.type.shape) >= MIN_ELEMENTS for v in node.outputs)


def _floats(node: Node) -> bool:
    return all(jnp.dtype(t.dtype) in FLOATS for t in node.types) and all(
        jnp.dtype(v.type.dtype) in FLOATS | {jnp.dtype(bool)} for v in node.inputs)


def supported(node: Node) -> bool:
    """Whether YNNPACK takes `node` into a fusion that reaches it."""
    if node.op in ELEMENTWISE:
        return _floats(node)
    if node.op in PASSED:
        return True
    if node.op == "conv_general_dilated":
        return _floats(node)
    if node.op == "dot_general":
        return _floats(node) and _plain_dot(node)
    return False


def _plain_dot(node: Node) -> bool:
    """A dot YNNPACK runs: the lhs contracted on its last dimension once XLA's dot
    decomposer has put it in order (`_reordered`), more than one row and one column, one
    side of 8 or more."""
    (lc, rc), (lb, rb) = node.params["dimension_numbers"]
    lhs, rhs = (v.type.shape for v in node.inputs)
    m = math.prod(d for i, d in enumerate(lhs) if i not in lb and i not in lc)
    n = math.prod(d for i, d in enumerate(rhs) if i not in rb and i not in rc)
    k = math.prod(lhs[i] for i in lc)
    if _reordered(node) is None:
        last = lc[0]
        if node.inputs[0].node.op == "transpose":      # XLA folds it into the dot
            last = node.inputs[0].node.params["permutation"][last]
        if last != len(lhs) - 1:
            return False
    return m > 1 and n > 1 and max(m, n, k) >= 8


def _reordered(node: Node) -> tuple[int, ...] | None:
    """For a dot whose batch dimensions are not first or that contracts several, XLA's
    dot decomposer transposes the operands into batch, free, contracting (lhs) and
    batch, contracting, free (rhs) order: the operands it transposes. None for a dot it
    leaves as it is."""
    (lc, rc), (lb, rb) = node.params["dimension_numbers"]
    lhs, rhs = (len(v.type.shape) for v in node.inputs)
    if tuple(lb) == tuple(range(len(lb))) and tuple(rb) == tuple(range(len(rb))) \
            and len(lc) == 1:
        return None
    lorder = (*lb, *(i for i in range(lhs) if i not in lb and i not in lc), *lc)
    rorder = (*rb, *rc, *(i for i in range(rhs) if i not in rb and i not in rc))
    return tuple(i for i, order in enumerate((lorder, rorder))
                 if order != tuple(range(len(order))))


def _copied(node: Node) -> tuple[int, ...]:
    """The operands XLA reads through a copy it makes before the library rewriter: a
    dot's operands the dot decomposer transposes (`_reordered`)."""
    return (_reordered(node) or ()) if node.op == "dot_general" else ()
