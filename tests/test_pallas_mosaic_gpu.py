"""Mosaic GPU kernels (plgpu.kernel) in the reference: TMA copies with barriers, TMA stores,
warpgroups synchronised by barriers, wgmma, tiled and swizzled SMEM, and every undefined
behaviour the dialect has (spec/pallas_mosaic_gpu.py UNDEFINED), each triggered by a kernel.

Expectations are independent of the reference: NumPy on the inputs, exact sums (math.fsum) for
wgmma, and the outputs the shipped kernels gave on a real H100 (tests/data/h100/).
"""
from __future__ import annotations

import functools
import math
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import interp

try:
    from jax.experimental.pallas import mosaic_gpu as plgpu
except ImportError as e:   # JAX 0.10.2's Mosaic GPU imports absl-py (mosaic/gpu/layout_inference)
    plgpu = None
    _WHY = f"jax.experimental.pallas.mosaic_gpu does not import here: {e}"

needs_plgpu = pytest.mark.skipif(plgpu is None, reason=_WHY if plgpu is None else "")

F32 = jnp.float32
RNG = np.random.default_rng(0)


def _kernel(body, out, scratch, **kw):
    return plgpu.kernel(body, out_type=out, scratch_types=scratch, **kw)


def _copy_add_one(x_gmem, o_gmem, smem, barrier):
    plgpu.copy_gmem_to_smem(x_gmem, smem, barrier)
    plgpu.barrier_wait(barrier)
    smem[...] = smem[...] + 1.0
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(smem, o_gmem)
    plgpu.wait_smem_to_gmem(0)


def _smem_kernel(body, shape=(64, 128), **kw):
    return _kernel(body, jax.ShapeDtypeStruct(shape, F32),
                   [plgpu.SMEM(shape, F32), plgpu.Barrier(num_arrivals=1)], **kw)


def _undefined(body, match):
    """``body`` (on one SMEM buffer and its barrier) raises AsyncAccessError matching ``match``."""
    from interp.pallas.mosaic_gpu import AsyncAccessError
    with pytest.raises(AsyncAccessError, match=match):
        interp.interpret(_smem_kernel(body))(np.zeros((64, 128), np.float32))


@needs_plgpu
def test_tma_round_trip_through_smem():
    x = RNG.standard_normal((64, 128)).astype(np.float32)
    out = interp.interpret(_smem_kernel(_copy_add_one))(x)
    np.testing.assert_array_equal(out, x + np.float32(1))


@needs_plgpu
def test_tiled_swizzled_smem_holds_the_logical_values():
    # SMEM tiled (8, 64) and swizzled 128 B: a view with the same logical values, so a TMA copy
    # in and a store out give the input back, and a strided read of the view sees the rows.
    def body(x_gmem, o_gmem, smem, barrier):
        plgpu.copy_gmem_to_smem(x_gmem, smem, barrier)
        plgpu.barrier_wait(barrier)
        smem[8:16, :] = smem[0:8, :] * 2.0
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(smem, o_gmem)
        plgpu.wait_smem_to_gmem(0)
    shape = (64, 64)
    transforms = (plgpu.TilingTransform((8, 32)), plgpu.SwizzleTransform(128))
    f = _kernel(body, jax.ShapeDtypeStruct(shape, F32),
                [plgpu.SMEM(shape, F32, transforms=transforms), plgpu.Barrier(num_arrivals=1)])
    x = RNG.standard_normal(shape).astype(np.float32)
    want = x.copy()
    want[8:16] = x[0:8] * np.float32(2)
    np.testing.assert_array_equal(interp.interpret(f)(x), want)


@needs_plgpu
def test_read_of_smem_before_its_tma_barrier_is_undefined():
    # spec/pallas_mosaic_gpu.py UNDEFINED["tma-read-before-barrier"]
    def body(x_gmem, o_gmem, smem, barrier):
        plgpu.copy_gmem_to_smem(x_gmem, smem, barrier)
        o = smem[...]                     # the copy may still be writing it
        plgpu.barrier_wait(barrier)
        smem[...] = o
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(smem, o_gmem)
        plgpu.wait_smem_to_gmem(0)
    _undefined(body, r"kernel 'body'.*warpgroup 0.*read of .*smem.*TMA copy is still writing")


@needs_plgpu
@pytest.mark.parametrize("misuse, match", [
    ("overwrite", "TMA store still reads it"),     # UNDEFINED["smem-write-under-tma-store"]
    ("no wait", "ends with TMA stores still reading SMEM"),   # UNDEFINED["async-store-at-exit"]
])
def test_smem_under_a_tma_store(misuse, match):
    # spec/pallas_mosaic_gpu.py: SMEM a TMA store reads is in flight until wait_smem_to_gmem.
    def body(x_gmem, o_gmem, smem, barrier):
        plgpu.copy_gmem_to_smem(x_gmem, smem, barrier)
        plgpu.barrier_wait(barrier)
        plgpu.copy_smem_to_gmem(smem, o_gmem)
        if misuse == "overwrite":
            smem[...] = jnp.zeros(smem.shape, F32)   # before wait_smem_to_gmem
            plgpu.wait_smem_to_gmem(0)
    _undefined(body, match)


@needs_plgpu
def test_a_barrier_that_cannot_complete_is_a_deadlock_not_a_hang():
    # spec/pallas_mosaic_gpu.py UNDEFINED["barrier-deadlock"]: two arrivals expected, one comes.
    def body(x_gmem, o_gmem, smem, barrier):
        plgpu.copy_gmem_to_smem(x_gmem, smem, barrier)
        plgpu.barrier_wait(barrier)
    f = _kernel(body, jax.ShapeDtypeStruct((64, 128), F32),
                [plgpu.SMEM((64, 128), F32), plgpu.Barrier(num_arrivals=2)])
    from interp.pallas.mosaic_gpu import DeadlockError
    with pytest.raises(DeadlockError, match=r"warpgroup 0 waits for phase 0 of barrier.*"
                                            r"1 of 2 arrivals"):
        interp.interpret(f)(np.zeros((64, 128), np.float32))


def _producer_consumer(consumer_waits: bool):
    """Warpgroup 0 copies x into SMEM; warpgroup 1 waits on the copy's barrier (or not),
    doubles it and stores it."""
    def body(x_gmem, o_gmem, smem, barrier):
        wg = jax.lax.axis_index("wg")

        @pl_when(wg == 0)
        def _():
            plgpu.copy_gmem_to_smem(x_gmem, smem, barrier)

        @pl_when(wg == 1)
        def _():
            if consumer_waits:
                plgpu.barrier_wait(barrier)
            smem[...] = smem[...] * 2.0
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(smem, o_gmem)
            plgpu.wait_smem_to_gmem(0)
    return _smem_kernel(body, num_threads=2, thread_name="wg")


def pl_when(cond):
    from jax.experimental import pallas as pl
    return pl.when(cond)


@needs_plgpu
@pytest.mark.parametrize("grid_order", ["sequential", "shuffled"])
def test_warpgroups_synchronised_by_a_barrier(grid_order):
    x = RNG.standard_normal((64, 128)).astype(np.float32)
    out = interp.interpret(_producer_consumer(True), grid_order=grid_order, seed=3)(x)
    np.testing.assert_array_equal(out, x * np.float32(2))


@needs_plgpu
def test_a_warpgroup_reading_another_ones_copy_without_waiting_is_undefined():
    from interp.pallas.mosaic_gpu import AsyncAccessError
    with pytest.raises(AsyncAccessError, match="warpgroup 1: read"):
        interp.interpret(_producer_consumer(False))(np.zeros((64, 128), np.float32))


@needs_plgpu
@pytest.mark.parametrize("with_barrier", [True, False])
def test_warpgroups_sharing_smem_without_a_barrier_race(with_barrier):
    # Warpgroup 0 writes SMEM, warpgroup 1 reads it: ordered by a barrier (0 arrives after its
    # write, 1 waits) the value is defined; without one it depends on the schedule.
    def body(x_gmem, o_gmem, smem, barrier):
        wg = jax.lax.axis_index("wg")

        @pl_when(wg == 0)
        def _():
            smem[...] = jnp.full(smem.shape, 3.0, F32)
            if with_barrier:
                plgpu.barrier_arrive(barrier)

        @pl_when(wg == 1)
        def _():
            if with_barrier:
                plgpu.barrier_wait(barrier)
            o_gmem[...] = smem[...]
    f = _smem_kernel(body, num_threads=2, thread_name="wg")
    run = interp.interpret(f, grid_order="shuffled", seed=1)
    x = np.zeros((64, 128), np.float32)
    if with_barrier:
        np.testing.assert_array_equal(run(x), np.full((64, 128), 3, np.float32))
    else:
        from interp.pallas.mosaic_gpu import WarpgroupRaceError
        with pytest.raises(WarpgroupRaceError, match=r"warpgroup 1: read of .*smem.* which "
                                                     r"warpgroup 0 of block \(\) wrote"):
            run(x)


def _wgmma_kernel(m, k, n, *, wait: bool):
    from conformance.cases.pallas_mosaic_gpu import build_wgmma
    return build_wgmma(m, k, n, wait=wait)(None)


@needs_plgpu
def test_wgmma_is_the_exact_product_rounded_once():
    m, k, n = 64, 128, 128
    a = RNG.standard_normal((m, k)).astype(np.float16)
    b = RNG.standard_normal((k, n)).astype(np.float16)
    out = interp.interpret(_wgmma_kernel(m, k, n, wait=True))(a, b)
    # math.fsum: the exact sum of the exact f16 products, rounded once to float64, then to f32
    # (double rounding could differ only when the exact sum lies within 2**-53 relative of an
    # f32 rounding boundary).
    want = np.array([[math.fsum(float(a[i, j]) * float(b[j, c]) for j in range(k))
                      for c in range(n)] for i in range(m)]).astype(np.float32)
    np.testing.assert_array_equal(out, want)


