"""Hopper's asynchronous warpgroup matrix multiply (``wgmma``) as whole operations: it reads its
SMEM operands and writes its accumulator until ``wgmma_wait`` (or a waiting accumulator read)
retires it. The arithmetic (acc + a @ b rounded as the instruction rounds) is the rule's
(``interp/rules/pallas_mosaic_gpu.py``), passed in as ``product``; who may touch what while a
wgmma is in flight is decided here."""
from __future__ import annotations

import numpy as np

from ..memory import KernelRef
from .errors import AsyncAccessError
from .races import Footprint


def allocate_accumulator(aval, name, run, opts):
    """The ref of a wgmma accumulator scratch operand (plgpu.ACC), or None for another aval."""
    if type(aval).__name__ == "WGMMAAbstractAccumulatorRef":
        # Mosaic GPU allocates accumulators as zeros (lowering.py _run_scoped_lowering_rule:
        # mgpu.WGMMAAccumulator.zero).
        return KernelRef(np.zeros(aval.shape, aval.dtype), name, run, kind="accumulator (regs)",
                         check_bounds=opts.check_bounds)
    return None


def issue(run, acc, a, b, product) -> None:
    """wgmma (wgmma_ref): ``acc`` ((ref, index): the accumulator) becomes ``product(acc value, a
    value, b value)``, in flight from now on. ``a``, ``b``: an SMEM operand as (ref, index), or a
    register operand as its array."""
    acc_ref, acc_index = acc
    av, a_region = _operand(run, a)
    bv, b_region = _operand(run, b)
    # The wgmma's own accumulator access is ordered with earlier wgmmas (the async proxy runs
    # them in order), so it bypasses the in-flight check a warpgroup's access gets.
    acc_ref.array[acc_index] = product(acc_ref.array[acc_index], av, bv)
    run.wgmma.append((acc_ref, [r for r in (a_region, b_region) if r is not None]))


def _operand(run, x):
    """(value, Footprint or None) of a wgmma operand: SMEM (ref, index) read, or registers. The
    tensor core reads SMEM operands through the async proxy (PTX ISA, wgmma.mma_async: "accessing
    the same memory location across multiple proxies needs a cross-proxy fence";
    ``plgpu.commit_smem`` "commits all reads from/writes to SMEM, making them visible to TMA and
    MMA operations"): a plain write needs commit_smem first (commit_smem/c1)."""
    if isinstance(x, tuple):
        ref, index = x
        with run.through_async_proxy("wgmma (SMEM operand)"):
            return ref.read(index), Footprint(ref, index)
    return x, None


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
