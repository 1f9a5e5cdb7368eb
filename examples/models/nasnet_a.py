"""NASNet-A as in TASO's nasnet_a example: three stages of five normal cells and one
reduction cell; cells combine separable convs (a grouped kxk conv, then a 1x1) with
average and max pooling, pairwise adds and a five-way channel concat. A 7x7 stem brings
the image to TASO's 128 x 56 x 56 input; a dense classifier ends it."""
from __future__ import annotations

import functools

from models import layers as L

FULL = dict(image=224, channels=128, normal=5, stages=3, classes=1000)
SMALL = dict(image=32, channels=8, normal=1, stages=3, classes=10)


def _separable(net: L.Net, x, out: int, k: int, stride: int = 1):
    """TASO's separable conv: a kxk conv in `out` groups (depthwise when the channels
    already equal `out`), then a 1x1."""
    t = net.conv(x, out, k, stride, groups=out, relu=False)
    return net.conv(t, out, relu=False, gain=0.5)   # cells add branches: keep sums O(1)


def _fit(net: L.Net, cur, prev):
    """Brings `prev` to `cur`'s channels and size."""
    out = L.channels(cur, net.layout)
    if L.spatial(prev, net.layout) == L.spatial(cur, net.layout):
        return net.conv(prev, out)
    return net.conv(prev, out, 3, 2)


def _normal_cell(net: L.Net, prev, cur, out: int):
    lay = net.layout
    cur = net.conv(cur, out)
    prev = _fit(net, cur, prev)
    sep = functools.partial(_separable, net, out=out, k=3)
    avg = functools.partial(L.avg_pool, layout=lay, k=3, stride=1)
    pairs = ((sep(cur), cur), (sep(prev), sep(cur)), (avg(cur), prev),
             (avg(prev), avg(prev)), (sep(prev), sep(prev)))
    return L.concat_channels([a + b for a, b in pairs], lay)


def _reduction_cell(net: L.Net, prev, cur, out: int):
    lay = net.layout
    cur = net.conv(cur, out)
    prev = _fit(net, cur, prev)
    sep = functools.partial(_separable, net, out=out)
    o0 = sep(prev, k=7, stride=2) + sep(cur, k=5, stride=2)
    o1 = L.max_pool(cur, lay, 3, 2) + sep(prev, k=7, stride=2)
    o2 = L.avg_pool(cur, lay, 3, 2) + sep(prev, k=5, stride=2)
    o3 = L.max_pool(cur, lay, 3, 2) + sep(o0, k=3)
    o4 = L.avg_pool(o0, lay, 3, 1) + o1
    return L.concat_channels([o0, o1, o2, o3, o4], lay)


def body(net: L.Net, x, *, cfg: dict):
    lay = net.layout
    x = L.max_pool(net.conv(x, cfg["channels"], 7, 2), lay, 3, 2)
    out = cfg["channels"]
    for _ in range(cfg["stages"]):
        prev = cur = x
        for _ in range(cfg["normal"]):
            prev, cur = cur, _normal_cell(net, prev, cur, out)
        out *= 2
        x = _reduction_cell(net, prev, cur, out)
    return net.classifier(L.global_avg_pool(x, lay), cfg["classes"])


build = L.cnn_builder(body, FULL, SMALL)