def _wgmma_of_plainly_written_smem(fence: bool):
    """b reaches SMEM by a plain store (the generic proxy), a by TMA; then one wgmma. The tensor
    core reads SMEM operands through the async proxy: the plain write needs commit_smem
    (fence.proxy.async) before the wgmma."""
    from jax.experimental import pallas as pl
    t = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))

    def body(a_gmem, b_gmem, o_gmem, a_smem, b_smem, barrier):
        plgpu.copy_gmem_to_smem(a_gmem, a_smem, barrier)
        plgpu.barrier_wait(barrier)
        b_smem[...] = b_gmem[...]
        if fence:
            plgpu.commit_smem()

        def compute(acc_ref):
            plgpu.wgmma(acc_ref, a_smem, b_smem)
            plgpu.wgmma_wait(0)
            return acc_ref[...]
        o_gmem[...] = pl.run_scoped(compute, plgpu.ACC((64, 128), jnp.float32))
    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((64, 128), jnp.float32),
                        scratch_types=[plgpu.SMEM((64, 64), jnp.float16, transforms=t),
                                       plgpu.SMEM((64, 128), jnp.float16, transforms=t),
                                       plgpu.Barrier(num_arrivals=1)])


@needs_plgpu
def test_wgmma_of_smem_written_plainly_needs_commit_smem():
    # spec/pallas_mosaic_gpu.py commit_smem/c1 (wgmma's SMEM operands are async-proxy reads)
    from interp.pallas.mosaic_gpu import TmaRaceError
    a = RNG.integers(-4, 4, (64, 64)).astype(np.float16)
    b = RNG.integers(-4, 4, (64, 128)).astype(np.float16)
    want = a.astype(np.float32) @ b.astype(np.float32)     # small integers: exact in any order
    np.testing.assert_array_equal(interp.interpret(_wgmma_of_plainly_written_smem(True))(a, b), want)
    with pytest.raises(TmaRaceError, match=r"commit_smem/c1: .*wgmma \(SMEM operand\) accesses .*plain store"):
        interp.interpret(_wgmma_of_plainly_written_smem(False))(a, b)


@needs_plgpu
def test_reading_the_accumulator_before_wgmma_wait_is_undefined():
    # spec/pallas_mosaic_gpu.py UNDEFINED["accumulator-before-wgmma-wait"]
    if not hasattr(plgpu, "wgmma_accumulator_load"):
        pytest.skip("this JAX has no wgmma_accumulator_load(wait_n=None): every accumulator "
                    "read waits")
    from interp.pallas.mosaic_gpu import AsyncAccessError
    a = np.zeros((64, 128), np.float16)
    b = np.zeros((128, 128), np.float16)
    with pytest.raises(AsyncAccessError, match="accumulator .* while a wgmma still writes it"):
        interp.interpret(_wgmma_kernel(64, 128, 128, wait=False))(a, b)


@needs_plgpu
def test_every_mosaic_gpu_primitive_is_supported_or_refused_with_a_reason():
    from interp.coverage import all_primitives
    cov = interp.coverage()
    mine = {name for name, mods in all_primitives().items()
            if any("pallas.mosaic_gpu" in m for m in mods)}
    assert len(mine) > 30
    silent = sorted(name for name in mine if cov[name] == "unsupported")
    assert silent == []
    assert cov["inline_mgpu" if "inline_mgpu" in mine else "inline_mgpu_p"].startswith(
        "partial: only the proxy fences")


# --- the emulated device -----------------------------------------------------------------------

@pytest.mark.parametrize("name, cores", [("h100", 132), ("b200", 148)])
def test_emulated_device_answers_what_tracing_asks(name, cores):
    from jax._src import lib as jax_lib
    before = jax_lib.cuda_versions
    seen = {}

    def f(x):
        seen["cores"] = jax.sharding.get_abstract_mesh().abstract_device.num_cores
        seen["cuda"] = jax_lib.cuda_versions.cuda_runtime_get_version()
        return x + 1
    out = interp.interpret(f, emulated_device=name)(np.int32(1))
    assert out == 2 and seen == {"cores": cores, "cuda": 13000}
    assert jax_lib.cuda_versions is before   # restored after tracing


def test_emulated_device_nests():
    """Tracing under an emulated device inside another (a shipped kernel's builder emulates the
    device itself, interp.interpret(emulated_device=) around it) neither deadlocks nor leaks:
    the inner device is seen inside, the outer again after it, the machine after both."""
    from interp.emulated_device import tracing
    from jax._src import lib as jax_lib
    before = jax_lib.cuda_versions

    def cores():
        return jax.sharding.get_abstract_mesh().abstract_device.num_cores
    seen = []

    def nested():
        with tracing("h100"):
            with tracing("b200"):
                seen.append(cores())
            seen.append(cores())
    worker = threading.Thread(target=nested, daemon=True)   # (a deadlock fails, not hangs)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "nested emulated-device tracing deadlocked"
    assert seen == [148, 132]
    assert jax_lib.cuda_versions is before


def test_unknown_emulated_device_is_refused():
    with pytest.raises(ValueError, match="unknown emulated_device 'h200'"):
        interp.interpret(lambda x: x, emulated_device="h200")


# --- the kernels JAX ships, against what they computed on a real H100 ---------------------------
# tests/data/h100/README.md says where the recorded inputs and outputs come from.

def _recorded(name):
    import pathlib
    data = np.load(pathlib.Path(__file__).parent / "data" / "h100" / "mosaic_gpu_kernels.npz")
    ins = [data[f"{name}/in{i}"] for i in range(3) if f"{name}/in{i}" in data]
    return ins, data[f"{name}/out0"]


@needs_plgpu
def test_shipped_hopper_matmul_matches_the_h100_within_dot_product_bounds():
    from conformance.cases.pallas_mosaic_gpu import _hopper_matmul
    from conformance.checks import check
    from spec import compliance as C
    (a, b), h100 = _recorded("mgpu/hopper_matmul/f16")
    out = interp.interpret(_hopper_matmul(), emulated_device="h100")(a, b)
    bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    result = check(C.dot_product(a.shape[1]), out, h100, bound=bound)
    assert result.passed, result
    # ... and the reference is the kernel's own arithmetic, not the exact product: the kernel
    # accumulates each 64-wide K step into f32 and rounds the result to f16.
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16)
    assert check(C.dot_product(a.shape[1]), out, exact, bound=bound).passed


@needs_plgpu
@pytest.mark.parametrize("causal", [False, True])
def test_shipped_attention_matches_the_h100(causal):
    from conformance.cases.pallas_mosaic_gpu import _attention, attention_claim, attention_mode
    from conformance.checks import check
    (q, k, v), h100 = _recorded(f"mgpu/attention/causal={causal}")
    out = interp.interpret(_attention(causal), emulated_device="h100")(q, k, v)
    magnitude = float(np.abs(v).max())
    result = check(attention_mode(), out, h100, magnitude=magnitude)
    assert result.passed, result
    claim = np.asarray(attention_claim(q, k, v, causal))
    assert check(attention_mode(), out, claim, magnitude=magnitude).passed


# Supported rules of the dialect no case of conformance/cases/pallas_mosaic_gpu.py stages, and why.
NOT_IN_A_CASE = {
    "wgmma": "the value form appears only after run_state discharge, which the reference does not "
             "perform (run_state evaluates its body on refs)",
    "wgmma_accumulator_store": "no shipped kernel stores into an accumulator; the rule is a ref write",
    "barrier_arrive_and_wait": "JAX >= 0.12 only; no shipped kernel uses it",
    "set_max_registers": "no value effect; the shipped hopper matmul's trace has it on JAX 0.12",
    "print_layout": "no value effect (compile-time printing)",
    "async_prefetch": "no value effect (an L2 prefetch)",
    "griddepcontrol_wait": "no value effect for one kernel",
    "griddepcontrol_launch_dependents": "no value effect for one kernel",
    "_copysign": "bound only inside Mosaic GPU's lowering of sign, never in a traced program",
    "load": "plgpu.load: a ref read, as get",
    "store": "plgpu.store: a ref write, as swap",
    "layout_cast": "no value effect; the shipped attention's trace has it",
    "commit_group": "the shipped hopper matmul's trace has it",
    # multi-device: the spmd family's cases (spmd/pallas_mosaic_gpu/*), tests/test_spmd_mosaic_gpu.py
    "multimem_store": "multi-device: spmd/pallas_mosaic_gpu/all_gather/*",
    "multimem_load_reduce": "multi-device: spmd/pallas_mosaic_gpu/reduce_scatter/*",
    "semaphore_signal_multicast": "multi-device: spmd/pallas_mosaic_gpu/*",
}


@needs_plgpu
def test_every_supported_rule_is_in_a_case():
    from conformance.cases import pallas_mosaic_gpu as family
    from conformance.cli import case_primitives
    from interp.registry import REFUSED, RULES
    from interp.rules import pallas_mosaic_gpu
    from interp.coverage import all_primitives
    defined = set(all_primitives())   # (names differ by version: wgmma_accumulator_deref_p...)
    mine = {n for n, r in RULES.items() if r.__module__ == pallas_mosaic_gpu.__name__
            and n not in REFUSED and n in defined}
    mine -= set(NOT_IN_A_CASE) | {f"{n}_p" for n in NOT_IN_A_CASE}
    seen = set()
    for case in family.cases():
        if case.not_applicable:   # this JAX cannot express it (its rule's primitive is absent)
            continue
        if "/ops/" not in case.id and "/claims/" not in case.id:   # the feature kernels suffice
            seen |= case_primitives(case)
    assert mine - seen == set()


