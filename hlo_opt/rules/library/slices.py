"""Slices moved toward the inputs, so what a slice drops is never computed.

An unrolled RNN whose classifier reads only the last step (`stack(h_0..h_31)[:, -1]`,
SRU) computes the last layer's output gate and output at every step; once the slice
picks `h_31` out of the stack, the other 31 are dead, and the gate's projection needs
one row of the sequence, not 32 (measured on the 2-core VM: the whole model 1.08-1.16x
faster, interleaved, in three runs). `slice-of-stack-k` takes the operand out (per arity,
as `transpose-through-concat-k` does: patterns have a fixed arity), the others move a
slice above a broadcast or a matmul; `unary-through-slice` and `binary-through-slice`
(concat_split.py) move it above elementwise ops. The narrowing move
(`search/narrow.py`) applies them where the slice is its operand's only reader.

The `stack-of-*-k` rules do per-step work once over the stacked steps: SRU's first
layer computes `r_t * tanh(c_t) + (1 - r_t) * x_t` for each step and stacks the 32
results; stacked first, the gates and inputs are the tensors they were sliced from, and
the work is one elementwise loop over the sequence (`search/narrow.py`, `vectorize`).
"""
from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from hlo_opt import ops
from hlo_opt.rules.lang import Build, Fn, Guard, Pat, Rule, RuleSet, Sym, tensors
from hlo_opt.rules.library.common import binary, is_slice_of, unary

x, y, w = tensors("x y w")
f, g = unary(), binary()
ax = Sym("ax")
MAX_STACK = 32          # SRU stacks its 32 steps; longer stacks keep their slices


def _unit_strides(sl) -> Guard:
    return Guard("unit-strides", lambda m: m.params(sl)["strides"] is None
                 or all(s == 1 for s in m.params(sl)["strides"]))


def _picked(m, sl, whole, axis: int) -> int | None:
    """The index along `axis` that slice `sl` of `whole` takes alone (all of every
    other axis, unit strides), or None."""
    i = m.params(sl)["start_indices"][axis]
    return i if is_slice_of(m, sl, whole, axis, i, i + 1) else None


def _expand(value, shape, axis: int):
    """`value` with a unit axis inserted at `axis` (to `shape`)."""
    dims = tuple(i for i in range(len(shape)) if i != axis)
    return ops.make("broadcast_in_dim", [value], shape=tuple(shape), broadcast_dimensions=dims,
                    sharding=None).out()


def _names(prefix: str, k: int):
    return tensors(" ".join(f"{prefix}{i}" for i in range(k)))


def stack_rule(k: int) -> Rule:
    """stack(x_0, .., x_k-1)[i along the stacked axis] -> x_i with a unit axis."""
    xs = _names("x", k)
    st = Pat("stack", *xs, axis=ax)
    sl = Pat("slice", st)
    return Rule(f"slice-of-stack-{k}", "concat_split", sl,
                Build(lambda m: _expand(m[xs[_picked(m, sl, st, m[ax])]], m.shape(sl), m[ax])),
                guards=[Guard("one-operand", lambda m: _picked(m, sl, st, m[ax]) is not None)],
                identity=f"stack(x0, .., x{k - 1})[i] -> x_i",
                example=lambda n: (lambda *vs: lax.slice_in_dim(
                    jnp.stack(vs, axis=n % 2), (k - 1 - n) % k, (k - 1 - n) % k + 1, axis=n % 2),
                    [(2, 3)] * k))


_bc = Pat("broadcast_in_dim", x)
_sq = Pat("squeeze", _bc)
_sb = Pat("slice", _bc)
_dt = Pat("dot_general", x, w)
_sd = Pat("slice", _dt)
_in = Pat("slice", x)
_ss = Pat("slice", _in)


def _composed(m, key: str) -> tuple[int, ...]:
    """The outer slice's start or limit, moved by the inner slice's start."""
    return tuple(a + b for a, b in zip(m.params(_in)["start_indices"], m.params(_ss)[key]))


def _inserts_units(m) -> bool:
    """The broadcast only inserts unit axes, and the squeeze removes them: x again."""
    return m.shape(_sq) == m.shape(x) and math.prod(m.shape(_bc)) == math.prod(m.shape(x))


def _broadcast_whole(m) -> bool:
    """The slice takes all of every axis the broadcast's operand spans (size > 1)."""
    p, out = m.params(_sb), m.shape(_bc)
    return all((p["start_indices"][d], p["limit_indices"][d]) == (0, out[d])
               for j, d in enumerate(m.params(_bc)["broadcast_dimensions"])
               if m.shape(x)[j] != 1)


