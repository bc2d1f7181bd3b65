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
