"""A model's variant built and run in a process of its own, timed a turn at a time.

A user's process runs one program again and again; the fidelity benchmark times two
dozen variants side by side. In one process they share one malloc heap, and a free
chunk that other programs' buffers left in it can hold a temp buffer past malloc's
mmap line (`hlo_opt/cost/memory.py`): that buffer is then not faulted in every call, as
it is in the user's process. Inception-v3's variant with three quarters of its 3x3
convs as im2col (a 47.5 MiB temp buffer, XLA's `memory_analysis` and the model's
estimate alike) faulted all its 12,156 pages every call alone in a fresh process, and
none a call among the 24 variants of a full run (`docs/history.md`). So each variant
lives in a spawned process of its own, idle but for its turns, and the turns are
interleaved across the processes as they were across the programs of one process.

The process rebuilds its variant from the model's name (random weights from code, the
variants drawn from their seed) and checks it is the one asked for by its digest.
"""
from __future__ import annotations

import functools
import multiprocessing
import traceback

import jax

import models
import variants as V
from hlo_opt import capture, frozen
from hlo_opt.cost import fault_rates
from hlo_opt.cost.measure import least_call


def captured(name: str, small: bool) -> tuple:
    """(the model's graph, its argument leaves, the positions of its weights)."""
    fn, params, inputs = models.build(name, small=small)
    graph = capture.capture(fn, (params, *inputs)).graph
    return graph, jax.tree.leaves((params, *inputs)), range(len(jax.tree.leaves(params)))


def program(graph, frozen_inputs, args, options=None):
    """(jitted per-call program, its arguments): weight-only work done once, up front,
    and compiled with `options`, as `hlo_opt.jit` does it."""
    return frozen.Runner(graph, frozen_inputs, options).runtime_args(list(args))


def faults_per_call(fn, args, calls: int = 3) -> float | None:
    """Pages the process faulted in a call of `fn(*args)` (None where the OS counts
    none). The model prices a temp buffer past malloc's line as faulted in every call
    (`memory.py`)."""
    jax.block_until_ready(fn(*args))
    before = fault_rates.taken()
    if before is None:
        return None
    for _ in range(calls):
        jax.block_until_ready(fn(*args))
    return (fault_rates.taken() - before) / calls


class Worker:
    """Variant `index` of `count` of model `name`, in a process of its own: `turn`
    answers the least call of a turn of `seconds` (`measure.least_call`), `faults` the
    pages a call faults. A context manager: leaving it ends the process."""

    def __init__(self, name: str, small: bool, count: int, index: int, digest: str,
                 options: dict | None = None):
        ctx = multiprocessing.get_context("spawn")   # no jax state forked
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, daemon=True, args=(
            child, name, small, count, index, digest, dict(options or {})))
        self._process.start()
        child.close()
        self.label = f"{name} variant {index}"

    def ready(self) -> "Worker":
        """Waits for the variant to be built, compiled and run once."""
        self._answer()
        return self

    def turn(self, seconds: float) -> float:
        self._conn.send(("turn", seconds))
        return self._answer()

    def faults(self) -> float | None:
        self._conn.send(("faults", None))
        return self._answer()

    def _answer(self):
        try:
            ok, value = self._conn.recv()
        except EOFError:
            raise RuntimeError(f"{self.label}: its process ended "
                               f"(exit code {self._process.exitcode})") from None
        if not ok:
            raise RuntimeError(f"{self.label} failed in its process:\n{value}")
        return value

    def close(self) -> None:
        if self._process.is_alive():
            try:
                self._conn.send(("stop", None))
            except (BrokenPipeError, OSError):
                pass
            self._process.join(30)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
        self._conn.close()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _serve(conn, name, small, count, index, digest, options) -> None:
    try:
        graph, args, frozen_inputs = captured(name, small)
        found = V.variants(graph, count, fixed=frozen_inputs)
        label, variant = found[index]
        if variant.digest != digest:
            raise RuntimeError(f"variant {index} ({label}) was drawn otherwise in this "
                               f"process: digest {variant.digest}, asked for {digest}")
        fn, runtime = program(variant, frozen_inputs, args, options)
        del graph, args, found, variant
        call = functools.partial(fn, *runtime)
        jax.block_until_ready(call())
        conn.send((True, None))
    except Exception:   # noqa: BLE001 - told to the parent, which raises it
        conn.send((False, traceback.format_exc()))
        return
    while True:
        what, seconds = conn.recv()
        if what == "stop":
            return
        try:
            conn.send((True, least_call(call, (), seconds) if what == "turn"
                       else faults_per_call(fn, runtime)))
        except Exception:   # noqa: BLE001
            conn.send((False, traceback.format_exc()))
