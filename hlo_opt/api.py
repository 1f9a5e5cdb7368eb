"""`hlo_opt.jit` and `hlo_opt.optimize`: the public entry points.

An `Optimized` function is one `jax.jit` over a body that, when jax traces it for a new
input signature, captures the user's function, optimises its graph and evaluates the
result on the tracers.  jax therefore does the dispatch, the signature cache (shapes,
dtypes, pytree structure, static values, weak types), donation, `.lower()` and every
transformation (grad, vmap, an outer jit) exactly as for `jax.jit(fun)`; hlo_opt keeps
one `Report` per signature. With `frozen_argnums`, a call on concrete arrays goes instead
to the signature's `frozen.Runner`: the weight-only work once per frozen value, then the
per-call program (`pipeline.py` says how a signature is optimised); a call like the
last one skips the full signature (`frozen.Repeat`).

Errors in the user's function are the user's and propagate unchanged.  Any failure of
ours logs a warning naming the function and runs the original program instead.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore
from jax.tree_util import tree_flatten, tree_unflatten

from hlo_opt import capture, emit, pipeline
from hlo_opt.frozen import AVAL, Repeat, Runner, traced
from hlo_opt.ir import Graph
from hlo_opt.options import OPTION_NAMES, Options, disabled
from hlo_opt.report import Report

logger = logging.getLogger("hlo_opt")


def _avals(leaves) -> tuple:
    """The abstract values of the argument leaves, the signature's key. Jax arrays and
    tracers carry theirs (read in C: 0.8 us for SRU's 14 leaves, where reading shape,
    dtype and weak type one by one took 7.5 us, and jax.typeof 3 us a leaf); anything
    else (NumPy arrays, Python scalars) is typed by jax, which gives equal avals for
    equal types, so an entry is found whichever kind of array the caller passes."""
    try:
        return tuple(map(AVAL, leaves))
    except AttributeError:
        return tuple(map(jax.typeof, leaves))


def _concrete(leaf) -> bool:
    """An array value (not a tracer, not a shape-only stand-in)."""
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, complex)) and \
        not isinstance(leaf, jax.core.Tracer)


def _as_tuple(value, kind) -> tuple:
    if value is None:
        return ()
    return (value,) if isinstance(value, kind) else tuple(value)


def resolve_static(fun: Callable, argnums, argnames) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Static positions and names, each completed from the other through `fun`'s
    signature the way `jax.jit` does."""
    nums, names = _as_tuple(argnums, int), _as_tuple(argnames, str)
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        return nums, names
    by_pos = [p.name for p in params
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    named = {p.name: i for i, p in enumerate(params) if p.kind == p.POSITIONAL_OR_KEYWORD}
    if argnums is None:
        nums = tuple(named[n] for n in names if n in named)
    if argnames is None:
        names = tuple(by_pos[i] for i in nums
                      if -len(by_pos) <= i < len(by_pos) and by_pos[i] in named)
    return nums, names


class _Unseen(Exception):
    """Raised in a trace of `_outer` that meets a signature, optimised there, whose
    program does not run inline (`_inline`), when the caller asked for those only."""


@dataclasses.dataclass
class _Entry:
    """What one input signature runs: the optimised graph, or the original jaxpr."""

    report: Report
    out_tree: Any
    graph: Graph | None = None
    original: jcore.ClosedJaxpr | None = None
    runner: Runner | None = None     # weight-only work once per frozen value (called eagerly)
    repeat: Repeat | None = None     # its short check, made at its first call through runner

    def run(self, leaves: Sequence[Any]) -> list[Any]:
        if self.graph is not None:
            return emit.run(self.graph, leaves)
        return jcore.jaxpr_as_fun(self.original)(*leaves)


def _inline(entry: _Entry, users_options: dict) -> bool:
    """Whether the signature's per-call program is the whole graph's, run by `_outer`:
    nothing precomputed from its frozen arguments, no compile options but the user's."""
    return entry.runner is None or not (entry.runner.precomputes or
                                        entry.runner.options != users_options)


def _fallback_report(reason: str, original: Graph | None = None) -> Report:
    return Report.unsearched(original, fell_back=True, reason=reason)


class Optimized:
    """A function optimised by hlo_opt; call it like the `jax.jit` of the original."""

    def __init__(self, fun: Callable, options: Options, *, static_argnums=None,
                 static_argnames=None, donate_argnums=None, frozen_argnums=None,
                 jit_kwargs: dict[str, Any] | None = None):
        if not callable(fun):
            raise TypeError(f"hlo_opt.jit: expected a function, got {fun!r}")
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._name = getattr(fun, "__qualname__", None) or repr(fun)
        self.options = options.validate(self._name)
        self._static_nums, self._static_names = resolve_static(
            fun, static_argnums, static_argnames)
        self.frozen_argnums = _as_tuple(frozen_argnums, int)
        both = set(self.frozen_argnums) & set(self._static_nums)
        if both:
            raise ValueError(f"hlo_opt.jit({self._name}): argument(s) {sorted(both)} cannot be "
                             "both static and frozen; frozen arguments are arrays")
        self._donating = donate_argnums is not None or "donate_argnames" in (jit_kwargs or {})
        self._xla = dict((jit_kwargs or {}).get("compiler_options") or {})   # the user's
        jit_args = dict(jit_kwargs or {}, static_argnums=static_argnums,
                        static_argnames=static_argnames, donate_argnums=donate_argnums)
        self._plain = jax.jit(fun, **jit_args)
        # Read once, here: an environment lookup on every call costs microseconds next to
        # jax's C++ dispatch (measured 3-4 us per call on the 2-core CPU machine).
        self._disabled = disabled()
        @functools.wraps(fun)   # jax reads the user's signature for static/donated names
        def body(*args, **kwargs):
            return self._body(*args, **kwargs)
        self._outer = jax.jit(body, **jit_args)
        self._entries: dict[Any, _Entry] = {}
        self._inline = False         # every signature's program is the whole graph's
        self._seen_only = threading.local()     # _body may not run it in _outer (__call__)
        self._last: Repeat | None = None   # the signature the last frozen call ran

    # -- calling -----------------------------------------------------------------
    def _jitted(self):
        return self._plain if self._disabled else self._outer

    def __call__(self, *args, **kwargs):
        if self._disabled:
            return self._plain(*args, **kwargs)
        if not self.frozen_argnums or self._donating:
            return self._outer(*args, **kwargs)
        if self._inline:
            # No signature optimised so far precomputes anything from its frozen
            # arguments or compiles with options of its own (`compile_options`): its
            # per-call program is the whole graph's jax.jit, which jax's own
            # dispatch runs without the 50-100 us of Python below (2% of SRU's 4 ms).
            # A signature met for the first time whose program does precompute stops
            # the trace and runs below.
            self._seen_only.on = True
            try:
                return self._outer(*args, **kwargs)
            except _Unseen:
                pass
            finally:
                self._seen_only.on = False
        # Frozen arguments: the weight-only part runs once per distinct frozen value,
        # outside the per-call program, which needs concrete arrays. Under a trace
        # (grad, vmap, an outer jit) everything is computed inline instead.
        last = self._last
        if last is not None:
            try:
                leaves, in_tree = tree_flatten((args, kwargs))
                outs = last(leaves) if in_tree == last.in_tree else None
            except Exception:  # noqa: BLE001 - the full path below warns and falls back
                outs = None
            if outs is not None:
                return tree_unflatten(last.out_tree, outs)
        try:
            leaves, _, key = self._signature(args, kwargs)
            entry = self._entries.get(key)
        except Exception:  # noqa: BLE001 - bad arguments: jax.jit says what is wrong
            return self._outer(*args, **kwargs)
        if traced(leaves):
            return self._outer(*args, **kwargs)
        if entry is None:
            entry = self._store(key, self._optimize(args, kwargs))
        if entry.runner is None:
            return self._outer(*args, **kwargs)
        try:
            outs = entry.runner(leaves)
        except Exception as err:  # noqa: BLE001 - ours, not the user's: fall back
            self._warn(err)
            self._store(key, _Entry(_fallback_report(f"{type(err).__name__}: {err}"),
                                    entry.out_tree, original=entry.original))
            return self._outer(*args, **kwargs)
        if not (self._static_nums or self._static_names):   # else the trees differ
            entry.repeat = entry.repeat or Repeat.of(key[0], key[1], entry.out_tree,
                                                     entry.runner)
            self._last = entry.repeat
        return tree_unflatten(entry.out_tree, outs)

    def _callers(self, args, kwargs, key):
        """The arguments to optimise signature `key` on, as `_outer` traces it: the
        caller's own arrays where this trace was begun by a call (`__call__`, found up
        the stack) with concrete arrays of that signature, else the trace's tracers.
        Optimised on tracers, verify saw random inputs alone, whose integers lie in
        [0, 4) and never wrap. Found here, once per signature, not handed down on
        every call: a thread-local for them cost each call 1.9 us, where jax's own
        dispatch takes 14 (`docs/history.md`)."""
        frame = sys._getframe(1)
        while frame is not None and not (frame.f_code is _CALL and
                                         frame.f_locals.get("self") is self):
            frame = frame.f_back
        if frame is not None:
            try:
                caller = frame.f_locals["args"], frame.f_locals["kwargs"]
                leaves, _, own = self._signature(*caller)
            except Exception:  # noqa: BLE001 - the trace's own arguments still serve
                return args, kwargs
            if own == key and not traced(leaves):
                return caller
        return args, kwargs

    def lower(self, *args, **kwargs) -> jax.stages.Lowered:
        """`jax.stages.Lowered` of the optimised program."""
        return self._jitted().lower(*args, **kwargs)

    def trace(self, *args, **kwargs):
        return self._jitted().trace(*args, **kwargs)

    def eval_shape(self, *args, **kwargs):
        return self._jitted().eval_shape(*args, **kwargs)

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    def clear_cache(self) -> None:
        self._entries.clear()
        self._inline = False
        self._last = None
        self._plain.clear_cache()
        self._outer.clear_cache()

    @property
    def weight_computations(self) -> int:
        """How many times the weight-only part of any signature has been computed (once
        per distinct frozen value; 0 when nothing ran with concrete frozen arguments)."""
        return sum(e.runner.computed for e in self._entries.values() if e.runner)

    def explain(self, *args, **kwargs) -> Report:
        """The `Report` for this input signature (optimising it if not done yet)."""
        if self._disabled:
            return _fallback_report("HLO_OPT_DISABLE is set: plain jax.jit")
        leaves, _, key = self._signature(args, kwargs)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._store(key, self._optimize(args, kwargs))
        return entry.report

    # -- optimising ----------------------------------------------------------------
    def _signature(self, args, kwargs):
        leaves, in_tree, _ = capture.split_static(args, kwargs, self._static_nums,
                                                  self._static_names)
        nargs = len(args)
        statics = tuple((i % nargs, args[i]) for i in self._static_nums if -nargs <= i < nargs)
        statics += tuple(sorted((k, v) for k, v in kwargs.items() if k in self._static_names))
        avals = _avals(leaves)
        return leaves, in_tree, (in_tree, avals, statics)

    def _body(self, *args, **kwargs):
        """Traced by jax once per signature: run the optimised graph on the tracers."""
        try:
            leaves, _, key = self._signature(args, kwargs)
            entry = self._entries.get(key)
        except Exception as err:  # noqa: BLE001 - ours, not the user's: fall back
            self._warn(err)
            return self._fun(*args, **kwargs)
        if entry is None:
            entry = self._optimize(*self._callers(args, kwargs, key))
            if not capture.closes_over_tracers(entry.original):   # valid in this trace only
                self._store(key, entry)
            if getattr(self._seen_only, "on", False) and not _inline(entry, self._xla):
                # Its weights are computed once, outside `_outer`: `__call__` runs it.
                # Not raised before optimising: jax's C++ dispatch never takes over a
                # signature whose first trace raised (each call then 0.27 ms through
                # Python, not 0.02), and a signature that runs inline runs in `_outer`.
                raise _Unseen
        try:
            outs = entry.run(leaves)
        except Exception as err:  # noqa: BLE001
            self._warn(err)
            outs = self._store(key, _Entry(_fallback_report(f"{type(err).__name__}: {err}"),
                                           entry.out_tree, original=entry.original)).run(leaves)
        return tree_unflatten(entry.out_tree, outs)

    def _store(self, key, entry: _Entry) -> _Entry:
        self._entries[key] = entry
        self._last = None
        self._inline = all(_inline(entry, self._xla) for entry in self._entries.values())
        return entry

    def _optimize(self, args, kwargs) -> _Entry:
        # The user's function runs here; its errors are the user's and propagate.
        closed, _, out_tree = capture.trace(self._fun, args, kwargs,
                                            static_argnums=self._static_nums,
                                            static_argnames=self._static_names)
        original = None
        try:
            _require_concrete_shapes(closed)
            original = capture.from_jaxpr(closed).check()
            frozen = self._frozen_leaves(args)
            leaves = capture.split_static(args, kwargs, self._static_nums,
                                          self._static_names)[0]
            example = list(leaves) if len(leaves) == len(original.inputs) and \
                all(map(_concrete, leaves)) else None
            with jax.ensure_compile_time_eval():    # timing must run, not be traced
                outcome = pipeline.optimize(original, closed, frozen, self.options, self._name,
                                            example, self._xla)
            _check_emission(outcome.graph, closed)
            runner = None
            if frozen and not outcome.report.fell_back and \
                    not capture.closes_over_tracers(closed):
                runner = outcome.runner or Runner(outcome.graph, frozen,
                                                  outcome.report.compiler_options)
            return _Entry(outcome.report, out_tree, graph=outcome.graph, original=closed,
                          runner=runner)
        except Exception as err:  # noqa: BLE001 - ours, not the user's: fall back
            self._warn(err)
            return _Entry(_fallback_report(f"{type(err).__name__}: {err}", original),
                          out_tree, original=closed)

    def _frozen_leaves(self, args) -> tuple[int, ...]:
        """Positions, among the dynamic leaves, of the leaves of the frozen arguments."""
        n = len(args)
        static = {i % n for i in self._static_nums if -n <= i < n}
        frozen = {i % n for i in self.frozen_argnums if -n <= i < n}
        out, pos = [], 0
        for i, arg in enumerate(args):
            if i in static:
                continue
            count = len(jax.tree.leaves(arg))
            if i in frozen:
                out.extend(range(pos, pos + count))
            pos += count
        return tuple(out)

    def _warn(self, err: Exception) -> None:
        logger.warning("hlo_opt: could not optimise %s (%s: %s); running the original "
                       "under jax.jit", self._name, type(err).__name__, _first_line(err))

    def __repr__(self) -> str:
        return f"<hlo_opt.Optimized {self._name}>"


WARNED_CHARS = 200     # of an error's first line in the fall-back warning (the report has it all)


def _first_line(err: Exception) -> str:
    """The error's first line, cut at `WARNED_CHARS`: jax's shape-polymorphism errors
    run to seven lines and a link, and the warning is one line."""
    line = (str(err).strip().splitlines() or [""])[0]
    return line if len(line) <= WARNED_CHARS else line[:WARNED_CHARS - 3] + "..."


def _require_concrete_shapes(closed: jcore.ClosedJaxpr) -> None:
    """Symbolic dimensions (`jax.export` with shape polymorphism) cannot be searched:
    the cost model times concrete shapes and the rules compare them. Said plainly here,
    where the capture failed on jax's first comparison of a dimension."""
    for aval in closed.in_avals:
        dims = [d for d in getattr(aval, "shape", ()) if jax.export.is_symbolic_dim(d)]
        if dims:
            raise ValueError(f"symbolic dimension {dims[0]} in an input of shape "
                             f"{tuple(aval.shape)}: hlo_opt searches concrete shapes only")


def _check_emission(graph: Graph, closed: jcore.ClosedJaxpr) -> None:
    """Trace the emitted program once and require the original's output types."""
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type)
             for a in closed.in_avals]
    emitted = jax.make_jaxpr(lambda *xs: emit.run(graph, xs))(*specs)
    got = [(a.shape, a.dtype, a.weak_type) for a in emitted.out_avals]
    want = [(a.shape, a.dtype, a.weak_type) for a in closed.out_avals]
    if got != want:
        raise RuntimeError(f"emitted program returns {got}, the original {want}")


