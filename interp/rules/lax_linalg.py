"""Rules: lax.linalg (cholesky, qr/geqrf/householder_product/ormqr/geqp3, lu, eigh, eig, svd,
triangular_solve, schur, hessenberg, tridiagonal, tridiagonal_solve, cholesky_update,
symmetric_product).

Every decomposition is computed in the wide type (float64/complex128; LAPACK through SciPy, the
same algorithms XLA:CPU calls) and rounded once to the output dtype. Results are defined by
accuracy, plus the conventions of ``spec/lax_linalg.py`` where they are not unique (LAPACK's
Householder signs; eigenvector and singular-vector phases). Leading dimensions are batch
dimensions. Where XLA:CPU reports a LAPACK failure as NaN (info != 0), so does the reference;
non-finite input makes the iterative decompositions fail the same way.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg
from scipy.linalg import lapack

from .. import dtypes
from ..errors import UndefinedBehaviorError
from ..registry import register


def _wide(x) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.complex128 if dtypes.is_complex(x.dtype) else np.float64)


def _lapack(name: str, a: np.ndarray):
    """The LAPACK routine ``name`` for a wide array: d<name> or z<name>."""
    return getattr(lapack, ("z" if np.iscomplexobj(a) else "d") + name)


def _batched(eqn, fn, args, core_ranks):
    """Apply ``fn`` (2-D/1-D core arrays -> tuple of results) over the leading batch dimensions;
    each result is rounded once into an array of its output aval."""
    a0, r0 = np.asarray(args[0]), core_ranks[0]
    batch = a0.shape[:a0.ndim - r0]
    outs = [np.empty(aval.shape, aval.dtype) for aval in eqn.out_avals]
    for idx in np.ndindex(*batch):
        res = fn(*[np.asarray(a)[idx] for a in args])
        for o, r in zip(outs, res):
            r = np.asarray(r)
            if np.iscomplexobj(r) and not dtypes.is_complex(o.dtype):
                raise AssertionError(f"{eqn.name}: complex result for a real output")
            o[idx] = r
    return outs


def _finite(a) -> bool:
    return bool(np.isfinite(a).all())


def _nan(shape, like=np.float64):
    """All-NaN; complex NaN is nan+nanj, as XLA:CPU's failure results."""
    dtype = np.result_type(like, np.float64)
    return np.full(shape, complex(np.nan, np.nan) if dtype.kind == "c" else np.nan, dtype)


