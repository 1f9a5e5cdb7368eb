"""Two independent checks for every rule, and a check of the axioms themselves.

- `numeric(rule)`: each of the rule's example programs (one per shape instantiation)
  is captured, every match rewritten, and old and new graphs run on random inputs.
- `formal(rule, axioms)`: z3 proves source == target from the axioms (TASO's method).
  Tensors of each shape are an uninterpreted sort; each op, with its params, is an
  uninterpreted function. Axioms are rules too; an axiom matched on the terms of the
  problem (and on the terms its instances add, a few rounds deep) gives a formula
  `forall tensors of those types: lhs == rhs` (its guards depend on types and params
  only, so the instance holds for every tensor of the types). The rule is proven when
  `src != tgt` is unsatisfiable; the unsat core names the axioms the proof used.
- `validate(axiom)`: symbolic execution on small tensors (every dim <= 3, or at most
  `MAX_ELEMENTS` elements): each input
  element is a z3 real, each op runs its NumPy reference on those terms (nonlinear
  functions are uninterpreted), and z3 proves every output element equal. A wrong
  axiom (say, "relu of a conv is linear") fails here.
"""
from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Iterable, Sequence

import numpy as np
import z3

from hlo_opt import capture, emit, ops
from hlo_opt.ir import Graph, Node, TensorType, Value, replace, subgraph
from hlo_opt.rules.lang import Match, Rule, RuleError

ROUNDS = 3                 # axiom instantiation depth
MAX_INSTANCES = 3000
MAX_ELEMENTS = 64           # `validate`: an input above 3 in a dim must be this small
Z3_TIMEOUT_MS = 20000


class VerifyError(AssertionError):
    pass


@dataclasses.dataclass(frozen=True)
class Instance:
    graph: Graph
    matches: list[Match]
    args: list[np.ndarray]


@dataclasses.dataclass
class Outcome:
    ok: bool
    detail: str = ""
    axioms: frozenset[str] = frozenset()     # formal: axioms the proof used
    seconds: float = 0.0


def instances(rule: Rule, cases: int | None = None, seed: int = 0) -> list[Instance]:
    """The rule's example programs, captured, each with its matches (at least one)."""
    if rule.example is None:
        raise VerifyError(f"rule {rule.name!r} has no example")
    rng = np.random.default_rng(seed)
    out = []
    for n in range(rule.cases if cases is None else cases):
        fn, shapes = rule.example(n)
        args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        graph = capture.capture(fn, args).graph
        found = rule.matches(graph)
        if not found:
            raise VerifyError(f"rule {rule.name!r}: example {n} has no match:\n{graph}")
        out.append(Instance(graph, found, args))
    return out


def numeric(rule: Rule, rtol: float = 1e-4) -> Outcome:
    start = time.perf_counter()
    try:
        checked = 0
        for k, inst in enumerate(instances(rule)):
            want = emit.run(inst.graph, inst.args)
            for m in inst.matches:
                new = rule.apply(inst.graph, m)
                if new is None:
                    continue
                new.check()
                got = emit.run(new, inst.args)
                for g, w in zip(got, want):
                    g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
                    scale = max(1.0, float(np.nanmax(np.abs(w), initial=0.0)))
                    if g.shape != w.shape or not np.allclose(g, w, rtol=rtol, atol=rtol * scale,
                                                             equal_nan=True):
                        return Outcome(False, f"example {k}: results differ by "
                                       f"{np.nanmax(np.abs(g - w)):.3g}",
                                       seconds=time.perf_counter() - start)
                checked += 1
        if not checked:
            return Outcome(False, "no match could be rewritten")
        return Outcome(True, f"{checked} rewrites agree", seconds=time.perf_counter() - start)
    except (VerifyError, RuleError) as err:
        return Outcome(False, str(err), seconds=time.perf_counter() - start)


# -- z3 terms -------------------------------------------------------------------------------

