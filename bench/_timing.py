"""Timing shared by the benchmark modules."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, NamedTuple


class Timing(NamedTuple):
    first: float    # seconds of the first call (tracing, compilation, first-touch allocation)
    best: float     # fastest of the repeated calls
    median: float   # median of the repeated calls
    out: Any        # the last call's result


def measure(fn: Callable[[], Any], repeats: int) -> Timing:
    """One first call, then ``repeats`` timed calls."""
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    if not times:
        return Timing(first, float("nan"), float("nan"), out)
    return Timing(first, min(times), statistics.median(times), out)


class Comparison(NamedTuple):
    a: float        # median seconds of fn_a
    b: float        # median seconds of fn_b
    ratio: float    # median of the per-round ratios a/b
    out_a: Any
    out_b: Any


def compare(fn_a: Callable[[], Any], fn_b: Callable[[], Any], repeats: int) -> Comparison:
    """Time two functions in alternating rounds (a, b, a, b, ...) after one warm-up call each.

    On a shared machine the load changes from second to second: alternating puts both sides
    under the same load, and the median of per-round ratios is steadier than a ratio of medians.
    """
    out_a, out_b = fn_a(), fn_b()
    ta, tb = [], []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        out_a = fn_a()
        t1 = time.perf_counter()
        out_b = fn_b()
        t2 = time.perf_counter()
        ta.append(t1 - t0)
        tb.append(t2 - t1)
    ratio = statistics.median(x / y for x, y in zip(ta, tb))
    return Comparison(statistics.median(ta), statistics.median(tb), ratio, out_a, out_b)
