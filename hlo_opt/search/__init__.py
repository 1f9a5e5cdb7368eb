"""Search for a cheaper equivalent graph.

    search(graph, rules, cost) -> Result(graph, cost, applied, stop_reason, stats)

`cost` maps a Graph to predicted seconds (`cost.Price(model, frozen)`, or any
callable; a `Price` also gives the sweep each candidate's kernels, `shares.py`).
Algorithms: "greedy" (backtracking with alpha = 1), "backtracking" (MetaFlow/TASO,
alpha > 1 lets it pass through worse graphs), "sampling" (OCGGS, polynomial time);
"auto" takes backtracking for graphs up to `split_threshold` operations, sampling
above. Graphs above `split_threshold` operations are split by a minimum vertex cut
(`split.py`); before the cut, a greedy pass over the whole graph
takes the best rule applied at all its matches at once (`core.Everywhere`: the same
decision for every repeated block, which the parts, searched apart, would each have to
find); the parts are searched one by one, stitched, and a short greedy pass over the
whole graph then takes the rewrites that span the cuts. Before that sweep, every group
of dots sharing an operand merged at once (`merges.merge_all`) is priced as one
candidate, then each family of like grouped convs split into dense pieces, and each
family of like dots into pieces on column slices of the weight (`groups.cheapest`; the
dots also in graphs too small to split, and their halving rule is then left out of the
rules matched one at a time). Parts alike in shape and in which of their inputs are in `fixed`
(the indices of inputs whose work the cost counts as free: frozen weights) are searched
once, the others taking that search's result: BERT-base's 40 parts were 4 shapes.
With `layouts`, the search starts from the whole graph in NHWC (`layout.relayout`: every
conv converted and the transposes cancelled, by the rules) when that costs less than
alpha times the original (greedy: less than the original); then from the graph with its
slices moved toward the inputs (`narrow.narrow`), and with per-step work over stacked
steps done once on the stack (`narrow.vectorize`), each when that is cheaper. At the end,
every frozen matmul weight is read N x K (`layout.weights_nk`) unless that is priced
more than 2% dearer (its gain is inside the kernel timings' drift). With
`step_gain`, each step of the sampling search (and of greedy) must lower the cost of the
graph it left by that fraction to count as an improvement (0.5% by default: smaller
gains are the kernel timings' noise, and chasing them set the sampling's time). With
`search_gain`, what the search finds past those moves must gain that fraction over
their graph together, or their graph is the result (`hlo_opt.jit` asks 10% of programs
it times whole, whose timings carry a few percent of noise). With `timed_whole` (the cost
times the graph as one program, `Cost.whole`), the split's moves run but its parts are
not cut: a part priced as a program of its own does not price its share of the whole
(NasRNN's parts read gains of 15-28% that its whole program lost 3x on), so the whole
graph is searched as one part.
"""
from __future__ import annotations

import gc
import itertools
import math
import sys
import time
from collections.abc import Callable, Collection, Sequence

from hlo_opt.ir import Graph, rebase
from hlo_opt.rules.lang import Built, Rule
from hlo_opt.search import groups, layout, merges, narrow, shares
from hlo_opt.search import split as splitting
from hlo_opt.search.backtracking import backtrack
from hlo_opt.search.core import (BUDGET, SATURATED, TIME_LIMIT, Laps, Limits, Priced,
                                 Result, everywhere, is_move, rewrite, shape_of, surroundings)
from hlo_opt.search.sampling import sample

ALGORITHMS = ("auto", "greedy", "backtracking", "sampling")
STITCH_BUDGET = 50          # graphs the greedy pass across the cuts may cost
WHOLE_GROWTH = 6.0          # node cap of the whole-graph moves, times the input's nodes:
                            # NASNet-A's 77 depthwise convs as taps add 36 nodes each
WHOLE_GAIN = 0.005          # a whole-graph move must gain this much (`sweep_gain`); a
                            # cost read off one noisy timing needs more (pipeline.py)