def _lhs_dims(m) -> list[int | None]:
    """Per axis of the dot's left operand: the output axis it becomes (None: contracted)."""
    (lc, _), _ = m.params(_dt)["dimension_numbers"]
    free = [i for i in range(len(m.shape(x))) if i not in lc]
    return [free.index(i) if i in free else None for i in range(len(m.shape(x)))]


def _rows_only(m) -> bool:
    """No batch axes, and the slice takes all of every axis from the right operand."""
    (lc, _), (lb, _) = m.params(_dt)["dimension_numbers"]
    if lb:
        return False
    p, out = m.params(_sd), m.shape(_dt)
    first_rhs = len(m.shape(x)) - len(lc)
    return all((p["start_indices"][d], p["limit_indices"][d]) == (0, out[d])
               for d in range(first_rhs, len(out)))


def _lhs_bounds(m, lo: bool) -> tuple[int, ...]:
    p = m.params(_sd)["start_indices" if lo else "limit_indices"]
    return tuple((0 if lo else n) if d is None else p[d]
                 for d, n in zip(_lhs_dims(m), m.shape(x)))


def _through_binary(left: bool) -> Rule:
    """slice(g(x, y)) -> g(slice(x), y) where y spans only unit axes or axes the slice
    takes whole (a bias broadcast over the sequence); `left`: x is g's first operand."""
    src = Pat("slice", Pat(g, x, y) if left else Pat(g, y, x))
    moved = Pat("slice", x, like=src)

    def fits(m):
        p, big, small = m.params(src), m.shape(x), m.shape(y)
        return len(big) == len(small) and big == m.shape(src.inputs[0]) and small != big and all(
            k == 1 or (p["start_indices"][d], p["limit_indices"][d]) == (0, n)
            for d, (n, k) in enumerate(zip(big, small)))
    side = "lhs" if left else "rhs"
    return Rule(f"binary-through-slice-broadcast-{'rhs' if left else 'lhs'}", "concat_split",
                src, Pat(g, moved, y) if left else Pat(g, y, moved),
                guards=[_unit_strides(src), Guard("other-broadcast", fits)],
                identity=f"g(x, y)[s] -> g(x[s], y), y broadcast ({side} sliced)",
                example=lambda n: (lambda a, b: (jnp.add, jnp.multiply, jnp.maximum)[n](
                    *((a, b) if left else (b, a)))[n % 2:n % 2 + 2], [(3, 3), (1, 3)]))


