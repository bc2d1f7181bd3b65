"""Every GPU explanation (spec/allowances.py, spec/divergences.py; docs/gpu-triage.md) against outputs
recorded on an H100 (tests/data/h100, JAX 0.11.2): the recorded output is explained by the named
allowance or divergence, and the same output with one element made wrong is a fail."""
import collections
import pathlib

import ml_dtypes
import numpy as np
import pytest

from conformance.cases import all_cases
from conformance.checks import ulp_distance
from conformance.judge import compare
from hardware_runners.base import ReferenceRunner
from reports.schema import Record

DATA = pathlib.Path(__file__).parent / "data" / "h100" / "outputs-xla_cuda-subset.npz"


def _recorded():
    data = np.load(DATA)
    groups = collections.defaultdict(dict)
    for key in data.files:
        case_id, seed, i, dtype = key.rsplit("::", 3)
        a = data[key]
        dt = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
        groups[(case_id, int(seed))][int(i)] = a.view(dt) if a.dtype != dt else a
    return {k: [v[i] for i in sorted(v)] for k, v in groups.items()}


RECORDED = _recorded()
CASES = all_cases("nightly")

# (case, seed) -> (outcome, allowance or known divergence id)
EXPECTED = {
    ("lax_elementwise/div/float32/3x5", 0): ("pass-with-allowance", "gpu-f32-div-sqrt"),
    ("lax_special/sqrt/float32/3x5", 0): ("pass-with-allowance", "gpu-f32-div-sqrt"),
    ("lax_elementwise/integer_pow_neg/float32/2x3x4", 0): ("pass-with-allowance", "gpu-f32-div-sqrt"),
    ("control_flow/custom_linear_solve/diagonal/float32", 0): ("pass-with-allowance", "gpu-f32-div-sqrt"),
    ("programs/mlp/forward/float32", 0): ("pass-with-allowance", "matmul-precision-tf32"),
    ("programs/attention/forward/float32", 0): ("pass-with-allowance", "matmul-precision-tf32"),
    ("programs/rnn/backward/float32", 0): ("pass-with-allowance", "matmul-precision-tf32"),
    ("lax_reductions/max_pool_jvp/float64", 0): ("pass-with-allowance", "gpu-packed-select-and-gather-add-f64"),
    ("lax_indexing/scatter_rows_clip_rank3/float32", 0): ("pass-with-allowance", "scatter-duplicate-order"),
    ("lax_structure/scatter_set_drop/int32", 0): ("pass-with-allowance", "scatter-duplicate-order"),
    ("lax_special/exp2/bfloat16/3x5", 0): ("known-divergence", "jax-lowering-rounds-in-dtype"),
    ("lax_special/exp2/float32/3x5", 0): ("known-divergence", "jax-lowering-rounds-in-dtype"),
    ("lax_special/logistic/float16/33x65", 0): ("known-divergence", "jax-lowering-rounds-in-dtype"),
    ("lax_special/logistic/bfloat16/specials", 0): ("known-divergence", "jax-lowering-rounds-in-dtype"),
    ("lax_elementwise/mul_complex/complex64/33x65", 0): ("known-divergence", "xla-gpu-complex-mul"),
    ("lax_elementwise/mul_complex/complex128/33x65", 0): ("known-divergence", "xla-gpu-complex-mul"),
    ("random/rng_uniform/float32/64x64", 0): ("known-divergence", "xla-rng-uniform-reaches-b"),
    ("lax_special/lgamma/float32/specials", 0): ("known-divergence", "xla-gpu-special-functions"),
    ("lax_special/digamma/float32/3x5", 1): ("known-divergence", "xla-gpu-special-functions"),
    ("lax_special/erfc/float32/3x5", 1): ("known-divergence", "xla-gpu-special-functions"),
    ("lax_special/sqrt/float8_e3m4/exhaustive", 0): ("known-divergence", "xla-cpu-e3m4-sqrt-via-f16"),
    # the transformer block's matmuls bound to first order (ABS_REL with dot_sensitivity)
    ("programs/transformer_block/forward/float32", 0): ("pass-with-allowance", "matmul-precision-tf32"),
    ("lax_contractions/ragged_dot/f32", 0): ("pass-with-allowance", "matmul-precision-tf32"),
    # a cancellation: the case's derived ABS_REL mode, no allowance needed
    ("control_flow/remat_grad/float32", 0): ("pass", None),
    ("lax_special/exp2/float64/33x65", 0): ("known-divergence", "xla-gpu-exp2-f64-argument"),
}


