"""A text classifier on simple recurrent units (SRU, Lei et al. 2017), hidden 1024 — the
RNN text-classification model of MetaFlow. Each layer's three projections (candidate,
forget and reset gates) run over the whole sequence at once; only the cheap elementwise
recurrence is sequential, unrolled so the graph sees every step."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from models import layers as L

FULL = dict(vocab=10000, seq=32, hidden=1024, layers=2, classes=2)
SMALL = dict(vocab=100, seq=6, hidden=32, layers=2, classes=2)


def sru_layer(p: dict, x):
    """x: (batch, seq, hidden) -> (batch, seq, hidden)."""
    cand = x @ p["w"]
    forget = jax.nn.sigmoid(x @ p["wf"] + p["bf"])
    reset = jax.nn.sigmoid(x @ p["wr"] + p["br"])
    c = jnp.zeros_like(cand[:, 0])
    hs = []
    for t in range(x.shape[1]):
        f, r = forget[:, t], reset[:, t]
        c = f * c + (1 - f) * cand[:, t]
        hs.append(r * jnp.tanh(c) + (1 - r) * x[:, t])
    return jnp.stack(hs, axis=1)


def build(*, batch: int = 1, dtype="float32", small: bool = False, seed: int = 0):
    cfg = SMALL if small else FULL
    n = cfg["hidden"]
    init = L.Init(seed, dtype)
    params = {"embed": init.normal((cfg["vocab"], n)),
              "layers": [{"w": init.dense(n, n), "wf": init.dense(n, n),
                          "wr": init.dense(n, n), "bf": init.zeros((n,)),
                          "br": init.zeros((n,))} for _ in range(cfg["layers"])],
              "fc": L.classifier(init, n, cfg["classes"])}
    tokens = init.tokens((batch, cfg["seq"]), cfg["vocab"])

    def fn(params, tokens):
        x = params["embed"][tokens]
        for p in params["layers"]:
            x = sru_layer(p, x)
        return L.dense(x[:, -1], params["fc"])

    return fn, params, (tokens,)
