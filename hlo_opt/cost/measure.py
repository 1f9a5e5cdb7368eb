"""Timing a small program on this device: the measured half of the cost model.

A program (a kernel isolated by `partition.isolate`, or a whole graph) is emitted,
jitted once and run on random inputs of its shapes and dtypes: a warm-up call, then the
least of several samples, each long enough to read (`min_sample` seconds, many calls
if the program is short), every call blocked until ready. The least, not the median:
interference only ever slows a sample down, and on the 2-core machine single samples
of a steady 0.7 ms dot read up to 1.1 ms. The cost of an empty call — jax's dispatch,
the least of this process's readings of it (`dispatch_overhead`) — is subtracted, with
a floor of `EPSILON` (`net`).
"""
from __future__ import annotations

import concurrent.futures
import contextvars
import functools
import itertools
import math
import os
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from hlo_opt import compile_options, deadline, emit
from hlo_opt.cost import residency
from hlo_opt.ir import Graph, Node, TensorType, copy_nodes
from hlo_opt.params import Params

EPSILON = 1e-7
METHOD = 9         # bump when timing changes: the cache keeps no entry timed another way
SHORT = 1e-3       # programs faster than this are timed as COPIES instances in one call
COPIES = 8
MAX_ROTATION = 32  # copies of a program's cold inputs at most (`rotating`)
REPLICA_BYTES = 4 << 20    # ... but no more copies than fit this many bytes together
FIRST_WAKE = 0.3   # `warm_up`: seconds of running a reference in a process's first timing,
WAKE_LIMIT = 0.25  # ... and at most this long in later ones, until it runs this close
WAKE_WITHIN = 1.25 # to its best speed (hot, the median call reads 1.14x the least)
WAKE_CALLS = 10    # as the median of this many calls
REREAD = 5.0       # `net`: seconds at least between two readings of the empty call
SPAN = 0.05        # `least_in_rounds`: seconds a batch's samples span at least, in
MAX_ROUNDS = 4     # ... at most this many times its rounds
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
    else os.cpu_count() or 1        # the cores this process may run on
COMPILERS = min(4, CORES)           # kernels compiled at once (`_compile_all`)


def random_args(types: Sequence[TensorType], seed: int = 0) -> list[jax.Array]:
    """Arrays of the given types: normal floats, small non-negative integers (valid as
    indices of any non-empty axis after XLA's clamping), random booleans."""
    rng = np.random.default_rng(seed)
    out = []
    for t in types:
        dtype = np.dtype(t.dtype)
        if dtype.kind == "b":
            a = rng.random(t.shape) < 0.5
        elif dtype.kind in "iu":
            a = rng.integers(0, 4, t.shape)
        elif dtype.kind == "c":
            a = rng.standard_normal(t.shape) + 1j * rng.standard_normal(t.shape)
        else:
            a = rng.standard_normal(t.shape, np.float32)
        out.append(jnp.asarray(a, dtype))
    return out


def per_call(fn: Callable, args, number: int) -> float:
    """Mean seconds of `number` calls of `fn(*args)`, each blocked until ready."""
    start = time.perf_counter()
    for _ in range(number):
        jax.block_until_ready(fn(*args))
    return (time.perf_counter() - start) / number


def least_call(fn: Callable, args, seconds: float, most: int = 0) -> float:
    """The least seconds of one call of `fn(*args)` among calls made one after another
    for `seconds` (and no more than `most` calls, if given), each timed alone and
    blocked until ready, the first left out (a program switched to runs slow for its
    first calls: `pairing.ratio`); two calls at least. Interference only ever slows a
    call down, so the least reads the program's own time."""
    times = []
    end = time.perf_counter() + seconds
    while len(times) < 2 or (time.perf_counter() < end and len(times) != most):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return min(times[1:])


def sample_size(fn: Callable, args, min_sample: float) -> int:
    """Calls of `fn(*args)` that make a sample of at least `min_sample` seconds, read off
    its first calls (the first of all compiles it, or warms it up)."""
    jax.block_until_ready(fn(*args))                 # compile
    once = per_call(fn, args, 1)                     # warm up, and choose the sample size
    if once < min_sample:       # (a long call is a sample of its own however long it is)
        once = min(once, *(per_call(fn, args, 1) for _ in range(2)))
    return max(1, int(min_sample / max(once, 1e-9)))