def _assert_grouped_product(out, lhs, rhs, sizes):
    """Rows of lhs in consecutive groups (sizes), group g times rhs[g]: out within
    DOT_PRODUCT(K) of the exact per-group product."""
    from conformance.checks import check
    from spec import compliance as C
    group = np.repeat(np.arange(len(sizes)), sizes)
    lhs64, rhs64 = lhs.astype(np.float64), rhs.astype(np.float64)
    exact = np.einsum("mk,mkn->mn", lhs64, rhs64[group])
    bound = np.einsum("mk,mkn->mn", np.abs(lhs64), np.abs(rhs64[group]))
    result = check(C.dot_product(lhs.shape[1]), exact.astype(out.dtype), out, bound=bound)
    assert result.passed, result


@needs_plgpu
def test_shipped_ragged_dot_is_the_grouped_product():
    # ragged_dot_mgpu.ragged_dot: rows of lhs in consecutive groups (group_sizes), group g
    # multiplied by rhs[g]; against the exact per-group product, within DOT_PRODUCT(K).
    from conformance.cases.pallas_mosaic_gpu import shipped_module
    rd = shipped_module("ragged_dot_mgpu")
    lhs = RNG.standard_normal((512, 128)).astype(np.float16)
    rhs = RNG.standard_normal((4, 128, 256)).astype(np.float16)
    sizes = np.array([128, 64, 192, 128], np.int32)
    out = interp.interpret(lambda l, r, g: rd.ragged_dot(
        l, r, group_sizes=g, block_m=64, block_n=64, block_k=64, max_concurrent_steps=2,
        grid_block_n=1), emulated_device="h100")(lhs, rhs, sizes)
    _assert_grouped_product(out, lhs, rhs, sizes)


@needs_plgpu
def test_shipped_ragged_dot_refills_a_slot_its_unwaited_wgmma_reads():
    # The same kernel with K = 4 blocks (more pipeline steps than max_concurrent_steps=2): at
    # step s the pipeline (delay_release=1) copies block s+1 into the slot wgmma(s-1) reads, and
    # the body never waits for its wgmmas (docs/mosaic-gpu-findings.md, finding 1). With
    # K = 2 blocks (the test above) no slot is refilled, so that run is defined.
    from conformance.cases.pallas_mosaic_gpu import shipped_module
    from interp.pallas.mosaic_gpu import AsyncAccessError
    rd = shipped_module("ragged_dot_mgpu")
    lhs = RNG.standard_normal((128, 256)).astype(np.float16)
    rhs = RNG.standard_normal((2, 256, 64)).astype(np.float16)
    sizes = np.array([64, 64], np.int32)
    with pytest.raises(AsyncAccessError, match=r"TMA copy \(copy_gmem_to_smem\) write of .*smem"
                                               r".* while a wgmma still reads it"):
        interp.interpret(lambda l, r, g: rd.ragged_dot(
            l, r, group_sizes=g, block_m=64, block_n=64, block_k=64, max_concurrent_steps=2,
            grid_block_n=1), emulated_device="h100")(lhs, rhs, sizes)


@needs_plgpu
@pytest.mark.parametrize("wait", [None, 1])
def test_a_later_wgmma_does_not_retire_an_earlier_one(wait):
    # The minimal form of finding 1: wgmma(a0) then wgmma(a1) on one accumulator, then a0's SMEM
    # overwritten. PTX ISA 9.7.15: only wgmma.wait_group retires a wgmma (a later one accumulating
    # into the same registers is ordered after it, not waited for); wgmma_wait(1) retires a0's.
    from jax.experimental import pallas as pl
    from interp.pallas.mosaic_gpu import AsyncAccessError

    def body(a_gmem, b_gmem, o_gmem, a_smem, b_smem, barrier):
        plgpu.copy_gmem_to_smem(a_gmem, a_smem, barrier)
        plgpu.copy_gmem_to_smem(b_gmem, b_smem, barrier)
        plgpu.barrier_wait(barrier)

        def compute(acc_ref):
            plgpu.wgmma(acc_ref, a_smem.at[0], b_smem)
            plgpu.wgmma(acc_ref, a_smem.at[1], b_smem)
            if wait is not None:
                plgpu.wgmma_wait(wait)
            a_smem[0] = jnp.zeros((64, 64), jnp.float16)   # a0's operand
            plgpu.wgmma_wait(0)
            return acc_ref[...]
        o_gmem[...] = pl.run_scoped(compute, plgpu.ACC((64, 64), jnp.float32))
    t = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))
    f = _kernel(body, jax.ShapeDtypeStruct((64, 64), F32),
                [plgpu.SMEM((2, 64, 64), jnp.float16, transforms=t),
                 plgpu.SMEM((64, 64), jnp.float16, transforms=t), plgpu.Barrier(num_arrivals=2)])
    a = RNG.standard_normal((2, 64, 64)).astype(np.float16)
    b = RNG.standard_normal((64, 64)).astype(np.float16)
    if wait is None:
        with pytest.raises(AsyncAccessError, match="while a wgmma still reads it"):
            interp.interpret(f)(a, b)
    else:
        from conformance.checks import check
        from spec import compliance as C
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        result = check(C.dot_product(128), (a64[0] @ b64 + a64[1] @ b64).astype(np.float32),
                       interp.interpret(f)(a, b),
                       bound=np.abs(a64[0]) @ np.abs(b64) + np.abs(a64[1]) @ np.abs(b64))
        assert result.passed, result


@needs_plgpu
def test_shipped_attention_through_the_pipeline_emitter_is_attention():
    from conformance.cases.pallas_mosaic_gpu import attention_claim, attention_mode, shipped_module
    from conformance.checks import check
    am = shipped_module("attention_mgpu")
    cfg = am.TuningConfig(block_q=64, block_kv=64, max_concurrent_steps=2)
    q, k, v = (RNG.standard_normal((1, 256, 2, 64)).astype(np.float16) for _ in range(3))
    fn = functools.partial(am.attention_with_pipeline_emitter, config=cfg)
    out = interp.interpret(fn, emulated_device="h100")(q, k, v)
    result = check(attention_mode(), np.asarray(attention_claim(q, k, v, False)), out,
                   magnitude=float(np.abs(v).max()))
    assert result.passed, result


# --- Blackwell: tcgen05 and TMEM ------------------------------------------------------------------
needs_tmem = pytest.mark.skipif(plgpu is None or not hasattr(plgpu, "tcgen05_mma"),
                                reason="this JAX's Mosaic GPU has no tcgen05_mma / TMEM")


def _exact_product(a, b, acc=None):
    """acc + a @ b: the exact sum of the accumulator and the exact products (math.fsum), rounded
    once to float64, then to f32."""
    acc = np.zeros((a.shape[0], b.shape[1])) if acc is None else acc
    return np.array([[math.fsum([float(acc[i, c])] + [float(a[i, j]) * float(b[j, c])
                                                      for j in range(a.shape[1])])
                      for c in range(b.shape[1])] for i in range(a.shape[0])]).astype(np.float32)


@needs_tmem
@pytest.mark.parametrize("commit", ["mma_barrier", "commit_arrive"])
def test_tcgen05_mma_accumulates_in_tmem_exactly_rounded(commit):
    # Two MMAs over the halves of K, the second accumulating (accumulate=True): acc = a @ b.
    from conformance.cases.pallas_mosaic_gpu import build_tcgen05
    a = RNG.standard_normal((128, 128)).astype(np.float16)
    b = RNG.standard_normal((128, 128)).astype(np.float16)
    out = interp.interpret(build_tcgen05(128, 128, 128, commit=commit)(None))(a, b)
    half = 64
    # The accumulator is rounded to f32 after each MMA (PTX: D = A*B + D per instruction).
    want = _exact_product(a[:, half:], b[half:], acc=_exact_product(a[:, :half], b[:half]))
    np.testing.assert_array_equal(out, want)


@needs_tmem
def test_reading_tmem_before_the_mma_commit_barrier_is_undefined():
    # spec/pallas_mosaic_gpu.py UNDEFINED["tmem-read-before-commit"]
    from conformance.cases.pallas_mosaic_gpu import build_tcgen05
    from interp.pallas.mosaic_gpu import AsyncAccessError
    z = np.zeros((128, 128), np.float16)
    with pytest.raises(AsyncAccessError, match=r"read of .*tmem.* while a tcgen05_mma still "
                                               r"writes it: no tcgen05_commit_arrive"):
        interp.interpret(build_tcgen05(128, 128, 128, commit="none")(None))(z, z)


def _tmem_kernel(body, shape=(128, 128)):
    return _kernel(body, jax.ShapeDtypeStruct(shape, F32),
                   [plgpu.TMEM(shape, F32), plgpu.Barrier(orders_tensor_core=True)])


@needs_tmem
@pytest.mark.parametrize("waits", [True, False])
def test_overwriting_tmem_an_async_load_still_reads_is_undefined(waits):
    # spec/pallas_mosaic_gpu.py UNDEFINED["tmem-write-under-load"]
    def body(x_gmem, o_gmem, tmem, barrier):
        plgpu.async_store_tmem(tmem, x_gmem[...])
        plgpu.commit_tmem()
        o_gmem[...] = plgpu.async_load_tmem(tmem) * 2.0
        if waits:
            plgpu.wait_load_tmem()
        plgpu.async_store_tmem(tmem, jnp.zeros((128, 128), F32))
        plgpu.commit_tmem()
    x = RNG.standard_normal((128, 128)).astype(np.float32)
    run = interp.interpret(_tmem_kernel(body))
    if waits:
        np.testing.assert_array_equal(run(x), x * np.float32(2))
    else:
        from interp.pallas.mosaic_gpu import AsyncAccessError
        with pytest.raises(AsyncAccessError, match="async_load_tmem .* may still read it "
                                                   r"\(no wait_load_tmem\)"):
            run(x)


