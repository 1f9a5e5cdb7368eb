"""The on-disk cache of optimised graphs, so that a second process starts instantly.

Keyed by the captured graph's digest, the frozen inputs, the options that shape the
result and the rule names; one JSON file per device kind, jax version and hlo_opt code
(the cost cache's `Cache`: atomic, merged under a lock, rebuilt with a warning when
corrupt). The code is a digest of hlo_opt's own sources, not only its version number: a
graph found by other rules or another search is not this code's answer, and an edit
between releases must not read back the graphs older code found.
An entry holds the outcome (the graph that runs, written by `graph_json`, and what the
report said); an entry that does not read back exactly is ignored. Beside it, under
`short:<key>`, how many searches for the key were cut short by first-time kernel timing
and not stored (`pipeline.cut_short`), and the XLA compile options they were priced
under, so the next search reads their kernel timings under the same ones.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
from pathlib import Path

import hlo_opt
from hlo_opt import compile_options, emit, graph_json
from hlo_opt.cost.cache import Cache
from hlo_opt.cost.model import device_header
from hlo_opt.ir import Graph
from hlo_opt.report import Report

logger = logging.getLogger("hlo_opt")

FORMAT = 1
SHAPING = ("alpha", "budget", "time_limit", "search", "cost", "verify", "measure_final",
           "split_threshold")       # the options that can change the outcome
REPORTED = ("applied", "cost_before", "cost_after", "measured_before", "measured_after",
            "search_seconds", "stop_reason", "fell_back", "reason", "compiler_options")


@functools.cache
def code_digest() -> str:
    """A digest of every source file of the installed hlo_opt package."""
    root = Path(hlo_opt.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def key(original: Graph, frozen, options, rules, users_options=None) -> str | None:
    """The entry's key; None when the options name no reproducible result (a cost
    model object of the user's). `users_options`: the XLA compile options the user gave
    `jit`, under which the entry was priced and timed."""
    if not isinstance(options.cost, str):
        return None
    extra = {"xla": compile_options.label(users_options)} if users_options else {}
    text = json.dumps({"graph": original.digest, "frozen": list(frozen), **extra,
                       "options": {k: getattr(options, k) for k in SHAPING},
                       "rules": sorted(r.name for r in rules), "format": FORMAT},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class GraphStore:
    def __init__(self, cache_dir=None):
        self.cache = Cache("graphs", {**device_header(), "format": FORMAT,
                                     "hlo_opt": hlo_opt.__version__, "code": code_digest()},
                           cache_dir)

    def get(self, key: str, original: Graph, name: str = "optimized") -> tuple[Graph, Report] | None:
        entry = self.cache.get(key)
        if not isinstance(entry, dict):
            return None
        try:
            ran = graph_json.decode(entry["runs"], original)
            optimized = graph_json.decode(entry["optimized"], original)
            fields = {k: entry["report"][k] for k in REPORTED}
        except (KeyError, TypeError):
            ran = None
        if ran is None or optimized is None:
            logger.info("hlo_opt: cached optimised graph %s does not read back; optimising "
                        "again", key)
            return None
        report = Report(original=original, optimized=optimized, source=emit.to_source(
            optimized, name), **{**fields, "search_seconds": 0.0, "stop_reason": "cached"})
        return ran, report

    def _short(self, key: str) -> dict:
        entry = self.cache.get(f"short:{key}")
        ok = isinstance(entry, dict) and isinstance(entry.get("count"), int) \
            and isinstance(entry.get("xla"), str)
        return entry if ok else {}

    def searched_short(self, key: str) -> int:
        """How many searches for `key` were cut short and not stored (`note_short`)."""
        return self._short(key).get("count", 0)

    def short_options(self, key: str) -> compile_options.Options | None:
        """The compile options the searches for `key` cut short were priced under; None
        when none was cut short (or the entry does not read back)."""
        entry = self._short(key)
        try:
            options = dict(compile_options.parse(entry["xla"])) if entry else None
        except (ValueError, TypeError):
            return None
        return options if all(isinstance(v, str) for v in (options or {}).values()) else None

    def note_short(self, key: str, options: compile_options.Options) -> None:
        self.cache.put(f"short:{key}", {"count": self.searched_short(key) + 1,
                                        "xla": compile_options.label(options)})
        self.cache.flush()

    def put(self, key: str, original: Graph, ran: Graph, report: Report) -> None:
        try:
            entry = {"runs": graph_json.encode(ran, original),
                     "optimized": graph_json.encode(report.optimized, original),
                     "report": {k: getattr(report, k) for k in REPORTED}}
            json.dumps(entry)
        except (graph_json.Unwritable, TypeError, ValueError) as err:
            logger.info("hlo_opt: not caching this optimised graph on disk (%s)", err)
            return
        self.cache.put(key, entry)
        self.cache.flush()
