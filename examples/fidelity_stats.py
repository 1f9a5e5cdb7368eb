"""How far a cost model's prices and a measurement agree, and how far the measurement
agrees with itself: the statistics of `cost_fidelity.py`'s runs, apart from their timing.

A run times each variant over rounds (`ratios`: each variant's per-round speed-up over
the original, the original's all 1); these read the model's order against it
(`spearman`, `decided_pairs`, `scores`), the measurement against itself (`split_half`,
`across_sets`), what a perfect model would expect (`ceiling`) or one exact on each kind
of variant (`kinds_exact`), how many sets of processes a measurement needs
(`sets_to_agree`), and several kept runs pooled (`pooled`).
"""
from __future__ import annotations

import itertools
import math
import re
import statistics

import numpy as np
import scipy.stats

import bench


def spearman(a, b) -> float:
    """Spearman's rank correlation, tied values ranked level (their mean rank)."""
    ra, rb = (scipy.stats.rankdata(x) for x in (a, b))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def relative(ratios, rounds) -> list[float]:
    """Each variant's median time relative to the original over `rounds`."""
    return [statistics.median(1 / r[i] for i in rounds) for r in ratios]


def ratios_of(timing: dict) -> list[list[float]]:
    """Each variant's per-round speed-up over the first, the first's all 1."""
    return [[1.0] * timing["repeats"]] + [timing["speedup"][i]["ratios"]
                                          for i in range(1, len(timing["ms"]))]


def split_half(ratios) -> float:
    """Spearman of the measured order with itself: the variants ranked by their median
    time relative to the original over the even rounds against the same over the odd
    rounds. Where the machine cannot order the variants apart from its noise, neither
    can any cost model, and this says by how much: half the rounds rank less steadily
    than all of them, so it is a floor on the measurement's own agreement, and a model
    whose Spearman is near it orders the variants as well as a second run would."""
    n = len(ratios[0])
    return spearman(relative(ratios, range(0, n, 2)), relative(ratios, range(1, n, 2)))


def spearman_brown(r: float, k: float) -> float:
    """The agreement of a measurement k times as long as one that agrees at r."""
    return k * r / (1 + (k - 1) * r)


def across_sets(per_set: list[dict]) -> float:
    """The measurement's agreement with itself across its sets of processes, read as
    `split_half` reads it: the mean Spearman of one set's order (each variant's median
    time relative to the original over that set's rounds) with another's, stepped by
    Spearman-Brown to half the sets. NaN with one set. `split_half`'s halves share
    their processes, so they cannot see a process's own speed, which holds for its
    life: at ecf3a92 BERT's halves agreed at 0.94 while its three sets ranked each
    other at 0.57 (0.66 stepped), one variant 0.90x the original in two sets and 1.00x in
    the third, and its Spearman read 0.71 (`docs/history.md`)."""
    orders = []
    for s in per_set:
        ratios = ratios_of(bench.summary(s))
        orders.append(relative(ratios, range(len(ratios[0]))))
    pairs = [spearman(a, b) for a, b in itertools.combinations(orders, 2)]
    if not pairs or any(math.isnan(r) for r in pairs):
        return math.nan
    r = statistics.mean(pairs)
    return r if r <= 0 else spearman_brown(r, len(orders) / 2)


def ceiling(split: float) -> float:
    """The Spearman a model that knew each variant's true time would expect against this
    measurement, from the measurement's agreement with itself (`split_half`, r): all the
    rounds are as reliable as 2r / (1 + r) (Spearman-Brown: twice the rounds of a half),
    and a measurement of reliability R correlates with the truth as sqrt(R) (Spearman's
    attenuation). An estimate, for reading a model's Spearman: a model near it orders
    the variants as well as this run can tell, and a goal above it is beyond what any
    model is expected to show in this run (one may by chance). NaN when the halves do
    not agree at all."""
    if not split > 0:
        return float("nan")
    return math.sqrt(spearman_brown(split, 2))


def sets_to_agree(split: float, sets: int, target: float, most: int) -> int:
    """Sets of processes a measurement needs for its halves to agree at `target`, from
    their agreement `split` after `sets` (`split_half`): halves k times as long agree
    at k r / (1 + (k - 1) r) (Spearman-Brown), so k = target (1 - r) / (r (1 - target)).
    At least `sets`, at most `most`; `most` where the halves do not agree at all.

    Decided once, from the first sets, rather than timing until the halves agree: a
    measurement stopped the first time its own agreement crossed the line would read
    that agreement high. BERT's variants run within a few percent of each other, ten of
    its 24 (the original and its Q/K/V merges) level with one another, and the halves
    of its 12 rounds agreed at 0.77-0.86 in the last two runs (Intel host): each of the
    four Intel runs' prices ranked its variants at 0.89-0.95 against the other three
    runs' measurements pooled (37-39 rounds), and at 0.82-0.88 against its own 12-14
    (`docs/history.md`)."""
    if not 0 < target < 1 or split >= target:
        return sets
    if not split > 0:
        return most
    return max(sets, min(most, math.ceil(sets * target * (1 - split) / (split * (1 - target)))))