STEP_GAIN = 0.005           # the sampling's improvements must gain this much (`step_gain`,
                            # `sampling.py`): smaller ones are the timings' noise
WHOLE_FAMILIES = ("conv", "concat_split", "fusion", "algebra")

__all__ = ["search", "operations", "matched_alone", "Result", "ALGORITHMS", "SATURATED",
           "BUDGET", "TIME_LIMIT"]
MOVE_ONLY = (groups.DOTS.halve, layout.NK,    # rules only the moves apply (`matched_alone`)
             *layout.NCHW_ONE_SIDED)


def matched_alone(rules: Sequence[Rule]) -> list[Rule]:
    """The rules the search matches one match at a time: not `dot-halve-columns` (one
    dot of a family halved alone rarely pays where all do, and matched at every dot and
    every piece it multiplied the search: the enumeration of a three-dot test graph
    passed 5,000 graphs) nor `dot-weight-to-nk` (priced as a tie, taken on noise, and
    its dots no longer match the merge rules): the regrouping move and the finishing
    move apply them; nor the one-sided transpose sinks of the layout move
    (`layout.NCHW_ONE_SIDED`), which only take its transposes to where they cancel."""
    return [r for r in rules if r.name not in MOVE_ONLY]


def search(graph: Graph, rules: Sequence[Rule], cost: Callable[[Graph], float], **kwargs) -> Result:
    """See the module doc. The objects alive before the search are frozen out of the
    garbage collector while it runs (`gc.freeze`): a full collection over a large heap
    (a test session, a user's program) paused a one-second search for 0.3 s, a third of
    its time limit."""
    gc.freeze()
    try:
        return _search(graph, rules, cost, **kwargs)
    finally:
        gc.unfreeze()


