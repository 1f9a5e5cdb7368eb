"""The NAS recurrent cell of TASO's nasrnn example: hidden 512, 5 steps; each step
computes 8 pairs `x @ W_i + h @ U_i` and combines them through a fixed tree of
relu / sigmoid / tanh, adds and products. Weights are shared across steps, as in any
RNN (TASO drew new ones per step)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from models import layers as L

FULL = dict(hidden=512, length=5)
SMALL = dict(hidden=32, length=5)


def cell(p: dict, x, h):
    t = [x @ w + h @ u for w, u in zip(p["w"], p["u"])]
    sig, tanh, relu = jax.nn.sigmoid, jnp.tanh, jax.nn.relu
    m0 = relu(t[0]) + sig(t[3])
    m1 = sig(t[1]) + tanh(t[2])
    m2 = sig(t[4]) * tanh(t[5])
    m3 = sig(t[6]) * relu(t[7])
    m4 = sig(m1) + tanh(m2)
    m5 = tanh(m0) * tanh(m3)
    return tanh(tanh(m4) * tanh(m5))


def build(*, batch: int = 1, dtype="float32", small: bool = False, seed: int = 0):
    cfg = SMALL if small else FULL
    n = cfg["hidden"]
    init = L.Init(seed, dtype)
    params = {"w": [init.dense(n, n) for _ in range(8)],
              "u": [init.dense(n, n) for _ in range(8)]}
    xs = init.normal((cfg["length"], batch, n))
    h0 = init.normal((batch, n))

    def fn(params, xs, h):
        for x in xs:          # unrolled, as in TASO: the graph sees every step
            h = cell(params, x, h)
        return h

    return fn, params, (xs, h0)
