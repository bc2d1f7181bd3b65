"""Known divergences: real upstream bugs and documented differences, each with a link, the
runners and JAX versions it affects, and a matcher that recognises it in a failing result.

A failing (case, runner) whose difference one of these matches is reported as
``known-divergence`` with the link; when the upstream bug is fixed the case passes and the
nightly history shows it as fixed.
"""
from __future__ import annotations

import dataclasses
import fnmatch
from typing import Callable, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Failure:
    """What a matcher sees of one failing (case, runner)."""
    case_id: str
    runner: str
    jax_version: str
    primitives: tuple[str, ...]
    reference: Sequence[np.ndarray]
    backend: Sequence[np.ndarray]
    failing_outputs: tuple[int, ...]
    max_ulp: float | None


@dataclasses.dataclass(frozen=True)
class Divergence:
    id: str
    link: str
    summary: str
    runners: tuple[str, ...]                    # fnmatch patterns
    primitives: tuple[str, ...] = ()            # the case must exercise one of these (empty: any)
    dtypes: tuple[str, ...] = ()                # a failing output must have one of these (empty: any)
    jax_versions: tuple[str, str | None] = ("0", None)   # [first affected, first fixed)
    match: Callable[[Failure], bool] | None = None        # extra recognition on the values

    def matches(self, f: Failure) -> bool:
        if not any(fnmatch.fnmatchcase(f.runner, p) for p in self.runners):
            return False
        if self.primitives and not set(self.primitives) & set(f.primitives):
            return False
        if self.dtypes and not any(np.asarray(f.backend[i]).dtype.name in self.dtypes for i in f.failing_outputs):
            return False
        if not _version_in(f.jax_version, self.jax_versions):
            return False
        return self.match is None or bool(self.match(f))


def _vtuple(v: str) -> tuple:
    out = []
    for part in v.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def _version_in(v: str, rng) -> bool:
    lo, hi = rng
    return _vtuple(v) >= _vtuple(lo) and (hi is None or _vtuple(v) < _vtuple(hi))


def _failing_all_zero(f: Failure) -> bool:
    return all(not np.any(np.asarray(f.backend[i])) for i in f.failing_outputs)


def _ulp_below(limit: float):
    return lambda f: f.max_ulp is not None and f.max_ulp <= limit


def _erf_out_of_range(f: Failure) -> bool:
    return any(np.any(np.abs(np.asarray(f.backend[i], np.float64)) > 1) for i in f.failing_outputs)