def _search(graph: Graph, rules: Sequence[Rule], cost: Callable[[Graph], float], *,
           algorithm: str = "auto", alpha: float = 1.3, budget: int | None = 2000,
           time_limit: float | None = 10.0, split_threshold: int | None = 150,
           max_growth: float = 2.0, q: int = 20, eta: int = 1, seed: int = 0,
           progress: bool = False, layouts: bool = True, sweep_gain: float = WHOLE_GAIN,
           search_gain: float = 0.0, step_gain: float = STEP_GAIN, fixed: Collection[int] = (),
           timed_whole: bool = False, clock: Callable[[], float] = time.perf_counter) -> Result:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown search algorithm {algorithm!r}; one of {ALGORITHMS}")
    every = list(rules)
    rules = [r for r in every if r.name != layout.NK]     # a finishing move only
    limits = Limits(budget, time_limit, clock)
    # The finishing move is priced after the search: its time is held back from it.
    limits.held = int(layout.finishes(graph, every, fixed))
    priced = Priced(cost, limits)
    lap = Laps(limits)          # `stats["phases"]`: where the search's seconds went
    start_cost = priced(graph, anyway=True)
    lap("start")
    show = _progress_line(start_cost) if progress and sys.stderr.isatty() else None
    max_nodes = int(max_growth * len(graph.nodes)) + 1
    original, prefix = graph, []
    relaid = layout.relayout(graph, rules) if layouts and not limits.reason() else None
    # The layout move is a move like any other: within alpha of the start it is taken (by
    # all but greedy), and the end keeps the original if nothing pays after it. NASNet-A
    # relaid read 0.98-1.01x the original, timed cold, and its 2.9x comes after it
    # (1x1 convs as dots, depthwise convs as taps: NHWC only).
    if relaid is not None and priced(relaid[0]) < start_cost * (
            1.0 if algorithm == "greedy" else alpha):
        graph, prefix = relaid
    lap("layout")
    for move in (narrow.narrow, narrow.vectorize):
        found = move(graph, rules) if not limits.reason() else None
        if found is not None and priced(found[0]) < priced(graph):
            graph, prefix = found[0], prefix + found[1]
    rules = narrow.after(rules)

    def run(g: Graph, algo: str, lim: Limits = limits) -> Result:
        cost_of = priced.within(lim)
        nodes = int(max_growth * len(g.nodes)) + 1
        if algo == "auto":
            algo = "sampling" if split_threshold and operations(g) > split_threshold \
                else "backtracking"
        if algo == "sampling":
            return sample(g, rules, cost_of, lim, q=q, eta=eta, max_nodes=nodes, seed=seed,
                          gain=step_gain, progress=show)
        # Greedy's steps must gain as the sampling's do: taking every gain, it followed
        # the kernel timings' noise to the time limit on every zoo model (SqueezeNet:
        # 2,343 graphs in 10 s from 1.19x to 1.23x).
        greedy = algo == "greedy"
        return backtrack(g, rules, cost_of, lim, alpha=1.0 if greedy else alpha,
                         max_nodes=nodes, gain=step_gain if greedy else 0.0, progress=show)

    splittable = split_threshold and operations(graph) > split_threshold and not graph.effects
    if not splittable:
        # (the grouped convs' rules are moves of their own in a graph this small)
        graph, names = groups.cheapest(graph, rules, priced, limits.reason, (groups.DOTS,))
        prefix += names
        rules = matched_alone(rules)
        lap("moves")
        result = run(graph, algorithm)
        lap("search")
    else:
        merged = merges.merge_all(graph, rules, max_nodes) if not limits.reason() else None
        if merged is not None and priced(merged[0]) < priced(graph):
            graph, prefix = merged[0], prefix + merged[1]
        graph, names = groups.cheapest(graph, rules, priced, limits.reason)
        prefix += names
        rules = matched_alone(rules)
        lap("moves")
        whole_nodes = int(WHOLE_GROWTH * max(len(original.nodes), len(graph.nodes))) + 1
        graph, names = _everywhere(graph, rules, priced, limits, whole_nodes, sweep_gain)
        prefix += names
        lap("sweep")
        max_nodes = max(max_nodes, int(max_growth * len(graph.nodes)) + 1)
        result = _split_search(graph, rules, priced, limits, run, split_threshold, max_nodes,
                               algorithm, fixed, step_gain, timed_whole)
        lap("search")
    result.applied[:0] = prefix
    if search_gain and result.cost > priced(graph) * (1 - search_gain):
        # What the search found past the moves gains less than the noise of the timing
        # that priced it: SRU's search moved 65 slices above sigmoids on such readings,
        # and the program ran slower than the moves' graph (1.11-1.20x against
        # 1.10-1.26x over jax.jit, interleaved).
        result = Result(graph, priced(graph), prefix, result.stop_reason, result.stats)
    result, tie = _weights_nk(result, every, fixed, priced, limits)
    # Parts searched apart can lose in the whole: never worse (than the tie move's
    # allowance, when it was taken).
    if result.cost > start_cost * (1 + layout.TIE if tie else 1.0):
        result = Result(original, start_cost, [], result.stop_reason, result.stats)
    result.stats.update(tie=tie and bool(result.applied))
    lap("finish")
    # The layout move's price as the search had it; not priced again past the limit
    # (infinite where its pricing was stopped: `Priced`).
    relaid_cost = None if relaid is None else priced.memo.get(relaid[0].digest, math.inf)
    result.stats.update(seconds=limits.elapsed(), start_cost=start_cost,
                        costed=limits.costed, stopped=limits.stopped, algorithm=algorithm,
                        relaid=relaid_cost, phases=dict(lap))
    if show:
        sys.stderr.write("\n")
    return result


def _weights_nk(result: Result, rules, fixed, priced, limits: Limits
                ) -> tuple[Result, bool]:
    """The result with `layout.weights_nk` taken, unless that is priced more than
    `layout.TIE` dearer; and whether it was. A finishing move, after the search: its
    dots no longer match the merge rules, which read K x N weights, and the search
    would fold the transposes back on a tie (`dot-fold-rhs-transpose` undid 9 of BERT's
    48 when the move came before it). Not tried when its pricing would end past the
    time limit (`Limits.late`)."""
    found = None if limits.late() else layout.weights_nk(result.graph, rules, fixed)
    if found is None or priced(found[0]) > result.cost * (1 + layout.TIE):
        return result, False
    return Result(found[0], priced(found[0]), result.applied + found[1], result.stop_reason,
                  result.stats), True


