"""The rule language: a rule is a source pattern, a target built from the same
constructors, and guards; the matcher finds a rule's matches in a Graph and `apply`
rewrites one.

    x, a, b = tensors("x a b")
    d1, d2 = Pat("dot_general", x, a), Pat("dot_general", x, b)
    merged = Pat("dot_general", x, Pat("concatenate", a, b, dimension=1), like=d1)
    sizes = Fn(lambda m: (m.shape(a)[1], m.shape(b)[1]))
    pieces = Pat("split", merged, axis=1, sizes=sizes)
    Rule("merge-dots-shared-lhs", "concat_split", src=[d1, d2], tgt=[pieces[0], pieces[1]],
         guards=[same_params(d1, d2)])

The pattern pieces live in `pattern.py` and are re-exported here. Patterns are DAGs: a `Pat` object used twice stands for one value, and so does a tensor
variable. A source `Pat` constrains the params it names (a value, or a `Sym` bound on
first use and compared after) and leaves the rest free; a target `Pat` takes its params
from `like=` (a source node's params), then from its keywords (values, `Sym`s, or `Fn`s
of the match). An op may be an `OpVar`, binding the op name among a set of ops.
Several source roots make a multi-output pattern; `tgt` lists one value per root.
"""
from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from hlo_opt import ops
from hlo_opt.ir import Graph, Node, TensorType, Value, replace
from hlo_opt.rules.pattern import (Build, Const, Fn, OpVar, Pat, Proj, Sym, Tensor,
                                   tensors, walk)

__all__ = ["Build", "Const", "Fn", "Guard", "Match", "OpVar", "Pat", "Proj", "Rule",
           "RuleError", "RuleSet", "Sym", "Tensor", "tensors", "walk"]

FAMILIES = ("algebra", "concat_split", "layout", "conv", "fusion", "axiom")
STOP_EVERY = 256     # bindings between two questions to `Rule.matches`'s `stop`


class RuleError(ValueError):
    """A rule that cannot be built or that produced ill-typed output; names the rule."""


@dataclasses.dataclass(frozen=True)
class Guard:
    """A named predicate on a match (shapes and params only, never tensor values)."""
    name: str
    test: Callable[["Match"], bool]


class Match:
    """What a rule's source bound in a graph."""

    def __init__(self, rule: "Rule", values: dict[int, Value], syms: dict[str, Any],
                 opvars: dict[str, str]):
        self.rule, self._values, self.syms, self.opvars = rule, values, syms, opvars

    def __getitem__(self, key: "Pat | Tensor | Sym | OpVar") -> Any:
        if isinstance(key, Sym):
            return self.syms[key.name]
        if isinstance(key, OpVar):
            return self.opvars[key.name][0]
        return self._values[id(key)]

    def type(self, key: "Pat | Tensor") -> TensorType:
        return self[key].type

    def shape(self, key: "Pat | Tensor") -> tuple[int, ...]:
        return self[key].type.shape

    def node(self, key: Pat) -> Node:
        return self[key].node

    def params(self, key: Pat):
        return self.node(key).params

    @property
    def roots(self) -> list[Value]:
        return [self[r] for r in self.rule.src]

    @property
    def nodes(self) -> set[Node]:
        """The graph nodes the source pattern's ops matched."""
        return {self._values[id(p)].node for r in self.rule.src for p in walk(r)
                if isinstance(p, Pat)}

    def leaves(self) -> list[Value]:
        """The values bound to tensor variables, in first-use order."""
        out = []
        for r in self.rule.src:
            for p in walk(r):
                if isinstance(p, Tensor) and self[p] not in out:
                    out.append(self[p])
        return out


@dataclasses.dataclass
class Built:
    """What `Rule.apply_all` made: (match, the nodes built for it) for each match it
    took, and node -> the node standing for it in the result (itself, or the copy
    `ir.replace` rebuilt it as: a node built for one match that reads another's)."""

    made: list[tuple[Match, set[Node]]] = dataclasses.field(default_factory=list)
    images: dict[Node, Node] = dataclasses.field(default_factory=dict)


