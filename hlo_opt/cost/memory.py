"""What a program's fresh memory costs each call on CPU: page faults above malloc's mmap line.

XLA's CPU runtime allocates a program's temporaries as one buffer per call, and each
output as a buffer of its own. glibc's malloc serves a request above its mmap threshold
with a fresh mapping and unmaps it on free, so every page of such a buffer is faulted in
again on the next call. The threshold rises with what the process frees, but never past
32 MiB on 64-bit Linux (`DEFAULT_MMAP_THRESHOLD_MAX`): past that line, a buffer costs
its pages' faults on every call, whatever the kernels inside do.

Measured on the 2-core VM (Intel Xeon host): Inception-v3 in NHWC with its 149x149 conv
as im2col has a 47.5 MiB temp buffer (7.9 MiB without) and ran in 92.5 ms against
76.3 ms, but in 76.9 against 74.8 with `MALLOC_MMAP_THRESHOLD_` set to 1 GiB, while its
kernels, timed alone, summed the same either way: the summed kernels priced the im2col
as a gain, and the program lost 21%.

`temp_bytes` estimates the temp buffer from the kernel partition: the values that cross
kernels, each live from its kernel to its last reader, and inside a kernel the operands
of a concatenate, which XLA's CPU backend materialises (it fuses no concatenate: each
operand is a loop of its own, then a copy). `seconds` prices the faults at two rates,
each measured once per device (`fault_rates.py`): the pages of the weight copies XLA
makes for its convs at the rate XLA pays for them, and every other page at the rate of
XLA's threads faulting a fresh mapping in side by side. An activation's pages are
faulted in by the one kernel that writes them, on every thread.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from hlo_opt.cost import layouts
from hlo_opt.cost.partition import Kernel, links
from hlo_opt.ir import Graph, Value

MMAP_LINE = 32 << 20        # bytes: glibc's highest mmap threshold on 64-bit Linux
PAGE = 4096

logger = logging.getLogger("hlo_opt")


def temp_bytes(graph: Graph, kernels: Sequence[Kernel], precomputed: Sequence[bool]) -> int:
    """Peak bytes of the per-call program's temporaries: the least over two orders of
    the kernels, theirs (the program's order) and a depth-first one from the outputs,
    the larger inputs first (XLA's memory scheduler keeps the least of such orders;
    NASNet-A's branches in program order peaked at 39.8 MiB, depth first at ~24, as XLA),
    plus the copies of weights XLA relays out for its convs each call, all live at once
    (`layouts.weight_copies`).
    """
    copies = layouts.weight_copies(kernels, precomputed)
    best = _peak(graph, kernels, precomputed) + copies
    for schedule in (_depth_first, _greedy):
        if best <= MMAP_LINE:      # the finer orders cost more; only the line matters
            break
        order = schedule(graph, kernels)
        best = min(best, copies + _peak(graph, [kernels[i] for i in order],
                                        [precomputed[i] for i in order]))
    return best


def _depth_first(graph: Graph, kernels: Sequence[Kernel]) -> list[int]:
    """Kernel indices in a post-order from the graph's outputs, each kernel's producers
    visited largest first (by the bytes they and their producers make, counted as XLA's
    DFS scheduler counts them), then any kernel no output reads, in order."""
    maker, producers = links(kernels)
    size = [0] * len(kernels)
    for i, k in enumerate(kernels):         # kernels come producers first
        size[i] = sum(v.type.nbytes for v in k.outputs) + sum(size[j] for j in producers[i])
    order, seen = [], set()
    for root in [maker[v] for v in graph.outputs if v in maker] + list(range(len(kernels))):
        stack = [(root, False)]
        while stack:
            i, done = stack.pop()
            if done:
                order.append(i)
            elif i not in seen:
                seen.add(i)
                stack.append((i, True))
                # pushed smallest first, so the largest is visited (and done) first
                stack.extend((j, False) for j in sorted(producers[i], key=lambda j: (size[j], j))
                             if j not in seen)
    return order


def _greedy(graph: Graph, kernels: Sequence[Kernel]) -> list[int]:
    """Kernel indices in a greedy order (XLA's list scheduler's rule): of the kernels
    whose producers have run, the one that frees the most bytes net of what it makes."""
    _, producers = links(kernels)
    readers: dict[int, set[int]] = {i: set() for i in range(len(kernels))}
    for i, made_by in enumerate(producers):
        for j in made_by:
            readers[j].add(i)
    size = [sum(v.type.nbytes for v in k.outputs) for k in kernels]
    waiting = {i: len(p) for i, p in enumerate(producers)}
    unread = {i: len(readers[i]) for i in readers}
    ready = {i for i, n in waiting.items() if n == 0}
    order = []
    while ready:
        def gain(i):
            return sum(size[j] for j in producers[i] if unread[j] == 1) - size[i]
        i = max(ready, key=lambda i: (gain(i), -i))
        ready.remove(i)
        order.append(i)
        for j in producers[i]:
            unread[j] -= 1
        for r in readers[i]:
            waiting[r] -= 1
            if waiting[r] == 0:
                ready.add(r)
    return order


def _peak(graph: Graph, kernels: Sequence[Kernel], precomputed: Sequence[bool]) -> int:
    """Peak bytes of the temporaries with the kernels run in the given order.

    Graph outputs are buffers of their own; what precomputed kernels make is an argument
    of the per-call program; a `free` kernel (a bitcast) aliases what it reads, and so
    does each of a kernel's `views` the value it views. Two outputs that view one
    value are one buffer: NASNet-A's concatenate read by two 1x1 convs as dots, each
    through a reshape of its own, was counted twice (7.7 MiB), and priced a program whose
    temp buffer XLA made 24.5 MiB at 38.3, past the line."""
    outputs = set(graph.outputs)
    buffer: dict[Value, Value] = {}        # value -> the value whose buffer holds it
    born: dict[Value, int] = {}
    last: dict[Value, int] = {}            # buffer -> index of its last reading kernel
    for i, (kernel, pre) in enumerate(zip(kernels, precomputed)):
        for v in kernel.inputs:
            last[buffer.get(v, v)] = i
        views = dict(kernel.views)
        for v in kernel.outputs:
            if kernel.kind == "free" and kernel.inputs:
                buffer[v] = buffer.get(kernel.inputs[0], kernel.inputs[0])
            elif v in views and not pre:
                buffer[v] = buffer.get(views[v], views[v])
            elif not pre and v not in outputs:
                buffer[v] = v
                born[v] = i
    made, freed = [0] * len(kernels), [0] * len(kernels)
    for b, i in born.items():
        made[i] += b.type.nbytes
        freed[max(i, last.get(b, i))] += b.type.nbytes
    live = peak = 0
    for i, kernel in enumerate(kernels):
        live += made[i]
        # what the kernel materialises inside takes the place of inputs it reads last
        peak = max(peak, live + max(0, _inner(kernel) - freed[i]))
        live -= freed[i]
    return peak


def _inner(kernel: Kernel) -> int:
    """Bytes a kernel materialises inside: the operands of its concatenates (and they
    are made inside the kernel)."""
    inside = set(kernel.nodes)
    return sum(v.type.nbytes for n in kernel.nodes if n.op == "concatenate"
               for v in n.inputs if v.node in inside)


def seconds(graph: Graph, temp: int, copies: int, fault_per_byte: Callable[[], float],
            fresh_per_byte: Callable[[], float]) -> float:
    """Seconds of page faults per call: of the temp buffer, when past the line, its
    `copies` bytes of weight copies at `fault_per_byte` and the rest at `fresh_per_byte`;
    of each output past the line, at `fresh_per_byte`. (Each rate is called only where
    it is needed: calibrating it takes a moment.)"""
    copied = min(copies, temp) if temp > MMAP_LINE else 0
    fresh = sum(b for b in (v.type.nbytes for v in graph.outputs) if b > MMAP_LINE) + \
        (temp - copied if temp > MMAP_LINE else 0)
    return (fault_per_byte() * copied if copied else 0.0) + \
        (fresh_per_byte() * fresh if fresh else 0.0)
