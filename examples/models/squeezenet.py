"""SqueezeNet 1.0 (Iandola et al.): a 7x7 stem, eight fire modules (1x1 squeeze, then
1x1 and 3x3 expands concatenated on channels), a 1x1 conv to the classes and a global
average pool — one of MetaFlow's evaluation models."""
from __future__ import annotations

from models import layers as L

# (squeeze, expand) of fire2..fire9; a max pool follows the stem, fire4 and fire8.
FIRES = ((16, 64), (16, 64), (32, 128), (32, 128), (48, 192), (48, 192), (64, 256), (64, 256))
POOL_AFTER = (2, 6)
FULL = dict(image=224, div=1, classes=1000)
SMALL = dict(image=48, div=8, classes=10)


def body(net: L.Net, x, *, cfg: dict):
    c = lambda n: max(2, n // cfg["div"])     # noqa: E731
    lay = net.layout
    x = L.max_pool(net.conv(x, c(96), 7, 2, "VALID"), lay, 3, 2, "VALID")
    for i, (squeeze, expand) in enumerate(FIRES):
        s = net.conv(x, c(squeeze))
        x = L.concat_channels([net.conv(s, c(expand)), net.conv(s, c(expand), 3)], lay)
        if i in POOL_AFTER:
            x = L.max_pool(x, lay, 3, 2, "VALID")
    return L.global_avg_pool(net.conv(x, cfg["classes"]), lay)


build = L.cnn_builder(body, FULL, SMALL)