def time_callable(fn: Callable, args, *, repeats: int = 5, min_sample: float = 2e-3) -> float:
    """Least seconds per call of `fn(*args)` over `repeats` samples (compiled or not)."""
    number = sample_size(fn, args, min_sample)
    return min(per_call(fn, args, number) for _ in range(repeats))


def least_in_rounds(calls: Sequence[tuple[Callable, tuple, int] | Exception],
                    repeats: int, counter: Callable[[], float] | None = None
                    ) -> list:
    """Least seconds per call of each `(fn, args, number)` over `repeats` rounds, a
    round being one sample of each in turn (after an untimed call: a program switched
    to runs its first call slow); an exception stays one, or is the one a call raised.
    With `counter` (a running count, such as the page faults the process has taken),
    each result is instead (least seconds, the count's rise per call in that sample).

    Rounds, not each program's samples back to back: this machine's speed moves in
    spells longer than one program's five samples (10-15 ms), so samples back to back
    were all slow together or all fast. Priced in three fresh caches in one process,
    one Inception graph's largest kernels read 98/142/112 us and 82/50/53 us; a 98 us
    kernel compiled once and timed twelve times read 94-152 us (`/tmp/s29/noise*.py`,
    2-core AMD VM). Taken in rounds across a batch, a program's samples fall in
    different spells, and the least of them is the machine at its speed. A batch of a
    few (a search's new kernels) takes more rounds, until they span `SPAN` seconds.

    Each sample starts with `deadline.check`: a batch compiled before a search's limit
    still had its rounds to run, 0.4 s each for 28 of NASNet-A's kernels, and cold
    NASNet-A searches with a 5 s limit ended 3-18% late in 8 runs, 1-2% in 3 after it
    (`/tmp/s62/dl.py`, AMD host)."""
    best: list = [c if isinstance(c, Exception) else (float("inf"), 0.0) for c in calls]
    end = time.perf_counter() + SPAN
    for r in itertools.count():
        if r >= repeats and (time.perf_counter() >= end or r >= MAX_ROUNDS * repeats):
            break
        warm_up()
        for i, c in enumerate(calls):
            if isinstance(best[i], Exception):
                continue
            deadline.check()
            try:
                best[i] = min(best[i], _sample(*c, counter=counter or _no_count))
            except Exception as err:  # noqa: BLE001 - the caller prices it another way
                best[i] = err
    return [b if isinstance(b, Exception) or counter else b[0] for b in best]


def _sample(fn: Callable, args, number: int, counter: Callable[[], float]
            ) -> tuple[float, float]:
    """(seconds per call, `counter`'s rise per call) of `number` calls, after one
    untimed call."""
    jax.block_until_ready(fn(*args))
    before = counter()
    seconds = per_call(fn, args, number)
    return seconds, (counter() - before) / number


def _no_count() -> float:
    return 0.0


_best_reference: float | None = None   # least seconds of `_reference` seen by this process
_loaded: float | None = None    # the speed a wake that ran to its limit reached (`warm_up`)


@functools.cache
def _reference() -> tuple[Callable, tuple]:
    a = jnp.ones((384, 384), jnp.float32)
    return jax.jit(lambda a: a @ a), (a,)