@needs_tmem
def test_reading_tmem_stored_without_commit_tmem_is_undefined():
    # spec/pallas_mosaic_gpu.py UNDEFINED["tmem-store-before-commit"]
    def body(x_gmem, o_gmem, tmem, barrier):
        plgpu.async_store_tmem(tmem, x_gmem[...])
        o_gmem[...] = plgpu.async_load_tmem(tmem)
        plgpu.wait_load_tmem()
    from interp.pallas.mosaic_gpu import AsyncAccessError
    with pytest.raises(AsyncAccessError, match="async_store_tmem wrote with no commit_tmem"):
        interp.interpret(_tmem_kernel(body))(np.zeros((128, 128), np.float32))


@needs_tmem
def test_collective_scaled_and_sparse_tcgen05_are_refused_by_name():
    from interp.registry import REFUSED
    assert "scale-factor layout" in REFUSED["async_copy_scales_to_tmem"]
    assert "metadata layout" in REFUSED["async_copy_sparse_metadata_to_tmem"]


@needs_tmem
@pytest.mark.parametrize("via", ["registers", "smem"])
def test_tmem_round_trip(via):
    from conformance.cases.pallas_mosaic_gpu import build_tmem_round_trip
    x = RNG.standard_normal((128, 128)).astype(np.float32)
    out = interp.interpret(build_tmem_round_trip((128, 128), via)(None))(x)
    np.testing.assert_array_equal(out, x * np.float32(2))


# --- cluster launch control -------------------------------------------------------------------------
needs_dynamic_scheduling = pytest.mark.skipif(
    plgpu is None or not hasattr(plgpu, "dynamic_scheduling_loop"),
    reason="this JAX's Mosaic GPU has no dynamic_scheduling_loop (cluster launch control)")


@needs_dynamic_scheduling
@pytest.mark.parametrize("grid_order", ["sequential", "shuffled"])
def test_dynamic_scheduling_claims_every_block_once(grid_order):
    # Each claimed block records which launched cluster computed it: every block is computed
    # exactly once whoever claims it; launching in order, the first cluster cancels every later
    # launch (spec/pallas_mosaic_gpu.py try_cluster_cancel), shuffled, some launches survive.
    from jax.experimental import pallas as pl

    def body(o_gmem):
        me = jax.lax.axis_index("g")

        @plgpu.dynamic_scheduling_loop(grid_names=("g",))
        def _(info):
            (i,) = info.index
            o_gmem[pl.ds(i, 1)] = o_gmem[pl.ds(i, 1)] * 0 + me + 1
    f = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((8,), jnp.int32), grid=(8,),
                     grid_names=("g",))
    out = interp.interpret(f, grid_order=grid_order, seed=4, uninitialized="zero")()
    assert (out >= 1).all()   # every block claimed
    if grid_order == "sequential":
        np.testing.assert_array_equal(out, np.ones(8, np.int32))
    else:
        assert len(set(out.tolist())) > 1


# --- the Blackwell kernels JAX ships (no B200 outputs are recorded: only the exact product) -------
def _blackwell_matmul(collective=False):
    from conformance.cases.pallas_mosaic_gpu import shipped_module
    bm = shipped_module("blackwell_matmul_mgpu")
    cfg = bm.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                          collective=collective, epilogue_tile_n=64)
    return lambda a, b: bm.matmul_kernel(a, b, cfg)


# --- clusters ---------------------------------------------------------------------------------------
needs_clusters = pytest.mark.skipif(plgpu is None or not hasattr(plgpu, "ClusterBarrier"),
                                    reason="this JAX's Mosaic GPU has no ClusterBarrier")


@needs_clusters
@pytest.mark.parametrize("grid_order", ["sequential", "shuffled"])
def test_multicast_tma_gives_every_block_of_the_cluster_the_data(grid_order):
    from conformance.cases.pallas_mosaic_gpu import build_cluster_multicast
    x = RNG.standard_normal((64, 128)).astype(np.float32)
    out = interp.interpret(build_cluster_multicast((64, 128))(None), grid_order=grid_order,
                           seed=1)(x)
    np.testing.assert_array_equal(out, np.concatenate([x, x * np.float32(2)]))


@needs_clusters
def test_a_block_missing_from_a_multicast_copy_deadlocks_the_others():
    # Every block of the collective must issue the copy (launch_context.py async_copy: "the
    # behavior is undefined otherwise"): block 0's barrier waits for block 1's share of the
    # bytes, which never comes.
    from conformance.cases.pallas_mosaic_gpu import build_cluster_multicast
    from interp.pallas.mosaic_gpu import DeadlockError
    with pytest.raises(DeadlockError, match=r"block \(0,\), warpgroup 0 waits for phase 0 .* "
                                            r"16384 transaction bytes pending"):
        interp.interpret(build_cluster_multicast((64, 128), every_block_issues=False)(None))(
            np.zeros((64, 128), np.float32))


@needs_clusters
def test_partitioned_copy_gives_each_block_its_slice():
    from conformance.cases.pallas_mosaic_gpu import build_cluster_partitioned
    x = RNG.standard_normal((128, 128)).astype(np.float32)
    out = interp.interpret(build_cluster_partitioned((128, 128))(None))(x)
    np.testing.assert_array_equal(out, x * np.float32(2))


@needs_clusters
def test_a_cluster_barrier_waits_for_every_block():
    # Block 1 writes SMEM of its own, then both arrive on a cluster barrier; block 0 reading its
    # copy of the barrier completes only when block 1 arrived too (2 arrivals expected): without
    # block 1's arrival the wait is a deadlock.
    from jax.experimental import pallas as pl

    def kernel(arrive_from_1):
        def body(o_gmem, everyone):
            b = jax.lax.axis_index("c")

            @pl.when(jnp.logical_or(arrive_from_1, b == 0))
            def _():
                plgpu.barrier_arrive(everyone)
            plgpu.barrier_wait(everyone)
            o_gmem[pl.ds(b, 1)] = jnp.full((1,), 1, jnp.int32) + b
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((2,), jnp.int32), cluster=(2,),
                            cluster_names=("c",),
                            scratch_types=[plgpu.ClusterBarrier(collective_axes=("c",))])
    np.testing.assert_array_equal(interp.interpret(kernel(True))(), [1, 2])
    from interp.pallas.mosaic_gpu import DeadlockError
    with pytest.raises(DeadlockError, match="0 of 2 arrivals|1 of 2 arrivals"):
        interp.interpret(kernel(False))()


@needs_clusters
def test_shipped_blackwell_ragged_dot_is_the_grouped_product():
    # blackwell_ragged_dot_mgpu: 2-CTA clusters (collective tcgen05_mma, partitioned TMA, cluster
    # barriers); the kernel reads its SM count off jax.local_devices() (the emulated B200: 148).
    # Its collective=False path reads axis_index("x") of a cluster axis it does not create, so
    # only collective=True traces. No B200 output is recorded: checked against the exact
    # per-group product within DOT_PRODUCT(K).
    from conformance.cases.pallas_mosaic_gpu import shipped_module
    rd = shipped_module("blackwell_ragged_dot_mgpu")
    bm = shipped_module("blackwell_matmul_mgpu")
    cfg = rd.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                          collective=True, grid_tile_width=1,
                          grid_minor_dim=bm.MatmulDimension.N)
    lhs = RNG.standard_normal((512, 128)).astype(np.float16)
    rhs = RNG.standard_normal((4, 128, 256)).astype(np.float16)
    sizes = np.array([128, 64, 192, 128], np.int32)
    out = interp.interpret(lambda l, r, g: rd.ragged_dot_kernel(l, r, g, cfg),
                           emulated_device="b200")(lhs, rhs, sizes)
    _assert_grouped_product(out, lhs, rhs, sizes)


@needs_clusters
@pytest.mark.parametrize("collective, shape, match", [
    # The store warpgroup ends each tile with wait_smem_to_gmem(1): after the last tile one TMA
    # store still reads SMEM when the kernel ends (spec/pallas_mosaic_gpu.py
    # UNDEFINED["async-store-at-exit"]; JAX's GPU interpret mode raises the same).
    (False, (256, 128, 256), r"block \(0,\), warpgroup 1: the warpgroup ends with TMA stores "
                             "still reading SMEM"),
    # 2-CTA clusters without cluster_axes for plgpu.dynamic_scheduling_loop ("This must be
    # passed in if the kernel uses a cluster size > 1", helpers.py): both blocks issue a
    # cancellation request, each response is multicast to both blocks (mosaic/gpu/utils.py
    # try_cluster_cancel: .multicast::cluster::all), so block 1's overwrites what block 0 reads.
    (True, (512, 128, 512), r"read of .*int8\[2, 16\].* while a TMA copy is still writing it"),
])
def test_shipped_blackwell_matmul_is_reported_undefined(collective, shape, match):
    # No B200 output is recorded; the reference stops at the first undefined access.
    from interp.pallas.mosaic_gpu import AsyncAccessError
    m, k, n = shape
    a = RNG.standard_normal((m, k)).astype(np.float16)
    b = RNG.standard_normal((k, n)).astype(np.float16)
    with pytest.raises(AsyncAccessError, match=match):
        interp.interpret(_blackwell_matmul(collective), emulated_device="b200")(a, b)


