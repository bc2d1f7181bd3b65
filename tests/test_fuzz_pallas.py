"""The Pallas kernel generator (conformance/fuzz/families/pallas.py): deterministic, well typed,
race-free and defined by construction (checked by the reference's detectors), judged on JAX's
interpret modes, shrunk, and an injected bug found."""
from __future__ import annotations

import hashlib
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

import interp
from conformance import divergence_models as DM
from conformance.fuzz import ir, render, shrink, values
from conformance.fuzz.campaign import run_campaign
from conformance.fuzz.evaluate import case_for, evaluate
from conformance.fuzz.generate import generate, program_key, regenerate
from hardware_runners import get_runner
from tests.support import generated_digest

# sha256 over the sources and input bytes of programs 0-29 of seed 0: the same on JAX 0.10.2,
# 0.11.2 and 0.12.0.1 (numpy 2.1-2.5). Changing it means raising GENERATOR_VERSION.
PINNED = "edbee38ae716f5e9ac2a4c1423798fbe974adeb89e5e924475990277816726ab"
# sha256 over the sources of pallas-tpu programs 0-19 of seed 0 (the same on both JAX ends).
PINNED_TPU = "97cedc088522a42397f6068535f0897164adc93de110d7c54e454e80d18f392c"


def _bits(a):
    a = np.asarray(a)
    return a.dtype, a.shape, a.tobytes()


def _kernel(p):
    return p.body.ops[0].blocks[0]


def test_kernels_are_deterministic_across_processes_and_jax_versions():
    assert generated_digest("pallas", 0, 30) == PINNED


def test_the_generator_covers_what_it_claims():
    """Over 60 kernels: every kind of index map, grid ranks 1-3, partial edge blocks, prefetch,
    scratch, accumulation and each kernel operation appear."""
    seen: set = set()
    for i in range(60):
        p, _ = generate("pallas", 1, i)
        call = p.body.ops[0]
        seen.add(f"grid{len(call.p['grid'])}")
        seen |= {e[0] for _, m in call.p["in_specs"] + call.p["out_specs"] for e in m}
        seen |= {op.name for op in _kernel(p).ops}
        seen |= {"masked-load" for op in _kernel(p).ops if op.name == "k_load" and op.p["mask"]}
        seen |= {"scratch"} if call.p["scratch"] else set()
        seen |= {"prefetch"} if call.p["n_prefetch"] else set()
        seen |= {call.p["target"], call.outs[0].dtype}
    want = {"grid1", "grid2", "grid3", "g", "c", "div", "mod", "lin", "s", "k_load", "k_store", "k_accum",
            "k_masked_store", "k_init", "k_dot", "k_reduce", "k_rows", "binary", "select", "masked-load",
            "scratch", "prefetch", "tpu", "generic", "float32", "int32"}
    assert want <= seen, want - seen


def _reference(fn, xs, **options):
    with np.errstate(all="ignore"):      # (float overflow in the kernels' arithmetic is defined)
        return [np.asarray(o) for o in interp.eval_jaxpr(jax.make_jaxpr(fn)(*xs), *xs, **options)]


def _defined(fn, xs, seed: int) -> bool:
    """The reference with race detection gives the same bits whatever never-written memory holds
    (NaN or 0) and in whatever order the 'parallel' axes run."""
    a = _reference(fn, xs, detect_races=True)
    b = _reference(fn, xs, detect_races=True, uninitialized="zero", grid_order="shuffled", seed=seed)
    return all(_bits(x) == _bits(y) for x, y in zip(a, b))


@pytest.mark.parametrize("family,seed", [("pallas", 2), ("pallas", 3), ("pallas-tpu", 2)])
def test_every_kernel_is_race_free_and_defined_under_the_reference(family, seed):
    for i in range(40):
        p, _ = generate(family, seed, i)
        xs = values.make_inputs(p, program_key(family, seed, i))
        assert _defined(render.function(p), xs, seed * 100 + i), f"{family}/{seed}/{i}: output depends on " \
            "memory outside the arrays or on the order of parallel axes"