def warm_up(limit: float = WAKE_LIMIT) -> None:
    """Run a reference program until it runs at the best speed this process has seen
    it run (the median of its last `WAKE_CALLS` calls within `WAKE_WITHIN` of its
    least), for at most `limit` seconds; in a process's first timing, `FIRST_WAKE`
    seconds, to learn that speed (the first calls of a process are the slowest of all:
    thread pools starting, memory being mapped).

    A machine that has been idle, or had one core compiling while the other slept,
    runs slow for a while: on the 2-core VM the reference ran 2.3x its best for the
    first 30-90 ms after a second idle. A 64x1024 @ 1024x1024 dot (0.57 ms) timed after
    a second idle read above 0.7 ms in 6 of 8 timings (0 of 8 after 0.2 s of running
    the reference); after five compiles, 4 of 8 (1 of 8 after the fixed 0.02 s this
    replaced, 0 of 8 after 0.1 s). Kernels timed so at one moment and at another were
    priced at two speeds of one machine: BERT's three Q/K/V dots summed 2-10% dearer
    than their merged one, which runs no faster. With this wake: 1 of 8, 0 of 8 and 0
    of 8 hot, the wake taking 55, 35 and 4 ms (medians).

    A wake that runs to its limit met a machine slower than its best, not one waking:
    another program is running. Its best median is then the speed the machine has, and
    later wakes stop within `WAKE_WITHIN` of it too, until one is back at the best
    speed. Waking to the best alone, beside two CPU burners, pricing six small
    Inception-v3 variants from an empty cache took 5.8 s of 38-43 s in 49 wakes, 13 of
    them to the limit; so, 2.4-2.6 s (0.8-1.1 s at rest, `docs/history.md`)."""
    global _best_reference, _loaded
    fn, args = _reference()
    jax.block_until_ready(fn(*args))
    first = _best_reference is None
    end = time.perf_counter() + (FIRST_WAKE if first else limit)
    recent: list[float] = []
    reached = math.inf          # the least median of `WAKE_CALLS` calls in this wake
    while time.perf_counter() < end:
        seconds = per_call(fn, args, 1)
        _best_reference = min(seconds, _best_reference or seconds)
        recent = recent[1 - WAKE_CALLS:] + [seconds]
        if first or len(recent) < WAKE_CALLS:
            continue
        reached = min(reached, float(np.median(recent)))
        if reached <= _best_reference * WAKE_WITHIN:
            _loaded = None
            return
        if _loaded is not None and reached <= _loaded * WAKE_WITHIN:
            return
    if not first and math.isfinite(reached):
        _loaded = reached


_overheads: list[float] = []     # `dispatch_overhead`'s readings, and when it was last
_overhead_read_at = -float("inf")  # read `again` (`time.perf_counter()`)


def dispatch_overhead(*, again: bool = False) -> float:
    """Seconds of an (almost) empty jitted call: dispatch and launch, no work. The least
    of this process's readings: one, read at the first use, and one more each time it
    is read `again` (`net`)."""
    global _overhead_read_at
    if again or not _overheads:
        warm_up()
        tiny = jax.jit(lambda x: x + 1)
        x = jnp.zeros((), jnp.float32)
        _overheads.append(min(time_callable(tiny, (x,), repeats=7) for _ in range(3)))
        if again:
            _overhead_read_at = time.perf_counter()
    return min(_overheads)


def net(seconds: float, copies: int = 1) -> float:
    """Seconds of one of `copies` programs timed together in one call, less the empty
    call's (`dispatch_overhead`), at least `EPSILON`.

    A call no longer than an empty one says the empty one was read slow, the machine
    busy when it was: read once a process, the reading then stood for the whole
    process, every short program was priced `EPSILON`, and the four variants of small
    SRU were all priced alike in one CI run (a reading of 40 us, against 5.8 us read at
    rest, priced three of the four at `EPSILON` on the Zen 4 host). The empty call is
    then read again, the second time at once and then no more often than every `REREAD`
    seconds, and the least reading kept."""
    _check_overhead(seconds)
    return max((seconds - dispatch_overhead()) / copies, EPSILON)


def _check_overhead(seconds: float) -> None:
    """Reads the empty call again if a call of `seconds` says it was read slow (`net`)."""
    if seconds <= dispatch_overhead() and \
            time.perf_counter() - _overhead_read_at >= REREAD:
        dispatch_overhead(again=True)


def replicate(graph: Graph, copies: int) -> Graph:
    """`copies` independent instances of `graph` in one program, each on inputs of its
    own (so XLA can neither share nor skip work)."""
    inputs, outputs = [], []
    for _ in range(copies):
        env = {}
        for node in graph.inputs:
            inputs.append(Node("input", (), Params(index=len(inputs)), node.types))
            env[node.out()] = inputs[-1].out()
        copy_nodes([n for n in graph.nodes if n.op != "input"], env)
        outputs += [env[v] for v in graph.outputs]
    return Graph(inputs, outputs)


