"""Rules: dot_general, ragged_dot_general, conv_general_dilated, fft.

Every contraction reduces to batched matrix products whose float results are *correctly rounded*:
each output element is the exact sum of the exact products, rounded once to the output dtype.
A float64 (long double for float64 inputs) BLAS product gives an approximation with a proven error
bound; :func:`certified_round` (interp/numerics.py) keeps the elements whose bound interval rounds to
one value and recomputes the rest exactly. Integer results wrap around in the output type.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from jax.lax import DotAlgorithm, DotAlgorithmPreset

from .. import dtypes
from ..registry import register
from ._fft_exact import fft_value
from ._scratch import scratch
from ..numerics import (F32, F64, LONGDOUBLE, UNIT, c_order, certified_round, convert, exact_dot, fsum_round,
                        reduce_precision_bits, refine_sums, round_exact, round_float, significand_bits,
                        sum_error_bound, two_sum, wide_type, wrap_int)
from ._windows import window_indices

FP8 = {np.dtype(t) for t in dtypes.ML_FLOATS if dtypes.bit_width(t) == 8}


def _lowered_inputs(eqn, lhs, rhs, out_dtype):
    """Input dtypes as XLA:CPU/GPU see them: JAX's lowering converts mixed-dtype inputs to the
    output dtype, except a mix of two float8 types (jax/_src/lax/lax.py _handle_dot_precision)."""
    if lhs.dtype != rhs.dtype and not (lhs.dtype in FP8 and rhs.dtype in FP8):
        return convert(lhs, out_dtype), convert(rhs, out_dtype)
    return lhs, rhs


def _algorithm_of(precision):
    """The explicit DotAlgorithm / DotAlgorithmPreset (not DEFAULT) in a precision param, or None."""
    # (a DotAlgorithm is a NamedTuple itself; a pair of Precisions is a plain tuple)
    for p in (precision if type(precision) is tuple else (precision,)):
        if isinstance(p, DotAlgorithm) or (isinstance(p, DotAlgorithmPreset) and p.name != "DEFAULT"):
            return p
    return None


# --------------------------------------------------------------------------------------------
# Explicit dot algorithms (XLA PrecisionConfig.Algorithm, JAX lax.DotAlgorithmPreset / DotAlgorithm).
# What a program with an algorithm means, stage by stage as JAX lowers it
# (jax/_src/lax/lax.py _handle_dot_precision, get_algorithm_compute_types):
#   1. each input is converted (round to nearest even) to the algorithm's input type, unless its
#      dtype is one the preset accepts as it is (BF16 presets accept float32 storage);
#   2. the algorithm rounds every input to its precision type (bf16 / tf32 / f16 / f32 / f64 /
#      the fp8 types as they are); the _X3/_X6/_X9 algorithms split each float32 input into 2 or 3
#      components x = c0 + c1 (+ c2), c_i = round(x - c0 - ... - c_{i-1}) computed in float32,
#      and sum the component products XLA's emitters sum (xla/backends/gpu/codegen/triton/
#      dot_algorithms.cc EmitBF16x3Matmul/EmitBF16x6Matmul/EmitBF16x9Matmul, after
#      arXiv:1904.06376; TF32_TF32_F32_X3 the same with tf32 components); an output element
#      whose inputs hold inf/NaN is the hi*hi sum alone (the emitters' ZeroNaNs drop the low
#      products' sum where it is not finite);
#   3. every product is exact and their sum is rounded once to the accumulation type;
#   4. that value is converted to the dot's result type and then to the output dtype.
# tf32 rounding is round to nearest even of the float32 significand to 10 bits (reduce_precision
# with 8 exponent and 10 mantissa bits): the reference's choice where hardware may truncate.

_PAIRS = {1: ((0, 0),),
          "X3": ((0, 0), (0, 1), (1, 0)),
          "X6": ((0, 0), (0, 1), (1, 0), (0, 2), (2, 0), (1, 1)),
          "X9": tuple((i, j) for i in range(3) for j in range(3))}
_PARTS = {1: 1, "X3": 2, "X6": 3, "X9": 3}


class _Algorithm(NamedTuple):
    lhs: np.dtype             # stage 1: the dtype the lowering converts lhs to
    rhs: np.dtype
    precision: "str | None"   # stage 2: "bfloat16" | "tf32" | None (the input type itself)
    split: "int | str"        # 1, "X3", "X6", "X9"
    accumulation: np.dtype    # stage 3
    result: np.dtype          # stage 4: the dot's result type before the final conversion


def _pick(dtype, supported):
    """jax get_algorithm_compute_types.maybe_convert_dtype: keep a supported dtype, else the first."""
    if supported is None or any(np.dtype(dtype) == np.dtype(t) for t in supported):
        return np.dtype(dtype)
    return np.dtype(supported[0])


def _algorithm_semantics(eqn, alg, lhs_dtype, rhs_dtype) -> _Algorithm:
    out = np.dtype(eqn.out_dtype)
    if isinstance(alg, DotAlgorithm):
        if (alg.lhs_component_count, alg.rhs_component_count, alg.num_primitive_operations) != (1, 1, 1):
            raise eqn.unsupported(f"dot_algorithm/unsupported: dot algorithm {alg!r}: component "
                                  "decompositions other than the presets' have no definition to follow")
        acc = np.dtype(alg.accumulation_type)
        return _Algorithm(np.dtype(alg.lhs_precision_type), np.dtype(alg.rhs_precision_type), None, 1, acc, acc)
    name = alg.name
    if name.startswith("ANY_F8"):
        if np.dtype(lhs_dtype) not in FP8 or np.dtype(rhs_dtype) not in FP8:
            # (JAX's lowering's error, with the statement's id)
            raise ValueError(f"The dot algorithm '{name}' requires both inputs to have float8 dtypes. "
                             f"Got {lhs_dtype} and {rhs_dtype} instead. (dot_algorithm/unsupported)")
    lhs = _pick(lhs_dtype, alg.supported_lhs_types)
    rhs = _pick(rhs_dtype, alg.supported_rhs_types)
    result = _pick(out, alg.supported_output_types(lhs, rhs))
    acc = np.dtype(alg.accumulation_type) if alg.accumulation_type is not None else result
    precision = "bfloat16" if name.startswith("BF16") else "tf32" if name.startswith("TF32") else None
    split = name.rsplit("_", 1)[1] if name.endswith(("_X3", "_X6", "_X9")) else 1
    return _Algorithm(lhs, rhs, precision, split, acc, result)


def _round_tf32(x: np.ndarray) -> np.ndarray:
    u = c_order(x.astype(np.float32)).view(np.uint32).astype(np.uint64)
    return reduce_precision_bits(u, (32, 8, 23), 8, 10).astype(np.uint32).view(np.float32)


def _components(x: np.ndarray, precision, parts: int) -> list:
    """Stage 2: the input rounded to the algorithm's precision type, or split into ``parts``
    components (float32 arrays holding bf16/tf32 values; exact copies of the values)."""
    if precision is None:
        return [x]
    rnd = _round_tf32 if precision == "tf32" else lambda v: v.astype(dtypes.bfloat16).astype(np.float32)
    rest = convert(x, np.float32)
    finite = np.isfinite(rest)
    comps = []
    with np.errstate(invalid="ignore"):
        for i in range(parts):
            c = rnd(rest)
            comps.append(c if i == 0 else np.where(finite, c, np.float32(0)))
            rest = rest - c
    return comps


def algorithm_dot_value(eqn, lhs, rhs, dimension_numbers, alg) -> np.ndarray:
    """dot_general under an explicit algorithm (stages 1-4 above)."""
    a = _algorithm_semantics(eqn, alg, lhs.dtype, rhs.dtype)
    out = np.dtype(eqn.out_dtype)
    if not all(dtypes.is_float(t) for t in (a.lhs, a.rhs, a.accumulation, a.result, out)) or \
            dtypes.is_complex(lhs.dtype) or dtypes.is_complex(rhs.dtype):
        raise eqn.unsupported(f"dot algorithm {alg!r} with {lhs.dtype} x {rhs.dtype} -> {out}")
    lhs, rhs = convert(np.asarray(lhs), a.lhs), convert(np.asarray(rhs), a.rhs)
    lc = _components(lhs, a.precision, _PARTS[a.split])
    rc = _components(rhs, a.precision, _PARTS[a.split])
    pairs = _PAIRS[a.split]
    if len(pairs) == 1:
        value = dot_general_value(eqn, lc[0], rc[0], dimension_numbers, a.accumulation)
    else:
        # One contraction over (component pair, k): the exact sum of every listed product.
        (cl, cr), (bl, br) = dimension_numbers
        inc = lambda dims: tuple(d + 1 for d in dims)  # noqa: E731
        dn = ((inc(cl) + (0,), inc(cr) + (0,)), (inc(bl), inc(br)))
        value = dot_general_value(eqn, np.stack([lc[i] for i, _ in pairs]), np.stack([rc[j] for _, j in pairs]),
                                  dn, a.accumulation)
        if not (np.isfinite(lc[0]).all() and np.isfinite(rc[0]).all()):
            # ZeroNaNs: an element whose inputs hold inf/NaN has a non-finite hi*hi sum and is
            # that sum alone (its low products, such as inf * 0 from a zero low component, are
            # dropped as a whole).
            hh = dot_general_value(eqn, lc[0], rc[0], dimension_numbers, a.accumulation)
            value = np.where(np.isfinite(hh), value, hh)
    return convert(convert(np.asarray(value), a.result), out)


def _float_matmul(a: np.ndarray, b: np.ndarray, out_dtype) -> np.ndarray:
    """Correctly rounded ``a @ b`` for real inputs a (B, M, K), b (B, K, N) -> out_dtype."""
    nb, m, k = a.shape
    n = b.shape[2]
    for x in (a, b):
        if dtypes.is_int(x.dtype) and dtypes.bit_width(x.dtype) > 32:
            raise NotImplementedError("dot/int64-to-float-unsupported: 64-bit integer inputs with a "
                                      "float result")
    wide = wide_type(a.dtype, b.dtype)
    # Every input value is exact in float64. (The copies are temporaries: no path returns them.)
    af, bf = (x if x.dtype == F64 else _scratch_copy(f"dot.{name}", x) for name, x in (("a", a), ("b", b)))

    def exact(i):
        bi, rest = divmod(int(i), m * n)
        mi, ni = divmod(rest, n)
        return af[bi, mi], bf[bi, :, ni]

    def refine(idx):
        bi, rest = np.divmod(idx, m * n)
        mi, ni = np.divmod(rest, n)
        if wide == F64:
            return extracted_sums(af[bi, mi] * bf[bi, :, ni])
        return refine_sums(af[bi, mi], bf[bi, :, ni], wide)

    aw, bw = af.astype(wide, copy=False), bf.astype(wide, copy=False)
    with np.errstate(all="ignore"):
        finite = False
        if wide == F64 and 1 < k <= 1 << 20 and a.dtype == F32 and b.dtype == F32:
            # float32 inputs: norm bounds from a float32 einsum (half the traffic); where the
            # squares overflow or a row holds inf/NaN, the float64 norms below decide.
            na, nbn = _f32_norm_bound(a, "bmk,bmk->bm"), _f32_norm_bound(b, "bkn,bkn->bn")
            finite = np.isfinite(na).all() and np.isfinite(nbn).all()
        if not finite:
            # Cauchy-Schwarz: sum_k |a_k b_k| <= |a|_2 |b|_2 (inflated for the rounding of the
            # norms). (einsum: no squared temporaries.) A row or column holding inf/NaN has a
            # non-finite norm.
            na = np.sqrt(np.einsum("bmk,bmk->bm", aw, aw))
            nbn = np.sqrt(np.einsum("bkn,bkn->bn", bw, bw))
            finite = np.isfinite(na).all() and np.isfinite(nbn).all()
        if finite and k > 1 and wide == F64:
            # The common case: the bound is the rank-1 matrix na_i nbn_j times a constant, which
            # _certify_rank1 never materialises in full.
            s = np.matmul(af, bf, out=scratch("dot.s", (nb, m, n), F64))
            return _certify_rank1(s, af, bf, na * (1 + 2 * (k + 4) * UNIT[F64]), nbn, out_dtype, exact, refine,
                                  (significand_bits(a.dtype), significand_bits(b.dtype)))
        # float64 inputs: exact slice products on the float64 BLAS (no long double product).
        sliced = _sliced_matmul(af, bf, finite) if wide == LONGDOUBLE and k > 1 else None
        if sliced is not None:
            hi, lo, bound = sliced
            s = hi.astype(LONGDOUBLE) + lo.astype(LONGDOUBLE)
            bound = bound + np.abs(s) * UNIT[LONGDOUBLE]
        else:
            # K == 1: the product itself (BLAS would add it to +0.0, losing the sign of -0.0 products).
            s = aw * bw if k == 1 else np.matmul(aw, bw)
            absbound = na[:, :, None] * nbn[:, None, :]
            absbound *= 1 + 2 * (k + 4) * UNIT[wide]
            bound = sum_error_bound(absbound, k, wide)
        # Rows/columns with inf/NaN: recompute without BLAS (its kernels may mishandle them);
        # the IEEE result is then order independent because no finite partial sum overflows.
        # (Found through the norms: a row whose norm overflows without inf/NaN is merely redone.)
        if not finite:
            for i in range(nb):
                rows = np.flatnonzero(~np.isfinite(na[i]))
                cols = np.flatnonzero(~np.isfinite(nbn[i]))
                if rows.size:
                    s[i, rows, :] = np.einsum("mk,kn->mn", aw[i, rows], bw[i])
                if cols.size:
                    s[i, :, cols] = np.einsum("mk,kn->nm", aw[i], bw[i][:, cols])

    if sliced is not None and np.dtype(out_dtype) == F64:
        return _round_pair(hi, lo, sliced[2], s, exact)
    return certified_round(s, bound, out_dtype, exact, refine, single=k == 1)


def _scratch_copy(slot: str, x: np.ndarray) -> np.ndarray:
    out = scratch(slot, x.shape, F64)
    np.copyto(out, x)
    return out


def _f32_norm_bound(x: np.ndarray, spec: str) -> np.ndarray:
    """Upper bounds (float64) of the 2-norms of float32 rows/columns, from a float32 einsum (half
    the memory traffic of float64): every square and addition rounds by at most u32 relative or
    2**-150 absolute (underflow), so the sum of k squares is at most the computed one times
    1 + gamma_{k+1}(u32), plus k 2**-149. inf where the float32 squares overflow (the caller
    then takes the float64 norms)."""
    k = x.shape[1] if spec.startswith("bkn") else x.shape[2]
    ku = (k + 2) * 2.0 ** -24
    sq = np.einsum(spec, x, x).astype(F64)
    return np.sqrt(sq * ((1 + ku / (1 - ku)) * (1 + 2 ** -50)) + k * 2.0 ** -149) * (1 + 2 ** -50)


# Up to this many terms in all, undecided elements are summed by math.fsum
# rather than by the vectorised tiers (measured: ~0.15 us a term against a fixed ~60-100 us).
FSUM_TERMS = 1024


def _certify_rank1(s, af, bf, row, col, out_dtype, exact, refine, digits) -> np.ndarray:
    """certified_round of ``s`` = the float64 BLAS product af @ bf (B, M, N), whose k exact
    products add up in absolute value to at most row_i col_j ((B, M) x (B, N)), without a
    full-size bound. ``digits``: the significand bits of a's and b's own dtypes
    (:func:`significand_bits`).

    Stage 1 takes one bound per row (per column instead where that leaves far fewer undecided):
    with bb_i >= max_j (the certified_round widening of the element bound), round(s - bb_i) and
    round(s + bb_i) bracket the correctly rounded exact sum (rounding is monotone), and where
    their bits agree that is the result. Two fused subtract/add-and-round passes and a compare:
    on random data all but ~0.1% of the elements are decided there. Stage 2 recomputes the rest
    more precisely and gives them to certified_round (its zero, refinement and exact tiers): many
    by :func:`_blocked_dots` (a bound ~sqrt(k)/2 times tighter than BLAS's), a few (at most
    FSUM_TERMS terms in all) exactly by :func:`fsum_round`. Before that, the undecided elements
    that BLAS summed exactly (:func:`_summed_exactly`: narrow inputs, such as float16, whose
    sums are often rounding ties of the output dtype, which no bound decides) are ``s`` rounded.
    """
    out_dtype = np.dtype(out_dtype)
    if s.size == 0:
        return s.astype(out_dtype)
    k = af.shape[2]
    u = UNIT[F64]
    ku = (k + 1) * u
    g = ku / (1 - ku)                                   # sum_error_bound's factor
    # certified_round widens the bound g A (A = row_i col_j >= |exact|, |s| <= A + g A) by
    # 4u (|s| + bound): bb <= A (g + 4u (1 + 2g)); the last factor covers this float arithmetic.
    widen = (g + 4 * u * (1 + 2 * g)) * (1 + 2 ** -40)
    lo, todo = _bracket(s, (row * (np.max(col, axis=1, keepdims=True) * widen))[:, :, None], out_dtype)
    if todo.size > s.size >> 8:   # column norms far apart: try one bound per column
        lo_c, todo_c = _bracket(s, (col * (np.max(row, axis=1, keepdims=True) * widen))[:, None, :], out_dtype)
        if todo_c.size < todo.size:
            lo, todo = lo_c, todo_c
    if todo.size:
        bi, rest = np.divmod(todo, s.shape[1] * s.shape[2])
        mi, ni = np.divmod(rest, s.shape[2])
        done = _summed_exactly(af, bf, bi, mi, ni, row[bi, mi] * col[bi, ni], digits)
        if done.any():
            # (an exact zero sum is +0: XLA accumulates from +0.0, and k > 1 here)
            lo.flat[todo[done]] = round_float(s.flat[todo[done]] + 0.0, out_dtype)
            todo, bi, mi, ni = todo[~done], bi[~done], mi[~done], ni[~done]
    if todo.size:
        if todo.size * k > FSUM_TERMS:
            sums, bound = _blocked_dots(af, bf, bi, mi, ni, row[bi, mi] * col[bi, ni])
            lo.flat[todo] = certified_round(sums, bound, out_dtype, lambda j: exact(todo[j]),
                                            lambda j: refine(todo[j]))
        else:   # (few: each exact sum rounded once by math.fsum)
            lo.flat[todo] = fsum_round(af[bi, mi] * bf[bi, :, ni], out_dtype)
    return lo


def _summed_exactly(af, bf, bi, mi, ni, absbound, digits) -> np.ndarray:
    """Which dots af[bi, mi, :] . bf[bi, :, ni] the float64 BLAS product summed exactly, given
    |products| summing to at most ``absbound`` and inputs of ``digits`` = (pa, pb) significand
    bits (pa + pb <= 53: every product is exact). Each input of row i of a is an integer multiple
    of 2**ua_i, ua_i = min_k e(a_ik) - pa (:func:`significand_bits`; the smallest exponent of
    the row's nonzero values), each of column j of b of 2**ub_j, so every product, and every
    partial sum in any order (FMA or not), is a multiple of U = 2**(ua_i + ub_j) of magnitude at
    most ``absbound``: below 2**53 U it is a float64 number (U >= 2**-1074: the inputs are at
    most float32), every addition is exact, and s is the exact sum."""
    pa, pb = digits
    ua = _lowest_exponent(af, axis=2) - pa             # (B, M)
    ub = _lowest_exponent(bf, axis=1) - pb             # (B, N)
    with np.errstate(over="ignore"):
        units = np.ldexp(absbound * (1 + 2 ** -40), -(ua[bi, mi] + ub[bi, ni]))
    return units < 2.0 ** 53


def _lowest_exponent(x: np.ndarray, axis: int) -> np.ndarray:
    """The smallest binary exponent (np.frexp) of the nonzero values along ``axis`` (int64; a
    large one, 2**12, where all are zero: their products are exact zeros)."""
    e = np.frexp(x)[1].astype(np.int64)
    return np.min(np.where(x != 0, e, 1 << 12), axis=axis, initial=1 << 12)


def _bracket(s, bb, out_dtype):
    """(round(s - bb), flat indices where round(s + bb) has other bits)."""
    if out_dtype in (F32, np.dtype(np.float16)):      # NumPy's casts round once: fused
        lo = np.subtract(s, bb, out=np.empty(s.shape, out_dtype), casting="same_kind")
        hi = np.add(s, bb, out=scratch("dot.hi", s.shape, out_dtype), casting="same_kind")
    else:
        lo, hi = round_float(s - bb, out_dtype), round_float(s + bb, out_dtype)
    uint = dtypes.storage_uint(out_dtype)
    return lo, np.flatnonzero(np.not_equal(lo.view(uint), hi.view(uint), out=scratch("dot.ne", s.shape, bool)))


def _blocked_dots(af, bf, bi, mi, ni, absbound) -> tuple[np.ndarray, np.ndarray]:
    """The dots af[bi, mi, :] . bf[bi, :, ni] of exact float64 products (|products| summing to
    at most ``absbound``) as (sums, bound): summed in chunks of c ~ sqrt(k) terms, then the
    k / c chunk sums (each level in any order), so the error is at most
    (gamma_c + gamma_{k/c} (1 + gamma_c)) absbound instead of BLAS's gamma_k absbound.
    The columns of bf are gathered row by row (np.take streams bf once instead of k strided
    reads per element), in groups of elements of bounded memory."""
    nbat, m, k = af.shape
    n = bf.shape[2]
    c = max(1, math.isqrt(k))
    nc = -(-k // c)
    rows, cols = bi * m + mi, bi * n + ni
    a2 = af.reshape(-1, k)
    b2 = bf.reshape(k, n) if nbat == 1 else bf.transpose(1, 0, 2).reshape(k, nbat * n)
    sums = np.empty(rows.size)
    step = max(1, (1 << 20) // (nc * c))
    for i in range(0, rows.size, step):
        at = a2[rows[i:i + step]]                                    # (t, k)
        bt = np.take(b2, cols[i:i + step], axis=1)                   # (k, t)
        if nc * c != k:
            at = np.pad(at, ((0, 0), (0, nc * c - k)))
            bt = np.pad(bt, ((0, nc * c - k), (0, 0)))
        parts = np.einsum("tck,ckt->tc", at.reshape(-1, nc, c), bt.reshape(nc, c, -1))
        sums[i:i + step] = np.sum(parts, axis=1)
    u = UNIT[F64]
    g1 = (c + 1) * u / (1 - (c + 1) * u)
    g2 = (nc + 1) * u / (1 - (nc + 1) * u)
    return sums, absbound * ((g1 + g2 * (1 + g1)) * (1 + 2 ** -40))


def _round_pair(hi, lo, delta, special, exact) -> np.ndarray:
    """float64 results of exact values within ``delta`` of hi + lo (float64 arrays): with s =
    fl(hi + lo) and its exact error e (TwoSum), the value rounds to s wherever |e| + delta is
    below half an ulp of s; the rest (near-ties) are computed exactly. ``special``: the caller's
    values where they are not finite (inf/NaN rows and columns), taken as they are."""
    with np.errstate(all="ignore"):
        s, e = two_sum(hi, lo)
        half_ulp = np.abs(np.spacing(s)) / 2
        certain = np.abs(e) + delta * (1 + 2 ** -50) < half_ulp * (1 - 2 ** -50)
        certain &= np.isfinite(s) & ((s != 0) | (delta == 0))   # (a tiny nonzero sum keeps its sign)
        out = np.where(s == 0, 0.0, s)           # an exact zero sum is +0 (XLA starts from +0.0)
    nonfinite = ~np.isfinite(np.asarray(special))
    out = np.where(nonfinite, np.asarray(special, LONGDOUBLE).astype(F64), out)
    for i in np.flatnonzero(~(certain | nonfinite)):
        out.flat[i] = round_exact(*exact_dot(*exact(i)), F64)
    return out


def _slices(x: np.ndarray, e: np.ndarray, rho: int, count: int) -> tuple[list, np.ndarray]:
    """x = sum(slices) + rest, exactly: slice t holds multiples of 2**(e - (t+1)*rho) of magnitude
    <= (2**rho + 1) units (e per row or column: |x| < 2**e), |rest| <= 2**(e - count*rho).
    Extraction by sigma = 2**(e + 53 - rho - t*rho): fl((r + sigma) - sigma) keeps r's bits down to
    the unit, fl(r - that) is exact (Rump, Ogita, Oishi 2008, ExtractVector)."""
    parts, rest = [], x
    for t in range(count):
        sigma = np.ldexp(1.0, e + (53 - rho) - t * rho)
        p = (rest + sigma) - sigma
        rest = rest - p
        parts.append(p)
    return parts, rest


def _sliced_matmul(a: np.ndarray, b: np.ndarray, finite: bool):
    """``a @ b`` of float64 inputs (B, M, K) x (B, K, N) as float64 (hi, lo, bound) with
    |hi + lo - exact| <= bound, from exact float64 BLAS products of input slices (the Ozaki scheme: Ozaki, Ogita, Oishi,
    Rump, "Error-free transformations of matrix multiplication by using fast routines of matrix
    multiplication and its applications", Numer. Algorithms 59(1), 2012).

    Rows of a and columns of b are cut into slices of rho bits below their largest element; with
    K * (2**rho + 1)**2 <= 2**53 every slice product is a sum of K integer multiples of one unit
    below 2**53 units, so BLAS computes it exactly in any order (FMA or not). The s**2 exact
    products are summed by :func:`extracted_sums`; what the slices leave (below 2**-63 of each
    row's / column's largest) is bounded by Cauchy-Schwarz. None where the exponent range does not
    allow exact slices (huge or tiny values): the caller then uses its long double product.
    """
    k = a.shape[2]
    rho = (52 - math.ceil(math.log2(k))) // 2
    if rho < 8:
        return None
    count = -(-63 // rho)
    if not finite:   # inf/NaN rows and columns are recomputed by the caller
        a, b = np.where(np.isfinite(a), a, 0.0), np.where(np.isfinite(b), b, 0.0)
    ma, mb = np.max(np.abs(a), axis=2, keepdims=True), np.max(np.abs(b), axis=1, keepdims=True)
    ea, eb = np.frexp(ma)[1], np.frexp(mb)[1]
    top = int(ea.max(initial=0)) + int(eb.max(initial=0))
    lowest = lambda e, m: int(np.min(np.where(m > 0, e, 1 << 20), initial=1 << 20))  # noqa: E731
    bottom = lowest(ea, ma) + lowest(eb, mb)
    if top + math.ceil(math.log2(k)) + 2 > 1020 or max(top, 0) + 53 > 1000 or \
            bottom - 2 * count * rho < -1070:
        return None
    pa, ra = _slices(a, ea, rho, count)
    pb, rb = _slices(b, eb, rho, count)
    terms = np.stack([np.matmul(x, y) for x in pa for y in pb], axis=-1)   # each one exact
    hi, lo, bound = _extracted_pair(terms.reshape(-1, terms.shape[-1]))
    # a @ b - sum(slice products) = ra @ b + (a - ra) @ rb, bounded by the norms.
    norm = lambda x, ax: np.sqrt(np.einsum("...k,...k->...", np.moveaxis(x, ax, -1), np.moveaxis(x, ax, -1)))  # noqa: E731
    nra, nrb, na, nb_ = norm(ra, 2), norm(rb, 1), norm(a, 2), norm(b, 1)
    rest = nra[:, :, None] * nb_[:, None, :] + (na + nra)[:, :, None] * nrb[:, None, :]
    rest *= 1 + 2 * (k + 4) * UNIT[F64]
    shape = terms.shape[:-1]
    return hi.reshape(shape), lo.reshape(shape), bound.reshape(shape) + rest


def extracted_sums(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row sums of ``p`` (R, K), float64 terms that are exact (the products of float32-or-narrower
    inputs), with an error bound far below float64's own rounding: (s, bound), |s - exact| <= bound.

    One step of Rump, Ogita and Oishi's error-free extraction ("Accurate floating-point
    summation part I: faithful rounding", SIAM J. Sci. Comput. 31(1), 2008, Algorithm 3.2
    ExtractVector): with sigma = 2**M * 2**ceil(log2 max|p|) and 2**M >= K + 2, q = fl((sigma + p)
    - sigma) and r = fl(p - q) satisfy p = q + r exactly, every q is a multiple of u*sigma with
    sum |q| < sigma, so fl(sum q) is exact; |r| <= u*sigma, so the float64 sum of the r's errs by at
    most gamma_K sum |r| (Higham eq. 4.4). The final addition's error is taken exactly by TwoSum.
    Vectorised over rows; replaces long double (x87) arithmetic, which was the slow tier.
    """
    p = np.asarray(p, F64)
    with np.errstate(all="ignore"):
        hi, lo, bound = _extracted_pair(p)
        s = hi + lo
        bb = s - hi
        err = (hi - (s - bb)) + (lo - bb)   # TwoSum: s + err == hi + lo exactly
    return s, bound + np.abs(err)


def _extracted_pair(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hi, lo, bound): hi = the exact sum of the extracted parts, |hi + lo - sum(p)| <= bound."""
    k = p.shape[1]
    mu = np.max(np.abs(p), axis=1, initial=0.0)
    sigma = np.ldexp(1.0, np.frexp(mu)[1] + math.ceil(math.log2(k + 2)))[:, None]
    q = (sigma + p) - sigma
    r = p - q
    ku = (k + 1) * UNIT[F64]
    return np.sum(q, axis=1), np.sum(r, axis=1), np.sum(np.abs(r), axis=1) * (ku / (1 - ku))


def _integer_matmul(a: np.ndarray, b: np.ndarray, wide) -> np.ndarray:
    """``a @ b`` of integers in ``wide``, exactly. When every product and partial sum is an integer
    below 2**53 in magnitude (bounded by K * max|a| * max|b|), float64 holds each of them exactly
    in any summation order, so BLAS gives the exact sums (NumPy's integer matmul has no BLAS:
    1024^3 int32, 3 s -> 0.05 s); otherwise integer arithmetic, wrapping mod 2**64."""
    if a.size and b.size and a.dtype.itemsize <= 4 and b.dtype.itemsize <= 4:
        bound = (int(np.abs(a.astype(np.int64)).max()) * int(np.abs(b.astype(np.int64)).max())
                 * a.shape[-1])
        if bound < 2**53:
            return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(wide)
    return np.matmul(a.astype(wide), b.astype(wide))


def matmul(eqn, a: np.ndarray, b: np.ndarray, out_dtype) -> np.ndarray:
    """Batched ``a @ b`` (a: (B, M, K), b: (B, K, N)) with the reference's semantics."""
    out_dtype = np.dtype(out_dtype)
    try:
        if dtypes.is_int(out_dtype) or dtypes.is_bool(out_dtype):
            wide = np.uint64 if dtypes.is_unsigned(a.dtype) and dtypes.is_unsigned(b.dtype) else np.int64
            p = _integer_matmul(a, b, wide)                  # wraps mod 2**64
            return p != 0 if dtypes.is_bool(out_dtype) else wrap_int(p, out_dtype)
        if dtypes.is_float(out_dtype):
            return _float_matmul(a, b, out_dtype)
        if dtypes.is_complex(out_dtype):
            # (ar + i ai)(br + i bi): real part [ar, -ai] . [br; bi], imaginary [ar, ai] . [bi; br].
            part = np.dtype(np.float32 if out_dtype == np.complex64 else np.float64)
            a, b = a.astype(out_dtype), b.astype(out_dtype)
            ar, ai, br, bi = a.real, a.imag, b.real, b.imag
            out = np.empty(a.shape[:2] + b.shape[2:], out_dtype)
            out.real = _float_matmul(np.concatenate([ar, -ai], 2), np.concatenate([br, bi], 1), part)
            out.imag = _float_matmul(np.concatenate([ar, ai], 2), np.concatenate([bi, br], 1), part)
            return out
    except NotImplementedError as e:
        raise eqn.unsupported(str(e)) from None
    raise eqn.unsupported(f"contraction with result {out_dtype}")


def _as_batched(x: np.ndarray, batch, contract, contract_last: bool):
    """``x`` as (B, F, K) (or (B, K, F)) plus the batch and free shapes."""
    free = [d for d in range(x.ndim) if d not in batch and d not in contract]
    bshape = [x.shape[d] for d in batch]
    fshape = [x.shape[d] for d in free]
    ksize = math.prod(x.shape[d] for d in contract)
    order = list(batch) + (free + list(contract) if contract_last else list(contract) + free)
    xt = np.transpose(x, order)
    shape = (math.prod(bshape), math.prod(fshape), ksize) if contract_last else \
        (math.prod(bshape), ksize, math.prod(fshape))
    return xt.reshape(shape), bshape, fshape


def dot_general_value(eqn, lhs, rhs, dimension_numbers, out_dtype) -> np.ndarray:
    (lc, rc), (lb, rb) = dimension_numbers
    lhs, rhs = _lowered_inputs(eqn, np.asarray(lhs), np.asarray(rhs), out_dtype)
    a, bshape, mshape = _as_batched(lhs, lb, lc, contract_last=True)
    b, _, nshape = _as_batched(rhs, rb, rc, contract_last=False)
    return np.asarray(matmul(eqn, a, b, out_dtype)).reshape(tuple(bshape + mshape + nshape))


@register("dot_general")
def dot_general(eqn, lhs, rhs, *, dimension_numbers, precision, preferred_element_type, out_sharding):
    # preferred_element_type is the result dtype (eqn.out_dtype); out_sharding places it.
    return _dot(eqn, lhs, rhs, dimension_numbers, precision)


# --------------------------------------------------------------------------------------------
# ragged_dot_general: the dense formulation of jax/_src/lax/lax.py _ragged_dot_general_impl (the
# lowering of every platform without a ragged-dot instruction, CPU included). group_sizes has
# shape [prefix..., g]: the prefix dims of the operand (its batch dims, then the dims before the
# ragged one among the non-contracting (mode 1) or contracting (mode 2) dims; a 1-D group_sizes
# is broadcast over them). For each prefix position, group g covers [sum(sizes[:g]),
# sum(sizes[:g+1])) of the ragged dimension (cumsum in the sizes' integer type); elements outside
# every group contribute nothing. Masked-out products are exact zeros, so the exact sum (and its
# one rounding) is that of the group's own products.

def _prefix_dims(rank: int, ragged: int, batch, contract, mode: str) -> list:
    """jax _ragged_dot_prefix_dims: the operand dims group_sizes' leading axes run over."""
    batch, contract = list(batch), list(contract)
    if mode == "noncontracting":
        free = [d for d in range(rank) if d not in contract and d not in batch]
        return batch + free[:free.index(ragged)]
    return batch + contract[:contract.index(ragged)]


def _expand(x: np.ndarray, dim: int, sizes: np.ndarray, prefix: list) -> np.ndarray:
    """x with a new leading group axis, zero outside each group along ``dim``; ``sizes`` has shape
    [x.shape[p] for p in prefix] + [g]."""
    ends = wrap_int(np.cumsum(sizes.astype(np.int64), axis=-1), sizes.dtype).astype(np.int64)
    starts = wrap_int(ends - sizes.astype(np.int64), sizes.dtype).astype(np.int64)
    g = sizes.shape[-1]
    order = [0] + [1 + i for i in np.argsort(prefix)]       # prefix axes into x's dim order
    shape = (g,) + tuple(x.shape[d] if d in prefix else 1 for d in range(x.ndim))
    starts = np.moveaxis(starts, -1, 0).transpose(order).reshape(shape)
    ends = np.moveaxis(ends, -1, 0).transpose(order).reshape(shape)
    j = np.arange(x.shape[dim]).reshape([1] * (dim + 1) + [x.shape[dim]] + [1] * (x.ndim - dim - 1))
    return np.where((starts <= j) & (j < ends), x[None], np.zeros((), x.dtype))


def _dot(eqn, lhs, rhs, dimension_numbers, precision) -> np.ndarray:
    alg = _algorithm_of(precision)
    if alg is not None:
        return algorithm_dot_value(eqn, np.asarray(lhs), np.asarray(rhs), dimension_numbers, alg)
    return dot_general_value(eqn, lhs, rhs, dimension_numbers, eqn.out_dtype)


@register("ragged_dot_general")
def ragged_dot_general(eqn, lhs, rhs, group_sizes, *, ragged_dot_dimension_numbers, precision,
                       preferred_element_type, group_offset, out_sharding):
    if group_offset is not None:
        # JAX has no semantics for it: its impl and every lowering raise (both JAX versions).
        raise eqn.unsupported("ragged_dot_general/c5: Unimplemented group_offset support (as in JAX: "
                              "jax/_src/lax/lax.py _ragged_dot_general_impl)")
    rdn = ragged_dot_dimension_numbers
    (lc, rc), (lb, rb) = rdn.dot_dimension_numbers
    (ragged,) = rdn.lhs_ragged_dimensions
    lhs, rhs, sizes = np.asarray(lhs), np.asarray(rhs), np.asarray(group_sizes)
    inc = lambda dims: tuple(d + 1 for d in dims)  # noqa: E731
    if ragged in lb:          # ragged batch: an ordinary dot_general (group_sizes unused)
        return _dot(eqn, lhs, rhs, rdn.dot_dimension_numbers, precision)
    mode = "contracting" if ragged in lc else "noncontracting"
    l_prefix = _prefix_dims(lhs.ndim, ragged, lb, lc, mode)
    if sizes.ndim == 1:
        sizes = np.broadcast_to(sizes, tuple(lhs.shape[d] for d in l_prefix) + sizes.shape)
    if mode == "contracting":     # one output per group, the group axis first
        r_ragged = rc[list(lc).index(ragged)]
        r_prefix = _prefix_dims(rhs.ndim, r_ragged, rb, rc, mode)
        dn = ((inc(lc), inc(rc)), ((0,) + inc(lb), (0,) + inc(rb)))
        return _dot(eqn, _expand(lhs, ragged, sizes, l_prefix), _expand(rhs, r_ragged, sizes, r_prefix), dn,
                    precision)
    (gdim,) = rdn.rhs_group_dimensions   # ragged free dimension: rows of group g use rhs[g]
    dn = ((inc(lc) + (0,), tuple(rc) + (gdim,)), (inc(lb), tuple(rb)))
    return _dot(eqn, _expand(lhs, ragged, sizes, l_prefix), rhs, dn, precision)


# --------------------------------------------------------------------------------------------
# conv_general_dilated as patches @ kernel.

@register("conv_general_dilated")
def conv_general_dilated(eqn, lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                         dimension_numbers, feature_group_count, batch_group_count,
                         precision=None, preferred_element_type=None, out_sharding=None):
    # Precision hints do not change the meaning; an explicit dot algorithm neither: JAX lowers a
    # convolution's algorithm as precision DEFAULT with no algorithm attribute (jax/_src/lax/
    # convolution.py -> lax.precision_attr / _full_precision), on every platform.
    # preferred_element_type is the result dtype (eqn.out_dtype); out_sharding places it. (Defaults:
    # pallas_tpu's conv calls this rule directly.)
    out_dtype = eqn.out_dtype
    lhs, rhs = _lowered_inputs(eqn, np.asarray(lhs), np.asarray(rhs), out_dtype)
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    x = np.transpose(lhs, lhs_spec)            # (N, C, spatial...)
    w = np.transpose(rhs, rhs_spec)            # (O, I, window...)
    g, bg = feature_group_count, batch_group_count
    if g > 1 and bg > 1:   # (JAX's shape rule rejects such a program before it reaches us)
        raise ValueError("conv_general_dilated/c4: At most one of batch_group_count and "
                         "feature_group_count may be > 1, got "
                         f"batch_group_count={bg} and feature_group_count={g}")
    n, c = x.shape[:2]
    o, i = w.shape[:2]
    spatial, window = x.shape[2:], w.shape[2:]
    idx = window_indices(spatial, window, window_strides, padding, lhs_dilation, rhs_dilation)
    out_sp = idx.shape[:-1]
    s, kw = math.prod(out_sp), idx.shape[-1]
    xf = x.reshape(n, c, math.prod(spatial))   # (spelled out: -1 is ambiguous when n or c is 0)
    patches = xf[:, :, np.where(idx >= 0, idx, 0).reshape(-1)] if xf.shape[2] else \
        np.zeros((n, c, s * kw), x.dtype)
    patches = np.where((idx >= 0).reshape(-1), patches, np.zeros((), x.dtype)).reshape(n, c, s, kw)
    wk = w.reshape(o, i, kw)
    if bg > 1:   # batch groups: group j takes lhs batch slice j and output features j*O/bg...
        nb, ob = n // bg, o // bg
        a = patches.reshape(bg, nb, c, s, kw).transpose(0, 1, 3, 2, 4).reshape(bg, nb * s, c * kw)
        b = wk.reshape(bg, ob, i * kw).transpose(0, 2, 1)
        res = matmul(eqn, a, b, out_dtype).reshape(bg, nb, s, ob).transpose(1, 0, 3, 2)
        res = res.reshape(nb, o, *out_sp)
    else:        # feature groups: output features j*O/g... see input features j*C/g...
        og = o // g
        a = patches.reshape(n, g, i, s, kw).transpose(1, 0, 3, 2, 4).reshape(g, n * s, i * kw)
        b = wk.reshape(g, og, i * kw).transpose(0, 2, 1)
        res = matmul(eqn, a, b, out_dtype).reshape(g, n, s, og).transpose(1, 0, 3, 2)
        res = res.reshape(n, o, *out_sp)
    return np.ascontiguousarray(np.transpose(res, np.argsort(out_spec)))


# --------------------------------------------------------------------------------------------
# fft

@register("fft")
def fft(eqn, x, *, fft_type, fft_lengths):
    kind = getattr(fft_type, "name", str(fft_type)).split(".")[-1].upper()
    if kind not in ("FFT", "IFFT", "RFFT", "IRFFT"):
        raise eqn.unsupported(f"fft_type {fft_type}")
    # Every output part correctly rounded (interp/rules/_fft_exact.py).
    return fft_value(kind, np.asarray(x), fft_lengths, eqn.out_dtype)