def _everywhere(graph, rules, priced, limits, max_nodes, gain: float = WHOLE_GAIN
                ) -> tuple[Graph, list[str]]:
    """Sweeps of first-improvement greedy over whole-graph moves (a rule at all its
    matches, or at all those of one shape), while a sweep improves. Layout rules are
    left out: the layout move has made that decision for the whole graph already. The
    families that change kernels (conv, then concat/split) go first: the time may run
    out before the sweep ends. A move is not tried again on surroundings it did not
    pay on (`core.surroundings`): after the moves that paid, the next sweep tries only
    those near them (Inception-v3 at 4 C blocks, small: 62 tries -> 41, the same graph
    found; each try rewrites and prices the whole graph). Where the price is its
    kernels' sum, a rule's matches of one shape are tried only if, in the try at all
    its matches, their kernels gained half what a move must (`shares.by_shape`)."""
    applied: list[str] = []
    failed: set[tuple[str, frozenset]] = set()
    users = None                # of the graph as it is: `Graph.users()`, when first asked
    base = None                 # and its `Cost`, likewise
    improved = True
    ordered = sorted((r for r in rules if r.family in WHOLE_FAMILIES),
                     key=lambda r: WHOLE_FAMILIES.index(r.family))
    # (rule, matches) -> the fewest nodes of a graph on which that move overran the node
    # cap: it overruns again on one as large, and making NASNet-A's 24 depthwise convs
    # dense took 1.1 s a sweep, the last of them past the time limit.
    overgrown: dict[tuple[str, int], int] = {}
    while improved:
        improved = False
        for rule in ordered:
            again = True
            while again:               # a rule that paid is tried again first: pairwise
                again = False          # merges of 8 dots take three sweeps (NasRNN)
                found = rule.matches(graph, stop=limits.reason)
                by_shape: dict[tuple, float] = {}
                for group in everywhere(found, limits.reason):
                    if limits.reason():
                        return graph, applied
                    key = (rule.name, len(group))
                    if len(graph.nodes) >= overgrown.get(key, len(graph.nodes) + 1):
                        continue
                    if users is None:
                        users = graph.users()
                    tried = (rule.name, surroundings(group, users))
                    if tried in failed:
                        continue
                    needed = gain * priced(graph)
                    if by_shape.get(shape_of(group[0]), -needed) > -needed / 2:
                        failed.add(tried)
                        continue
                    built = Built() if len(group) == len(found) else None
                    names, new = rewrite(graph, rule, group, max_nodes, built)
                    if new is None or len(new.nodes) > max_nodes:
                        overgrown[key] = len(graph.nodes)
                        continue
                    if is_move(graph, new, max_nodes) and \
                            priced(new) < priced(graph) * (1 - gain):
                        graph, applied, users, base = new, applied + names, None, None
                        improved = again = True
                        break          # the rule's matches changed: match it again
                    failed.add(tried)
                    if built is not None and new.digest in priced.memo:   # (priced in time)
                        base = base or priced.breakdown(graph)
                        if base is not None:
                            by_shape = shares.by_shape(base, priced.breakdown(new), built,
                                                       found, shape_of, needed / 4)
    return graph, applied