def replicas(graph: Graph) -> int:
    """How many copies of a short `graph` to time together (1: time it alone)."""
    nbytes = sum(n.types[0].nbytes for n in graph.inputs) + sum(v.type.nbytes
                                                                 for v in graph.outputs)
    return max(1, min(COPIES, REPLICA_BYTES // max(nbytes, 1)))


def _time_program(graph: Graph, repeats: int, min_sample: float, seed: int,
                  options=None) -> float:
    fn, args = compiled(graph, seed, options)
    try:
        deadline.check()        # a compile can cross a search's limit: no timing then
        return time_callable(fn, args, repeats=repeats, min_sample=min_sample)
    finally:
        release(fn)


def time_graph(graph: Graph, *, repeats: int = 5, min_sample: float = 2e-3,
               seed: int = 0, options=None, cold: Sequence[int] = ()) -> float:
    """Seconds one run of `graph` takes inside a larger program on this device
    (`time_graphs` of one graph)."""
    seconds = time_graphs([graph], repeats=repeats, min_sample=min_sample, seed=seed,
                          options=options, cold=[cold])[0]
    if isinstance(seconds, Exception):
        raise seconds
    return seconds


def time_graphs(graphs: Sequence[Graph], *, repeats: int = 5, min_sample: float = 2e-3,
                seed: int = 0, options=None, cold: Sequence[Sequence[int]] | None = None
                ) -> list[float | Exception]:
    """Seconds one run of each graph takes inside a larger program on this device, or
    the exception that stopped it compiling or running; compiled with `options`
    (`compile_options`: XLA's defaults when None). `cold[i]`: the inputs of graph `i`
    the program reads from main memory (`residency.py`); each call reads them from the
    next of enough copies to overflow the last-level cache.

    All are compiled first, then timed together (`least_in_rounds`). A program timed
    right after its compile reads slow: on the 2-core VM, a 0.6 ms dot timed after each
    compile read above 1.2x its least in 31% of timings (0.81 ms at the 90th
    percentile); timed back to back after compiling ten, in 2%. The compiler runs on
    one core while the other's worker threads sleep, and the first calls after it wake
    them.

    A call's fixed cost (dispatch, argument handling, output allocation) is not the
    kernel's: for short programs, `COPIES` independent instances are timed in one call
    and the fixed cost is shared out, as it is in a whole program. (XLA CPU also runs
    independent short kernels side by side, which this captures in part: a 4-channel
    3x3 conv read 0.24 ms alone and 0.15 ms a copy among 8 on the 2-core machine.)
    Copies stop at `REPLICA_BYTES` of operands together: copies that overflow the caches
    evict each other and time memory traffic the program does not have (a 64x1024 @ 1024x1024 dot read
    0.70-0.77 ms alone, 0.87-0.95 ms a copy among 8 with 36 MiB of operands, and 0.78 ms
    each as the three dots of one program, on that machine: 2 MiB L2 per core, 32 MiB
    L3). With 4 MiB, the cost model called the sign of every case of cost_fidelity.py."""
    warm_up()
    cold = list(cold or [()] * len(graphs))
    alone = _time_batch(graphs, cold, repeats, min_sample, seed, options)
    short = [i for i, s in enumerate(alone) if not isinstance(s, Exception)
             and s < SHORT and replicas(graphs[i]) > 1]
    many = _time_batch([replicate(graphs[i], replicas(graphs[i])) for i in short],
                       [[j + k * len(graphs[i].inputs) for k in range(replicas(graphs[i]))
                         for j in cold[i]] for i in short],
                       repeats, min_sample, seed, options)
    # the empty call read again before any is netted, not between two of them
    _check_overhead(min((s for s in alone + many if not isinstance(s, Exception)),
                        default=float("inf")))
    out = [s if isinstance(s, Exception) else net(s) for s in alone]
    for i, s in zip(short, many):
        if not isinstance(s, Exception):
            out[i] = net(s, replicas(graphs[i]))
    return out


def _time_batch(graphs: Sequence[Graph], cold: Sequence[Sequence[int]], repeats: int,
                min_sample: float, seed: int, options=None) -> list[float | Exception]:
    """Compile and run each once, then time them all (`least_in_rounds`), each with its
    `cold` inputs in turn from copies (`rotating`)."""
    ready: list = []
    try:
        _compile_all(graphs, seed, options, ready)
        warm_up()         # wake the workers the compiles let sleep
        calls: list = []
        for r, inputs in zip(ready, cold):
            try:
                if isinstance(r, Exception):
                    calls.append(r)
                else:
                    fn, args = rotating(*r, inputs)
                    calls.append((fn, args, sample_size(fn, args, min_sample)))
            except Exception as err:  # noqa: BLE001
                calls.append(err)
        return least_in_rounds(calls, repeats)
    finally:
        _release_all(ready)


def _compile_all(graphs: Sequence[Graph], seed: int, options, ready: list) -> None:
    """Appends to `ready` each graph compiled (`compiled`) and run once, or the
    exception that stopped it, in order; `COMPILERS` compile at once. XLA's compile of
    a kernel runs on one core and lets go of the GIL: one after another, NASNet-A's
    cold first call spent 11.9 s in 154 kernel compiles and left the other core idle.
    Each compile begins with `deadline.check`, in the caller's context: past a search's
    limit, the compiles not begun are not begun, none is run, and `OutOfTime` is raised
    once the ones under way have ended (and are in `ready`, to be released)."""
    def build(graph: Graph) -> tuple[Callable, list]:
        deadline.check()        # past a search's limit: stop before the next compile
        fn, args = compiled(graph, seed, options)
        fn.lower(*args).compile()       # into the jitted function's own cache
        return fn, args

    with concurrent.futures.ThreadPoolExecutor(COMPILERS) as pool:
        futures = [pool.submit(contextvars.copy_context().run, build, g) for g in graphs]
        try:
            for future in futures:
                deadline.check()    # past it, the compiles done are not run either
                try:
                    fn, args = future.result()
                    jax.block_until_ready(fn(*args))
                    ready.append((fn, args))
                except deadline.OutOfTime:
                    raise
                except Exception as err:  # noqa: BLE001 - the caller prices it another way
                    ready.append(err)
        except BaseException:
            for future in futures:
                future.cancel()
            concurrent.futures.wait(futures)
            ready.extend(f.result() for f in futures[len(ready):]
                         if not f.cancelled() and f.exception() is None)
            raise


def _release_all(ready: list) -> None:
    for r in ready:
        if not isinstance(r, Exception):
            release(r[0])


def rotating(fn: Callable, args: list, cold: Sequence[int]) -> tuple[Callable, tuple]:
    """(callable, arguments) that call `fn` with the `cold` arguments taken in turn from
    copies that together overflow the last-level cache twice over, so each call reads
    them from main memory; `fn` and `args` as they are when there are none."""
    nbytes = sum(args[i].nbytes for i in cold)
    if not nbytes:
        return fn, tuple(args)
    copies = min(MAX_ROTATION, -(-2 * residency.last_level_cache() // nbytes))
    sets = [args] + [[jnp.array(a, copy=True) if i in cold else a for i, a in enumerate(args)]
                     for _ in range(copies - 1)]
    turn = itertools.cycle(sets)
    return (lambda: fn(*next(turn))), ()


def compiled(graph: Graph, seed: int = 0, options=None) -> tuple[Callable, list]:
    """`graph` jitted (with XLA compile `options`), and random arguments for it."""
    return (compile_options.jit(emit.to_callable(graph), options),
            random_args([n.types[0] for n in graph.inputs], seed))


def release(fn: Callable) -> None:
    """Drop a timed program's executable from jax's caches. A jitted function's
    executable outlives the function in jax's global cache, and each of XLA CPU's holds
    memory mappings: a NasRNN search timing candidates whole went from 516 to 7,452
    mappings in 15 s, and search_bench's runs crashed at the kernel's limit of 65,530
    ("LLVM compilation error: Cannot allocate memory", then a segfault)."""
    fn.clear_cache()


def time_whole(graph: Graph, *, repeats: int = 5, min_sample: float = 10e-3,
               seed: int = 0, options=None) -> float:
    """Seconds of one call of `graph` as a program of its own, the empty call's cost
    removed (so that it compares with a sum of kernels)."""
    warm_up()
    return net(_time_program(graph, repeats, min_sample, seed, options))