class Rule:
    """A named, guarded rewrite from `src` (one or more roots) to `tgt` (one value
    per root). Checked when built: every target variable is bound by the source and
    every op exists. `example(n)` gives `(fn, arg shapes)` for n < `cases`: a small
    program containing the pattern, at a different shape for each n."""

    def __init__(self, name: str, family: str, src: Pat | Sequence[Pat],
                 tgt: "Pat | Tensor | Sequence[Pat | Tensor]", guards: Sequence[Guard] = (),
                 identity: str = "", example: Callable[[int], tuple] | None = None,
                 cases: int = 3):
        self.name, self.family, self.cases = name, family, cases
        self.src = [src] if isinstance(src, (Pat, Proj)) else list(src)
        self.tgt = [tgt] if isinstance(tgt, (Pat, Proj, Tensor, Build)) else list(tgt)
        self.guards, self.identity, self.example = list(guards), identity, example
        self._check()

    def __repr__(self) -> str:
        return f"Rule({self.name})"

    def _fail(self, message: str):
        raise RuleError(f"rule {self.name!r}: {message}")

    def _check(self) -> None:
        if not self.name or self.name != self.name.lower() or " " in self.name \
                or "_" in self.name:
            self._fail("names are kebab-case")
        if self.family not in FAMILIES:
            self._fail(f"unknown family {self.family!r}; one of {FAMILIES}")
        if len(self.src) != len(self.tgt) or not self.src:
            self._fail(f"{len(self.src)} source roots but {len(self.tgt)} targets")
        bound_t, bound_p, bound_s, bound_o = set(), set(), set(), set()
        for root in self.src:
            if not isinstance(root, (Pat, Proj)):
                self._fail("a source root must be an op pattern")
            for p in walk(root):
                if isinstance(p, Tensor):
                    bound_t.add(p)
                    continue
                bound_p.add(id(p))
                if isinstance(p, (Proj, Const, Build)):
                    if not isinstance(p, Proj):
                        self._fail("constants and builders belong in targets")
                    continue
                self._check_op(p.op)
                if isinstance(p.op, OpVar):
                    bound_o.add(p.op.name)
                if p.like is not None:
                    self._fail("`like=` belongs in targets")
                for v in p.params.values():
                    if isinstance(v, Fn):
                        self._fail("`Fn` params belong in targets")
                    if isinstance(v, Sym):
                        bound_s.add(v.name)
        for root in self.tgt:
            for p in walk(root):
                if isinstance(p, Tensor):
                    if p not in bound_t:
                        self._fail(f"target variable {p.name!r} is not bound by the source")
                    continue
                if id(p) in bound_p or isinstance(p, (Proj, Build)):
                    continue                          # a source value reused as is
                if isinstance(p, Const):
                    if p.like not in bound_t and id(p.like) not in bound_p:
                        self._fail("a constant's `like` must be bound by the source")
                    continue
                self._check_op(p.op)
                if isinstance(p.op, OpVar) and p.op.name not in bound_o:
                    self._fail(f"target op variable {p.op.name!r} is not bound by the source")
                if p.like is not None and id(p.like) not in bound_p:
                    self._fail("`like=` must name a source pattern node")
                for v in p.params.values():
                    if isinstance(v, Sym) and v.name not in bound_s:
                        self._fail(f"target param {v.name!r} is not bound by the source")

    def _check_op(self, op) -> None:
        for name in ([op] if isinstance(op, str) else sorted(op.choices)):
            if name not in ops.OPS:
                self._fail(f"unknown op {name!r}")

    # -- matching ------------------------------------------------------------------------

    def matches(self, graph: Graph, by_op: dict[str, list[Node]] | None = None,
                stop: Callable[[], object] | None = None) -> list[Match]:
        """Every match of the source in `graph` whose guards hold; `by_op` (op name ->
        nodes, in graph order) may be passed in when many rules scan one graph. `stop`,
        asked every `STOP_EVERY` bindings, ends the scan when true, with the matches
        found so far: a source of two roots sharing an operand matches every ordered
        pair of its readers, 249,500 pairs where 500 dots read one weight (7 s)."""
        if by_op is None:
            by_op = {}
            for node in graph.nodes:
                by_op.setdefault(node.op, []).append(node)
        found = []
        readers = graph.users() if len(self.src) > 1 else None
        bindings = self._match_roots(0, by_op, {}, {}, {}, readers)
        for k, (values, syms, opvars) in enumerate(bindings, 1):
            if stop is not None and k % STOP_EVERY == 0 and stop():
                break
            m = Match(self, values, syms, opvars)
            if len(set(m.roots)) == len(self.src) and \
                    all(g.test(m) for g in self.guards):
                found.append(m)
        return found

    def _match_roots(self, i, by_op, values, syms, opvars, readers):
        """The bindings of roots i.. . A later root with an input bound already (the
        operand two merged convs share) is looked for among that value's readers, not
        among all nodes of its op: scanning them all made matching two roots quadratic
        (`merge-convs-shared-input` 1.5 -> 5.3 ms from Inception's 1 to 4 C blocks, for
        1.9x the nodes). The same candidates that can match, in the same order."""
        if i == len(self.src):
            yield values, syms, opvars
            return
        root = self.src[i]
        base = root.base if isinstance(root, Proj) else root
        names = [base.op] if isinstance(base.op, str) else sorted(base.op.choices)
        shared = next((values[id(p)] for p in base.inputs if id(p) in values), None)
        if shared is not None and readers is not None:
            candidates = _readers(readers, shared.node, names)
        else:
            candidates = itertools.chain.from_iterable(by_op.get(n, ()) for n in names)
        for node in candidates:
            if root.index >= len(node.types):
                continue
            state = _unify(root, node.out(root.index), dict(values), dict(syms), dict(opvars))
            if state is not None:
                yield from self._match_roots(i + 1, by_op, *state, readers)

    # -- rewriting -----------------------------------------------------------------------

    def build(self, m: Match) -> list[Value]:
        """The target's values for match `m` (new nodes; the graph is untouched)."""
        built: dict[int, Value] = {}

        def go(p) -> Value:
            if isinstance(p, Tensor) or id(p) in m._values:
                return m[p]
            if id(p) in built:
                return built[id(p)]
            if isinstance(p, Proj):
                built[id(p)] = go(p.base).node.out(p.index)
                return built[id(p)]
            if isinstance(p, Build):
                built[id(p)] = p.fn(m)
                return built[id(p)]
            if isinstance(p, Const):
                dtype = m.type(p.like).dtype
                node = ops.make_const(np.asarray(p.value, dtype), TensorType((), dtype))
                built[id(p)] = node.out()
                return built[id(p)]
            inputs = [go(q) for q in p.inputs]
            op = p.op if isinstance(p.op, str) else m[p.op]
            if p.like is not None:
                params = dict(m.params(p.like).items())
            elif isinstance(p.op, OpVar):         # the params of the op it matched
                params = dict(m.opvars[p.op.name][1].items())
            else:
                params = {}
            for k, v in p.params.items():
                params[k] = v.fn(m) if isinstance(v, Fn) else m[v] if isinstance(v, Sym) else v
            try:
                node = ops.make(op, inputs, **params)
            except Exception as err:  # noqa: BLE001 - a rule bug: say which rule
                raise RuleError(f"rule {self.name!r}: cannot build {op}: {err}") from err
            built[id(p)] = node.out(p.index)
            return built[id(p)]
        out = [go(t) for t in self.tgt]
        for root, value in zip(m.roots, out):
            if root.type != value.type:
                raise RuleError(f"rule {self.name!r} turned a {root.type} into a {value.type}")
        return out

    def apply(self, graph: Graph, m: Match) -> Graph | None:
        """`graph` rewritten at `m`, or None when the rewrite would create a cycle (a
        target input computed from one of the values it replaces)."""
        new, taken = self.apply_all(graph, [m])
        return new if taken else None

    def apply_all(self, graph: Graph, found: Sequence[Match], max_nodes: int | None = None,
                  built: "Built | None" = None) -> tuple[Graph | None, int]:
        """`graph` rewritten at every match in `found` (one per root value, the first),
        and how many; one rebuild of the graph for all of them (`apply` rebuilds it
        for each). Matches may overlap or follow one another (a chain of convs): each
        target reads what its match bound, and `ir.replace` sends every read of a
        replaced value to its image. A single-root target reads only values above its
        root, so no cycle can form; a multi-root match that would make one is
        skipped, as `apply` does. With `max_nodes`, None as soon as the graph's nodes,
        plus those built for the matches taken, less the nodes those matched, pass it:
        NASNet-A's 12 depthwise convs made dense built 26,526 nodes (1.9 s, a fifth of
        its search's time) before the whole graph was found over the search's cap. With
        `built`, what each match taken built and what stands for each node in the
        result (`Built`)."""
        if not found:
            return graph, 0
        users = graph.users() if len(self.src) > 1 else None
        existing = set(graph.nodes)
        subst: dict[Value, Value] = {}
        taken, size, held = 0, len(graph.nodes), set()
        for m in found:
            if any(v in subst for v in m.roots):
                continue
            new = self.build(m)
            made, reads = _built(new, existing)
            if users is not None and reads & _below({v.node for v in m.roots}, users):
                continue
            subst.update(zip(m.roots, new))
            taken += 1
            if built is not None:
                built.made.append((m, made))
            if max_nodes is not None:
                mine = m.nodes
                size += len(made) - len(mine - held)
                held |= mine
                if size > max_nodes:
                    return None, taken
        return replace(graph, subst, None if built is None else built.images), taken


