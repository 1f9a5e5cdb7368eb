"""Which kernel operands come from main memory each call (`cost/residency.py`), and kernels
timed so (`measure.rotating`)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hlo_opt import capture
from hlo_opt.cost import measure, model, residency
from hlo_opt.cost.partition import partition
from hlo_opt.frozen import weight_only

W = 512                     # a 512 x 512 float32 weight: 1 MiB, `COLD_MIN`


def _net(x, w1, w2, b):
    return jnp.tanh(x @ w1 + b) @ w2.T


ARGS = (jnp.ones((8, W)), jnp.ones((W, W)), jnp.ones((W, W)), jnp.ones((W,)))


def _cold(llc: int, monkeypatch, frozen=(1, 2, 3)) -> list[tuple[str, list[str]]]:
    """(ops, cold operands) of each kernel run per call, with the last-level cache `llc`."""
    monkeypatch.setattr(residency, "last_level_cache", lambda: llc)
    g = capture.capture(_net, ARGS).graph
    kernels = partition(g)
    fixed = weight_only(g, frozen)
    pre = [all(v.node in fixed for v in k.inputs) for k in kernels]
    names = {n.out(): f"in{i}" for i, n in enumerate(g.inputs)}
    return [("+".join(n.op for n in k.nodes), [names.get(v, v.node.op) for v in c])
            for k, c, p in zip(kernels, residency.cold(g, kernels, pre, fixed), pre) if not p]


def test_parameters_that_fit_the_cache_stay_hot(monkeypatch):
    assert all(not c for _, c in _cold(64 << 20, monkeypatch))


def test_parameters_that_overflow_it_are_read_from_memory(monkeypatch):
    cold = _cold(1 << 20, monkeypatch)
    # the first dot reads the input and w1; the second its weight, transposed once up
    # front (frozen): a parameter of the per-call program too. The bias (2 KiB) and
    # the activations made per call stay hot.
    assert sorted(c for ops, c in cold if ops == "dot_general") == [["in0", "in1"], ["transpose"]]
    assert all(not c for ops, c in cold if ops != "dot_general")
    # not frozen, w2 is read as it is and transposed each call
    cold = _cold(1 << 20, monkeypatch, frozen=())
    assert ("transpose", ["in2"]) in cold


def test_rotating_reads_each_call_from_the_next_copy(monkeypatch):
    monkeypatch.setattr(residency, "last_level_cache", lambda: 4 << 20)
    seen = []
    a, w = jnp.ones((4,)), jnp.arange(float(W * W)).reshape(W, W)   # 1 MiB
    fn, args = measure.rotating(lambda *xs: seen.append(xs), [a, w], cold=(1,))
    for _ in range(10):
        fn(*args)
    pointers = [x[1].unsafe_buffer_pointer() for x in seen]
    assert len(set(pointers)) == 8 == len(set(pointers[:8]))   # 2 x 4 MiB / 1 MiB copies
    assert pointers[8:] == pointers[:2]
    assert all(x[0] is a for x in seen)
    assert all(np.array_equal(x[1], w) for x in seen)
    same, args = measure.rotating(len, [a, w], cold=())
    assert same is len and args[0] is a and args[1] is w


def test_a_kernel_with_cold_operands_is_timed_and_cached_apart(monkeypatch, tmp_path):
    monkeypatch.setattr(residency, "last_level_cache", lambda: 1 << 20)
    g = capture.capture(_net, ARGS).graph
    m = model.Measured(tmp_path)
    priced = m.cost(g, (1, 2, 3))
    cold = [k for k in priced.kernels if k.kernel.cold]
    assert len(cold) == 2 and all(k.seconds > 0 for k in cold)
    keys = [key for key in m.cache.entries if ":cold" in key]
    assert sorted(k.split(":cold")[1] for k in keys) == ["[0, 1]", "[1]"]   # x, w1; w2.T
    # hot, the same kernels are other timings, cached under their programs alone
    monkeypatch.setattr(residency, "last_level_cache", lambda: 64 << 20)
    assert not any(k.kernel.cold for k in model.Measured(tmp_path).cost(g, (1, 2, 3)).kernels)


@pytest.mark.parametrize("llc", [1 << 20, 64 << 20])
def test_rotated_copies_compute_the_same_result(llc, monkeypatch):
    monkeypatch.setattr(residency, "last_level_cache", lambda: llc)
    # every copy the timing cycles through computes what the program does
    g = capture.capture(lambda x, w: x @ w, ARGS[:2]).graph
    fn, args = measure.compiled(g)
    rot, none = measure.rotating(fn, args, (1,))
    want = fn(*args)[0]
    for _ in range(measure.MAX_ROTATION + 1):
        np.testing.assert_array_equal(jax.block_until_ready(rot(*none))[0], want)


def _sysfs(root, sizes: dict[str, str]) -> None:
    """A fake `/sys/devices/system/cpu/cpu0/cache`: an `indexN/size` per entry, and the
    `uevent` file Linux keeps beside them."""
    for index, size in sizes.items():
        (root / index).mkdir()
        (root / index / "size").write_text(size + "\n")
    (root / "uevent").write_text("")


@pytest.mark.parametrize("sizes, expected", [
    ({"index0": "32K", "index1": "64K", "index2": "512K", "index3": "8192K"}, 8 << 20),
    ({"index0": "48K", "index2": "2048K", "index3": "36M"}, 36 << 20),
    ({"index0": "32K", "index3": "garbled"}, 32 << 10),
    ({}, residency.DEFAULT_LLC),
])
def test_the_last_level_cache_is_read_past_the_files_beside_the_index_folders(
        tmp_path, monkeypatch, sizes, expected):
    """The directory's `uevent` file once made every host read the 32 MiB default."""
    _sysfs(tmp_path, sizes)
    monkeypatch.setattr(residency, "SYSFS_CACHE", str(tmp_path))
    residency.last_level_cache.cache_clear()
    try:
        assert residency.last_level_cache() == expected
    finally:
        residency.last_level_cache.cache_clear()