DIVERGENCES: tuple[Divergence, ...] = (
    Divergence(
        "tpu-interpret-prng-zeros",
        "https://github.com/jax-ml/jax/blob/main/jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py "
        "(prng_random_bits_p: 'TODO(jburnim): Implement this properly?' returns jnp.zeros)",
        "JAX's TPU interpret mode ignores pltpu.prng_seed and returns all zeros from "
        "pltpu.prng_random_bits (and from the stateful samplers built on it).",
        runners=("pallas:tpu-interpret",),
        primitives=("prng_random_bits",),
        match=_failing_all_zero),
    Divergence(
        "pallas-ops-tpu-threefry-rank3",
        "https://github.com/jax-ml/jax/blob/main/jax/experimental/pallas/ops/tpu/random/prng_utils.py "
        "(blocked_iota/compute_scalar_offset use total_shape[0..1] as strides)",
        "The shipped Pallas TPU threefry kernel (plthreefry_random_bits) equals partitionable "
        "jax.random.bits only for rank <= 2: for rank >= 3 its counters use the wrong strides. "
        "Found by this suite (research/prng.md; verified for (2,5,7) and (3,4,300)).",
        runners=("pallas:*",), primitives=("threefry2x32",),
        match=lambda f: f.case_id.startswith("pallas/claims/tpu_threefry")
        and all(np.ndim(f.reference[i]) >= 3 for i in f.failing_outputs)),
    Divergence(
        "jax-39707-log1p-f64-cpu", "https://github.com/jax-ml/jax/issues/39707",
        "float64 log1p on XLA:CPU is up to ~129 ulp from the correctly rounded result.",
        runners=("xla:cpu",), primitives=("log1p",), dtypes=("float64", "complex128"),
        match=_ulp_below(256)),
    Divergence(
        "jax-14717-erf-above-one-cpu", "https://github.com/jax-ml/jax/issues/14717",
        "erf returns values slightly above 1 on XLA:CPU.",
        runners=("xla:cpu", "pallas:interpret", "pallas:tpu-interpret"), primitives=("erf",),
        match=_erf_out_of_range),
    Divergence(
        "jax-3193-argmax-nan", "https://github.com/jax-ml/jax/issues/3193",
        "argmax/argmin with NaN inputs return an index that differs between backends.",
        runners=("xla:cuda", "xla:rocm", "xla:tpu"), primitives=("argmax", "argmin")),
    Divergence(
        "jax-6443-sort-negative-nan", "https://github.com/jax-ml/jax/issues/6443",
        "sort places -NaN differently from +NaN on some backends.",
        runners=("xla:cuda", "xla:rocm", "xla:tpu"), primitives=("sort",)),
    Divergence(
        "jax-12359-scatter-duplicates", "https://github.com/jax-ml/jax/issues/12359",
        "scatter with duplicate indices: which update wins differs between CPU and GPU.",
        runners=("xla:cuda", "xla:rocm", "xla:tpu"), primitives=("scatter",)),
    Divergence(
        "jax-19011-fp8-minmax-nan", "https://github.com/jax-ml/jax/issues/19011",
        "min/max of fp8 values with NaN do not propagate NaN on some backends.",
        runners=("xla:*",), primitives=("max", "min"),
        dtypes=("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz")),
    Divergence(
        "jax-19689-frexp-subnormal-tpu", "https://github.com/jax-ml/jax/issues/19689",
        "frexp of subnormals is wrong on TPU (no subnormal support).",
        runners=("xla:tpu",), primitives=("frexp",)),
    Divergence(
        "jax-25047-pallas-gpu-float-to-int8", "https://github.com/jax-ml/jax/issues/25047",
        "Pallas GPU converts negative floats to int8 as 0.",
        runners=("pallas:triton",), primitives=("convert_element_type",), dtypes=("int8",)),
    Divergence(
        "xla-40862-f64-rsqrt-blackwell", "https://github.com/openxla/xla/issues/40862",
        "f64 rsqrt is inaccurate on NVIDIA Blackwell.",
        runners=("xla:cuda",), primitives=("rsqrt",), dtypes=("float64",)),
    Divergence(
        "pallas-interpret-triton-atomic-duplicates",
        "https://github.com/jax-ml/jax/blob/main/jax/_src/pallas/triton/primitives.py "
        "(_atomic_rmw_discharge_rule: x_new = ref.at[idx].set(monoid(ref[idx], val)))",
        "JAX's HLO interpret mode discharges a Triton atomic_add/max/min as gather -> op -> "
        "scatter-set, so when several lanes of one atomic hit the same element all but one update "
        "is lost (a GPU applies every lane's update atomically). Distinct indices agree. Found by "
        "this suite (pallas/triton_atomics_add_max_cas/duplicates_indices; JAX 0.10.2 and 0.12.0.1).",
        runners=("pallas:interpret",), primitives=("atomic_rmw",),
        # The case's outputs 0 and 2 are the atomically updated refs; output 1 echoes the indices.
        match=lambda f: f.case_id.startswith("pallas/triton_atomics_") and set(f.failing_outputs) <= {0, 2}
        and len(np.unique(f.reference[1])) < np.size(f.reference[1])),
    Divergence(
        "pallas-triton-maxnum", "research/numerics.md (Pallas Triton lowers max/min to maxnumf)",
        "Pallas Triton lowers max/min to maxnum/minnum, which drop NaN instead of propagating it.",
        runners=("pallas:triton",), primitives=("max", "min")),
)

BY_ID = {d.id: d for d in DIVERGENCES}


def find(f: Failure) -> Divergence | None:
    for d in DIVERGENCES:
        if d.matches(f):
            return d
    return None
