"""ResNeXt-50 (32x4d shape): TASO's resnext50 example — widths 128/256/512/1024, 32 groups
in every 3x3 conv, blocks expand by 2 — with a 7x7 stem and a classifier around it."""
from __future__ import annotations

from models.resnet50 import bottleneck_net

FULL = dict(image=224, stem=64, widths=(128, 256, 512, 1024), blocks=(3, 4, 6, 3),
            classes=1000)
SMALL = dict(image=32, stem=16, widths=(32, 64, 64, 128), blocks=(2, 1, 1, 1), classes=10)


def build(*, batch: int = 1, layout: str = "NCHW", dtype="float32", small: bool = False,
          seed: int = 0):
    return bottleneck_net(SMALL if small else FULL, expansion=2,
                          groups=8 if small else 32, batch=batch, layout=layout,
                          dtype=dtype, seed=seed)