def _edge_sum_kernel(interpret, mask: bool):
    """Row sums of blocks of 4 columns of a 6-column array: the second block is partial, its
    out-of-array columns masked (to 0) or not."""
    def kernel(x_ref, o_ref):
        x = x_ref[...]
        if mask:
            x = jnp.where(jax.lax.broadcasted_iota(jnp.int32, x.shape, 1) + pl.program_id(0) * 4 < 6, x, 0)
        o_ref[...] = jnp.broadcast_to(jnp.sum(x, axis=1, keepdims=True), x.shape)
    return lambda x: pl.pallas_call(kernel, grid=(2,), in_specs=[pl.BlockSpec((2, 4), lambda i: (0, i))],
                                    out_specs=pl.BlockSpec((2, 4), lambda i: (0, i)),
                                    out_shape=jax.ShapeDtypeStruct((2, 6), jnp.float32), interpret=interpret)(x)


def test_pallas_tpu_kernels_copy_by_dma_and_are_deterministic():
    h = hashlib.sha256()
    dmas = 0
    for i in range(20):
        p, choices = generate("pallas-tpu", 0, i)
        ops = [op.name for op in _kernel(p).ops]
        assert ops.count("k_dma_start") == ops.count("k_dma_wait")
        dmas += ops.count("k_dma_start")
        assert ir.dumps(regenerate("pallas-tpu", choices)) == ir.dumps(p.__class__(**{**p.__dict__, "origin": ()}))
        h.update(render.source(p).encode())
    assert dmas >= 20
    assert h.hexdigest() == PINNED_TPU


def test_a_read_of_a_dma_buffer_before_its_wait_is_a_race_under_the_reference():
    """What makes a generator bug in the DMA ordering a reference finding, never a backend's."""
    from jax.experimental.pallas import tpu as pltpu

    def racy(x):
        def kernel(x_hbm, o_ref, buf, sem):
            copy = pltpu.make_async_copy(x_hbm, buf, sem.at[0])
            copy.start()
            o_ref[...] = buf[...]
            copy.wait()
        return pl.pallas_call(kernel, grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0, grid=(1,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((2, 4), lambda i: (0, 0)),
            scratch_shapes=[pltpu.VMEM((2, 4), jnp.float32), pltpu.SemaphoreType.DMA((1,))]),
            out_shape=jax.ShapeDtypeStruct((2, 4), jnp.float32), interpret=True)(x)
    x = np.ones((2, 4), np.float32)
    with pytest.raises(interp.RaceError):
        _reference(racy, [x], detect_races=True)


def test_the_definedness_check_catches_an_unmasked_edge_and_a_shared_parallel_block():
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    assert _defined(_edge_sum_kernel(True, mask=True), [x], 0)
    assert not _defined(_edge_sum_kernel(True, mask=False), [x], 0)

    from jax.experimental.pallas import tpu as pltpu

    def shared(x):
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] * (pl.program_id(0) + 1).astype(jnp.float32)
        return pl.pallas_call(kernel, grid=(4,), in_specs=[pl.BlockSpec((2, 6), lambda i: (0, 0))],
                              out_specs=pl.BlockSpec((2, 6), lambda i: (0, 0)),
                              out_shape=jax.ShapeDtypeStruct((2, 6), jnp.float32),
                              compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
                              interpret=True)(x)
    assert not all(_defined(shared, [x], s) for s in range(4))   # some order of the parallel axis tells


@pytest.mark.parametrize("family,index", [("pallas", i) for i in range(6)] + [("pallas-tpu", i) for i in range(3)])
def test_kernels_run_on_both_interpret_modes_with_the_reference_bits(family, index):
    p, _ = generate(family, 4, index)
    xs = values.make_inputs(p, program_key(family, 4, index))
    recs = evaluate(shrink.TestCase(p, xs), [get_runner("pallas:interpret"), get_runner("pallas:tpu-interpret")],
                    f"{family}/4/{index}")
    for rec in recs:
        assert rec["outcome"] in ("pass", "pass-with-allowance", "known-divergence"), rec


