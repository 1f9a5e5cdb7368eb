"""The two rates at which the cost model prices a page faulted in each call (`memory.py`),
each measured once per device and cached: the pages of the weight copies XLA makes for
its convs at the rate XLA pays for them (`calibrate`: many copies, run side by side on
every thread, their faults overlapping), and every other page at the rate of XLA's
threads faulting a fresh mapping in side by side and one unmapping it (`fresh_rate`).

Measured on the AMD EPYC VM (2026-12-03): the copies' rate read 0.96-1.14 us a page;
Inception-v3 with its 3x3 convs as im2col (a 47.5 MiB temp buffer, all of it the
column buffers, 12,840 pages faulted a call) ran 100.3 ms from a heap that kept its
pages and 124.0 ms with them given back before each call (14k pages faulted, nothing
unmapped: 1.7 us a page), and about 130 ms as XLA runs it (mmapped and unmapped each
call: about 2.4 us a page); one thread writing a byte a page of a fresh mapping read
2.5 us a page, and 0.7 more to unmap it. Priced at the copies' rate, the im2col
variants read 0.72-0.79x the original where they ran 0.84-0.97x (20 rounds), and
Inception-v3's Spearman was 0.66-0.70; with those pages at the one-thread rate, 0.95-0.97
against the same measurements (`docs/history.md`). Over later runs that one-thread rate
priced them 0.93-1.04x where they ran 0.67-1.0x; XLA writes them on both threads, which
fault side by side (`fresh_rate`).
"""
from __future__ import annotations

import json
import logging
import mmap
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from hlo_opt import deadline
from hlo_opt.cost import measure
from hlo_opt.cost.cache import Cache
from hlo_opt.cost.memory import MMAP_LINE, PAGE

DEFAULT_FAULT = 0.7e-6 / PAGE   # seconds per byte, for tests: 0.7 us a page on the VM
DEFAULT_FRESH = 2.0e-6 / PAGE   # ... a fresh page, faulted in by two threads, unmapped
FAULT_ENTRY = "xla_fault_per_counted_byte"
FRESH_ENTRY = "threads_fresh_page_per_byte"     # (one thread's, before: measured again)
FRESH_BYTES = 64 << 20      # the mapping `fresh_rate` faults in: 16,384 pages
THREADS = measure.CORES     # XLA's CPU thread pool: one thread a core it may run on

logger = logging.getLogger("hlo_opt")


def calibrate(header: dict, cache_dir=None) -> float:
    """Seconds per byte of faulting in a program's fresh temp buffer, as XLA's CPU
    runtime pays it: the weight copies of NCHW convs (`layouts.py`), timed per byte in a
    program whose temp buffer is under the line and in one past it; the difference, over
    the pages the two faulted (`_copy_seconds`, `_rate`), is the faults. Measured once
    per device, in a process of its own (`_measured_rate`), and read from the cache after.

    A one-thread microbenchmark (a byte written per page of a fresh 64 MiB mapping)
    read 1.75 us a page on the AMD EPYC VM, where XLA pays 0.68 (24 weight copies of
    4 MiB, 96 MiB of temp: 2.83 ms a copy against 2.14 with 6, under the line): its
    threads fault side by side, and a zeroed page is then in the cache for the write.
    At the microbenchmark's rate, ResNet-50's NCHW program (26,278 pages a call) was
    priced 1.25x its run; ResNet-50's 43 ms from freezing its weights in HWIO order
    held 17.5 ms the kernels did not show, 0.67 us a page.

    The rate is the largest part of the price that moves from one calibration to the
    next: three caches on the AMD host held 1.6, 1.8 and 4.2e-10 s a byte, and priced
    Inception-v3's NCHW original 111, 111 and 143 ms (it ran in 128; its search's graph
    at 1.48-1.52x and 2.06-2.08x, where it ran 1.70x). Hence `ROUNDS`, and the faults
    counted (the entry's name changed with them, so a rate cached before is measured
    again)."""
    cache = Cache("memory", header, cache_dir)
    if FAULT_ENTRY not in cache:
        cache.put(FAULT_ENTRY, _measured_rate())
        cache.flush()
    return float(cache.get(FAULT_ENTRY))


