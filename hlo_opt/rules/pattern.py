"""Patterns: the pieces a rule's source and target are built from.

A tensor variable matches any value; a `Pat` an op node (its params constrained by
values or bound by `Sym`s); `Proj` another output of a multi-output node; an `OpVar` any
op of a set. Targets may also hold `Fn` params computed from the match, scalar `Const`s
and `Build` values made by a function of the match.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hlo_opt.ir import Value
    from hlo_opt.rules.lang import Match


@dataclasses.dataclass(frozen=True, eq=False)
class Tensor:
    """A tensor variable: matches any value (the same value at every use)."""
    name: str

    def __repr__(self) -> str:
        return self.name


def tensors(names: str) -> tuple[Tensor, ...]:
    return tuple(Tensor(n) for n in names.split())


@dataclasses.dataclass(frozen=True)
class Sym:
    """A param variable: binds a param's value in the source, reads it in the target."""
    name: str


@dataclasses.dataclass(frozen=True)
class Fn:
    """A target param computed from the match."""
    fn: Callable[["Match"], Any]


@dataclasses.dataclass(frozen=True)
class OpVar:
    """An op variable: matches any op in `choices`, the same op at every use."""
    name: str
    choices: frozenset[str]


@dataclasses.dataclass(frozen=True, eq=False)
class Const:
    """A target scalar constant, in the dtype of `like`."""
    value: float
    like: "Tensor | Pat"

    @property
    def inputs(self):
        return ()


@dataclasses.dataclass(frozen=True, eq=False)
class Build:
    """A target value built by `fn(match)` with `ops.make` (for targets whose size
    depends on the match, such as a block-diagonal kernel with one block per group)."""
    fn: Callable[["Match"], Value]

    @property
    def inputs(self):
        return ()


class Pat:
    """One node of a pattern (source or target); `index` picks an output, and
    `pat[i]` is output i of the same node (a split's pieces)."""

    def __init__(self, op: str | OpVar, *inputs: "Pat | Tensor", index: int = 0,
                 like: "Pat | None" = None, **params):
        self.op, self.inputs, self.index = op, inputs, index
        self.like, self.params = like, params
        self._outs: dict[int, Proj] = {}

    def __repr__(self) -> str:
        op = self.op if isinstance(self.op, str) else f"<{self.op.name}>"
        args = ", ".join(map(repr, self.inputs))
        return f"{op}({args})" + (f"[{self.index}]" if self.index else "")

    def __getitem__(self, index: int) -> "Pat | Proj":
        if index == self.index:
            return self
        return self._outs.setdefault(index, Proj(self, index))   # one object per output

    def walk(self) -> Iterator:
        return walk(self)


def walk(pattern) -> Iterator:
    """A pattern's nodes and variables, each once, children first."""
    seen: set[int] = set()

    def go(p):
        if id(p) in seen:
            return
        seen.add(id(p))
        for q in getattr(p, "inputs", ()):
            yield from go(q)
        yield p
    yield from go(pattern)


@dataclasses.dataclass(frozen=True, eq=False)
class Proj:
    """Output `index` of the node `base` matches (or builds)."""
    base: Pat
    index: int

    @property
    def inputs(self):
        return (self.base,)

    def __repr__(self) -> str:
        return f"{self.base!r}[{self.index}]"