# --- semaphores: Mosaic GPU's and Pallas's generic primitives share their names -------------------
@needs_plgpu
@pytest.mark.parametrize("signal", ["semaphore_signal", "semaphore_signal_parallel"])
def test_mosaic_gpu_semaphores_order_warpgroups(signal):
    # spec/pallas_mosaic_gpu.py SEMAPHORE_NAMES: plgpu.semaphore_signal / semaphore_wait bind
    # Mosaic GPU's own primitives (with memory_scope), named as the generic ones TPU kernels bind.
    from jax._src.pallas import primitives as generic
    from jax._src.pallas.mosaic_gpu import primitives as mgpu_prims
    if not hasattr(plgpu, "semaphore_signal_parallel"):
        pytest.skip("this JAX's Mosaic GPU has no semaphore_signal_parallel")
    assert mgpu_prims.semaphore_signal_p is not generic.semaphore_signal_p
    assert mgpu_prims.semaphore_signal_p.name == generic.semaphore_signal_p.name

    from conformance.cases.pallas_mosaic_gpu import build_semaphore_handoff
    f = build_semaphore_handoff((8, 128), signal)(None)
    jaxpr = str(jax.make_jaxpr(f)(np.ones((8, 128), np.float32)))
    assert "memory_scope" in jaxpr   # Mosaic GPU's semaphore_wait, not the generic one
    x = RNG.standard_normal((8, 128)).astype(np.float32)
    for order in ("sequential", "shuffled"):
        out = interp.interpret(f, grid_order=order, seed=3)(x)
        np.testing.assert_array_equal(out, (x + np.float32(1)) * np.float32(2))


@needs_plgpu
def test_a_mosaic_gpu_scratch_semaphore_is_one_per_block():
    # Scratch semaphores live in GMEM with block-local scope: each block (CTA) has its own
    # (lowering.py: scope_idx = block_idx() for _is_block_local_scope). Block 1's signal lands
    # on its own semaphore, so block 0 waits forever: a deadlock.
    if not hasattr(plgpu, "ClusterBarrier"):
        pytest.skip("this JAX's Mosaic GPU has no clusters")
    from jax.experimental import pallas as pl

    def body(o_gmem, sem):
        b = jax.lax.axis_index("c")

        @pl.when(b == 1)
        def _():
            o_gmem[pl.ds(1, 1)] = jnp.full((1,), 7, jnp.int32)
            plgpu.semaphore_signal(sem, 1)

        @pl.when(b == 0)
        def _():
            plgpu.semaphore_wait(sem, 1)
            o_gmem[pl.ds(0, 1)] = jnp.full((1,), 5, jnp.int32)
    f = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((2,), jnp.int32), cluster=(2,),
                     cluster_names=("c",), scratch_types=[plgpu.SemaphoreType.REGULAR])
    from interp.errors import UndefinedBehaviorError
    with pytest.raises(UndefinedBehaviorError, match="semaphore_wait"):
        interp.interpret(f)()


# --- the other Hopper kernels JAX ships ---------------------------------------------------------
@needs_clusters
@pytest.mark.parametrize("cluster", [None, "M"])
def test_shipped_mixed_type_matmul_is_the_product(cluster):
    # hopper_mixed_type_matmul_mgpu: int8 @ bf16 -> bf16, with and without 2-block clusters
    # (multicast TMA through the warp-specialized pipeline); its SM count comes off
    # jax.extend.backend.get_default_device() (the emulated H100). Against the exact product
    # within DOT_PRODUCT(K) (no H100 output of this kernel is recorded).
    from conformance.cases.pallas_mosaic_gpu import shipped_module
    from conformance.checks import check
    from spec import compliance as C
    mm = shipped_module("hopper_mixed_type_matmul_mgpu")
    cfg = mm.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                          cluster_dimension=None if cluster is None else mm.MatmulDimension.M)
    a = RNG.integers(-128, 127, (256, 256)).astype(np.int8)
    b = RNG.standard_normal((256, 256)).astype(jnp.bfloat16)
    out = interp.interpret(lambda a, b: mm.mixed_matmul_kernel(a, b, out_dtype=jnp.bfloat16,
                                                               config=cfg),
                           emulated_device="h100")(a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    result = check(C.dot_product(256), (a64 @ b64).astype(jnp.bfloat16), out,
                   bound=np.abs(a64) @ np.abs(b64))
    assert result.passed, result


@needs_plgpu
def test_shipped_transposed_ragged_dot_writes_smem_a_wgmma_still_reads():
    # transposed_ragged_dot_mgpu (SM count off jax.devices()[0].core_count: the emulated H100)
    # views lhs past its end ("potentially out of bounds, but we never access the out of bound
    # part": a Mosaic GPU view is address arithmetic, only accessed elements must exist). Its
    # pipeline (delay_release=1, no wgmma_wait in the body when max_concurrent_steps > 1: the
    # kernel relies on an "implicit wait of wgmma") refills at step s the SMEM slot the wgmma of
    # step s-1 reads, with that wgmma never waited for: neither JAX's lowering nor the PTX ISA
    # has such a wait (docs/mosaic-gpu-findings.md, finding 1):
    # spec/pallas_mosaic_gpu.py UNDEFINED["smem-write-under-wgmma"].
    from conformance.cases.pallas_mosaic_gpu import shipped_module
    from interp.pallas.mosaic_gpu import AsyncAccessError
    tr = shipped_module("transposed_ragged_dot_mgpu")
    lhs = RNG.standard_normal((512, 128)).astype(np.float16)
    rhs = RNG.standard_normal((512, 128)).astype(np.float16)
    sizes = np.array([128, 64, 192, 128], np.int32)
    with pytest.raises(AsyncAccessError, match=r"TMA copy \(copy_gmem_to_smem\) write of .*smem"
                                               r".* while a wgmma still reads it"):
        interp.interpret(lambda l, r, g: tr.transposed_ragged_dot(
            l, r, group_sizes=g, block_m=64, block_n=64, block_k=64, max_concurrent_steps=2,
            grid_block_n=1), emulated_device="h100")(lhs, rhs, sizes)


def _bound_parameters():
    """{primitive name: set of parameter names} of every ``<prim>_p.bind(...)`` in the installed
    JAX's Mosaic GPU primitives (read as source: JAX 0.10.2's does not import without absl-py)."""
    import ast
    import importlib.util
    import pathlib
    root = pathlib.Path(importlib.util.find_spec("jax").origin).parent / "_src/pallas/mosaic_gpu"
    tree = ast.parse("\n".join((root / f).read_text() for f in ("primitives.py", "core.py")))
    names = {t.id: node.value.args[0].value for node in ast.walk(tree)
             if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
             and getattr(node.value.func, "attr", "") == "Primitive" and node.value.args
             and isinstance(node.value.args[0], ast.Constant)
             for t in node.targets if isinstance(t, ast.Name)}
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "bind":
            var = ast.unparse(node.func.value).split(".")[-1]
            if var in names:
                bound.setdefault(names[var], set()).update(k.arg for k in node.keywords if k.arg)
    return bound


def test_every_rule_names_the_parameters_this_jax_binds():
    # Every parameter the installed JAX binds is named by the rule (none left to **params), and
    # every parameter the rule requires is bound (version-specific ones default to None).
    from interp.evaluator import _keywords
    from interp.registry import REFUSED, RULES
    from interp.rules import pallas_mosaic_gpu
    bound = _bound_parameters()
    checked = 0
    for name, params in sorted(bound.items()):
        rule = RULES.get(name)
        if rule is None or rule.__module__ != pallas_mosaic_gpu.__name__ or name in REFUSED:
            continue
        if name == "wgmma":   # bound with **kwargs: wgmma_ref's transform trees
            params = bound["wgmma_ref"]
        keywords = _keywords(rule)
        assert keywords is not None, f"{name}: the rule takes **params"
        accepted, required = keywords
        assert params <= accepted, (name, params - accepted)
        assert required <= params, (name, required - params)
        checked += 1
    assert checked >= 25


# --- warps and views ----------------------------------------------------------------------------
@needs_tmem   # plgpu.warp_map arrived with the Blackwell kernels (JAX 0.11)
def test_warps_of_a_warp_map_run_concurrently():
    # Warp 0 waits for a barrier warp 1 arrives on after it: only warps running concurrently
    # (a fork/join, lowering.py _mpmd_map_lowering_rule; on JAX 0.10.2 warp_map binds core_map,
    # lowered by _core_map_lowering_rule) let warp 0 finish.
    from jax.experimental import pallas as pl
    if not hasattr(plgpu, "warp_map"):
        pytest.skip("this JAX's Mosaic GPU has no warp_map")

    def body(o_gmem, barrier):
        @plgpu.warp_map
        def _(warp):
            @pl.when(warp == 0)
            def _():
                plgpu.barrier_wait(barrier)
                o_gmem[pl.ds(0, 1)] = jnp.full((1,), 10, jnp.int32)

            @pl.when(warp == 1)
            def _():
                o_gmem[pl.ds(1, 1)] = jnp.full((1,), 11, jnp.int32)
                plgpu.barrier_arrive(barrier)
    f = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((2,), jnp.int32),
                     scratch_types=[plgpu.Barrier(num_arrivals=1)])
    np.testing.assert_array_equal(interp.interpret(f)(), [10, 11])