def fresh_rate(header: dict, cache_dir=None) -> float:
    """Seconds per byte of a fresh page as the kernel that writes an activation past the
    line pays it each call: its pages faulted in by all of XLA's threads side by side,
    each writing its share of the buffer, then given back by one (the buffer's free):
    the least over `ROUNDS` of `THREADS` threads each writing a byte per page of its share
    of a fresh anonymous mapping, then the mapping unmapped, less the same writes to a
    mapping already in place. Under a second; measured once per device and cached beside
    `calibrate`'s rate. Where the two read alike (an OS that maps pages in ahead), the rate
    measured on the VM (`DEFAULT_FRESH`), with a warning.

    One thread alone read 2.3-2.5 us a page on the AMD EPYC VM (2026-12-04) and two side by
    side 1.35 plus 0.65 to unmap, 2.0 (`/tmp/s87/par.py`); XLA's slices and concatenate
    writing Inception-v3's im2col columns fault on both threads. Priced at one thread's
    rate (3.1 us in the 5992840 run's cache), its im2col variants read 0.93-0.99x the
    original in that run and the six kept runs' measurements ranked them at 0.71-0.93;
    at 0.65 of it (2.0 us, the threads' rate) at 0.91-0.98 (`--rescore` from a copy of
    that run's cache, `docs/history.md`)."""
    cache = Cache("memory", header, cache_dir)
    if FRESH_ENTRY not in cache:
        rate = _threads_rate()
        if rate <= 0:
            logger.warning("hlo_opt: a fresh page cost this device nothing measurable; "
                           "pricing one at %.3g us, as measured on a 2-core VM",
                           DEFAULT_FRESH * PAGE * 1e6)
            rate = DEFAULT_FRESH
        cache.put(FRESH_ENTRY, rate)
        cache.flush()
    return float(cache.get(FRESH_ENTRY))