_CALL = Optimized.__call__.__code__     # `_callers` finds the caller's frame by it


def jit(fun: Callable | None = None, *, static_argnums: int | Sequence[int] | None = None,
        static_argnames: str | Sequence[str] | None = None,
        donate_argnums: int | Sequence[int] | None = None,
        frozen_argnums: int | Sequence[int] | None = None, **kwargs: Any):
    """Drop-in for `jax.jit` that optimises the function's graph.

    Accepts jax.jit's keywords (unknown ones are passed to jax.jit), `frozen_argnums`
    (arguments that do not change between calls, such as weights at inference) and the
    options of `Options`.  Without `fun`, returns a decorator.
    """
    options = Options(**{k: kwargs.pop(k) for k in list(kwargs) if k in OPTION_NAMES})

    def wrap(f: Callable) -> Optimized:
        return Optimized(f, options, static_argnums=static_argnums,
                         static_argnames=static_argnames, donate_argnums=donate_argnums,
                         frozen_argnums=frozen_argnums, jit_kwargs=kwargs)
    return wrap if fun is None else wrap(fun)


def optimize(fun: Callable | None = None, **kwargs: Any):
    """Decorator form: `@hlo_opt.optimize` or `@hlo_opt.optimize(alpha=1.05, ...)`."""
    return jit(fun, **kwargs)
