"""XLA compile options that hlo_opt chooses for a program by timing it on the device.

XLA's CPU backend hands convolutions, dots and reductions to the YNNPACK library as
library fusions (`ynn_fusion`). Each conv is one, and a reduction (a network's global
mean) starts one that grows up through every supported operand whose users it already
holds, up to XLA's 100-instruction limit: ResNet-50's last 28 convs with their adds and
relus are one. Whether the library path pays depends on the device and the program. On
the AMD EPYC 2-vCPU host (jax 0.10.2, `/tmp/s23/ynnmatrix.py`, 9 interleaved rounds),
compiling with it off ran ResNet-50 NHWC 1.52x faster, ResNeXt-50 NHWC 1.45x,
Inception-v3 NHWC 1.43x, SqueezeNet NHWC 1.56x, ResNet-50 NCHW 1.23x; and slower on
NASNet-A (0.88x), BERT (0.93x) and SRU (0.87x). The one multi-conv fusion also broke the
cost model's sum of kernels: ResNet-50 relaid ran 74 ms against 64 ms priced with it,
and 51 against 51-55 priced without it (`/tmp/s23/reprice.py`).

XLA's flag takes a set of library-fusion types, and a subset is a third choice: with
`ELTWISE` alone (`YNN_ELTWISE`), YNNPACK's fusions grow from elementwise ops: a conv
and the relu after it are one library call (NASNet-A's NHWC program makes 128 library
calls, against 218 under the defaults, one a conv or dot). On the AMD host
(`/tmp/s65`, 7-9 interleaved rounds of hlo_opt's optimised program against jax.jit),
NASNet-A's ran 1.49x jax.jit's speed with it, 1.08x under the defaults and 0.98x with
YNNPACK off; NasRNN's 1.59x against 1.48x under both others; ResNet-50's 1.77x
against 3.12x off. No subset beat YNNPACK off on the other CNNs, nor the defaults on
BERT (`docs/history.md`, "Compile options: YNNPACK's fusion types one by one").

So it is measured, not assumed: `CHOICES` are tried against XLA's defaults on the
program the search is headed for (`pipeline.choose_options`, `pipeline.probe`), the
kernels are priced and the program is compiled under the winner. An option this
jaxlib does not know is left out, never fatal.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp

Options = Mapping[str, str]

DEFAULT: Options = {}
NO_YNN: Options = {"xla_cpu_experimental_ynn_fusion_type": ""}   # no YNNPACK fusions
YNN_ELTWISE: Options = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_ELTWISE"}
CHOICES = {"cpu": (NO_YNN, YNN_ELTWISE)}       # besides the default, by platform
NAMES = {"": "XLA's defaults", json.dumps(NO_YNN, sort_keys=True): "YNNPACK off",  # reports
         json.dumps(YNN_ELTWISE, sort_keys=True): "YNNPACK elementwise fusions only"}


def jit(fun: Callable, options: Options | None = None, **kwargs) -> Callable:
    """`jax.jit(fun)` compiled with `options` (none: XLA's defaults)."""
    return jax.jit(fun, compiler_options=dict(options) if options else None, **kwargs)


def label(options: Options | None) -> str:
    """A stable text for `options` ("" for the defaults): cache keys and reports."""
    return json.dumps(dict(options), sort_keys=True) if options else ""


def describe(options: Options | None) -> str:
    """`options` in words, for a report."""
    text = label(options)
    return NAMES.get(text, text)


def parse(text: str) -> Options:
    """`label` backwards."""
    return json.loads(text) if text else DEFAULT


def choices(platform: str | None = None) -> list[Options]:
    """The non-default options worth timing on `platform` (default: jax's first device)
    that this jaxlib accepts."""
    platform = platform or jax.devices()[0].platform
    return [o for o in CHOICES.get(platform, ()) if accepted(label(o))]


@functools.cache
def accepted(text: str) -> bool:
    """Whether XLA compiles a small program with these options."""
    try:
        jit(lambda x: x * 2, parse(text)).lower(jnp.zeros((2,), jnp.float32)).compile()
    except Exception:  # noqa: BLE001 - an unknown flag or value: not a choice here
        return False
    return True