def _readers(users: dict[Node, list[Node]], node: Node, names: Sequence[str]) -> list[Node]:
    """The nodes reading `node` (`users`: `Graph.users()`) whose op is one of `names`:
    those of the first name, then of the next, each in graph order (as `by_op`'s
    lists), once each."""
    near = dict.fromkeys(users.get(node, ()))
    return [n for name in names for n in near if n.op == name]


def _below(roots: set[Node], users: dict[Node, list[Node]]) -> set[Node]:
    """`roots` and their descendants."""
    out, stack = set(roots), list(roots)
    while stack:
        for user in users.get(stack.pop(), ()):
            if user not in out:
                out.add(user)
                stack.append(user)
    return out


def _built(values: Sequence[Value], existing: set[Node]) -> tuple[set[Node], set[Node]]:
    """(the nodes not in `existing` that compute `values`, the nodes of `existing`
    they read)."""
    stack, made, reads = [v.node for v in values], set(), set()
    while stack:
        node = stack.pop()
        if node in existing:
            reads.add(node)
        elif node not in made:
            made.add(node)
            stack.extend(node.parents())
    return made, reads


def _unify(pat, value: Value, values: dict, syms: dict, opvars: dict):
    """Extend the bindings so that `pat` matches `value`, or None."""
    if id(pat) in values:
        return (values, syms, opvars) if values[id(pat)] == value else None
    if isinstance(pat, Tensor):
        values[id(pat)] = value
        return values, syms, opvars
    if isinstance(pat, Proj):
        if value.index != pat.index:
            return None
        state = _unify(pat.base, value.node.out(pat.base.index), values, syms, opvars)
        if state is not None:
            values[id(pat)] = value
        return state
    node = value.node
    if isinstance(pat.op, str):
        if node.op != pat.op:
            return None
    else:
        if node.op not in pat.op.choices or \
                opvars.setdefault(pat.op.name, (node.op, node.params))[0] != node.op:
            return None
    if value.index != pat.index or len(node.inputs) != len(pat.inputs):
        return None
    for key, want in pat.params.items():
        if key not in node.params:
            return None
        have = node.params[key]
        if isinstance(want, Sym):
            if syms.setdefault(want.name, have) != have:
                return None
        elif have != want:
            return None
    values[id(pat)] = value
    for p, v in zip(pat.inputs, node.inputs):
        state = _unify(p, v, values, syms, opvars)
        if state is None:
            return None
    return values, syms, opvars


class RuleSet:
    """An ordered set of rules with unique names; sets compose with `+`."""

    def __init__(self, rules: Iterable[Rule] = ()):
        self.rules: list[Rule] = []
        names: set[str] = set()
        for r in rules:
            if r.name in names:
                raise RuleError(f"rule {r.name!r} defined twice")
            names.add(r.name)
            self.rules.append(r)

    def __add__(self, other: "RuleSet") -> "RuleSet":
        return RuleSet(self.rules + other.rules)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def __getitem__(self, name: str) -> Rule:
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(f"no rule named {name!r}")

    def family(self, name: str) -> "RuleSet":
        return RuleSet(r for r in self.rules if r.family == name)