@needs_plgpu
def test_core_map_over_a_mosaic_gpu_mesh_writes_the_refs_it_closes_over():
    """pl.core_map over plgpu.Mesh: JAX 0.10.2 binds core_map (its meaning: JAX's discharge,
    mosaic_gpu/core.py _gpu_mesh_discharge_rule, to an mpmd_map over the mesh), 0.11 and later
    an mpmd_map. Each block writes its rows; the answer by hand."""
    from jax.experimental import pallas as pl
    from tests.support import core_map_over_refs

    def body(x_ref, o_ref):
        i = jax.lax.axis_index("x")
        o_ref[pl.ds(i * 8, 8)] = x_ref[pl.ds(i * 8, 8)] * 2 + i.astype(F32)

    f = core_map_over_refs(plgpu.Mesh(grid=(2,), grid_names=("x",)), body)
    x = RNG.standard_normal((16, 128)).astype(np.float32)
    want = 2 * x + np.repeat(np.arange(2, dtype=np.float32), 8)[:, None]
    np.testing.assert_array_equal(interp.interpret(f, detect_races=True)(x)[1], want)


@needs_plgpu
def test_a_warp_core_map_with_scratch_is_refused_naming_it():
    """JAX 0.10.2's warp_map form, core_map over a WarpMesh, with scratch_shapes: its Mosaic
    GPU lowering (_core_map_lowering_rule) passes the body no arguments, so nothing defines
    it; the reference refuses it by name."""
    from jax._src.pallas import core as pallas_core
    from jax.experimental import pallas as pl
    from interp.errors import UnsupportedPrimitiveError
    if not hasattr(pallas_core, "core_map_p"):
        pytest.skip("this JAX's pl.core_map binds mpmd_map (core_map_p is JAX 0.10.2's)")

    def body(o_gmem):
        @pl.core_map(plgpu.WarpMesh(axis_name="warp"), scratch_shapes=[plgpu.SMEM((2,), jnp.int32)])
        def _(scratch):
            o_gmem[...] = jnp.zeros((2,), jnp.int32)
    f = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((2,), jnp.int32))
    with pytest.raises(UnsupportedPrimitiveError, match=r"core_map.*scratch_shapes.*JAX 0\.10"):
        interp.interpret(f)()


@needs_plgpu
@pytest.mark.parametrize("rows", [64, 65])
def test_a_gmem_view_past_its_buffer_is_address_arithmetic(rows):
    # x_gmem.at[64:192] reaches past x's 128 rows; only what a copy then touches must exist
    # (interp/rules/pallas_mosaic_gpu.py _address_view): rows 64..127 copy, row 128 is out of
    # bounds.
    from jax.experimental import pallas as pl
    from interp.errors import OutOfBoundsError

    def body(x_gmem, o_gmem, smem, barrier):
        start = jax.lax.optimization_barrier(jnp.int32(64))   # dynamic: JAX checks static ones
        plgpu.copy_gmem_to_smem(x_gmem.at[pl.ds(start, 128)].at[pl.ds(0, rows)], smem, barrier)
        plgpu.barrier_wait(barrier)
        o_gmem[...] = smem[pl.ds(0, 64)]
    f = _kernel(body, jax.ShapeDtypeStruct((64, 128), F32),
                [plgpu.SMEM((rows, 128), F32), plgpu.Barrier(num_arrivals=1)])
    x = RNG.standard_normal((128, 128)).astype(np.float32)
    if rows == 64:
        np.testing.assert_array_equal(interp.interpret(f)(x), x[64:])
    else:
        with pytest.raises(OutOfBoundsError, match="dimension 0"):
            interp.interpret(f)(x)


def test_a_chain_of_slicings_selects_what_resolving_positions_selects():
    # _view composes chains of unit-stride slicings and integer indices to slices (no position
    # arrays of the whole buffer); the elements, in order, are those the general resolution
    # (interp/ref_indexing.py _resolve_chain: positions followed through every view) selects.
    from jax._src.state.indexing import NDIndexer, Slice

    from interp import ref_indexing
    from interp.pallas.memory import KernelRef
    from interp.rules.pallas_mosaic_gpu import _view

    def ix(shape, *indices):
        return NDIndexer.from_indices_shape(tuple(indices), shape)
    x = np.arange(6 * 8 * 10, dtype=np.float32).reshape(6, 8, 10)
    chains = [
        (ix((6, 8, 10), Slice(1, 4), Slice(2, 6), Slice(0, 10)), ix((4, 6, 10), 2, Slice(1, 3), Slice(5, 5))),
        (ix((6, 8, 10), np.int32(5), Slice(0, 8), Slice(3, 7)), ix((8, 4), Slice(np.int32(2), 6), 1)),
        (ix((6, 8, 10), Slice(0, 6), Slice(0, 8), Slice(0, 10)), ix((6, 8, 10), Slice(2, 2), 7, 9),
         ix((2,), Slice(1, 1))),
    ]
    for chain in chains:
        ref = KernelRef(x.copy(), "x", None, kind="gmem")
        target, index = _view(None, ref, chain)
        assert target is ref and all(type(i) in (int, slice) for i in index)
        positions, _ = ref_indexing._resolve_chain(None, ref, chain, False)
        np.testing.assert_array_equal(ref.array[index], x[positions])


# --- reductions across a warpgroup's layout and Ampere mma ---------------------------------------
needs_reductions = pytest.mark.skipif(plgpu is None or not hasattr(plgpu, "sum"),
                                      reason="this JAX's Mosaic GPU has no plgpu.sum / max / "
                                             "min / prod (mosaic_gpu_reduce_*: JAX >= 0.12)")


def _reduce_rows(kind, x, dtype=F32):
    reduce = getattr(plgpu, kind)

    def body(x_gmem, o_gmem):
        o_gmem[...] = reduce(x_gmem[...], axis=1)
    f = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape[:1], dtype))
    return interp.interpret(f)(x)


@needs_reductions
def test_plgpu_sum_is_the_correctly_rounded_row_sum():
    # spec/pallas_mosaic_gpu.py REDUCTIONS: each row's exact sum (math.fsum) rounded once to
    # f32, whatever order the hardware's shuffle tree takes. Row 0 cancels catastrophically:
    # 1e8 + 1 - 1e8 + 1 sums to 0 or 1 in f32 left to right, exactly 2.
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    x[0, :4] = [1e8, 1, -1e8, 1]
    x[0, 4:] = 0
    want = np.array([math.fsum(map(float, row)) for row in x], np.float32)
    out = _reduce_rows("sum", x)
    np.testing.assert_array_equal(out, want)
    assert out[0] == 2


@needs_reductions
@pytest.mark.parametrize("kind", ["max", "min"])
def test_plgpu_max_min_are_exact_and_propagate_nan(kind):
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    x[3, 17] = np.nan   # the lowering's max.NaN / min.NaN propagate NaN
    out = _reduce_rows(kind, x)
    want = getattr(np, kind)(x, axis=1)   # NumPy's max/min propagate NaN too
    np.testing.assert_array_equal(out, want)
    assert np.isnan(out[3])


@needs_reductions
def test_plgpu_prod_is_the_correctly_rounded_row_product():
    x = RNG.uniform(0.9, 1.1, (128, 64)).astype(np.float32)
    from fractions import Fraction
    want = np.array([float(math.prod(Fraction(float(v)) for v in row)) for row in x], np.float32)
    np.testing.assert_array_equal(_reduce_rows("prod", x), want)


@needs_reductions
def test_plgpu_sum_of_integers_wraps():
    x = np.full((128, 64), 2**26, np.int32)   # 64 * 2**26 = 2**32: wraps to 0
    x[1] = RNG.integers(-1000, 1000, 64)
    want = x.astype(np.int64).sum(axis=1).astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(_reduce_rows("sum", x, jnp.int32), want)