def shares(nbytes: int, threads: int) -> list[slice]:
    """Each thread's share of `nbytes` of pages: whole pages, one slice a thread, the first
    byte of each page once."""
    pages = nbytes // PAGE
    bounds = [pages * i // threads * PAGE for i in range(threads + 1)]
    return [slice(lo, hi, PAGE) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


def _threads_rate(threads: int | None = None) -> float:
    """`fresh_rate`'s microbenchmark: seconds per byte, fresh less touched, the pages
    written by `threads` (default `THREADS`) side by side (numpy lets go of the GIL for
    the writes) and unmapped by this one."""
    parts = shares(FRESH_BYTES, threads or THREADS)
    touched = mmap.mmap(-1, FRESH_BYTES)
    warm = np.frombuffer(touched, np.uint8)
    warm[::PAGE] = 1
    fresh_s = warm_s = float("inf")
    with ThreadPoolExecutor(len(parts)) as pool:
        def write(view):
            for done in [pool.submit(view.__setitem__, part, 1) for part in parts]:
                done.result()
        write(warm)                 # the threads started
        for _ in range(ROUNDS):
            deadline.check()
            mapping = mmap.mmap(-1, FRESH_BYTES)
            view = np.frombuffer(mapping, np.uint8)
            start = time.perf_counter()
            write(view)
            del view                # the mapping cannot close while a view holds it
            mapping.close()
            fresh_s = min(fresh_s, time.perf_counter() - start)
            start = time.perf_counter()
            write(warm)
            warm_s = min(warm_s, time.perf_counter() - start)
    del warm
    touched.close()
    return (fresh_s - warm_s) / FRESH_BYTES


COPY_BYTES = 4 << 20        # one 1024 x 1024 float32 weight
SMALL_COPIES, BIG_COPIES = 6, 24    # 24 MiB of temp buffer, under the line; 96, past it
ROUNDS = 20                 # of the calibration: in five processes each, the rate read
                            # 1.2-2.8e-10 s a byte with 5 rounds, 2.0-2.6 with 20 (2.4 s
                            # and 6 s once per device; `/tmp/s60/fault4.py`)
CHILD_LIMIT = 300           # seconds the calibration's own process may take (it took 10)


def _measured_rate() -> float:
    """The fault rate from `_copy_seconds`, run first in a process of its own, then, where
    that cannot run or cannot tell the faults apart, in this one; where neither can, the
    rate measured on the VM (`DEFAULT_FAULT`), with a warning.

    A process of its own: in two CI runs, in pytest's process after a thousand tests,
    the program under the line read as slow a copy as the one past it (cached as 0 the
    first time; the second, with its pages counted and 20 rounds, read 0 again), as it
    would were its buffer faulted each call too (no log shows its pages): what malloc
    gives back to the OS depends on what the process did before. A fresh process starts
    where a user's program does, and leaves no 96 MiB of churn and compiled programs in
    this one."""
    places = (("a process of its own", _copy_seconds_apart), ("this process", _copy_seconds))
    for where, measure_in in places:
        try:
            samples = measure_in((SMALL_COPIES, BIG_COPIES))
        except ChildFailed as err:
            logger.info("hlo_opt: the fault rate is measured in this process: %s", err)
            continue
        rate = _rate(samples)
        if rate is not None:
            return rate
        logger.info("hlo_opt: in %s the fault rate could not be told apart: (seconds, pages) "
                    "a copy %s", where, samples)
    logger.warning("hlo_opt: the cost of a page fault could not be measured on this device "
                   "(the program under malloc's mmap line faulted as the one past it); "
                   "pricing faults at %.3g us a page, as measured on a 2-core VM",
                   DEFAULT_FAULT * PAGE * 1e6)
    return DEFAULT_FAULT


def _rate(samples: Sequence[tuple[float, float]]) -> float | None:
    """Seconds per byte from (seconds, pages faulted) a copy under the line and past it:
    the difference over the pages the two faulted apart; None where the two faulted
    alike (less than a quarter of a copy's pages apart) or the one past the line ran no
    slower, as then the difference is not the faults'."""
    (small, small_pages), (big, big_pages) = samples
    pages = big_pages - small_pages
    if pages < COPY_BYTES / PAGE / 4 or big <= small:
        return None
    return (big - small) / (pages * PAGE)


class ChildFailed(Exception):
    """The calibration's own process did not start or did not answer."""


def _copy_seconds_apart(counts: tuple[int, ...]) -> list[tuple[float, float]]:
    """`_copy_seconds` in a fresh Python process (this interpreter, this package, on the
    CPU), waited for a quarter second at a time so that a search's limit
    (`deadline.check`) stops it as it would stop the rounds here."""
    deadline.check()
    if getattr(sys, "frozen", False) or not Path(sys.executable).name.lower().startswith("python"):
        raise ChildFailed(f"this interpreter ({sys.executable!r}) is not one to start again")
    package = str(Path(__file__).resolve().parents[2])     # where this hlo_opt is
    code = (f"import json, sys; p = {package!r}; sys.path[:0] = [] if p in sys.path else [p]; "
            "from hlo_opt.cost import fault_rates; "
            f"print(json.dumps(fault_rates._copy_seconds({tuple(counts)!r})))")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    try:
        child = subprocess.Popen([sys.executable, "-c", code], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as err:
        raise ChildFailed(f"{sys.executable} did not start: {err}") from err
    end = time.monotonic() + CHILD_LIMIT
    try:
        while True:
            try:
                out, err = child.communicate(timeout=0.25)
                break
            except subprocess.TimeoutExpired:
                deadline.check()
                if time.monotonic() > end:
                    raise ChildFailed(f"no answer in {CHILD_LIMIT} s") from None
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    try:
        if child.returncode != 0:
            raise ValueError(f"exit {child.returncode}: {err.strip()[-500:]}")
        return [(float(s), float(p)) for s, p in json.loads(out.strip().splitlines()[-1])]
    except (ValueError, IndexError, TypeError) as bad:
        raise ChildFailed(str(bad)) from None


def taken() -> int | None:
    """Page faults this process has taken (minor: a fresh page zeroed), where the OS
    counts them (`resource` is POSIX only)."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _copy_seconds(counts: tuple[int, ...]) -> list[tuple[float, float]]:
    """(seconds, pages faulted) per weight copy of a program of n NCHW 1x1 convs on a
    1x1 input for each n in `counts` (the weight copies are all its work and all its
    temp buffer): the least sample over `ROUNDS` rounds, one sample of each program in
    turn, with the pages faulted in that sample. Where the OS counts no faults, a
    buffer past the line faults all its pages and one under it none.

    In rounds: timed one program after the other, the first read the process's slow
    start (in one CI run the small program's copies read slower than the big one's,
    and the rate was cached as 0). Counted: the line is not a wall, and the program
    under it faulted 922 to 5,224 of its 6,144 pages a call in one process, none in
    others (malloc's threshold rises as the process frees, `/tmp/s60/faults2.py`);
    one such reading made the difference half the faults' time."""
    calls = []
    for copies in counts:
        fn, args = copies_program(copies)
        calls.append((fn, args, measure.sample_size(fn, args, 2e-3)))
    counted = taken() is not None
    least = measure.least_in_rounds(calls, ROUNDS, counter=taken if counted else None)
    for fn, *_ in calls:
        measure.release(fn)
    out = []
    for copies, sample in zip(counts, least):
        if isinstance(sample, Exception):
            raise sample
        seconds, pages = sample if counted else (
            sample, COPY_BYTES / PAGE * copies if copies * COPY_BYTES > MMAP_LINE else 0.0)
        out.append((seconds / copies, pages / copies))
    return out


def copies_program(copies: int) -> tuple[Callable, list]:
    """(jitted program, its arguments): `copies` NCHW 1x1 convs on a 1x1 input, summed,
    whose work and temp buffer are the copies XLA makes of their 4 MiB weights."""
    def program(x, *weights):
        return sum(lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))
                   for w in weights)
    rng = np.random.default_rng(0)
    x = jnp.ones((1, 1024, 1, 1), jnp.float32)
    weights = [jnp.asarray(rng.standard_normal((1024, 1024, 1, 1), np.float32))
               for _ in range(copies)]
    return jax.jit(program), [x] + weights
