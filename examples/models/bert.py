"""A BERT encoder in TASO's bert configuration: sequence 64, hidden 1024, 16 heads,
8 layers, with separate Q/K/V projections. Unlike TASO's sketch it is the full layer:
biases, softmax attention, output projection, residuals, layer norms and the 4x GELU
feed-forward. The input is the embedded sequence, as in TASO."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from models import layers as L

FULL = dict(seq=64, hidden=1024, heads=16, layers=8, ffn=4096)
SMALL = dict(seq=8, hidden=32, heads=4, layers=2, ffn=64)


def _dense(init: L.Init, inp: int, out: int) -> dict:
    return {"w": init.dense(inp, out), "b": init.zeros((out,))}


def _norm(init: L.Init, n: int) -> dict:
    return {"g": init.ones((n,)), "b": init.zeros((n,))}


def attention(p: dict, x, heads: int):
    b, s, h = x.shape
    split = lambda t: t.reshape(b, s, heads, h // heads)   # noqa: E731
    q, k, v = (split(L.dense(x, p[name])) for name in ("q", "k", "v"))
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.array(np.sqrt(h // heads), x.dtype)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, axis=-1), v)
    return L.dense(o.reshape(b, s, h), p["o"])


def encoder_layer(p: dict, x, heads: int):
    x = L.layer_norm(x + attention(p, x, heads), p["ln1"])
    y = L.dense(jax.nn.gelu(L.dense(x, p["ffn1"])), p["ffn2"])
    return L.layer_norm(x + y, p["ln2"])


def build(*, batch: int = 1, dtype="float32", small: bool = False, seed: int = 0):
    cfg = SMALL if small else FULL
    h, f = cfg["hidden"], cfg["ffn"]
    init = L.Init(seed, dtype)
    params = [{"q": _dense(init, h, h), "k": _dense(init, h, h), "v": _dense(init, h, h),
               "o": _dense(init, h, h), "ln1": _norm(init, h),
               "ffn1": _dense(init, h, f), "ffn2": _dense(init, f, h), "ln2": _norm(init, h)}
              for _ in range(cfg["layers"])]
    x = init.normal((batch, cfg["seq"], h))

    def fn(params, x):
        for p in params:
            x = encoder_layer(p, x, cfg["heads"])
        return x

    return fn, params, (x,)