NARROW = [
    # The regrouping move halves a grouped conv's input again and again; each piece is
    # then one slice of it, not a chain of four.
    Rule("slice-of-slice", "concat_split", _ss,
         Pat("slice", x, start_indices=Fn(lambda m: _composed(m, "start_indices")),
             limit_indices=Fn(lambda m: _composed(m, "limit_indices")), strides=None),
         guards=[_unit_strides(_in), _unit_strides(_ss)],
         identity="x[a:b][c:d] -> x[a+c:a+d]",
         example=lambda n: (lambda x: x[n % 2:, 1:][1:3, n % 2:] * 2, [(4, 3)])),
    _through_binary(True),
    _through_binary(False),
    Rule("squeeze-of-broadcast", "concat_split", _sq, x, guards=[Guard("units", _inserts_units)],
         identity="squeeze(expand(x)) -> x",
         example=lambda n: (lambda x: jnp.squeeze(lax.broadcast_in_dim(
             x, (2, 1, 3) if n % 2 else (1, 2, 3), (0, 2) if n % 2 else (1, 2)), n % 2) * 2,
             [(2, 3)])),
    Rule("slice-of-broadcast", "concat_split", _sb,
         Pat("broadcast_in_dim", x, like=_bc, shape=Fn(lambda m: m.shape(_sb))),
         guards=[_unit_strides(_sb), Guard("operand-whole", _broadcast_whole)],
         identity="broadcast(x)[s] -> broadcast(x) to s",
         example=lambda n: (lambda x: lax.broadcast_in_dim(x, (2, 3, 3), (2,))[n // 2:, n % 2:n % 2 + 2]
                            * 2, [(3,)])),
    Rule("slice-through-dot", "concat_split", _sd,
         Pat("dot_general", Pat("slice", x, start_indices=Fn(lambda m: _lhs_bounds(m, True)),
                                limit_indices=Fn(lambda m: _lhs_bounds(m, False)), strides=None),
             w, like=_dt),
         guards=[_unit_strides(_sd), Guard("rows-only", _rows_only)],
         identity="(x @ w)[rows] -> x[rows] @ w",
         example=lambda n: (lambda x, w: (x @ w)[:, n % 2:2, :] if n < 2 else (x @ w)[1:],
                            [(2, 3, 2) if n < 2 else (3, 2), (2, 2)])),
]

# Per-step work stacked: done once on the stacked operands -------------------------------------

def _stack_example(k: int, step):
    """stack of `step(i, operands)` for i < k, along axis n % 2, on (2, 3) operands."""
    return lambda n: (lambda *vs: jnp.stack([step(i, vs) for i in range(k)], axis=n % 2),
                      [(2, 3)] * (2 * k))


def stack_of_unary(k: int) -> Rule:
    xs = _names("x", k)
    return Rule(f"stack-of-unary-{k}", "concat_split",
                Pat("stack", *[Pat(f, v) for v in xs], axis=ax),
                Pat(f, Pat("stack", *xs, axis=ax)),
                identity=f"stack(f(x0), .., f(x{k - 1})) -> f(stack(x0, .., x{k - 1}))",
                example=_stack_example(k, lambda i, vs: jnp.tanh(vs[i])))


def stack_of_binary(k: int) -> Rule:
    a_s, b_s = _names("a", k), _names("b", k)
    return Rule(f"stack-of-binary-{k}", "concat_split",
                Pat("stack", *[Pat(g, a, b) for a, b in zip(a_s, b_s)], axis=ax),
                Pat(g, Pat("stack", *a_s, axis=ax), Pat("stack", *b_s, axis=ax)),
                guards=[Guard("same-shapes", lambda m: len({m.shape(v) for v in a_s + b_s}) == 1)],
                identity="stack(g(a0, b0), ..) -> g(stack(a0, ..), stack(b0, ..))",
                example=_stack_example(k, lambda i, vs: jnp.maximum(vs[i], vs[k + i])))


def stack_of_scalar_op(k: int, left: bool) -> Rule:
    """stack(g(s, b_i)) -> g(s, stack(b_i)) for one scalar constant s (`left`: s is g's
    first operand; the other side: its second), as `1 - r_t` is at every step of SRU."""
    s_s, b_s = _names("s", k), _names("b", k)
    pairs = [(v, b) if left else (b, v) for v, b in zip(s_s, b_s)]
    stacked = Pat("stack", *b_s, axis=ax)

    def one_scalar(m):
        nodes = [m[v].node for v in s_s]
        return all(n.op == "const" and n.types[0].shape == () for n in nodes) and \
            len({n.digest for n in nodes}) == 1
    return Rule(f"stack-of-scalar-{'lhs' if left else 'rhs'}-op-{k}", "concat_split",
                Pat("stack", *[Pat(g, *p) for p in pairs], axis=ax),
                Pat(g, s_s[0], stacked) if left else Pat(g, stacked, s_s[0]),
                guards=[Guard("one-scalar", one_scalar)],
                identity="stack(g(s, b0), ..) -> g(s, stack(b0, ..))",
                example=_stack_example(k, (lambda i, vs: jnp.maximum(0.5, vs[i])) if left
                                       else (lambda i, vs: jnp.maximum(vs[i], 0.5))))


def stack_of_slices(k: int) -> Rule:
    """stack(x[0], .., x[k-1]) along the axis they were taken from -> x."""
    parts = [Pat("squeeze", Pat("slice", x)) for _ in range(k)]
    st = Pat("stack", *parts, axis=ax)

    def in_order(m):
        axis = m[ax]
        return m.shape(x)[axis] == k and all(
            tuple(m.params(p)["dimensions"]) == (axis,) and
            is_slice_of(m, p.inputs[0], x, axis, i, i + 1) for i, p in enumerate(parts))
    return Rule(f"stack-of-slices-{k}", "concat_split", st, x,
                guards=[Guard("every-index-in-order", in_order)],
                identity=f"stack(x[0], .., x[{k - 1}]) -> x",
                example=lambda n: (lambda v: jnp.stack([v[i] if n % 2 == 0 else v[:, i]
                                                        for i in range(k)], axis=n % 2) * 2,
                                   [(k, 1, 1 + n // 2) if n % 2 == 0 else (1, k, 1)]))


STACKED = [rule(k) for k in range(2, MAX_STACK + 1)
           for rule in (stack_of_unary, stack_of_binary, stack_of_slices,
                        lambda k: stack_of_scalar_op(k, True),
                        lambda k: stack_of_scalar_op(k, False))]

RULES = RuleSet(NARROW + [stack_rule(k) for k in range(2, MAX_STACK + 1)] + STACKED)