class Terms:
    """z3 sorts (one per tensor type) and function symbols (one per op, params, input
    types and output index), shared by every formula of one proof."""

    def __init__(self):
        self.sorts: dict[tuple, z3.SortRef] = {}
        self.funcs: dict[tuple, z3.FuncDeclRef] = {}

    def sort(self, t: TensorType) -> z3.SortRef:
        key = (t.shape, t.dtype)
        if key not in self.sorts:
            self.sorts[key] = z3.DeclareSort(f"T{list(t.shape)}{t.dtype}")
        return self.sorts[key]

    def func(self, node: Node, index: int) -> z3.FuncDeclRef:
        key = (node.op, node.params.key, tuple(v.type for v in node.inputs), index)
        if key not in self.funcs:
            domain = [self.sort(v.type) for v in node.inputs]
            self.funcs[key] = z3.Function(f"{node.op}_{len(self.funcs)}", *domain,
                                          self.sort(node.types[index]))
        return self.funcs[key]

    def term(self, value: Value, leaves: dict[Value, z3.ExprRef]) -> z3.ExprRef:
        memo = dict(leaves)
        stack = [value]
        while stack:
            v = stack[-1]
            if v in memo:
                stack.pop()
                continue
            node = v.node
            if not node.inputs:                     # a const (or an unbound input)
                memo[v] = z3.Const(f"{node.op}_{node.digest[:12]}_{v.index}",
                                   self.sort(v.type))
                stack.pop()
                continue
            todo = [u for u in node.inputs if u not in memo]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            memo[v] = self.func(node, v.index)(*[memo[u] for u in node.inputs])
        return memo[value]


def formal(rule: Rule, axioms: Iterable[Rule], cases: int | None = None) -> Outcome:
    """Prove the rule from the axioms on each example instantiation."""
    start = time.perf_counter()
    axioms = list(axioms)
    used: set[str] = set()
    try:
        for k, inst in enumerate(instances(rule, cases)):
            m = inst.matches[0]
            ok, detail, core = prove(m.roots, rule.build(m), m.leaves(), axioms)
            if not ok:
                return Outcome(False, f"example {k}: {detail}",
                               seconds=time.perf_counter() - start)
            used |= core
    except (VerifyError, RuleError) as err:
        return Outcome(False, str(err), seconds=time.perf_counter() - start)
    return Outcome(True, "proven", frozenset(used), time.perf_counter() - start)


def prove(src: Sequence[Value], tgt: Sequence[Value], leaves: Sequence[Value],
          axioms: Sequence[Rule]) -> tuple[bool, str, set[str]]:
    """(proven, detail, axioms used) for src == tgt, the leaves being arbitrary tensors."""
    graph, outs = subgraph(list(src) + list(tgt), leaves)
    terms = Terms()
    goal_leaves = {n.out(): z3.Const(f"x{i}", terms.sort(n.types[0]))
                   for i, n in enumerate(graph.inputs)}
    n = len(src)
    lhs = [terms.term(v, goal_leaves) for v in outs[:n]]
    rhs = [terms.term(v, goal_leaves) for v in outs[n:]]
    solver = z3.Solver()
    solver.set("timeout", Z3_TIMEOUT_MS)
    trackers = {}
    for axiom, formula in saturate(graph, axioms, terms, goal_leaves):
        if axiom.name not in trackers:
            trackers[axiom.name] = z3.Bool(f"axiom:{axiom.name}")
        solver.add(z3.Implies(trackers[axiom.name], formula))
    solver.add(z3.Or([a != b for a, b in zip(lhs, rhs)]))
    result = solver.check(*trackers.values())
    if result == z3.unsat:
        core = {str(c).removeprefix("axiom:") for c in solver.unsat_core()}
        return True, "proven", core
    return False, f"not proven from the axioms (z3: {result})", set()