def _add_zero_kernel(interpret):
    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _init():
            o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)
        o_ref[...] += x_ref[...]
    return lambda x: pl.pallas_call(kernel, grid=(1,), in_specs=[pl.BlockSpec((1, 2), lambda i: (0, 0))],
                                    out_specs=pl.BlockSpec((1, 2), lambda i: (0, 0)),
                                    out_shape=jax.ShapeDtypeStruct((1, 2), jnp.float32), interpret=interpret)(x)


def test_interpret_modes_keep_the_sign_of_a_negative_zero_added_to_zero():
    """The divergence pallas-interpret-add-zero-keeps-negative-zero: JAX's interpret modes
    (XLA:CPU) give -0.0 for 0.0 + -0.0 in a kernel, IEEE 754 and the reference +0.0; its matcher
    takes exactly those elements."""
    from jax.experimental.pallas import tpu as pltpu

    def plus_zero(interpret):
        def kernel(x_ref, o_ref):
            o_ref[...] = jax.lax.add(np.float32(0.0), x_ref[...])
        spec = pl.BlockSpec((1, 2), lambda i: (0, i))
        return lambda x: pl.pallas_call(kernel, grid=(2,), in_specs=[spec], out_specs=spec,
                                        out_shape=jax.ShapeDtypeStruct((1, 4), jnp.float32),
                                        interpret=interpret)(x)
    x4 = np.array([[-0.0, 1.5, -0.0, 2.0]], np.float32)
    assert not np.signbit(np.asarray(interp.interpret(plus_zero(True))(x4))).any()
    for mode in (True, pltpu.InterpretParams()):
        assert np.signbit(np.asarray(jax.jit(plus_zero(mode))(x4))).tolist() == [[True, False, True, False]]

    x = np.array([[-0.0, 1.5]], np.float32)
    ref = np.asarray(interp.interpret(_add_zero_kernel(True))(x))
    got = np.asarray(jax.jit(_add_zero_kernel(True))(x))
    assert np.signbit(ref[0, 0]) == False and np.signbit(got[0, 0]) == True  # noqa: E712
    assert got[0, 1] == ref[0, 1] == 1.5

    def failure(out, prims=("pallas_call", "add")):
        return DM.Failure("fuzz/x", "pallas:interpret", jax.__version__, prims, [ref], [out], (0,), None)
    matcher = DM.MATCHERS["kernel_adds_zero_as_identity"]
    assert matcher(failure(got))
    assert not matcher(failure(got, ("pallas_call",)))                   # the kernel adds no floats
    assert not matcher(failure(np.array([[-0.0, 1.75]], np.float32)))    # another difference too
    assert not matcher(failure(np.array([[0.0, 1.75]], np.float32)))