def _phase_normalize(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Columns of ``v`` scaled by a unit scalar so that each column's first entry of largest
    magnitude is real and positive. Returns (normalized v, the scalars used)."""
    if v.size == 0:
        return v, np.ones(v.shape[-1:], v.dtype)
    k = np.argmax(np.abs(v), axis=0)
    pivot = v[k, np.arange(v.shape[1])]
    mag = np.abs(pivot)
    scale = np.where(mag > 0, np.conj(pivot) / np.where(mag > 0, mag, 1), 1).astype(v.dtype)
    out = v * scale
    out[k, np.arange(v.shape[1])] = mag  # exactly real: p * conj(p) / |p| may round off imag
    return out, scale


# --- Cholesky -----------------------------------------------------------------------------------

@register("cholesky")
def cholesky(eqn, x):
    # potrf on the lower triangle (the upper triangle of the input is not read); the result's
    # upper triangle is zero; a matrix that is not positive definite gives all-NaN (XLA:CPU:
    # info != 0 -> NaN, jax/_src/lax/linalg.py _cholesky_cpu_lowering).
    def core(a):
        a = _wide(a)
        if not _finite(np.tril(a)):
            return (_nan(a.shape, a.dtype),)
        c, info = _lapack("potrf", a)(a, lower=1, clean=1)
        return (c if info == 0 else _nan(a.shape, a.dtype),)
    return _batched(eqn, core, [x], [2])[0]


@register("cholesky_update")
def cholesky_update(eqn, r, w):
    # The Givens-rotation update of jax/_src/lax/linalg.py _cholesky_update_jax_fn, in float64.
    def core(r, w):
        r, z = _wide(r).copy(), _wide(w).copy()
        for k in range(z.shape[0]):
            x, y = r[k, k], z[k]
            if y == 0:
                c, s = 1.0, 0.0
            else:
                den = max(abs(x), abs(y))
                xs, ys = x / den, y / den
                rh = 1 / np.sqrt(xs * xs + ys * ys)
                c, s = xs * rh, -ys * rh
            row = c * r[k, :] - s * z
            z = c * z + s * r[k, :]
            z[k] = 0  # eliminated (exactly, not up to rounding)
            r[k, :] = row
        return (np.triu(r),)  # upper triangular by definition: exact zeros below
    return _batched(eqn, core, [r, w], [2, 1])[0]


@register("symmetric_product")
def symmetric_product(eqn, a, c, *, alpha, beta):
    # alpha * A @ A.T + beta * C, the whole matrix (the CPU lowering, _symmetric_product_jax_fn).
    def core(a, c):
        a, c = _wide(a), _wide(c)
        return (alpha * (a @ a.T) + beta * c,)
    return _batched(eqn, core, [a, c], [2, 2])[0]


# --- QR family ----------------------------------------------------------------------------------

def _householder_q(a: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """The full m x m Q = H(1) H(2) ... H(k), H(i) = I - tau_i v_i v_i^H, v_i the i-th column of
    the strictly lower part of ``a`` with a unit diagonal (LAPACK geqrf/orgqr convention)."""
    m = a.shape[0]
    q = np.eye(m, dtype=np.result_type(a, taus))
    for i in reversed(range(taus.shape[0])):
        v = np.zeros(m, q.dtype)
        v[i] = 1
        v[i + 1:] = a[i + 1:, i]
        q -= taus[i] * np.outer(v, np.conj(v) @ q)
    return q


@register("geqrf")
def geqrf(eqn, x):
    def core(a):
        a = _wide(a)
        qr, tau, _, info = _lapack("geqrf", a)(a)
        return qr, tau
    return _batched(eqn, core, [x], [2])


@register("geqp3")
def geqp3(eqn, x, jpvt, *, use_magma):
    # use_magma picks the GPU library (MAGMA or cuSOLVER), not the factorisation
    # LAPACK geqp3 (jpvt 1-based, as LAPACK's; qr() subtracts 1). Columns with jpvt != 0 on input
    # are fixed: LAPACK moves them to the front in their order, factors them without pivoting
    # (geqrf), applies Q^H to the free columns and pivots those on the trailing rows (dgeqp3's
    # own structure, composed here from geqrf + geqp3 of the trailing block).
    def core(a, p):
        a = _wide(a)
        m, n = a.shape
        fixed = np.flatnonzero(p != 0)
        free = np.flatnonzero(p == 0)
        if fixed.size == 0:
            qr, jp, tau, _, info = _lapack("geqp3", a)(a)
            return qr, jp, tau
        nf = fixed.size
        qr1, tau1, _, _ = _lapack("geqrf", a[:, fixed])(a[:, fixed])
        b = np.conj(_householder_q(qr1, tau1).T) @ a[:, free]
        out = np.empty((m, n), a.dtype)
        out[:, :nf] = qr1
        order, taus = free, [tau1[:min(m, nf)]]
        if free.size and m > nf:
            qr2, jp2, tau2, _, _ = _lapack("geqp3", b[nf:])(b[nf:])
            out[:nf, nf:] = b[:nf, jp2 - 1]
            out[nf:, nf:] = qr2
            order, taus = free[jp2 - 1], taus + [tau2]
        elif free.size:
            out[:, nf:] = b                     # no rows left below the fixed block: no pivoting
        return out, np.concatenate([fixed, order]) + 1, np.concatenate(taus)[:min(m, n)]
    return _batched(eqn, core, [x, jpvt], [2, 1])
@register("householder_product")
def householder_product(eqn, a, taus):
    def core(a, taus):
        a, taus = _wide(a), _wide(taus)
        return (_householder_q(a, taus)[:, :a.shape[1]],)
    return _batched(eqn, core, [a, taus], [2, 1])[0]


@register("ormqr")
def ormqr(eqn, a, taus, c, *, left, transpose):
    # Q @ C, Q^H @ C, C @ Q or C @ Q^H (transpose is the conjugate transpose for complex).
    def core(a, taus, c):
        a, taus, c = _wide(a), _wide(taus), _wide(c)
        q = _householder_q(a, taus)
        if transpose:
            q = np.conj(q.T)
        return (q @ c if left else c @ q,)
    return _batched(eqn, core, [a, taus, c], [2, 1, 2])[0]


@register("qr")
def qr(eqn, x, *, pivoting, full_matrices, use_magma):
    # use_magma picks the GPU library (MAGMA or cuSOLVER), not the factorisation
    # The composition of jax/_src/lax/linalg.py _qr_lowering (geqrf or geqp3, then orgqr), in
    # float64: R's diagonal signs are LAPACK's Householder convention, not made positive.
    def core(a):
        a = _wide(a)
        m, n = a.shape
        k = m if full_matrices else min(m, n)
        if m == 0 or n == 0:
            res = [np.eye(m, k, dtype=a.dtype), np.zeros((k, n), a.dtype)]
            return res + [np.zeros(n, np.int32)] if pivoting else res
        if pivoting:
            r, p, taus, _, _ = _lapack("geqp3", a)(a)
            p = p - 1
        else:
            r, taus, _, _ = _lapack("geqrf", a)(a)
        q = _householder_q(r, taus)[:, :k]
        r = np.triu(r[:k, :])
        return [q, r, p] if pivoting else [q, r]
    return _batched(eqn, core, [x], [2])


# --- LU -----------------------------------------------------------------------------------------

def _pivots_to_permutation(pivots: np.ndarray, size: int) -> np.ndarray:
    perm = np.arange(size, dtype=np.int32)
    for i, j in enumerate(pivots.tolist()):
        if not -size <= j < size:
            raise UndefinedBehaviorError(f"lu_pivots_to_permutation: pivot {j} at position {i} "
                                         f"is outside [0, {size}) (lu_pivots_to_permutation/c1)")
        j %= size  # jnp indexing wraps negative indices
        perm[i], perm[j] = perm[j], perm[i]
    return perm


@register("lu_pivots_to_permutation")
def lu_pivots_to_permutation(eqn, pivots, *, permutation_size):
    # Apply the swaps i <-> pivots[i] in order to the identity permutation
    # (_generic_lu_pivots_to_permutation).
    return _batched(eqn, lambda p: (_pivots_to_permutation(p, permutation_size),),
                    [pivots], [1])[0]


@register("lu")
def lu(eqn, x):
    # getrf (partial pivoting; pivots 0-based), permutation from the pivots. A singular matrix
    # is no failure (info > 0 is kept, as XLA:CPU does).
    def core(a):
        a = _wide(a)
        m, n = a.shape
        if a.size == 0:
            return a, np.zeros(min(m, n), np.int32), np.arange(m, dtype=np.int32)
        lu_, piv, info = _lapack("getrf", a)(a)
        if info < 0:
            lu_ = _nan(a.shape, a.dtype)
        return lu_, piv, _pivots_to_permutation(piv, m)
    return _batched(eqn, core, [x], [2])


# --- triangular and tridiagonal solves ----------------------------------------------------------

@register("triangular_solve")
def triangular_solve(eqn, a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    # Solves op(A) X = B (left_side) or X op(A) = B, op(A) = A, A^T, conj(A) or A^H, reading only
    # the `lower` triangle of A (and not its diagonal when unit_diagonal). Substitution in the
    # wide type with IEEE division: a zero pivot gives inf/NaN as trsm does.
    wide = dtypes.wide_float(eqn.out_dtype)

    def core(a, b):
        a, b = np.asarray(a).astype(wide), np.asarray(b).astype(wide)
        t = np.tril(a) if lower else np.triu(a)
        if unit_diagonal:
            np.fill_diagonal(t, 1)
        if conjugate_a:
            t = np.conj(t)
        low = lower
        if transpose_a:
            t, low = t.T, not low
        if not left_side:  # X op(A) = B  <=>  op(A)^T X^T = B^T
            t, low, b = t.T, not low, b.T
        x = np.zeros_like(b)
        n = t.shape[0]
        order = range(n) if low else range(n - 1, -1, -1)
        with np.errstate(all="ignore"):
            for i in order:
                rest = slice(0, i) if low else slice(i + 1, n)
                x[i] = (b[i] - t[i, rest] @ x[rest]) / t[i, i]
        return (x if left_side else x.T,)
    return _batched(eqn, core, [a, b], [2, 2])[0]


@register("tridiagonal_solve")
def tridiagonal_solve(eqn, dl, d, du, b, *, perturb_singular):
    # gtsv (partial pivoting); dl[0] and du[-1] are not read; a singular system is all-NaN
    # (XLA:CPU info != 0 -> NaN, _tridiagonal_solve_cpu_lowering). perturb_singular=True is
    # jaxlib's own kernel, run in the operand's arithmetic (_gtsv_perturbed).
    if perturb_singular:
        if np.dtype(eqn.out_dtype) not in _PERTURBED_DTYPES:
            raise eqn.unsupported(f"tridiagonal_solve/c3: perturb_singular=True for {eqn.out_dtype} "
                                  "(jaxlib's kernel "
                                  "exists for float32/float64/complex64/complex128 only)")
        n, k = b.shape[-2:]
        flat = [np.asarray(v).reshape((-1, n)) for v in (dl, d, du)]
        with np.errstate(all="ignore"):
            x = _gtsv_perturbed(eqn, *flat, np.asarray(b).reshape((-1, n, k)))
        return x.reshape(b.shape)

    def core(dl, d, du, b):
        dl, d, du, b = _wide(dl), _wide(d), _wide(du), _wide(b)
        if np.iscomplexobj(b) or np.iscomplexobj(d):
            dl, d, du, b = (x.astype(np.complex128) for x in (dl, d, du, b))
        if d.shape[0] == 0:
            return (b,)
        if d.shape[0] == 1:         # (SciPy's gtsv wrapper rejects the empty off-diagonals)
            return (b / d[0] if d[0] != 0 else _nan(b.shape, b.dtype),)
        *_, x, info = _lapack("gtsv", b)(dl[1:], d, du[:-1], b)
        return (x if info == 0 else _nan(b.shape, b.dtype),)
    return _batched(eqn, core, [dl, d, du, b], [1, 1, 1, 2])[0]


# perturb_singular=True: jaxlib/tridiagonal_solve_perturbed.h
# SolveWithGaussianEliminationWithPivotingAndPerturbSingular (xLAGTF + xLAGTS): a row-pivoted LU
# fused with the forward solve, then back substitution in which each pivot of magnitude < 1 that
# would overflow rhs / pivot is moved away from zero by eps * max|U| (doubling until it is safe)
# or scaled up with the row. Its result on a singular system is made of rounding residues, so the
# reference runs the kernel's own procedure in the operand's precision, every operation rounded
# once as the C++ source writes it (no FMA contraction: that is a backend allowance), complex
# products and quotients as the C99 Annex G routines jaxlib links (libgcc __mulsc3/__divsc3:
# Smith's division). Bitwise with XLA:CPU of JAX 0.10.2 (tests/test_lax_linalg.py).
_PERTURBED_DTYPES = tuple(np.dtype(t) for t in ("float32", "float64", "complex64", "complex128"))


def _lamch_safemin(rt):
    """LAPACK xLAMCH('S') of the real type ``rt`` (the smallest number whose reciprocal does not
    overflow) and that reciprocal."""
    one, fi = rt(1), np.finfo(rt)
    tiny, small = rt(fi.tiny), one / rt(fi.max)
    safemin = tiny if small < tiny else small * (one + rt(fi.eps))
    return safemin, one / safemin


# Per real type of _PERTURBED_DTYPES, computed once (the pivot test runs per step and system).
_SAFEMIN = {rt: _lamch_safemin(rt) for rt in (np.float32, np.float64)}


def _copysign(mag, sign):
    return type(mag)(np.copysign(mag, sign))


def _mag(v):
    """|v| as the kernel's std::abs: hypot for complex (NumPy's vectorised complex abs is not
    hypot: it differs in the last bit for about a third of float32/float64 arguments)."""
    v = np.asarray(v)
    return np.hypot(v.real, v.imag) if np.iscomplexobj(v) else np.abs(v)


def _box(v, cond):
    """Where ``cond``: +-1 for an infinite v, +-0 otherwise (C99 Annex G's "box" of a factor)."""
    return np.where(cond, np.copysign(np.isinf(v).astype(v.dtype), v), v)


def _nan_to_zero(v, cond):
    return np.where(cond & np.isnan(v), np.copysign(np.zeros_like(v), v), v)


def _annex_g_mul(a, b):
    """Complex a * b elementwise as libgcc's __mulsc3/__muldc3: four rounded products, then the C99
    Annex G recovery of infinities that the plain formula turned into NaN + NaN i."""
    a, b = np.asarray(a), np.asarray(b)
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    ac, bd, ad, bc = ar * br, ai * bi, ar * bi, ai * br
    re, im = ac - bd, ad + bc
    bad = np.isnan(re) & np.isnan(im)
    if bad.any():
        a_inf = np.isinf(ar) | np.isinf(ai)        # box the infinite factor, the other's NaNs -> 0
        ar, ai, br, bi = _box(ar, a_inf), _box(ai, a_inf), _nan_to_zero(br, a_inf), _nan_to_zero(bi, a_inf)
        b_inf = np.isinf(br) | np.isinf(bi)
        br, bi, ar, ai = _box(br, b_inf), _box(bi, b_inf), _nan_to_zero(ar, b_inf), _nan_to_zero(ai, b_inf)
        ovf = ~(a_inf | b_inf) & (np.isinf(ac) | np.isinf(bd) | np.isinf(ad) | np.isinf(bc))
        ar, ai, br, bi = (_nan_to_zero(v, ovf) for v in (ar, ai, br, bi))
        redo = bad & (a_inf | b_inf | ovf)
        inf = np.asarray(np.inf, re.dtype)
        re = np.where(redo, inf * (ar * br - ai * bi), re)
        im = np.where(redo, inf * (ar * bi + ai * br), im)
    return _complex(re, im, np.result_type(a, b))


def _annex_g_div(a, b):
    """Complex a / b elementwise as libgcc's __divsc3/__divdc3: Smith's algorithm (ratio of the
    smaller to the larger part of b), then the C99 Annex G recovery of zero and infinite operands."""
    a, b = np.asarray(a), np.asarray(b)
    ar, ai, c, d = a.real, a.imag, b.real, b.imag
    small = _mag(c) < _mag(d)
    ratio = np.where(small, c / d, d / c)
    denom = np.where(small, c * ratio + d, d * ratio + c)
    re = np.where(small, ar * ratio + ai, ai * ratio + ar) / denom
    im = np.where(small, ai * ratio - ar, ai - ar * ratio) / denom
    bad = np.isnan(re) & np.isnan(im)
    if bad.any():
        inf, zero = np.asarray(np.inf, re.dtype), np.asarray(0, re.dtype)
        by_zero = bad & (c == 0) & (d == 0) & ~(np.isnan(ar) & np.isnan(ai))
        re = np.where(by_zero, np.copysign(inf, c) * ar, re)
        im = np.where(by_zero, np.copysign(inf, c) * ai, im)
        num_inf = bad & ~by_zero & (np.isinf(ar) | np.isinf(ai)) & np.isfinite(c) & np.isfinite(d)
        x, y = _box(ar, True), _box(ai, True)
        re = np.where(num_inf, inf * (x * c + y * d), re)
        im = np.where(num_inf, inf * (y * c - x * d), im)
        den_inf = (bad & ~by_zero & ~num_inf & (np.isinf(c) | np.isinf(d))
                   & np.isfinite(ar) & np.isfinite(ai))
        cc, dd = _box(c, True), _box(d, True)
        re = np.where(den_inf, zero * (ar * cc + ai * dd), re)
        im = np.where(den_inf, zero * (ai * cc - ar * dd), im)
    return _complex(re, im, np.result_type(a, b))


def _perturb_pivots(eqn, perturb, pivots, rows):
    """MaybePerturbPivot for a batch of systems (pivots (B,), rows (B, k)). Most pivots are left
    as they are (|p| >= 1, or no overflow to fear): only the others take the scalar procedure."""
    safemin, bignum = _SAFEMIN[type(abs(pivots.dtype.type(0)))]
    ap = _mag(pivots)
    with np.errstate(invalid="ignore"):
        max_factor = np.max(_mag(rows), axis=1) if rows.shape[1] else np.zeros_like(ap)
    nan_rows = np.isnan(rows).any(axis=1) & (rows.shape[1] > 1)
    special = (ap < 1) & ((ap < safemin) | (max_factor > ap * bignum) | nan_rows)
    if not special.any():
        return pivots, rows
    pivots, rows = pivots.copy(), rows.copy()
    for i in np.flatnonzero(special):
        pivots[i], rows[i] = _perturb_pivot(eqn, perturb[i], pivots[i], rows[i])
    return pivots, rows


def _perturb_pivot(eqn, perturb, pivot, row):
    """jaxlib MaybePerturbPivot (from LAPACK xLAGTS) on one system: (pivot, row) such that neither
    row / pivot nor 1 / pivot overflows; pivots of magnitude >= 1 are kept."""
    rt = type(abs(pivot))
    safemin, bignum = _SAFEMIN[rt]
    ap = abs(pivot)
    if ap >= rt(1):
        return pivot, row
    perturb = _copysign(max(abs(perturb), safemin), pivot.real)   # never 0; pivot's real sign
    if row.size > 1 and np.isnan(row).any():
        # Eigen's vectorised maxCoeff gives NaN or the largest non-NaN magnitude depending on where
        # the NaN is: the result is defined only where both choices give the same bits.
        outs = [_perturb_loop(perturb, pivot, row, m, safemin, bignum)
                for m in (rt(np.nan), rt(np.nanmax(_mag(row))))]
        if not all(np.array_equal(a, b, equal_nan=True) for a, b in zip(*outs)):
            raise eqn.unsupported("tridiagonal_solve/c3: perturb_singular=True: a NaN right-hand side "
                                  "meeting a small "
                                  "pivot (jaxlib's max over the row is order-dependent for NaN)")
        return outs[0]
    return _perturb_loop(perturb, pivot, row, rt(np.max(_mag(row))) if row.size else rt(0),
                         safemin, bignum)


def _perturb_loop(perturb, pivot, row, max_factor, safemin, bignum):
    rt = type(safemin)
    one, ap = rt(1), abs(pivot)
    if np.iscomplexobj(pivot):   # std::complex += / *= a real scalar: the imaginary part is untouched
        shift = lambda v, t: _complex(v.real + t, v.imag, v.dtype)          # noqa: E731
        scale = lambda v, t: _complex(v.real * t, v.imag * t, v.dtype)     # noqa: E731
    else:
        shift = scale = None
    while ap < one:
        if ap < safemin:
            if ap == 0 or max_factor * safemin > ap:
                pivot = shift(pivot, perturb) if shift else pivot + perturb
                perturb = perturb * rt(2)
            elif scale:
                return scale(pivot, bignum), scale(row, bignum)
            else:
                return pivot * bignum, row * bignum
        elif max_factor > ap * bignum:
            pivot = shift(pivot, perturb) if shift else pivot + perturb
            perturb = perturb * rt(2)
        else:
            break
        ap = abs(pivot)
    return pivot, row


def _std_max(a, b):
    return np.where(a < b, b, a)     # std::max: keeps a when b is NaN


def _gtsv_perturbed(eqn, dl, d, du, rhs, fms=None):
    """The kernel on a batch of systems (dl, d, du: (B, n); rhs: (B, n, k)) in rhs's dtype, the
    systems side by side: each step computes every branch and selects per system (elementwise
    operations, so each system gets exactly its own branch's bits). ``fms(c, a, b)`` computes
    c - a * b where the C++ source writes ``c - a * b`` on scalars (default: two roundings; tests
    pass a fused one to replay XLA:CPU builds that contract it into an FMA)."""
    cplx = np.iscomplexobj(rhs)
    mul = _annex_g_mul if cplx else np.multiply
    div = _annex_g_div if cplx else np.divide
    if fms is None:
        fms = lambda c, a, b: c - mul(a, b)     # noqa: E731
    nb, n, k = rhs.shape
    x = np.zeros_like(rhs)
    if n == 0:
        return x
    rt = type(abs(rhs.dtype.type(0)))
    eps = rt(np.finfo(rt).eps)
    if n == 1:
        p, row = _perturb_pivots(eqn, eps * _mag(d[:, 0]), d[:, 0], rhs[:, 0])
        x[:, 0] = div(row, p[:, None])
        return x
    # u[:, i, 0..2]: diagonal and two superdiagonals of U (rows exchanged by the pivoting).
    u = np.zeros((nb, n, 3), rhs.dtype)
    u[:, 0, 0], u[:, 0, 1] = d[:, 0], du[:, 0]
    max_u = _std_max(_mag(u[:, 0, 0]), _mag(u[:, 0, 1]))
    scale1 = _mag(u[:, 0, 0]) + _mag(u[:, 0, 1])
    x[:, 0] = rhs[:, 0]
    zero = rhs.dtype.type(0)
    for j in range(n - 1):
        sub, diag, sup, r1 = dl[:, j + 1], d[:, j + 1], du[:, j + 1], rhs[:, j + 1]
        uj0, uj1, xj = u[:, j, 0].copy(), u[:, j, 1].copy(), x[:, j].copy()
        scale2 = _mag(sub) + _mag(diag)
        if j < n - 2:
            scale2 = scale2 + _mag(sup)
        piv1 = np.where(uj0 == 0, rt(0), _mag(uj0) / scale1)
        piv2 = _mag(sub) / scale2
        keep = sub == 0                         # row j + 1 has nothing to eliminate
        elim = ~keep & (piv2 <= piv1)           # eliminate without a row exchange
        swap = ~keep & ~elim                    # exchange rows j and j + 1
        factor, factor_s = div(sub, uj0), div(uj0, sub)
        last = j == n - 2                       # (the kernel does not fill u[j, 2], u[j+1, 1] then)
        u[:, j, 0] = np.where(swap, sub, uj0)
        u[:, j, 1] = np.where(swap, diag, uj1)
        u[:, j, 2] = np.where(swap & (not last), sup, zero)
        u[:, j + 1, 0] = np.where(swap, fms(uj1, factor_s, diag),
                                  np.where(elim, fms(diag, factor, uj1), diag))
        u[:, j + 1, 1] = np.where(swap, zero if last else mul(-factor_s, sup), sup)
        x[:, j + 1] = np.where(swap[:, None], xj - mul(factor_s[:, None], r1),
                               np.where(elim[:, None], r1 - mul(factor[:, None], xj), r1))
        x[:, j] = np.where(swap[:, None], r1, xj)
        scale1 = np.where(swap, _mag(u[:, j + 1, 0]) + _mag(u[:, j + 1, 1]), scale2)
        if not last:        # (as the kernel: row n - 2 of U does not enter max|U|)
            for i in range(3):
                max_u = _std_max(max_u, _mag(u[:, j, i]))
    max_u = _std_max(max_u, _mag(u[:, n - 1, 0]))
    perturb = eps * max_u
    one = rhs.dtype.type(1)
    p, row = _perturb_pivots(eqn, perturb, u[:, n - 1, 0], x[:, n - 1])
    x[:, n - 1] = mul(row, div(one, p)[:, None])
    for j in range(n - 2, -1, -1):
        row = x[:, j] - mul(u[:, j, 1][:, None], x[:, j + 1])
        if j < n - 2:
            row = row - mul(u[:, j, 2][:, None], x[:, j + 2])
        p, row = _perturb_pivots(eqn, np.copysign(perturb, u[:, j, 0].real), u[:, j, 0], row)
        x[:, j] = mul(row, div(one, p)[:, None])
    return x


def _complex(re, im, dtype):
    out = np.empty(np.shape(re), dtype)
    out.real, out.imag = re, im
    return out if out.ndim else out[()]


# --- eigen and singular value decompositions ----------------------------------------------------

@register("eigh")
def eigh(eqn, x, *, lower, sort_eigenvalues, subset_by_index, algorithm):
    # syevd/heevd on the `lower` triangle, eigenvalues ascending (also when sort_eigenvalues is
    # False: the order is then implementation-defined and this is the one chosen). Each
    # eigenvector's first largest-magnitude entry is made real positive. The algorithm (QR,
    # Jacobi, QDWH) computes the same decomposition, to its accuracy.
    def core(a):
        a = _wide(a)
        n = a.shape[0]
        lo, hi = subset_by_index if subset_by_index is not None else (0, n)
        tri = np.tril(a) if lower else np.triu(a)
        if not _finite(tri):
            return _nan((n, hi - lo), a.dtype), _nan(hi - lo)
        w, v = scipy.linalg.eigh(a, lower=lower, check_finite=False, driver="evd")
        v, _ = _phase_normalize(v[:, lo:hi])
        return v, w[lo:hi]
    return _batched(eqn, core, [x], [2])


@register("eig")
def eig(eqn, x, *, compute_left_eigenvectors, compute_right_eigenvectors, implementation,
        enable_eigvec_derivs):
    # geev: eigenvalues in LAPACK's order (complex conjugate pairs with the positive imaginary
    # part first); eigenvectors of unit 2-norm with the first largest-magnitude entry real
    # positive; left eigenvectors satisfy vl^H A = w vl^H. Every EigImplementation (LAPACK,
    # MAGMA, CUSOLVER) computes the same decomposition: the reference gives this one result for
    # all of them (spec/lax_linalg.py), and refuses what JAX's lowering refuses.
    # enable_eigvec_derivs only lets the JVP differentiate the eigenvectors.
    impl = getattr(implementation, "name", implementation)
    if impl not in (None, "LAPACK", "MAGMA", "CUSOLVER"):
        raise eqn.unsupported(f"eig implementation {implementation}")
    if impl == "CUSOLVER" and compute_left_eigenvectors:
        raise eqn.unsupported("eig/c5: Left eigenvectors are not supported by cusolver (JAX's GPU "
                              "lowering raises the same NotImplementedError)")

    def core(a):
        a = _wide(a)
        n = a.shape[0]
        if not _finite(a):
            nan = _nan((n, n), np.complex128)
            res = [_nan(n, np.complex128)]
            return res + [nan] * (compute_left_eigenvectors + compute_right_eigenvectors)
        w, vl, vr = scipy.linalg.eig(a, left=True, right=True, check_finite=False)
        res = [w.astype(np.complex128)]
        for wanted, v in ((compute_left_eigenvectors, vl), (compute_right_eigenvectors, vr)):
            if wanted:
                v = v.astype(np.complex128)
                v = v / np.linalg.norm(v, axis=0)
                res.append(_phase_normalize(v)[0])
        return res
    return _batched(eqn, core, [x], [2])


@register("svd")
def svd(eqn, x, *, full_matrices, compute_uv, subset_by_index, algorithm=None):
    # gesdd in float64 (the algorithm choice changes no value beyond accuracy); singular values
    # descending; each pair (u_i, v_i) is scaled so that u_i's first largest-magnitude entry is
    # real positive. The extra columns of U / rows of V^H when full_matrices=True (a basis of
    # the orthogonal complement, not unique) are LAPACK's.
    def core(a):
        a = _wide(a)
        m, n = a.shape
        rank = min(m, n)
        lo, hi = subset_by_index if subset_by_index is not None else (0, rank)
        if m == 0 or n == 0:
            s = np.zeros(0, np.float64)
            if not compute_uv:
                return (s,)
            size = max(m, n)
            u = np.eye(size, dtype=a.dtype) if full_matrices else np.zeros((m, n), a.dtype)
            v = np.zeros((0, 0), a.dtype)
            return (s, v, u) if m < n else (s, u, v)
        if not _finite(a):
            s = _nan(hi - lo)
            if not compute_uv:
                return (s,)
            return (s, _nan(eqn.out_avals[1].shape[-2:], a.dtype),
                    _nan(eqn.out_avals[2].shape[-2:], a.dtype))
        # One LAPACK call for every parameter combination, so that s is bit-identical whether
        # or not vectors (full or reduced) are asked for.
        u, s, vh = np.linalg.svd(a, full_matrices=True)
        if not compute_uv:
            return (s[lo:hi],)
        u_r, scale = _phase_normalize(u[:, :rank])
        u = np.concatenate([u_r, u[:, rank:]], axis=1)
        vh = np.concatenate([vh[:rank] * np.conj(scale)[:, None], vh[rank:]], axis=0)
        if not full_matrices:
            u, vh = u[:, :rank], vh[:rank]
        if subset_by_index is not None:
            u, s, vh = u[:, lo:hi], s[lo:hi], vh[lo:hi]
        return s, u, vh
    return _batched(eqn, core, [x], [2])


@register("schur")
def schur(eqn, x, *, compute_schur_vectors, sort_eig_vals, select_callable=None):
    # gees: real Schur form (standardized 2x2 blocks) for real input, complex Schur form for
    # complex input; A = Z T Z^H. As JAX's only lowering (jax/_src/lax/linalg.py
    # _schur_cpu_lowering, both JAX versions): sort_eig_vals raises, select_callable is ignored.
    if sort_eig_vals:
        raise eqn.unsupported("schur/c2: The sort feature of LAPACK's gees routine is not implemented "
                              "(JAX raises the same NotImplementedError when lowering it)")

    def core(a):
        a = _wide(a)
        if not _finite(a):
            nan = _nan(a.shape, a.dtype)
            return (nan, nan) if compute_schur_vectors else (nan,)
        t, z = scipy.linalg.schur(a, output="complex" if np.iscomplexobj(a) else "real",
                                  check_finite=False)
        return (t, z) if compute_schur_vectors else (t,)
    return _batched(eqn, core, [x], [2])


@register("hessenberg")
def hessenberg(eqn, x):
    # gehrd: H in the upper Hessenberg part, the reflectors below the subdiagonal, n-1 taus.
    def core(a):
        a = _wide(a)
        n = a.shape[0]
        if n == 0:
            return a, np.zeros(0, a.dtype)
        h, tau, info = _lapack("gehrd", a)(a)
        return h, tau[:max(n - 1, 0)]
    return _batched(eqn, core, [x], [2])


@register("tridiagonal")
def tridiagonal(eqn, x, *, lower):
    # sytrd/hetrd on the `lower` triangle: (reflectors and tridiagonal in a, diagonal d,
    # off-diagonal e (real), taus).
    def core(a):
        a = _wide(a)
        name = "hetrd" if np.iscomplexobj(a) else "sytrd"
        c, d, e, tau, info = getattr(lapack, ("z" if np.iscomplexobj(a) else "d") + name)(
            a, lower=int(lower))
        return c, d, e, tau
    return _batched(eqn, core, [x], [2])