def _judge(case_id, seed, outs):
    case = CASES[case_id]
    inputs = case.make_inputs(seed)
    with case.context():
        ref = ReferenceRunner().run(case.as_program(), inputs)
        rec = Record(case=case.id, runner="xla:cuda")
        compare(case, "xla:cuda", inputs, ref, outs, rec, first_divergence=False)
    return rec, inputs, ref


def test_the_subset_is_the_expected_one():
    assert set(RECORDED) == set(EXPECTED)


@pytest.mark.parametrize("key", sorted(EXPECTED), ids=lambda k: f"{k[0]}@{k[1]}")
def test_recorded_h100_output_is_explained(key):
    outcome, name = EXPECTED[key]
    rec, _, _ = _judge(*key, RECORDED[key])
    assert rec.outcome == outcome, rec.detail
    if outcome == "pass":
        return
    got = rec.allowance if outcome == "pass-with-allowance" else rec.known_divergence["id"]
    assert got == name


def _worst_element(ref, out):
    """Index of the element where the recorded output is farthest from the reference (a
    difference the explanation covers), or of the first element if none differs."""
    d = np.asarray(ulp_distance(ref, out), np.float64).ravel() if np.issubdtype(np.asarray(ref).dtype, np.inexact) \
        else (np.asarray(ref) != np.asarray(out)).ravel().astype(np.float64)
    d[~np.isfinite(d)] = -1
    return int(np.argmax(d))


def _spoil(ref, out):
    """The recorded output with its most different element replaced by a value no explanation
    allows: far from the reference (floats: 1e6 ulp past it or, for complex, 1e-3 relative; integers:
    an impossible value)."""
    ref, out = np.asarray(ref), np.array(out, copy=True)
    k = _worst_element(ref, out)
    r = ref.reshape(-1)[k]
    if np.iscomplexobj(out):
        out.reshape(-1)[k] = r + (abs(r) + 1) * 1e-3
    elif np.issubdtype(out.dtype, np.integer):
        out.reshape(-1)[k] = r + 12345 if r < 1000 else r - 12345
    else:
        wide = float(r) if np.isfinite(float(r)) and float(r) != 0 else 1.0
        out.reshape(-1)[k] = np.asarray(wide * (1 + 1e-2) + 0.5, np.float64).astype(out.dtype)
    return out


@pytest.mark.parametrize("key", sorted(k for k in EXPECTED if not k[0].startswith("random/")),
                         ids=lambda k: f"{k[0]}@{k[1]}")
def test_a_wrong_element_in_the_recorded_output_still_fails(key):
    outs = RECORDED[key]
    _, _, ref = _judge(*key, outs)
    # spoil the first output that the explanation was needed for (it differs from the reference)
    i = next((j for j, (r, o) in enumerate(zip(ref, outs))
              if np.asarray(r).tobytes() != np.asarray(o).tobytes()), 0)
    spoiled = list(outs)
    spoiled[i] = _spoil(ref[i], outs[i])
    rec, _, _ = _judge(*key, spoiled)
    assert rec.outcome == "fail", (rec.outcome, rec.allowance, rec.known_divergence)


def test_rng_uniform_divergence_needs_only_the_range_output():
    key = ("random/rng_uniform/float32/64x64", 0)
    outs = list(RECORDED[key])
    outs[0] = np.zeros_like(outs[0])               # the statistical output broken: not this divergence
    rec, _, _ = _judge(*key, outs)
    assert rec.outcome == "fail"
