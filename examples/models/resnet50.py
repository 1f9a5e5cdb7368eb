"""ResNet-50: bottleneck blocks 3-4-6-3, as in TASO's resnet50 example (conv + ReLU, no
batch norm), with the usual 7x7 stem and a global-pool + dense classifier around it.

`bottleneck_net` is shared with ResNeXt-50, which differs only in widths, expansion and
groups.
"""
from __future__ import annotations

import jax

from models import layers as L

FULL = dict(image=224, stem=64, widths=(64, 128, 256, 512), blocks=(3, 4, 6, 3), classes=1000)
SMALL = dict(image=32, stem=8, widths=(8, 16, 16, 32), blocks=(2, 1, 1, 1), classes=10)


def bottleneck_net(cfg: dict, *, expansion: int, groups: int, batch: int, layout: str,
                   dtype, seed: int):
    """(fn, params, inputs) of a bottleneck network described by `cfg`."""
    init = L.Init(seed, dtype, layout)
    params = {"stem": init.conv(cfg["stem"], 3, 7), "blocks": []}
    strides, channels = [], cfg["stem"]
    for stage, (width, count) in enumerate(zip(cfg["widths"], cfg["blocks"])):
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            out = width * expansion
            block = {"w1": init.conv(width, channels, 1),
                     "w2": init.conv(width, width, 3, groups=groups),
                     "w3": init.conv(out, width, 1, gain=0.3)}   # keeps the residual sum O(1)
            if stride > 1 or channels != out:
                block["proj"] = init.conv(out, channels, 1)
            params["blocks"].append(block)
            strides.append(stride)
            channels = out
    params["fc"] = L.classifier(init, channels, cfg["classes"])

    def fn(params, images):
        t = L.conv_relu(images, params["stem"], layout, 2)
        t = L.max_pool(t, layout, 3, 2)
        for block, stride in zip(params["blocks"], strides):
            y = L.conv_relu(t, block["w1"], layout)
            y = L.conv_relu(y, block["w2"], layout, stride, groups=groups)
            y = L.conv(y, block["w3"], layout)
            if "proj" in block:
                t = L.conv(t, block["proj"], layout, stride)
            t = jax.nn.relu(t + y)
        return L.dense(L.global_avg_pool(t, layout), params["fc"])

    return fn, params, (init.image(batch, 3, cfg["image"]),)


def build(*, batch: int = 1, layout: str = "NCHW", dtype="float32", small: bool = False,
          seed: int = 0, **overrides):
    """`overrides` replace entries of the configuration (`blocks=(2, 0, 0, 0)`: a
    two-block network, as in the search's scaling series)."""
    return bottleneck_net({**(SMALL if small else FULL), **overrides}, expansion=4, groups=1,
                          batch=batch, layout=layout, dtype=dtype, seed=seed)