def saturate(graph: Graph, axioms: Sequence[Rule], terms: Terms, goal: dict | None = None):
    """(axiom, formula) for the axiom instances met by rewriting the graph's outputs
    with the axioms, `ROUNDS` deep: each match is applied in its context, so the
    terms a proof passes through (a slice of a concat that was a dot) exist to be
    matched in the next round."""
    tops = {v.node.digest + str(v.index): v for v in graph.outputs}
    seen: set[tuple] = set()
    count = 0
    for _ in range(ROUNDS):
        current = Graph(graph.inputs, list(tops.values()))
        added = {}
        for axiom in axioms:
            for m in axiom.matches(current):
                key = (axiom.name, tuple(v.node.digest + str(v.index) for v in m.roots))
                if key in seen:
                    continue
                seen.add(key)
                try:
                    new = axiom.build(m)
                except RuleError:
                    continue
                yield axiom, _formula(m, new, terms, goal)
                count += 1
                if count >= MAX_INSTANCES:
                    return
                for v in replace(current, dict(zip(m.roots, new))).outputs:
                    k = v.node.digest + str(v.index)
                    if k not in tops:
                        added[k] = v
        if not added:
            return
        tops.update(added)


def _formula(m: Match, new: Sequence[Value], terms: Terms,
             goal: dict | None = None) -> z3.BoolRef:
    """The instance for all tensors of the leaves' types; with `goal` (the problem's
    inputs as z3 constants), also the instance on the matched terms themselves: it
    follows from the first, and z3 needs no search to find it (with 64 bound tensors,
    a 32-step `stack-of-binary-32`, it gave up at its 20 s timeout)."""
    leaves = m.leaves()
    bound = [z3.Const(f"q{i}", terms.sort(v.type)) for i, v in enumerate(leaves)]

    def same(env):
        return z3.And([terms.term(a, env) == terms.term(b, env) for a, b in zip(m.roots, new)])
    if not bound:
        return same({})
    general = z3.ForAll(bound, same(dict(zip(leaves, bound))))
    return general if goal is None else z3.And(general, same(goal))


# -- axioms, by symbolic execution -----------------------------------------------------------

LINEAR = frozenset({"add", "sub", "neg", "mul", "div"})     # real arithmetic in z3
IDENTITY = frozenset({"convert_element_type", "copy", "stop_gradient"})   # on the reals


@functools.cache
def _uninterpreted(op: str, arity: int) -> z3.FuncDeclRef:
    return z3.Function(f"sym_{op}", *[z3.RealSort()] * (arity + 1))


def _symbolic(node: Node, xs: list) -> Sequence:
    if node.op == "const":
        value = np.asarray(ops.const_value(node), np.float64)
        return (np.vectorize(lambda c: z3.RealVal(float(c)), otypes=[object])(value)
                .reshape(node.types[0].shape),)
    if node.op in ("max", "min"):
        a, b = np.broadcast_arrays(*xs)
        pick = (lambda p, q: z3.If(p >= q, p, q)) if node.op == "max" else \
            (lambda p, q: z3.If(p <= q, p, q))
        return (np.vectorize(pick, otypes=[object])(a, b).reshape(node.types[0].shape),)
    if node.op in ("reduce_window_max", "reduce_window_min"):
        return (_window_extreme(node, xs[0]),)
    if node.op in IDENTITY:
        return (xs[0],)
    kind = ops.get(node.op).kind
    if kind == ops.ELEMENTWISE and node.op not in LINEAR:
        f = _uninterpreted(node.op, len(xs))
        args = np.broadcast_arrays(*xs)
        return (np.vectorize(lambda *a: f(*a), otypes=[object])(*args)
                .reshape(node.types[0].shape),)
    return ops.get(node.op).reference(node, *xs)


def _window_extreme(node: Node, x: np.ndarray) -> np.ndarray:
    """Max (min) pooling on z3 terms: each window folded with If; padding is one
    uninterpreted constant (the -inf, or +inf, no real number is)."""
    keep = (lambda p, q: z3.If(p >= q, p, q)) if node.op.endswith("max") else \
        (lambda p, q: z3.If(p <= q, p, q))

    def fold(view, axis):
        cells = np.moveaxis(view, axis, tuple(range(-len(axis), 0)))
        flat = cells.reshape(cells.shape[:-len(axis)] + (-1,))
        out = np.empty(flat.shape[:-1], object)
        for idx in np.ndindex(out.shape):
            out[idx] = functools.reduce(keep, flat[idx])
        return out

    pad = z3.Real(f"pad_{node.op}")
    return ops.reductions.window_reference(fold, lambda dtype: pad)(node.params, x)


