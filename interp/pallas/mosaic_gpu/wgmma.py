"""Hopper's asynchronous warpgroup matrix multiply (``wgmma``): it reads its SMEM operands and
writes its accumulator until ``wgmma_wait`` (or a waiting accumulator read) retires it."""
from __future__ import annotations

import numpy as np

from ..memory import KernelRef
from .errors import AsyncAccessError


def allocate_accumulator(aval, name, run, opts):
    """The ref of a wgmma accumulator scratch operand (plgpu.ACC), or None for another aval."""
    if type(aval).__name__ == "WGMMAAbstractAccumulatorRef":
        # Mosaic GPU allocates accumulators as zeros (lowering.py _run_scoped_lowering_rule:
        # mgpu.WGMMAAccumulator.zero).
        return KernelRef(np.zeros(aval.shape, aval.dtype), name, run, kind="accumulator (regs)",
                         check_bounds=opts.check_bounds)
    return None


def wait(run, n: int) -> None:
    """wgmma_wait(n): at most n of the thread's wgmmas stay in flight."""
    if len(run.wgmma) > n:
        del run.wgmma[:len(run.wgmma) - n]


def check_access(run, ref, region, kind: str) -> None:
    """A write of SMEM a wgmma of the thread still reads; any access of an accumulator a wgmma
    still writes."""
    if kind != "read":
        for _, operands in run.wgmma:
            for footprint in operands:
                if region.overlaps(footprint):
                    raise AsyncAccessError(f"{run.where()}: {kind} of {region.describe()} while "
                                           "a wgmma still reads it (before wgmma_wait)")
    for acc, _ in run.wgmma:
        if ref is acc or (ref.array.base is not None and ref.array.base is acc.array.base):
            raise AsyncAccessError(
                f"{run.where()}: {kind} of accumulator {acc.short()} while a wgmma still "
                "writes it (before wgmma_wait)")