def test_the_kept_negative_zero_composes_with_flushed_subnormals():
    """Found by the 2026-11-29 kernel campaign (pallas-tpu/2026112902/49, both interpret modes): a
    zero-initialised accumulator += x * y where x is a negative subnormal: XLA:CPU flushes it (-0.0)
    and keeps 0 + -0.0 as -0.0; the reference gives the subnormal, its flush-to-zero replay +0.0.
    Neither the allowance nor the divergence explains the element alone; the matcher compares with
    the replayed reference too. One element off by anything else is still reported."""
    matcher = DM.MATCHERS["kernel_adds_zero_as_identity"]
    ref = np.float32([[0.0, -1e-45, 1.5]])             # -0.0 * 0 -> +0.0; 0 + -1e-45 * 1; 1.5 * 1
    flushed = np.float32([[0.0, 0.0, 1.5]])            # the flush-to-zero replay: 0 + -0.0 = +0.0
    backend = np.float32([[-0.0, -0.0, 1.5]])

    def failure(out, replayed=((flushed,),)):
        return DM.Failure("fuzz/x", "pallas:interpret", jax.__version__, ("pallas_call", "add"), [ref], [out],
                          (0,), None, replayed=replayed)
    assert matcher(failure(backend))
    assert not matcher(failure(backend, replayed=()))                         # the flush is needed
    assert not matcher(failure(np.float32([[-0.0, -0.0, 1.75]])))              # another difference
    assert not matcher(failure(np.float32([[-0.0, -3e-45, 1.5]])))

    p, _ = generate("pallas-tpu", 2026112902, 49)
    xs = values.make_inputs(p, program_key("pallas-tpu", 2026112902, 49))
    recs = evaluate(shrink.TestCase(p, xs), [get_runner("pallas:interpret"), get_runner("pallas:tpu-interpret")],
                    "pallas-tpu/2026112902/49")
    for rec in recs:
        assert rec["outcome"] in ("known-divergence", "pass-with-allowance", "pass"), rec
        if rec["outcome"] == "known-divergence":
            assert rec["known_divergence"]["id"] == "pallas-interpret-add-zero-keeps-negative-zero"


def test_a_generated_kernel_with_the_fold_is_a_known_divergence():
    p, _ = generate("pallas", 0, 12)
    xs = values.make_inputs(p, program_key("pallas", 0, 12))
    rec, = evaluate(shrink.TestCase(p, xs), [get_runner("pallas:interpret")], "pallas/0/12")
    assert rec["outcome"] in ("known-divergence", "pass"), rec
    if rec["outcome"] == "known-divergence":
        assert rec["known_divergence"]["id"] == "pallas-interpret-add-zero-keeps-negative-zero"


def test_subnormals_read_as_zero_inside_a_kernel_are_the_flush_to_zero_allowance():
    """Found by a campaign (pallas/1/70): both interpret modes compare a float32 subnormal inside
    the kernel as zero (XLA:CPU runs with denormals flushed); the runner's flush-to-zero allowance
    is replayed through the kernel's equations, so the program passes with it."""
    x = np.array([[1e-45, 2.0, 0.0, -1e-45]], np.float32)
    zeros = np.zeros_like(x)

    def masked(interpret):
        def kernel(x_ref, y_ref, o_ref):
            o_ref[...] = x_ref[...]
            o_ref[...] = jnp.where(x_ref[...] != y_ref[...], jnp.zeros_like(x_ref[...]), o_ref[...])
        spec = pl.BlockSpec((1, 4), lambda i: (0, 0))
        return lambda x, y: pl.pallas_call(kernel, grid=(1,), in_specs=[spec, spec], out_specs=spec,
                                           out_shape=jax.ShapeDtypeStruct((1, 4), jnp.float32),
                                           interpret=interpret)(x, y)
    ref = np.asarray(interp.interpret(masked(True))(x, zeros))
    got = np.asarray(jax.jit(masked(True))(x, zeros))
    assert ref.tolist() == [[0.0, 0.0, 0.0, 0.0]] and _bits(got[0, 0]) == _bits(x[0, 0]), got
    p, _ = generate("pallas", 1, 70)
    xs = values.make_inputs(p, program_key("pallas", 1, 70))
    recs = evaluate(shrink.TestCase(p, xs), [get_runner("pallas:interpret"), get_runner("pallas:tpu-interpret")],
                    "pallas/1/70")
    assert [(r["outcome"], r["allowance"]) for r in recs] == [("pass-with-allowance", "flush-to-zero")] * 2, recs