def _split_search(graph, rules, priced, limits, run, threshold, max_nodes, algorithm, fixed,
                  gain, timed_whole=False):
    """Split until parts are small; search each part with an equal share of what is
    left of the budget and time, a part that poses the same search as one before it
    (`splitting.shape`) taking that one's result; stitch; then a greedy pass over the
    matches across the cuts (`splitting.spans`), each step gaining `gain`."""
    def tree(g: Graph):
        if operations(g) <= threshold or limits.reason():
            return g
        first_nodes, _ = splitting.min_cut(g, rules, limits)
        if not first_nodes or len(first_nodes) >= operations(g):
            return g                           # no useful cut: search it whole
        parts = splitting.cut(g, first_nodes)
        if max(operations(parts.first), operations(parts.second)) >= operations(g):
            return g     # the second part recomputes the constants it reads: no smaller
        return (g, parts, tree(parts.first), tree(parts.second))

    def leaves(t) -> int:
        return 1 if isinstance(t, Graph) else leaves(t[2]) + leaves(t[3])

    # A program timed whole is searched whole, after the moves: its parts, timed as
    # programs of their own, misled the search (NasRNN's stitched graph ran 3x slower
    # than the graph before the cut), and their seconds were lost.
    shape = graph if timed_whole else tree(graph)
    applied: list[str] = []
    reasons: list[str] = []
    found: dict[str, tuple[Graph, Result]] = {}    # a part's shape -> (part, its result)
    part_of: dict = {}                             # node -> the part it was searched in
    ids = itertools.count()

    def shapes(t) -> dict[Graph, str]:
        if isinstance(t, Graph):
            return {t: splitting.shape(t, fixed)}
        return shapes(t[2]) | shapes(t[3])

    keys = shapes(shape) if not limits.reason() else {}
    todo = len(set(keys.values()))

    def solve(t) -> Graph:
        if not isinstance(t, Graph):
            g, parts, first, second = t
            return splitting.stitch(g, parts, solve(first), solve(second), part_of)
        out, i = part(t), next(ids)
        part_of.update((n, i) for n in out.nodes)
        return out

    def part(t: Graph) -> Graph:
        nonlocal todo
        if limits.reason():
            reasons.append(limits.reason())
            return t
        key = keys.get(t) or splitting.shape(t, fixed)
        donor, r = found.get(key, (None, None))
        if donor is not None and r.graph.inputs == donor.inputs:
            # A part that poses the search of one searched already (another layer,
            # another block): that search's result, put on this part's inputs.
            applied.extend(r.applied)
            return rebase(r.graph, t.inputs)
        # Keep back time for the end: pricing the stitched graph and the original, and
        # the pass across the cuts (a few candidates each).
        reserve = 4 * limits.step
        share = Limits(None if limits.budget is None
                       else max(1, (limits.budget - limits.costed) // max(1, todo)),
                       None if limits.time_limit is None
                       else max(0.0, limits.remaining() - reserve) / max(1, todo),
                       limits.clock, limits.deadline)
        todo -= 1
        r = run(t, algorithm, share)
        limits.add(share)
        applied.extend(r.applied)
        reasons.append(r.stop_reason)
        found[key] = (t, r)
        return r.graph

    stitched, where = solve(shape), splitting.spans(part_of)
    if priced(stitched, anyway=True) > priced(graph):   # parts' gains can be the whole's
        stitched, where = graph, None         # losses (a fusion across the cut undone)
    across = Limits(STITCH_BUDGET, limits.remaining(), limits.clock, limits.deadline)
    across.step, across.held = limits.step, limits.held
    cross = backtrack(stitched, rules, priced.within(across), across, alpha=1.0,
                      max_nodes=max_nodes, gain=gain, where=where)
    limits.add(across)
    applied.extend(cross.applied)
    reason = limits.reason() or next((r for r in reasons if r != SATURATED), SATURATED)
    return Result(cross.graph, cross.cost, applied, reason,
                  {"parts": leaves(shape), "shapes": len(found), "explored": None})


def operations(graph: Graph) -> int:
    """The size `split_threshold` bounds: operations, inputs not counted. Counted with
    its inputs, a graph with more weights than the threshold (ResNet-50 has 161) never
    had a part under it: the split went on cutting until no cut was left and searched
    parts of a node or two."""
    return sum(n.op != "input" for n in graph.nodes)


def _progress_line(start: float):
    def show(best: float, limits: Limits) -> None:
        sys.stderr.write(f"\rhlo_opt search: best {best * 1e3:.3f} ms "
                         f"(from {start * 1e3:.3f}), {limits.costed} graphs costed, "
                         f"{limits.elapsed():.1f} s")
        sys.stderr.flush()
    return show