@needs_plgpu
def test_plgpu_mma_is_acc_plus_the_product():
    # Ampere mma.sync: f16 operands, f32 accumulator, against the exact sum (math.fsum) of the
    # accumulator and the products (each exact in float64), rounded once to f32.
    if not hasattr(plgpu, "mma"):
        pytest.skip("this JAX's Mosaic GPU has no plgpu.mma")
    from conformance.cases.pallas_mosaic_gpu import build_mma
    acc = RNG.standard_normal((64, 64)).astype(np.float32)
    a = RNG.standard_normal((64, 32)).astype(np.float16)
    b = RNG.standard_normal((32, 64)).astype(np.float16)
    out = interp.interpret(build_mma(64, 32, 64)(None))(acc, a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = np.array([[math.fsum([float(acc[i, j]), *(a64[i] * b64[:, j])]) for j in range(64)]
                     for i in range(64)], np.float32)
    np.testing.assert_array_equal(out, want)


@needs_tmem
@pytest.mark.parametrize("reduce", ["max", "min", "absmax", "absmin"])
def test_tmem_load_with_reduce_gives_row_extremes_and_canonical_nan(reduce):
    # async_load_tmem(reduce=...): the loaded rows and their max/min/|max|/|min| along the last
    # dimension; f32 lowers to tcgen05.ld.red.<op>.NaN.f32 (mosaic/gpu/tcgen05.py _tmem_load),
    # so a row holding a NaN reduces to the canonical NaN 0x7fffffff.
    import inspect
    if "reduce" not in inspect.signature(plgpu.async_load_tmem).parameters:
        pytest.skip("this JAX's async_load_tmem has no reduce (JAX >= 0.11)")

    def body(x_gmem, o_gmem, r_gmem, tmem):
        plgpu.async_store_tmem(tmem, x_gmem[...])
        plgpu.commit_tmem()
        o_gmem[...], r_gmem[...] = plgpu.async_load_tmem(tmem, reduce=reduce)
        plgpu.wait_load_tmem()
    f = plgpu.kernel(body, out_type=(jax.ShapeDtypeStruct((128, 128), F32),
                                     jax.ShapeDtypeStruct((128,), F32)),
                     scratch_types=[plgpu.TMEM((128, 128), F32)])
    x = RNG.standard_normal((128, 128)).astype(np.float32)
    x[5, 9] = np.array(0xFFC00001, np.uint32).view(np.float32)   # a negative NaN with a payload
    out, red = interp.interpret(f)(x)
    np.testing.assert_array_equal(out, x)
    v = np.abs(x) if reduce.startswith("abs") else x
    want = (np.nanmax if reduce.endswith("max") else np.nanmin)(v, axis=1)
    rows = np.arange(128) != 5
    np.testing.assert_array_equal(red[rows], want[rows])
    assert red[5:6].view(np.uint32)[0] == 0x7FFFFFFF


@needs_plgpu
@pytest.mark.parametrize("wait,read", [(0, 1), (1, 0), (1, 1)])
def test_cp_async_copies_land_when_wait_gmem_to_smem_retires_them(wait, read):
    # copy_gmem_to_smem without a barrier is cp.async (Mosaic GPU before Hopper): one group per
    # copy; wait_gmem_to_smem(n) leaves the n newest in flight, so with n=1 the first copy may be
    # read and the second may not: UNDEFINED["smem-access-under-cp-async"].
    if not hasattr(plgpu, "wait_gmem_to_smem"):
        pytest.skip("this JAX's Mosaic GPU has no wait_gmem_to_smem (cp.async copies)")
    from interp.pallas.mosaic_gpu import AsyncAccessError

    def body(x_gmem, o_gmem, smem):
        plgpu.copy_gmem_to_smem(x_gmem.at[0], smem.at[0])
        plgpu.copy_gmem_to_smem(x_gmem.at[1], smem.at[1])
        plgpu.wait_gmem_to_smem(wait)
        o_gmem[...] = smem[read] + 1.0
    f = _kernel(body, jax.ShapeDtypeStruct((64, 128), F32), [plgpu.SMEM((2, 64, 128), F32)])
    x = RNG.standard_normal((2, 64, 128)).astype(np.float32)
    if read >= 2 - wait:
        with pytest.raises(AsyncAccessError, match="cp.async copy is still writing it"):
            interp.interpret(f)(x)
    else:
        np.testing.assert_array_equal(interp.interpret(f)(x), x[read] + np.float32(1))


@needs_plgpu
@pytest.mark.parametrize("dtype", ["int8", "float8_e4m3fn", "float8_e5m2"])
def test_wgmma_of_int8_and_fp8_operands(dtype):
    # int8: the exact integer product in the s32 accumulator; fp8: every product exact, the sum
    # rounded once to f32 (spec wgmma_ref). Expectations: exact integer sums, math.fsum.
    from conformance.cases.pallas_mosaic_gpu import build_wgmma
    dt = np.dtype(getattr(jnp, dtype))
    acc_dtype = jnp.int32 if dt.kind == "i" else jnp.float32
    m, k, n = 64, 128, 128
    f = build_wgmma(m, k, n, dtype=dt, acc_dtype=acc_dtype)(None)
    if dt.kind == "i":
        a = RNG.integers(-128, 128, (m, k)).astype(dt)
        b = RNG.integers(-128, 128, (k, n)).astype(dt)
        want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    else:
        a = RNG.standard_normal((m, k)).astype(dt)
        b = RNG.standard_normal((k, n)).astype(dt)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        want = np.array([[math.fsum(a64[i] * b64[:, j]) for j in range(n)] for i in range(m)],
                        np.float32)
    np.testing.assert_array_equal(interp.interpret(f)(a, b), want)


@needs_plgpu
@pytest.mark.parametrize("op", ["add", "and", "or", "xor", "umin", "umax", "smin", "smax",
                                "inc", "dec"])
def test_tma_store_with_reduction_on_int32(op):
    # copy_smem_to_gmem(reduction_op=op): dst = op(dst, src) per element (cp.reduce.async.bulk;
    # PTX: .inc = old >= b ? 0 : old + 1, .dec = old == 0 or old > b ? b : old - 1, unsigned
    # compares, as Mosaic GPU treats i32 for inc/dec). dst first gets `old` by a plain TMA store,
    # retired before the reducing one. Expectations: Python integers on the values.
    import inspect
    if "reduction_op" not in inspect.signature(plgpu.copy_smem_to_gmem).parameters:
        pytest.skip("this JAX's copy_smem_to_gmem has no reduction_op")

    def body(old_gmem, src_gmem, o_gmem, old_smem, src_smem, barrier):
        plgpu.copy_gmem_to_smem(old_gmem, old_smem, barrier)
        plgpu.copy_gmem_to_smem(src_gmem, src_smem, barrier)
        plgpu.barrier_wait(barrier)
        plgpu.copy_smem_to_gmem(old_smem, o_gmem)
        plgpu.wait_smem_to_gmem(0)
        plgpu.copy_smem_to_gmem(src_smem, o_gmem, reduction_op=op)
        plgpu.wait_smem_to_gmem(0)
    shape = (8, 128)
    f = _kernel(body, jax.ShapeDtypeStruct(shape, jnp.int32),
                [plgpu.SMEM(shape, jnp.int32), plgpu.SMEM(shape, jnp.int32),
                 plgpu.Barrier(num_arrivals=2)])
    old = RNG.integers(-2**31, 2**31, shape, dtype=np.int64).astype(np.int32)
    src = RNG.integers(-2**31, 2**31, shape, dtype=np.int64).astype(np.int32)
    old[0, :4] = [0, 5, -1, 7]
    src[0, :4] = [3, 5, 3, -1]
    out = interp.interpret(f)(old, src)
    u = lambda v: int(v) % 2**32   # noqa: E731  (the bits as unsigned)
    s32 = lambda v: (v + 2**31) % 2**32 - 2**31   # noqa: E731
    fns = {"add": lambda a, b: s32(int(a) + int(b)), "and": lambda a, b: int(a) & int(b),
           "or": lambda a, b: int(a) | int(b), "xor": lambda a, b: int(a) ^ int(b),
           "umin": lambda a, b: s32(min(u(a), u(b))), "umax": lambda a, b: s32(max(u(a), u(b))),
           "smin": lambda a, b: min(int(a), int(b)), "smax": lambda a, b: max(int(a), int(b)),
           "inc": lambda a, b: s32(0 if u(a) >= u(b) else u(a) + 1),
           "dec": lambda a, b: s32(u(b) if u(a) == 0 or u(a) > u(b) else u(a) - 1)}
    want = np.array([[fns[op](a, b) for a, b in zip(ra, rb)] for ra, rb in zip(old, src)],
                    np.int64).astype(np.int32)
    np.testing.assert_array_equal(out, want)


@needs_clusters
@pytest.mark.parametrize("wait", [True, False])
def test_async_store_smem_lands_in_the_peer_block_behind_its_barrier(wait):
    # Block 0 stores its rows (registers) into block 1's SMEM with plgpu.async_store_smem: one
    # arrival with expect-tx on block 1's barrier, completed by the bytes; block 1 reads after
    # observing that phase. Reading before it is UNDEFINED["tma-read-before-barrier"].
    if not hasattr(plgpu, "async_store_smem"):
        pytest.skip("this JAX's Mosaic GPU has no async_store_smem")
    from conformance.cases.pallas_mosaic_gpu import build_cluster_store
    from interp.pallas.mosaic_gpu import AsyncAccessError
    f = build_cluster_store((64, 128), wait=wait)(None)
    x = RNG.standard_normal((64, 128)).astype(np.float32)
    if wait:
        np.testing.assert_array_equal(interp.interpret(f)(x), x * np.float32(2))
    else:
        with pytest.raises(AsyncAccessError, match=r"block \(1,\).*read of .*smem.* while a "
                                                   "TMA copy is still writing it"):
            interp.interpret(f)(x)


def test_wgmma_sum_is_the_exact_sum_rounded_once():
    # Independent check: Fraction arithmetic. Mixed magnitudes make float64 partial sums inexact
    # (bf16 exponent range, cancellation against the accumulator), which the rule must not show.
    from fractions import Fraction

    import ml_dtypes

    from interp.numerics import round_exact
    from interp.rules.pallas_mosaic_gpu import _mma
    rng = np.random.default_rng(5)
    for dt, scales in ((np.float16, [1e-6, 1e-3, 1.0, 3e3]), (ml_dtypes.bfloat16, [1e-30, 1.0, 1e30]),
                       (ml_dtypes.float8_e4m3fn, [1e-2, 1.0, 1e2]), (ml_dtypes.float8_e5m2, [1e-4, 1.0, 1e4])):
        for trial in range(6):
            a = (rng.standard_normal((6, 12)) * rng.choice(scales, (6, 12))).astype(dt)
            b = (rng.standard_normal((12, 5)) * rng.choice(scales, (12, 5))).astype(dt)
            with np.errstate(over="ignore"):        # (trials whose accumulator overflows: skipped)
                acc = (-(a.astype(np.float64) @ b.astype(np.float64))).astype(np.float32) if trial % 2 \
                    else (rng.standard_normal((6, 5))
                          * rng.choice([1e-8, 1.0, 1e8], (6, 5))).astype(np.float32)
            if not np.isfinite(acc).all():
                continue
            want = np.empty(acc.shape, np.float32)
            for i, j in np.ndindex(*acc.shape):
                s = Fraction(float(acc[i, j])) + sum(Fraction(float(a[i, k])) * Fraction(float(b[k, j]))
                                                     for k in range(a.shape[1]))
                want[i, j] = round_exact(s.numerator, -(s.denominator.bit_length() - 1), np.dtype(np.float32))
            got = _mma(acc, a, b, np.float32)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (dt, trial)


# --- barrier_test (spec/pallas_mosaic_gpu.py BARRIER_TEST) ----------------------------------------

@needs_plgpu
def test_a_barrier_test_poll_loop_sees_the_producer():
    # Warpgroup 0 polls until warpgroup 1 arrives: 2 (x + 1) whatever the answers. Sequential
    # order: the first test yields, warpgroup 1 completes the phase, the test answers True (no
    # False answer); shuffled: a seeded half of such tests answer False at once, so some seed
    # polls more than once, with the same output.
    from conformance.cases.pallas_mosaic_gpu import build_producer_consumer
    x = RNG.standard_normal((64, 128)).astype(np.float32)
    f = build_producer_consumer((64, 128), poll=True, with_count=True)(None)
    out, failed = interp.interpret(f)(x)
    np.testing.assert_array_equal(out, (x + np.float32(1)) * np.float32(2))
    assert (failed == 0).all()
    counts = set()
    for seed in range(4):
        out, failed = interp.interpret(f, grid_order="shuffled", seed=seed)(x)
        np.testing.assert_array_equal(out, (x + np.float32(1)) * np.float32(2))
        counts.add(int(failed[0]))
    assert max(counts) > 0


def _poll(body, arrivals=1, num_threads=None):
    return _kernel(body, jax.ShapeDtypeStruct((128,), jnp.int32),
                   [plgpu.Barrier(num_arrivals=arrivals)],
                   **({} if num_threads is None else dict(num_threads=num_threads,
                                                          thread_name="wg")))


def _poll_until_complete(barrier, step=lambda: None):
    """Tests ``barrier`` until it answers True, calling ``step`` after each False; the number
    of False answers."""
    def loop(c):
        step()
        return plgpu.barrier_test(barrier), c[1] + 1
    return jax.lax.while_loop(lambda c: ~c[0], loop, (plgpu.barrier_test(barrier), 0))[1]


@needs_plgpu
@pytest.mark.parametrize("num_threads", [None, 2])
def test_a_poll_loop_nothing_can_complete_is_a_deadlock(num_threads):
    # UNDEFINED["barrier-poll-deadlock"]: nobody arrives; with 2 warpgroups both poll.
    def body(o_ref, barrier):
        o_ref[...] = jnp.full(o_ref.shape, _poll_until_complete(barrier), jnp.int32)
    from interp.pallas.mosaic_gpu import DeadlockError
    for order in ("sequential", "shuffled"):
        with pytest.raises(DeadlockError, match=r"warpgroup 0: deadlock: polls \(barrier_test\) "
                                                r"phase 0 of barrier .*0 of 1 arrivals"):
            interp.interpret(_poll(body, num_threads=num_threads), grid_order=order)()


@needs_plgpu
def test_a_poll_loop_that_arrives_itself_is_no_deadlock():
    # Three arrivals expected, the polling thread makes one after each False answer: three
    # False answers, then True (its own arrivals change the barrier between the tests).
    def body(o_ref, barrier):
        n = _poll_until_complete(barrier, lambda: plgpu.barrier_arrive(barrier))
        o_ref[...] = jnp.full(o_ref.shape, n, jnp.int32)
    assert (interp.interpret(_poll(body, arrivals=3))() == 3).all()


@needs_plgpu
def test_a_true_barrier_test_counts_as_the_wait():
    # The thread completes phase 0 and tests it (True): its next barrier_wait is for phase 1,
    # which nobody completes: a deadlock (without the test, the wait would pass).
    def body(o_ref, barrier):
        plgpu.barrier_arrive(barrier)
        ok = plgpu.barrier_test(barrier)
        o_ref[...] = jnp.full(o_ref.shape, ok.astype(jnp.int32), jnp.int32)
        plgpu.barrier_wait(barrier)
    from interp.pallas.mosaic_gpu import DeadlockError
    with pytest.raises(DeadlockError, match="waits for phase 1 of barrier"):
        interp.interpret(_poll(body))()


# --- clusters run concurrently (spec/pallas_mosaic_gpu.py CLUSTERS) ------------------------------

@needs_plgpu
@pytest.mark.parametrize("grid_order", ["sequential", "shuffled"])
def test_a_cluster_waits_for_a_later_cluster(grid_order):
    # Every cluster but the last waits until the last one signals a kernel-wide semaphore
    # (pl.get_global: one per launch), then writes its row; the last writes its row first. Run
    # one after another, the first cluster would wait forever.
    from jax.experimental import pallas as pl
    n = 4

    def body(x_gmem, o_gmem):
        sem = pl.get_global(plgpu.SemaphoreType.REGULAR)
        i = jax.lax.axis_index("i")

        @pl.when(i == n - 1)
        def _():
            o_gmem[i] = x_gmem[i] * 2.0
            pl.semaphore_signal(sem, n - 1)

        @pl.when(i < n - 1)
        def _():
            pl.semaphore_wait(sem, 1)
            o_gmem[i] = x_gmem[i] + o_gmem[n - 1]
    f = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((n, 128), F32), grid=(n,),
                     grid_names=("i",))
    x = RNG.standard_normal((n, 128)).astype(np.float32)
    want = np.concatenate([x[:-1] + x[-1] * np.float32(2), x[-1:] * np.float32(2)])
    np.testing.assert_array_equal(interp.interpret(f, grid_order=grid_order, seed=5)(x), want)