def test_a_product_stored_in_scratch_and_added_back_is_the_fma_contraction_allowance():
    """Found by a campaign (pallas/1/114): the kernel stores x * x into VMEM scratch and a
    one-step fori_loop adds a row of it to y; JAX's HLO interpret mode (XLA:CPU) folds the
    scratch update and read and contracts the multiply with the add into one FMA (0.31139457, where
    the twice-rounded value is 0.3113946). The fma-contraction replay finds the product's block."""
    x, y = np.float32(0.55352294), np.float32(0.0050069336)
    assert np.float32(np.float64(x) * np.float64(x) + np.float64(y)) != np.float32(np.float32(x * x) + y)
    p, _ = generate("pallas", 1, 114)
    xs = values.make_inputs(p, program_key("pallas", 1, 114))
    rec, = evaluate(shrink.TestCase(p, xs), [get_runner("pallas:interpret")], "pallas/1/114")
    assert (rec["outcome"], rec["allowance"]) in (("pass-with-allowance", "fma-contraction"), ("pass", None)), rec


def test_a_smaller_grid_computes_the_same_blocks():
    """Shrinking a kernel's grid along a non-accumulating axis keeps the blocks it still visits."""
    checked = 0
    for i in range(30):
        p, _ = generate("pallas", 5, i)
        call = p.body.ops[0]
        axes = [a for a, (g, s) in enumerate(zip(call.p["grid"], call.p["semantics"]))
                if g > 1 and not any(op.name == "k_init" and op.p["axis"] == a for op in _kernel(p).ops)]
        if not axes:
            continue
        tc = shrink.TestCase(p, values.make_inputs(p, program_key("pallas", 5, i)))
        small = shrink.smaller_grid(tc, axes[0], 1)
        big = _reference(render.function(p), tc.inputs, detect_races=True)[0]
        got = _reference(render.function(small.program), small.inputs, detect_races=True)[0]
        assert got.shape != big.shape or small.program.body.ops[0].p["grid"] != call.p["grid"]
        assert _bits(got) == _bits(big[tuple(slice(0, n) for n in got.shape)]), f"pallas/5/{i}"
        checked += 1
    assert checked >= 5


def test_kernel_ops_are_removed_and_unused_inputs_dropped():
    p, _ = generate("pallas", 0, 38)
    tc = shrink.TestCase(p, values.make_inputs(p, program_key("pallas", 0, 38)))
    n = len(_kernel(p).ops)
    smaller = [c for c in (shrink.kernel_without(tc, k) for k in range(n)) if c is not None]
    assert smaller and all(c.program.n_ops < p.n_ops for c in smaller)
    for c in smaller:               # each is a well-typed kernel the reference runs
        _reference(render.function(c.program), c.inputs, detect_races=True)
    trimmed = shrink.kernel_without_unused_inputs(smaller[0]) or smaller[0]
    assert len(trimmed.inputs) <= len(tc.inputs)
    _reference(render.function(trimmed.program), trimmed.inputs, detect_races=True)


def test_masked_store_mutant_is_found_as_its_bucket_and_shrunk(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_CONFORMANCE_RUNNERS", "conformance.fuzz.mutants")
    out = str(tmp_path / "c")
    s = run_campaign(["mutant:pallas-store-ignores-mask"], ["pallas"], programs=6, out=out, workers=1,
                     shrink_budget_s=60, bisect_budget_s=0, log=lambda *_: None)
    assert s["buckets"], "the injected bug was not found in 6 kernels"
    for bucket, b in s["buckets"].items():
        assert bucket.startswith("fail:pallas_call:") and ":mutant:pallas-store-ignores-mask:" in bucket, bucket
        assert b["shrunk"]
    for d in (tmp_path / "c" / "findings").iterdir():
        f = json.load(open(os.path.join(d, "finding.json")))
        assert f["reduced"]["eqns"] <= 8, f["reduced"]
        reduced = ir.loads(open(os.path.join(d, "reduced.json")).read())
        assert any(op.name == "k_masked_store" for op in _kernel(reduced).ops)
        assert reduced.body.ops[0].p["grid"] == tuple(1 for _ in reduced.body.ops[0].p["grid"])


def test_case_of_a_kernel_program_is_a_pallas_case():
    p, _ = generate("pallas", 0, 1)
    case = case_for(p, "x")
    assert case.kind == "pallas" and case.primitives[0] == "pallas_call"
    assert "interpret=interpret" in render.source(p)
