"""Python-source spelling of param values, for the readable program `emit` prints.

`pyrepr` returns source text that evaluates (with `np`, `jnp`, `lax` in scope) to an
equal value, or None when the value has no such spelling (callables, jaxprs); the
emitter then reaches the node through the `_env` table instead.
"""
from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from jax import lax

_LAX_TYPES = ("GatherDimensionNumbers", "ScatterDimensionNumbers", "ConvDimensionNumbers",
              "GatherScatterMode", "Precision", "RoundingMethod", "DotAlgorithmPreset")


class NoSource(ValueError):
    """A value with no Python spelling."""


def pyrepr(value: Any) -> str:
    if value is None or isinstance(value, (bool, str)):
        return repr(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, enum.Enum):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return repr(v) if math.isfinite(v) else f"float('{v}')"
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return f"jnp.{np.dtype(value).name}"
    if isinstance(value, enum.Enum):
        name = type(value).__name__
        if getattr(lax, name, None) is type(value):
            return f"lax.{name}.{value.name}"
        raise NoSource(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        name = type(value).__name__
        if name not in _LAX_TYPES or getattr(lax, name, None) is not type(value):
            raise NoSource(value)
        fields = ", ".join(f"{f}={pyrepr(getattr(value, f))}" for f in value._fields)
        return f"lax.{name}({fields})"
    if isinstance(value, tuple):
        inner = ", ".join(pyrepr(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(pyrepr(v) for v in value) + "]"
    raise NoSource(value)


def call_source(fn: str, args: Sequence[str], params: Mapping[str, Any]) -> str:
    """`fn(a, b, k=v, ...)`; raises NoSource if a param cannot be spelled."""
    parts = list(args) + [f"{k}={pyrepr(v)}" for k, v in params.items()]
    return f"{fn}({', '.join(parts)})"