def kinds_exact(names, measured) -> float:
    """The Spearman a model exact on each kind of variant and blind within a kind would
    read: each variant priced at the mean measured time of its kind, variants of one
    kind tied (ranked level). A kind is a variant's name without its numbers:
    `merge-2-groups-of-3 #7` and `merge-8-groups-of-3 #10` are one, the same move taken
    further or less far. Under the goal, the goal asks the model to order the variants
    of a kind among themselves too. Over the runs kept in `docs/runs`, BERT's five
    kinds read 0.72-0.88 in the eight on the Intel host (its model 0.71-0.88) and 0.71
    and 0.77 in the two on the Zen 4 host (its model 0.76 and 0.62), where ResNet-50's
    seven read 0.44-0.78 and its model 0.84-1.00 (`docs/history.md`). NaN with fewer
    than two kinds."""
    kinds = [re.sub(r"\d+", "", n.split(" #")[0]) for n in names]
    if len(set(kinds)) < 2:
        return float("nan")
    mean = {k: statistics.fmean(m for j, m in zip(kinds, measured) if j == k)
            for k in set(kinds)}
    return spearman([mean[k] for k in kinds], measured)


def decided_pairs(predicted, ratios) -> tuple[int, int, int]:
    """(pairs of variants, pairs whose order the rounds decide, decided pairs the model
    orders the same way). Variants within the machine's noise of each other have no
    order to get right, and Spearman over them ranks noise: BERT's merges all run
    within 4% of each other. A pair's order is decided by a sign test over the rounds
    (`bench.sign_of` of the per-round speed-ups of one over the other)."""
    pairs = decided = right = 0
    for i in range(len(predicted)):
        for j in range(i + 1, len(predicted)):
            pairs += 1
            sign = bench.sign_of([b / a for a, b in zip(ratios[i], ratios[j])])  # j over i
            if sign:
                decided += 1
                right += (predicted[j] < predicted[i]) == (sign > 0)
    return pairs, decided, right


def speedup_errors(pred, meas) -> list[float]:
    return [abs((pred[0] / p) / (meas[0] / m) - 1) for p, m in zip(pred[1:], meas[1:])]


def scores(predicted, measured, ratios) -> dict:
    """How the prices order and scale against the measurements (`fidelity`)."""
    errors = speedup_errors(predicted, measured)
    pairs, decided, right = decided_pairs(predicted, ratios)
    return {"spearman": spearman(predicted, measured),
            "pairs": pairs, "decided_pairs": decided, "decided_pairs_right": right,
            "speedup_error_median": statistics.median(errors) if errors else None,
            "speedup_error_max": max(errors) if errors else None,
            "within_15pct": sum(e <= 0.15 for e in errors) / len(errors) if errors else None}


def pooled(records: list[dict]) -> dict:
    """One model's records from several kept runs, the last the one scored: its prices
    against each variant's time over the original's, the geometric mean over the runs
    compiled with its options (the others are left out: SqueezeNet's YNNPACK choice
    moved between runs, and with it the order). A run's measurement holds that hour's
    slow spells; pooled over runs hours apart, fewer of them. Beside it, how the runs'
    measurements rank each other (`between`: least, median, most), what no run's
    split halves show: BERT's agreed within a run at 0.43-0.71 and between two runs at
    0.29-0.78, NasRNN's at 0.89-0.98 and 0.85-0.95 (the runs c1654a9 to 1e4535e in
    `docs/runs`).
    A run whose variants are not the scored run's is refused."""
    last = records[-1]
    names = [v["name"] for v in last["variants"]]
    for r in records:
        if [v["name"] for v in r["variants"]] != names:
            raise ValueError(f"{last['model']}: a run has the variants "
                             f"{[v['name'] for v in r['variants']]}, the scored run {names}")
    options = last.get("compiler_options", "")
    same = [r for r in records if r.get("compiler_options", "") == options]
    relative = [np.log([v["measured_s"] for v in r["variants"]]) for r in same]
    relative = [x - x[0] for x in relative]
    mean = np.mean(relative, axis=0)
    between = sorted(spearman(a, b) for a, b in itertools.combinations(relative, 2))
    repriced = [v.get("repriced_s") for v in last["variants"]]
    return {"model": last["model"], "runs": len(same), "left_out": len(records) - len(same),
            "spearman": spearman([v["predicted_s"] for v in last["variants"]], mean),
            "kinds_exact": kinds_exact(names, mean),
            "repriced": None if None in repriced else spearman(repriced, mean),
            "run_spearman": last["spearman"],
            "between": (between[0], statistics.median(between), between[-1]) if between
            else None}
