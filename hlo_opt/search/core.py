"""What every search shares: the moves out of a graph, the stopping rules, the result.

A move is one rule applied at one match, at every match it has, or at every match of
one shape (`Everywhere`): a network repeats its blocks, and one decision for all
sixteen grouped convs of ResNeXt, or for the three of its last stage, is one step. A
rewrite that would create a cycle or grow the graph past the node cap (2x the original,
as TASO does) is not a move.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from hlo_opt import deadline
from hlo_opt.ir import Graph
from hlo_opt.rules.lang import STOP_EVERY, Built, Match, Rule

SATURATED, BUDGET, TIME_LIMIT = "saturated", "budget", "time_limit"


@dataclasses.dataclass
class Result:
    graph: Graph
    cost: float
    applied: list[str]          # rule names along the path from the input to `graph`
    stop_reason: str            # saturated | budget | time_limit
    stats: dict


def by_op(graph: Graph) -> dict[str, list]:
    index: dict[str, list] = {}
    for node in graph.nodes:
        index.setdefault(node.op, []).append(node)
    return index


def matches(graph: Graph, rules: Sequence[Rule],
            limits: "Limits | None" = None) -> Iterator[tuple[Rule, Match]]:
    """Every (rule, match) in `graph`, the op index built once for all rules; with
    `limits`, none after they run out (matching a large graph takes seconds)."""
    index = by_op(graph)
    for rule in rules:
        if limits is not None and limits.reason():
            return
        for m in rule.matches(graph, index, _stop(limits)):
            yield rule, m


class Everywhere(tuple):
    """The matches of one rule, taken as one move (`Rule.apply_all`)."""


def options(graph: Graph, rules: Sequence[Rule], limits: "Limits | None" = None,
            where: Callable[[Match], bool] | None = None
            ) -> Iterator[tuple[Rule, "Match | Everywhere"]]:
    """`matches`, and after each rule with several matches, all of them at once and
    all those of each shape; with `where`, of the matches it keeps."""
    index = by_op(graph)
    for rule in rules:
        if limits is not None and limits.reason():
            return
        yield from ((rule, at) for at in rule_moves(rule, graph, index, where, limits))


def _stop(limits: "Limits | None") -> Callable[[], object] | None:
    return None if limits is None else limits.reason


def rule_moves(rule: Rule, graph: Graph, index: dict[str, list],
               where: Callable[[Match], bool] | None = None,
               limits: "Limits | None" = None) -> list["Match | Everywhere"]:
    """One rule's moves in `graph` (`index`: `by_op(graph)`): each match (that `where`
    keeps), then their all-at-once groups (`everywhere`); with `limits`, those found
    before they ran out."""
    found = rule.matches(graph, index, _stop(limits))
    if where is not None:
        found = [m for m in found if where(m)]
    return [*found, *everywhere(found, _stop(limits))]


def any_option(graph: Graph, rules: Sequence[Rule], rng: random.Random,
               limits: "Limits | None" = None) -> tuple[Rule, "Match | Everywhere"] | None:
    """One move of `options` drawn at random, or None when there is none: a rule drawn
    among those that match, then one of its moves. Rules are matched in a random order
    until one matches, not all of them: the sampling's follow-up moves matched every
    rule on each candidate that did not improve, to draw one move, and that was a third
    of its time (cProfile, Inception's parts at 4 C blocks: 2.2 of 7.0 s)."""
    index, order = by_op(graph), list(rules)
    rng.shuffle(order)
    for rule in order:
        if limits is not None and limits.reason():
            return None
        if found := rule_moves(rule, graph, index, limits=limits):
            return rule, rng.choice(found)
    return None


def everywhere(found: Sequence[Match], stop: Callable[[], object] | None = None
               ) -> list[Everywhere]:
    """A rule's all-at-once moves: all its matches, and all those of each shape (when
    there are several shapes, each with several matches). None when `stop`, asked
    every `STOP_EVERY` matches, says so (a match's shape is read off its leaves:
    seconds for a quarter of a million)."""
    if len(found) < 2:
        return []
    groups: dict[tuple, list[Match]] = {}
    for k, m in enumerate(found, 1):
        if stop is not None and k % STOP_EVERY == 0 and stop():
            return []
        groups.setdefault(shape_of(m), []).append(m)
    alike = [Everywhere(g) for g in groups.values() if len(g) > 1] if len(groups) > 1 else []
    return [Everywhere(found)] + alike


def shape_of(m: Match) -> tuple:
    """The types a match reads and writes: its matches with equal ones are the same
    block repeated (a stage of a ResNet), where a rewrite pays or loses alike."""
    return tuple(v.type for v in m.leaves()) + tuple(v.type for v in m.roots)


def surroundings(group: Everywhere, users: dict) -> frozenset:
    """What a move at all of `group`'s matches turns on near them: each match's nodes
    (op, params, types) and the ops and types of the nodes it reads and of those that
    read it (`users`: `Graph.users()`). Equal for two moves, they build the same kernels
    from the same neighbours: a move that did not pay gains as little again, unless
    a price beyond its neighbours (a graph timed whole, the faults of its temporaries)
    moved."""
    def around(m: Match) -> tuple:
        inside = m.nodes
        return (_bag((n.op, n.params, n.types) for n in inside),
                _bag((v.node.op, v.type) for n in inside for v in n.inputs
                     if v.node not in inside),
                _bag((u.op, u.types) for n in inside for u in users.get(n, ())
                     if u not in inside))
    return _bag(map(around, group))


def _bag(items: Iterable) -> frozenset:
    """A hashable multiset."""
    return frozenset(collections.Counter(items).items())


def step(graph: Graph, rule: Rule, at: "Match | Everywhere",
         max_nodes: int) -> tuple[list[str], Graph] | None:
    """(rule names applied, new graph) for one move, or None when it is no move."""
    names, new = rewrite(graph, rule, at, max_nodes)
    return (names, new) if is_move(graph, new, max_nodes) else None


def is_move(graph: Graph, new: Graph | None, max_nodes: int) -> bool:
    """Whether a rewrite of `graph` is a move: made, within the node cap, and changed."""
    return new is not None and len(new.nodes) <= max_nodes and new.digest != graph.digest


def rewrite(graph: Graph, rule: Rule, at: "Match | Everywhere", max_nodes: int | None = None,
            built: Built | None = None) -> tuple[list[str], Graph | None]:
    """(rule names applied, the rewritten graph or None), before `step`'s checks; None
    too for a move at all those matches that `Rule.apply_all` stopped building at the
    node cap. `built`: see `Rule.apply_all`."""
    if isinstance(at, Everywhere):
        new, taken = rule.apply_all(graph, at, max_nodes, built)
    else:
        new, taken = rule.apply(graph, at), 1
    return [rule.name] * taken, new


def moves(graph: Graph, rules: Sequence[Rule], max_nodes: int,
          limits: "Limits | None" = None, where: Callable[[Match], bool] | None = None
          ) -> Iterator[tuple[list[str], Graph]]:
    """(rule names applied, rewritten graph) for every applicable move (of the matches
    `where` keeps)."""
    for rule, at in options(graph, rules, limits, where):
        if (move := step(graph, rule, at, max_nodes)) is not None:
            yield move


class Limits:
    """A search's budget (graphs costed) and time limit, read on `clock` (wall-clock
    seconds by default; the pipeline's clock leaves out cold kernel measurements)."""

    def __init__(self, budget: int | None, time_limit: float | None,
                 clock: Callable[[], float] = time.perf_counter, deadline: float | None = None):
        self.budget, self.time_limit, self.clock = budget, time_limit, clock
        self.start = clock()
        # When pricing stops (`Priced`): the whole search's limit, inherited by its parts.
        self.deadline = deadline if deadline is not None or time_limit is None \
            else self.start + time_limit
        self.costed = 0
        self.stopped = 0         # pricings stopped at the deadline (`Priced`)
        self.step = 0.0          # a candidate's recent cost to make and price (decaying max)
        self.held = 0            # candidates' time held back for work after the search

    def reason(self) -> str | None:
        """Why to stop now, if so. The time limit counts the next candidate as already
        spent, and `held` more: on a graph of a thousand nodes one candidate can take a
        second or more, and starting it late would overrun the limit by that much."""
        if self.budget is not None and self.costed >= self.budget:
            return BUDGET
        if self.time_limit is not None and \
                self.elapsed() + (1 + self.held) * self.step >= self.time_limit:
            return TIME_LIMIT
        return None

    def late(self) -> bool:
        """Whether one more candidate at the recent step would end past the time limit:
        the time `held` back was spent by steps slower than those before them (ResNeXt-50's
        split search, its cold allowance spent, took 4.1 s on a candidate after 2.4 s,
        and the finishing move, priced anyway, ended it at 12.1 s of 10)."""
        return self.time_limit is not None and \
            self.elapsed() + self.step > self.time_limit

    def add(self, part: "Limits") -> None:
        """Count a sub-search's graphs (a split part's, the pass across the cuts) here."""
        self.costed += part.costed
        self.stopped += part.stopped

    def took(self, seconds: float) -> None:
        self.step = max(seconds, 0.7 * self.step)    # one slow outlier (a cold kernel) fades

    def past(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    def elapsed(self) -> float:
        return self.clock() - self.start

    def remaining(self) -> float | None:
        return None if self.time_limit is None else max(0.0, self.time_limit - self.elapsed())


class Laps(dict):
    """Seconds on a search's clock (`Limits.elapsed`) by stage: each call ends a lap,
    begun where the one before ended; a stage named again adds to its seconds."""

    def __init__(self, limits: Limits):
        super().__init__()
        self._limits, self._since = limits, 0.0

    def __call__(self, stage: str) -> None:
        now = self._limits.elapsed()
        self[stage] = self.get(stage, 0.0) + now - self._since
        self._since = now


class Priced:
    """Costs graphs once each (by structural hash) and counts them against the limits.
    Where the cost has a `breakdown` (`cost.Price`: the `Cost`, with its kernels), the
    last `KEPT` breakdowns are kept for `breakdown`."""

    KEPT = 4

    def __init__(self, cost: Callable[[Graph], float], limits: Limits,
                 memo: dict[str, float] | None = None, last: list | None = None,
                 kept: dict | None = None):
        self.fn, self.limits = cost, limits
        self.memo: dict[str, float] = {} if memo is None else memo
        self._last: list[float | None] = [None] if last is None else last
        self._split = getattr(cost, "breakdown", None)
        self._kept: dict = {} if kept is None else kept

    def breakdown(self, graph: Graph):
        """The graph's `Cost` (its kernels, their prices), or None where the cost gives
        none; priced again, uncounted, when it is no longer kept."""
        if self._split is None:
            return None
        found = self._kept.get(graph.digest)
        return found if found is not None else self._keep(graph.digest, self._split(graph))

    def _keep(self, key: str, cost):
        self._kept[key] = cost
        while len(self._kept) > self.KEPT:
            del self._kept[next(iter(self._kept))]
        return cost

    def _price(self, graph: Graph) -> float:
        if self._split is None:
            return float(self.fn(graph))
        return float(self._keep(graph.digest, self._split(graph)).total)

    def within(self, limits: Limits) -> "Priced":
        """The same prices (shared memo), counted against other limits. The time of
        the latest costing is shared too, and starts afresh with the new view: a step is
        the time since the last costing by any view, not since one made before the
        views' searches. Kept apart, the whole graph's first pricing after the split's
        parts read the parts' whole search as one step (3.7 s of NasRNN's), and the time
        limit, counting that step again for the next candidate, stopped at 4 s of 10."""
        self._last[0] = None
        return Priced(self.fn, limits, self.memo, self._last, self._kept)

    def __call__(self, graph: Graph, anyway: bool = False) -> float:
        """The graph's cost; infinite, and not kept, where the search's deadline passed
        while the cost model was timing it for the first time (`hlo_opt.deadline`),
        unless it is priced `anyway` (the search's start, the split's stitched graph)."""
        key = graph.digest
        if key not in self.memo:
            start = self.limits.clock()
            try:
                with deadline.stop_when(None if anyway else self.limits.past):
                    self.memo[key] = self._price(graph)
            except deadline.OutOfTime:
                self.limits.stopped += 1
                return math.inf
            self.limits.costed += 1
            # the time since the last costing: applying the move, then pricing it
            now = self.limits.clock()
            self.limits.took(now - min(start, self._last[0] or start))
            self._last[0] = now
        return self.memo[key]


def exhaustive(graph: Graph, rules: Sequence[Rule], cost: Callable[[Graph], float], *,
               max_nodes: int, max_graphs: int = 20000) -> tuple[float, Graph, int] | None:
    """(least cost, its graph, graphs seen) over every graph reachable by the rules, or
    None when more than `max_graphs` are reachable (the space is too big to enumerate)."""
    seen = {graph.digest: graph}
    todo = [graph]
    while todo:
        current = todo.pop()
        for _, new in moves(current, rules, max_nodes):
            if new.digest not in seen:
                seen[new.digest] = new
                if len(seen) > max_graphs:
                    return None
                todo.append(new)
    best = min(seen.values(), key=cost)
    return cost(best), best, len(seen)