@needs_plgpu
def test_clusters_waiting_on_each_other_forever_deadlock_naming_them():
    from jax.experimental import pallas as pl

    def body(o_gmem):
        sem = pl.get_global(plgpu.SemaphoreType.REGULAR)
        pl.semaphore_wait(sem, 1)
        o_gmem[...] = jnp.zeros(o_gmem.shape, F32)
    f = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((128,), F32), grid=(2,),
                     grid_names=("i",))
    from interp.pallas.mosaic_gpu import DeadlockError
    with pytest.raises(DeadlockError, match=r"kernel 'body': deadlock.*cluster \(0,\).*"
                                            r"cluster \(1,\)"):
        interp.interpret(f)()


@needs_plgpu
def test_clusters_that_never_wait_run_on_the_callers_thread(monkeypatch):
    # 8 clusters of 2 warpgroups, warpgroup 1 waiting for warpgroup 0 through a barrier: each
    # cluster starts when the one before finished (no other cluster alive), all on the caller's
    # thread, and gives 2 (x[i] + 1).
    import threading
    from interp.pallas.mosaic_gpu.launch import GpuMeshPlan
    threads, started = set(), []

    def start(self, launch, point):
        started.append((point, len(launch.clusters)))
        return start.original(self, launch, point)

    def run_thread(self, launch, point, thread):
        threads.add(threading.get_ident())
        return run_thread.original(self, launch, point, thread)
    start.original, run_thread.original = GpuMeshPlan._start_cluster, GpuMeshPlan._run_thread
    monkeypatch.setattr(GpuMeshPlan, "_start_cluster", start)
    monkeypatch.setattr(GpuMeshPlan, "_run_thread", run_thread)

    def body(x_gmem, o_gmem, smem, loaded, ready):
        i, wg = jax.lax.axis_index("i"), jax.lax.axis_index("wg")

        @pl_when(wg == 0)
        def _():
            plgpu.copy_gmem_to_smem(x_gmem.at[i], smem, loaded)
            plgpu.barrier_wait(loaded)
            smem[...] = smem[...] + 1.0
            plgpu.barrier_arrive(ready)

        @pl_when(wg == 1)
        def _():
            plgpu.barrier_wait(ready)
            o_gmem[i] = smem[...] * 2.0
    kernel = _kernel(body, jax.ShapeDtypeStruct((8, 64, 128), F32),
                     [plgpu.SMEM((64, 128), F32), plgpu.Barrier(num_arrivals=1),
                      plgpu.Barrier(num_arrivals=1)],
                     grid=(8,), grid_names=("i",), num_threads=2, thread_name="wg")
    xs = RNG.standard_normal((8, 64, 128)).astype(np.float32)
    np.testing.assert_array_equal(interp.interpret(kernel)(xs), (xs + np.float32(1)) * 2)
    assert threads == {threading.get_ident()}
    assert started == [((i,), 0) for i in range(8)]


def test_footprint_relations_are_remembered_only_for_immutable_views():
    # The race checks' overlap / cover answers are kept by mask identity for the read-only masks
    # of immutable views; a view through a writable position array is compared afresh, so
    # changing the positions changes the answer (rows by hand: {0, 1} against {2, 3}, then
    # {2, 3} against {2, 3}).
    import types
    from interp.pallas.mosaic_gpu.races import Footprint
    ref = types.SimpleNamespace(array=np.zeros((4, 4), np.float32))
    rows = np.array([0, 1])
    rows.flags.writeable = False
    whole = slice(0, 4, 1)
    first, second = Footprint(ref, (rows, whole)), Footprint(ref, (slice(1, 2, 1), whole))
    low, high = Footprint(ref, (slice(0, 2, 1), whole)), Footprint(ref, (slice(2, 4, 1), whole))
    for _ in range(2):   # the second time from what was remembered
        assert first.overlaps(second) and second.overlaps(first)
        assert not first.overlaps(high) and not high.overlaps(first)
        assert second.covered_by(first) and not first.covered_by(second)
        assert first.covered_by(low) and low.covered_by(first)
    moving = np.array([0, 1])
    assert not Footprint(ref, (moving, whole)).overlaps(high)
    moving[:] = [2, 3]
    assert Footprint(ref, (moving, whole)).overlaps(high)
    assert Footprint(ref, (moving, whole)).covered_by(high)
    assert not Footprint(ref, (moving, whole)).covered_by(low)
