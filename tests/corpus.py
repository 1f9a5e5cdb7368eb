"""The round-trip corpus: small functions that together use every op in the table.

Each case builds its arguments from a seed; `grad` says whether gradients are compared
(w.r.t. the float arguments).  Every case is compared bit for bit: the emitted program
keeps the jaxpr's equation order, so XLA sees the same computation and autodiff
accumulates cotangents in the same order (bf16 gradients differ visibly otherwise).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fn: Callable
    make_args: Callable[[np.random.Generator], tuple]
    static_argnums: tuple[int, ...] = ()
    grad: bool = True

    def args(self, seed: int = 0) -> tuple:
        return self.make_args(np.random.default_rng(seed))


def normal(rng, *shape, dtype=np.float32):
    return jnp.asarray(rng.standard_normal(shape).astype(np.float32), dtype=dtype)


def conv(x, w, stride=1, padding="SAME", layout=("NCHW", "OIHW", "NCHW"), groups=1, **kw):
    return lax.conv_general_dilated(x, w, (stride, stride), padding, dimension_numbers=layout,
                                    feature_group_count=groups, **kw)


def bottleneck_nchw(x, w1, w2, w3, scale, shift):
    def bn(y):
        return y * scale[:, None, None] + shift[:, None, None]
    y = jax.nn.relu(bn(conv(x, w1)))
    y = jax.nn.relu(bn(conv(y, w2)))
    return jax.nn.relu(conv(y, w3) + x)


def grouped_conv_nhwc(x, w):
    return jax.nn.relu(conv(x, w, layout=("NHWC", "HWIO", "NHWC"), groups=4))


def conv_variants(x, w, wt):
    a = conv(x, w, stride=2, padding=((1, 2), (0, 1)), rhs_dilation=(2, 1))
    b = conv(x, wt, padding=((1, 1), (0, 1)), lhs_dilation=(2, 2))          # transposed conv
    c = lax.conv_general_dilated(x[:, :, 0, :], w[:, :, 0, :], (1,), "SAME",
                                 dimension_numbers=("NCH", "OIH", "NCH"))
    return a.sum() + b.mean() + c.sum()


def layer_norm(x, g, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + 1e-5) * g + b


def transformer_block(x, wq, wk, wv, wo, w1, w2, g, b):
    heads = 2
    q, k, v = x @ wq, x @ wk, x @ wv
    split = lambda t: t.reshape(t.shape[0], heads, -1).transpose(1, 0, 2)
    att = jnp.einsum("hqd,hkd->hqk", split(q), split(k)) / np.sqrt(q.shape[-1] // heads)
    att = jax.nn.softmax(att, axis=-1)
    o = jnp.einsum("hqk,hkd->hqd", att, split(v)).transpose(1, 0, 2).reshape(x.shape)
    x = layer_norm(x + o @ wo, g, b)
    return layer_norm(x + jax.nn.gelu(x @ w1) @ w2, g, b)


def embedding(table, ids, pos):
    return layer_norm(table[ids] + pos, jnp.ones(table.shape[1]), jnp.zeros(table.shape[1]))


def nasrnn_cell(x, h, wx, wh):
    gates = [x @ wx[i] + h @ wh[i] for i in range(4)]
    a = jax.nn.sigmoid(gates[0]) * jnp.tanh(gates[1])
    b = jax.nn.relu(gates[2]) + jnp.tanh(gates[3])
    return jnp.tanh(a * b + h)


def sru_step(x, c, w, bf, br):
    xt, f, r = jnp.split(x @ w, 3, axis=-1)
    f, r = jax.nn.sigmoid(f + bf), jax.nn.sigmoid(r + br)
    c = f * c + (1 - f) * xt
    return r * jnp.tanh(c) + (1 - r) * x, c


def pooling(x):
    mx = lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), "SAME")
    mn = lax.reduce_window(x, jnp.inf, lax.min, (1, 1, 2, 2), (1, 1, 1, 1), "VALID")
    avg = lax.reduce_window(x, 0.0, lax.add, (1, 1, 3, 3), (1, 1, 1, 1),
                            ((0, 0), (0, 0), (1, 1), (1, 1)),
                            base_dilation=(1, 1, 2, 1)) / 9.0
    return mx.sum() + mn.mean() + avg.sum()


@jax.custom_vjp
def clip_gradient(x):
    return x


clip_gradient.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -0.1, 0.1),))


def with_custom_vjp(x):
    return (clip_gradient(x) ** 2).sum()


def relu_at_zero(x):
    return jax.nn.relu(x).sum() + jax.nn.relu(-x).sum()


def with_debug_print(x):
    jax.debug.print("first {}", x.sum())
    y = jnp.sin(x)
    jax.debug.print("second {}", y.sum())
    return y * 2


def pytree_io(tree):
    a, (b, c) = tree["a"], tree["bc"]
    return {"sum": a + b, "list": [c * 2, None, (a * c).sum()]}


def static_loop(x, n, mode):
    for _ in range(n):
        x = jnp.tanh(x) if mode == "tanh" else jnp.sin(x)
    return x


def bf16_ops(x, w, k):
    y = jax.nn.relu(x @ w)
    z = conv(y[None, None], k, layout=("NCHW", "OIHW", "NCHW"))
    return y.astype(jnp.float32).sum() + z.astype(jnp.float32).mean(), y


def int_ops(a, b):
    q, r = lax.div(a, b), lax.rem(a, b)
    bits = (a & b) | (a ^ 7) | (~b) | (a << 2) | (b >> 1)
    m = jnp.maximum(a, b) - jnp.minimum(a, b) + jnp.abs(a) * jnp.sign(b)
    c = jnp.where(a > b, q, r) + (a >= b) + (a <= b) + (a < b) + (a == b) + (a != b)
    return q + r + bits + m + c, jnp.argmax(a), jnp.argmin(b, axis=0), a.prod(), b.max()


def shape_ops(x, y):
    t = x.transpose(2, 0, 1).reshape(4, -1)
    s = jnp.squeeze(x[:1], 0)
    e = jnp.expand_dims(s, 1)
    c = jnp.concatenate([x, y], axis=2)
    p, q = jnp.split(c, [2], axis=2)
    r = jnp.flip(x, axis=(0, 2))
    sl = lax.slice(x, (0, 1, 0), (2, 3, 4), (1, 1, 2))
    pd = lax.pad(x, 0.5, ((1, -1, 0), (0, 2, 1), (2, 0, 0)))
    ds = lax.dynamic_slice(x, (1, 0, 1), (1, 2, 2))
    du = lax.dynamic_update_slice(x, jnp.zeros((1, 2, 2)), (1, 1, 2))
    st = jnp.stack([x, 2 * x], axis=1)       # jax 0.10's own `stack` primitive
    return t.sum() + e.sum() + p.sum() - q.mean() + r[0, 0, 0] + sl.sum() + pd.sum() + \
        ds.sum() + du.sum() + st[:, 1].sum()


def index_select(x, lo, hi):
    i = lax.broadcasted_iota(jnp.int32, x.shape, 1)
    y = lax.clamp(jnp.full_like(x, lo), x, jnp.full_like(x, hi))
    z = lax.select_n(i % 3, x, y, -x)
    return jnp.where(i > 2, y, z).astype(jnp.bfloat16).astype(jnp.float32), \
        (x > 0).astype(jnp.int32)


def reductions(x):
    return (x.sum(0), x.max(1), x.min(), jnp.prod(x[:2, :2]), jnp.all(x > -3.0),
            jnp.any(x > 1.0), jnp.argmin(x, axis=1))


def unary_math(x):
    p = jnp.abs(x) + 0.5                      # positive
    u = jnp.tanh(x) * 0.9                     # in (-1, 1)
    terms = [jnp.exp(x), jnp.exp2(x), jnp.log(p), jnp.log1p(p), jnp.expm1(x), jnp.tanh(x),
             jax.nn.sigmoid(x), jnp.sin(x), jnp.cos(x), jnp.tan(u), jnp.arcsin(u),
             jnp.arccos(u), jnp.arctan(x), jnp.sinh(x), jnp.cosh(x), jnp.arcsinh(x),
             jnp.arccosh(p + 1), jnp.arctanh(u), jnp.sqrt(p), lax.rsqrt(p), jnp.cbrt(x),
             jnp.floor(x), jnp.ceil(x), jnp.round(x), lax.round(x), lax.erf(x),
             lax.erfc(x), jnp.square(x), x ** 3, p ** x, jnp.arctan2(x, p),
             lax.nextafter(lax.stop_gradient(x), lax.stop_gradient(p)), -x, jnp.sign(x)]
    return sum(t.sum() for t in terms), jnp.isfinite(jnp.log(x))


def with_cumsum(x):
    return jnp.cumsum(x, axis=1) * 2 + lax.cummax(x, axis=0)


def with_loops(x):
    y = lax.fori_loop(0, 3, lambda i, c: c * 0.5 + jnp.sin(c), x)
    z, ys = lax.scan(lambda c, r: (c + r, c * r), jnp.zeros(x.shape[1]), x)
    return y, z, ys


def with_sort(x):
    return jnp.sort(x, axis=-1), jnp.argsort(x[0])


def with_checkpoint(x, w):
    block = jax.checkpoint(lambda h: jnp.tanh(h @ w))
    return block(block(x)).sum()


@jax.jit
def _inner(x, y):
    return x * y + 1


def nested_jit(x, y):
    return _inner(_inner(x, y), y) + jax.jit(jnp.sin)(x)


def softmax_logsumexp(x):
    return jax.nn.softmax(x, axis=-1), jax.nn.logsumexp(x, axis=0), \
        lax.stop_gradient(x) * x


_TABLE = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def closed_over_const(x):
    return x @ _TABLE.T + jnp.asarray(_TABLE[0, :3])


def train_step(params, x, y):
    def loss(p):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)
    value, grads = jax.value_and_grad(loss)(params)
    return value, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


def batched_dot(a, b):
    return jnp.einsum("bij,bjk->bik", a, b), lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,))))


def passthrough(x, unused, y):
    return x, jnp.float32(3.0), y * 1.0, jnp.copy(y)


def random_noise(key, x):
    return x + 0.1 * jax.random.normal(key, x.shape)


def maxpool_nchw(x):
    return lax.reduce_window(jax.nn.relu(x), -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                             "VALID").sum()


def logic_and_floatcmp(x, y):
    m = (x > y) & (x < 1.0) | ~(y > 0.5) ^ (x == y)
    return jnp.where(m, x - y, x * y), jnp.where(jnp.isnan(x / (y - y)), 0.0, 1.0)


def grad_wrt_pytree(params, x):
    return jax.grad(lambda p: jnp.sum(jnp.tanh(x @ p["w"]) ** 2))(params)


CASES = [
    Case("resnet_bottleneck_nchw", bottleneck_nchw,
         lambda r: (normal(r, 1, 8, 6, 6), normal(r, 4, 8, 1, 1), normal(r, 4, 4, 3, 3),
                    normal(r, 8, 4, 1, 1), normal(r, 4), normal(r, 4))),
    Case("grouped_conv_nhwc", grouped_conv_nhwc,
         lambda r: (normal(r, 2, 5, 5, 8), normal(r, 3, 3, 2, 8))),
    Case("conv_variants", conv_variants,
         lambda r: (normal(r, 2, 3, 7, 6), normal(r, 4, 3, 3, 2), normal(r, 4, 3, 2, 2))),
    Case("transformer_block", transformer_block,
         lambda r: (normal(r, 5, 8),) + tuple(normal(r, 8, 8) * 0.3 for _ in range(4)) +
                   (normal(r, 8, 16) * 0.3, normal(r, 16, 8) * 0.3, normal(r, 8), normal(r, 8))),
    Case("embedding", embedding,
         lambda r: (normal(r, 10, 6), jnp.asarray(r.integers(0, 10, (2, 5)), jnp.int32),
                    normal(r, 5, 6))),
    Case("nasrnn_cell", nasrnn_cell,
         lambda r: (normal(r, 2, 8), normal(r, 2, 8), normal(r, 4, 8, 8), normal(r, 4, 8, 8))),
    Case("sru_step", sru_step,
         lambda r: (normal(r, 3, 6), normal(r, 3, 6), normal(r, 6, 18), normal(r, 6),
                    normal(r, 6))),
    Case("pooling", pooling, lambda r: (normal(r, 2, 3, 8, 7),)),
    Case("custom_vjp", with_custom_vjp, lambda r: (normal(r, 4, 3) * 3,)),
    Case("relu_grad_at_zero", relu_at_zero,
         lambda r: (jnp.asarray([-1.0, 0.0, 0.0, 2.0, -0.0], jnp.float32),)),
    Case("debug_print", with_debug_print, lambda r: (normal(r, 3),)),
    Case("pytree_io", pytree_io,
         lambda r: ({"a": normal(r, 3), "bc": (normal(r, 3), normal(r, 3))},)),
    Case("static_args", static_loop, lambda r: (normal(r, 4), 3, "tanh"),
         static_argnums=(1, 2)),
    Case("bf16", bf16_ops,
         lambda r: (normal(r, 4, 6, dtype=jnp.bfloat16), normal(r, 6, 5, dtype=jnp.bfloat16),
                    normal(r, 2, 1, 3, 3, dtype=jnp.bfloat16))),
    Case("int_ops", int_ops,
         lambda r: (jnp.asarray(r.integers(-20, 20, (3, 4)), jnp.int32),
                    jnp.asarray(r.integers(1, 9, (3, 4)), jnp.int32)), grad=False),
    Case("shape_ops", shape_ops, lambda r: (normal(r, 2, 3, 4), normal(r, 2, 3, 2))),
    Case("index_select", index_select, lambda r: (normal(r, 3, 6), -0.5, 0.5)),
    Case("reductions", reductions, lambda r: (normal(r, 4, 5),)),
    Case("unary_math", unary_math, lambda r: (normal(r, 3, 4),)),
    Case("cumsum_opaque", with_cumsum, lambda r: (normal(r, 3, 4),)),
    Case("loops_opaque", with_loops, lambda r: (normal(r, 4, 3),)),
    Case("sort_opaque", with_sort, lambda r: (normal(r, 3, 5),)),
    Case("checkpoint", with_checkpoint, lambda r: (normal(r, 3, 4), normal(r, 4, 4))),
    Case("nested_jit", nested_jit, lambda r: (normal(r, 3), normal(r, 3))),
    Case("softmax_logsumexp", softmax_logsumexp, lambda r: (normal(r, 3, 5),)),
    Case("closed_over_const", closed_over_const, lambda r: (normal(r, 2, 4),)),
    Case("train_step", train_step,
         lambda r: ({"w1": normal(r, 4, 8), "b1": normal(r, 8), "w2": normal(r, 8, 2)},
                    normal(r, 6, 4), normal(r, 6, 2))),
    Case("batched_dot", batched_dot, lambda r: (normal(r, 2, 3, 4), normal(r, 2, 4, 5))),
    Case("passthrough", passthrough, lambda r: (normal(r, 3), normal(r, 2), normal(r, 3))),
    Case("random_noise", random_noise, lambda r: (jax.random.key_data(jax.random.key(3)),
                                                  normal(r, 4)), grad=False),
    Case("maxpool_nchw", maxpool_nchw, lambda r: (normal(r, 1, 2, 4, 4),)),
    Case("logic_and_floatcmp", logic_and_floatcmp, lambda r: (normal(r, 6), normal(r, 6))),
    Case("grad_wrt_pytree", grad_wrt_pytree,
         lambda r: ({"w": normal(r, 4, 3)}, normal(r, 5, 4))),
]
