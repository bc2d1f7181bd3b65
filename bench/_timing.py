"""Timing shared by the benchmark modules.

``clock``: the seconds counter the times are read from, ``time.perf_counter`` (wall) by default,
or ``time.process_time`` (this process's CPU seconds: steadier than wall time on a shared
machine, but blind to other threads' waits and to work done in other processes).
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, NamedTuple


class Timing(NamedTuple):
    first: float    # seconds of the first call (tracing, compilation, first-touch allocation)
    best: float     # fastest of the repeated calls
    median: float   # median of the repeated calls
    out: Any        # the last call's result


def measure(fn: Callable[[], Any], repeats: int, clock: Callable[[], float] = time.perf_counter) -> Timing:
    """One first call, then ``repeats`` timed calls."""
    t0 = clock()
    out = fn()
    first = clock() - t0
    times = []
    for _ in range(repeats):
        t0 = clock()
        out = fn()
        times.append(clock() - t0)
    if not times:
        return Timing(first, float("nan"), float("nan"), out)
    return Timing(first, min(times), statistics.median(times), out)


class Comparison(NamedTuple):
    a: float        # median seconds of fn_a
    b: float        # median seconds of fn_b
    ratio: float    # median of the per-round ratios a/b
    out_a: Any
    out_b: Any
    best_a: float   # fastest round of fn_a
    best_b: float   # fastest round of fn_b
    cpu_a: float    # median process CPU seconds of fn_a's rounds (whatever ``clock`` is)
    cpu_b: float    # median process CPU seconds of fn_b's rounds


def compare(fn_a: Callable[[], Any], fn_b: Callable[[], Any], repeats: int,
            clock: Callable[[], float] = time.perf_counter) -> Comparison:
    """Time two functions in alternating rounds (a, b, a, b, ...) after one warm-up call each.

    On a shared machine the load changes from second to second: alternating puts both sides
    under the same load, and the median of per-round ratios is steadier than a ratio of medians.
    The rounds' process CPU seconds are read as well, so one run can report both clocks.
    """
    out_a, out_b = fn_a(), fn_b()
    ta, tb, ca, cb = [], [], [], []
    for _ in range(max(1, repeats)):
        c0, t0 = time.process_time(), clock()
        out_a = fn_a()
        c1, t1 = time.process_time(), clock()
        out_b = fn_b()
        c2, t2 = time.process_time(), clock()
        ta.append(t1 - t0)
        tb.append(t2 - t1)
        ca.append(c1 - c0)
        cb.append(c2 - c1)
    ratio = statistics.median(x / y for x, y in zip(ta, tb))
    med = statistics.median
    return Comparison(med(ta), med(tb), ratio, out_a, out_b, min(ta), min(tb), med(ca), med(cb))