def symbolic_inputs(types: Sequence[TensorType]) -> list[np.ndarray]:
    out = []
    for i, t in enumerate(types):
        cells = [z3.Real(f"in{i}_{j}") for j in range(t.size)]
        out.append(np.array(cells, dtype=object).reshape(t.shape))
    return out


def validate(axiom: Rule) -> Outcome:
    """Prove the axiom elementwise on every one of its small example instantiations."""
    start = time.perf_counter()
    try:
        for k, inst in enumerate(instances(axiom)):
            for m in inst.matches:
                new = axiom.build(m)
                graph, outs = subgraph(m.roots + new, m.leaves())
                if not all(_small(n.types[0].shape) for n in graph.inputs):
                    return Outcome(False, f"example {k} has a dim above 3 "
                                          f"(and over {MAX_ELEMENTS} elements)")
                vals = graph.evaluate(symbolic_inputs([n.types[0] for n in graph.inputs]),
                                      _symbolic)
                half = len(m.roots)
                for a, b in zip(vals[:half], vals[half:]):
                    bad = _differs(np.asarray(a, object).ravel(), np.asarray(b, object).ravel())
                    if bad:
                        return Outcome(False, f"example {k}: {bad}",
                                       seconds=time.perf_counter() - start)
    except (VerifyError, RuleError) as err:
        return Outcome(False, str(err), seconds=time.perf_counter() - start)
    return Outcome(True, "holds on every small instance", seconds=time.perf_counter() - start)


def _small(shape) -> bool:
    """Every dim at most 3, or few elements in all: a stack of 32 steps needs an axis of
    32 (`stack-of-slices-32`), and 32 single elements are as small a problem."""
    return all(d <= 3 for d in shape) or int(np.prod(shape)) <= MAX_ELEMENTS


def _differs(a: np.ndarray, b: np.ndarray) -> str:
    if a.shape != b.shape:
        return f"shapes differ: {a.shape} vs {b.shape}"
    solver = z3.Solver()
    solver.set("timeout", Z3_TIMEOUT_MS)
    diffs = []
    for p, q in zip(a, b):
        p, q = _real(p), _real(q)
        d = z3.simplify(p - q)
        if not (z3.is_rational_value(d) and d.as_fraction() == 0):
            diffs.append(p != q)
    if not diffs:
        return ""
    solver.add(z3.Or(diffs))
    result = solver.check()
    if result == z3.unsat:
        return ""
    if result == z3.sat:
        return f"counterexample: {solver.model()}"[:300]
    return "z3 could not decide"


def _real(x) -> z3.ExprRef:
    return x if isinstance(x, z3.ExprRef) else z3.RealVal(float(x))


# -- the whole library -----------------------------------------------------------------------

@dataclasses.dataclass
class Report:
    rules: dict[str, tuple[Outcome, Outcome]]      # name -> (numeric, formal)
    axioms: dict[str, Outcome]                     # name -> validation
    seconds: float

    @property
    def ok(self) -> bool:
        return all(n.ok and f.ok for n, f in self.rules.values()) and \
            all(a.ok for a in self.axioms.values())

    def uses(self) -> dict[str, int]:
        """How many rules each axiom's proofs used."""
        count = {name: 0 for name in self.axioms}
        for _, formal_outcome in self.rules.values():
            for name in formal_outcome.axioms:
                count[name] = count.get(name, 0) + 1
        return count


def check_all(rules: Iterable[Rule], axioms: Iterable[Rule], progress=None) -> Report:
    """Validate every axiom, then check every rule numerically and prove it."""
    start = time.perf_counter()
    axioms = list(axioms)
    validated = {}
    for ax in axioms:
        validated[ax.name] = validate(ax)
        if progress:
            progress(ax.name, validated[ax.name])
    sound = [ax for ax in axioms if validated[ax.name].ok]   # prove from checked axioms only
    results = {}
    for rule in rules:
        results[rule.name] = (numeric(rule), formal(rule, sound))
        if progress:
            progress(rule.name, *results[rule.name])
    return Report(results, validated, time.perf_counter() - start)
