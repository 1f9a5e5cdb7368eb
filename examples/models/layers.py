"""What the zoo's models share: deterministic random weights, and layout-aware conv/pool.

Weights are drawn once, by NumPy, in one canonical form (conv kernels OIHW, dense
(in, out), images NCHW) and only then laid out for the requested layout and cast to the
requested dtype. So two builds with the same seed hold the same numbers whatever the
layout, and `to_layout` converts one build's arrays into the other's.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

LAYOUTS = ("NCHW", "NHWC")
KERNEL_LAYOUT = {"NCHW": "OIHW", "NHWC": "HWIO"}
# Permutations from the canonical (NCHW images, OIHW kernels) form.
IMAGE_PERM = {"NCHW": (0, 1, 2, 3), "NHWC": (0, 2, 3, 1)}
KERNEL_PERM = {"NCHW": (0, 1, 2, 3), "NHWC": (2, 3, 1, 0)}


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return layout


class Init:
    """Draws a model's weights and inputs from one seed.

    He-normal conv and dense weights keep activations of order one through deep ReLU
    stacks (the zoo's CNNs, like TASO's, have no batch norm); `gain` scales a layer down
    where a residual sum would otherwise double the variance every block.
    """

    def __init__(self, seed: int, dtype, layout: str = "NCHW"):
        self.rng = np.random.default_rng(seed)
        self.dtype = jnp.dtype(dtype)
        self.layout = check_layout(layout)

    def _cast(self, a: np.ndarray) -> jax.Array:
        with jax.ensure_compile_time_eval():    # concrete even while `Net` traces shapes
            return jnp.asarray(a, self.dtype)

    def normal(self, shape, std: float = 1.0) -> jax.Array:
        return self._cast(self.rng.standard_normal(shape, np.float32) * std)

    def conv(self, out: int, inp: int, kh: int, kw: int | None = None, *, groups: int = 1,
             gain: float = 1.0) -> jax.Array:
        kw = kh if kw is None else kw
        fan_in = inp // groups * kh * kw
        w = self.rng.standard_normal((out, inp // groups, kh, kw), np.float32)
        return self._cast(np.transpose(w * gain * np.sqrt(2.0 / fan_in),
                                       KERNEL_PERM[self.layout]))

    def dense(self, inp: int, out: int, *, gain: float = 1.0) -> jax.Array:
        return self.normal((inp, out), gain / np.sqrt(inp))

    def zeros(self, shape) -> jax.Array:
        return self._cast(np.zeros(shape, np.float32))

    def ones(self, shape) -> jax.Array:
        return self._cast(np.ones(shape, np.float32))

    def image(self, batch: int, channels: int, size: int) -> jax.Array:
        x = self.rng.standard_normal((batch, channels, size, size), np.float32)
        return self._cast(np.transpose(x, IMAGE_PERM[self.layout]))

    def tokens(self, shape, vocab: int) -> jax.Array:
        return jnp.asarray(self.rng.integers(0, vocab, shape), jnp.int32)



def to_layout(params, images, src: str, dst: str):
    """Re-lay a CNN build's arrays: every 4-D leaf of `params` is a conv kernel, every
    leaf of `images` an image batch."""
    def perm(table, a):
        inverse = np.argsort(table[src])
        return jnp.transpose(jnp.transpose(a, inverse), table[dst])
    params = jax.tree.map(lambda a: perm(KERNEL_PERM, a) if a.ndim == 4 else a, params)
    return params, jax.tree.map(lambda a: perm(IMAGE_PERM, a), images)


def channel_axis(layout: str) -> int:
    return 1 if layout == "NCHW" else 3


def channels(x: jax.Array, layout: str) -> int:
    return x.shape[channel_axis(layout)]


def spatial(x: jax.Array, layout: str) -> tuple[int, int]:
    return (x.shape[2], x.shape[3]) if layout == "NCHW" else (x.shape[1], x.shape[2])


def conv(x, w, layout: str, stride: int = 1, padding="SAME", *, groups: int = 1):
    """2-D convolution without bias, as TASO's `conv2d`."""
    strides = (stride, stride) if isinstance(stride, int) else stride
    return lax.conv_general_dilated(
        x, w, strides, padding, feature_group_count=groups,
        dimension_numbers=(layout, KERNEL_LAYOUT[layout], layout))


