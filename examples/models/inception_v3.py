"""Inception-v3, block for block as TASO's inceptionv3 example (conv + ReLU everywhere,
asymmetric 1x7 / 7x1 convs, four-way channel concats), with a dense classifier on the
global average pool. Input 299x299."""
from __future__ import annotations

from models import layers as L

FULL = dict(image=299, div=1, a=3, c=4, e=2, classes=1000)
SMALL = dict(image=75, div=8, a=1, c=1, e=1, classes=10)   # 75: the least input it takes


def _pads(padding):
    """TASO's convention: explicit symmetric padding per spatial dim."""
    ph, pw = padding
    return ((ph, ph), (pw, pw))


def body(net: L.Net, v, *, cfg: dict):
    c = lambda n: max(4, n // cfg["div"])     # noqa: E731 - channel widths, scaled down when small
    lay = net.layout

    def conv(v, out, kernel=(1, 1), stride=1, padding=(0, 0)):
        return net.conv(v, c(out), kernel, stride, _pads(padding))

    def avg(v):
        return L.avg_pool(v, lay, 3, 1, ((1, 1), (1, 1)))

    def max3s2(v):
        return L.max_pool(v, lay, 3, 2, "VALID")

    # front: 3 x 299 x 299 -> 192 x 35 x 35
    v = conv(v, 32, (3, 3), 2)
    v = conv(v, 32, (3, 3))
    v = conv(v, 64, (3, 3), padding=(1, 1))
    v = max3s2(v)
    v = conv(v, 80)
    v = conv(v, 192, (3, 3))
    v = max3s2(v)
    for pool_features in (32, 64, 64)[:cfg["a"]]:                       # inception A
        b1 = conv(v, 64)
        b5 = conv(conv(v, 48), 64, (5, 5), padding=(2, 2))
        b3 = conv(conv(conv(v, 64), 96, (3, 3), padding=(1, 1)), 96, (3, 3), padding=(1, 1))
        v = L.concat_channels([b1, b5, b3, conv(avg(v), pool_features)], lay)
    b3 = conv(v, 384, (3, 3), 2)                                         # inception B
    bd = conv(conv(conv(v, 64), 96, (3, 3), padding=(1, 1)), 96, (3, 3), 2)
    v = L.concat_channels([b3, bd, max3s2(v)], lay)
    for c7 in (128, 160, 160, 192)[:cfg["c"]]:                          # inception C
        b1 = conv(v, 192)
        b7 = conv(conv(conv(v, c7), c7, (1, 7), padding=(0, 3)), 192, (7, 1), padding=(3, 0))
        bd = conv(v, c7)
        for kernel, padding in (((7, 1), (3, 0)), ((1, 7), (0, 3)), ((7, 1), (3, 0))):
            bd = conv(bd, c7, kernel, padding=padding)
        bd = conv(bd, 192, (1, 7), padding=(0, 3))
        v = L.concat_channels([b1, b7, bd, conv(avg(v), 192)], lay)
    b3 = conv(conv(v, 192), 320, (3, 3), 2)                              # inception D
    b7 = conv(conv(conv(v, 192), 192, (1, 7), padding=(0, 3)), 192, (7, 1), padding=(3, 0))
    v = L.concat_channels([b3, conv(b7, 192, (3, 3), 2), max3s2(v)], lay)
    for _ in range(cfg["e"]):                                            # inception E
        b1 = conv(v, 320)
        b3 = conv(v, 384)
        bd = conv(conv(v, 448), 384, (3, 3), padding=(1, 1))
        v = L.concat_channels([b1, conv(b3, 384, (1, 3), padding=(0, 1)),
                               conv(b3, 384, (3, 1), padding=(1, 0)),
                               conv(bd, 384, (1, 3), padding=(0, 1)),
                               conv(bd, 384, (3, 1), padding=(1, 0)),
                               conv(avg(v), 192)], lay)
    return net.classifier(L.global_avg_pool(v, lay), cfg["classes"])


build = L.cnn_builder(body, FULL, SMALL)
