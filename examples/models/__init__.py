"""The model zoo of MetaFlow / TASO / OCGGS / Tensat, in plain JAX.

Each model module has `build(**config) -> (fn, params, inputs)`, called as
`fn(params, *inputs)`. Every build takes `batch`, `dtype` (float32 by default; bfloat16
works), `small` (a tiny configuration for tests) and `seed`; the CNNs also take
`layout` ("NCHW", the default as in TASO's ONNX inputs, or "NHWC").
"""
from __future__ import annotations

import importlib

NAMES = ("resnet50", "resnext50", "inception_v3", "squeezenet", "nasnet_a", "nasrnn",
         "bert", "sru")
CNNS = frozenset(NAMES[:5])


def build(name: str, *, layout: str | None = None, **config):
    """Build model `name`; `layout` is passed to the CNNs and must be None for the rest."""
    if name not in NAMES:
        raise ValueError(f"unknown model {name!r}; the zoo has {', '.join(NAMES)}")
    module = importlib.import_module(f"models.{name}")
    if name in CNNS:
        return module.build(layout=layout or "NCHW", **config)
    if layout is not None:
        raise ValueError(f"{name} is not a CNN: it takes no layout")
    return module.build(**config)