def conv_relu(x, w, layout: str, stride: int = 1, padding="SAME", *, groups: int = 1):
    return jax.nn.relu(conv(x, w, layout, stride, padding, groups=groups))


def _window(layout: str, k: int, stride: int, padding):
    """reduce_window's per-dimension window, strides and padding for a 2-D pool."""
    if not isinstance(padding, str):      # ((top, bottom), (left, right)): add N and C
        padding = ((0, 0), (0, 0), *padding) if layout == "NCHW" else \
            ((0, 0), *padding, (0, 0))
    if layout == "NCHW":
        return (1, 1, k, k), (1, 1, stride, stride), padding
    return (1, k, k, 1), (1, stride, stride, 1), padding


def max_pool(x, layout: str, k: int, stride: int, padding="SAME"):
    # A Python scalar init: jax recognises the monoid (reduce_window_max) and can
    # differentiate it; an array init would give the generic, non-differentiable form.
    return lax.reduce_window(x, -jnp.inf, lax.max,
                             *_window(layout, k, stride, padding))


def avg_pool(x, layout: str, k: int, stride: int, padding="SAME"):
    """Average pooling that counts padding as zeros (ONNX's count_include_pad=1)."""
    total = lax.reduce_window(x, 0.0, lax.add,
                              *_window(layout, k, stride, padding))
    return total / jnp.array(k * k, x.dtype)


def global_avg_pool(x, layout: str):
    return jnp.mean(x, axis=(2, 3) if layout == "NCHW" else (1, 2))


def concat_channels(xs, layout: str):
    return jnp.concatenate(xs, axis=channel_axis(layout))


def classifier(init: Init, features: int, classes: int) -> dict:
    return {"w": init.dense(features, classes), "b": init.zeros((classes,))}


def dense(x, p: dict):
    return x @ p["w"] + p["b"]


def layer_norm(x, p: dict, eps: float = 1e-6):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + jnp.array(eps, x.dtype)) * p["g"] + p["b"]


class Net:
    """Lets a CNN's architecture be written once, as `body(net, images)`.

    `cnn` runs the body twice: under `jax.eval_shape` with a net that draws each weight
    from the shapes flowing through it, then as the model with a net that hands the
    drawn weights back in the same order.
    """

    def __init__(self, layout: str, init: Init | None = None, params=None):
        self.layout, self.init = layout, init
        self.params = [] if params is None else params
        self._next = iter(self.params)

    def _weight(self, make):
        if self.init is None:
            return next(self._next)
        self.params.append(make(self.init))
        return self.params[-1]

    def conv(self, x, out: int, kernel=1, stride: int = 1, padding="SAME", *,
             groups: int = 1, relu: bool = True, gain: float | None = None):
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        gain = (1.0 if relu else np.sqrt(0.5)) if gain is None else gain   # He / LeCun
        w = self._weight(lambda init: init.conv(out, channels(x, self.layout), kh, kw,
                                                groups=groups, gain=gain))
        y = conv(x, w, self.layout, stride, padding, groups=groups)
        return jax.nn.relu(y) if relu else y

    def classifier(self, x, classes: int):
        p = self._weight(lambda init: classifier(init, x.shape[-1], classes))
        return dense(x, p)


def cnn_builder(body, full: dict, tiny: dict):
    """The `build` of a CNN written as `body(net, images, cfg=...)`, with its full and
    small configurations (each naming its input `image` size)."""
    def build(*, batch: int = 1, layout: str = "NCHW", dtype="float32", small: bool = False,
              seed: int = 0, **overrides):
        cfg = {**(tiny if small else full), **overrides}     # e.g. fewer blocks
        return cnn(functools.partial(body, cfg=cfg), image=cfg["image"], batch=batch,
                   layout=layout, dtype=dtype, seed=seed)
    return build


def cnn(body, *, image: int, batch: int, layout: str, dtype, seed: int):
    """(fn, params, inputs) of the CNN `body(net, images)` on `image`-sized RGB inputs."""
    init = Init(seed, dtype, layout)
    writer = Net(layout, init)
    images = init.image(batch, 3, image)
    jax.eval_shape(lambda x: body(writer, x), images)

    def fn(params, images):
        return body(Net(layout, params=params), images)

    return fn, writer.params, (images,)
