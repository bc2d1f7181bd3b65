"""lax.linalg: residual-based checks (A = QR, orthogonality, A V = V diag(w), reconstruction), the
documented conventions, and bitwise equality with XLA:CPU for what is exact (pivots,
permutations, structural zeros, NaN on failure)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.lax import linalg as L

import interp
from conformance.values import assert_same_bits
from tests.support import reference, x64, xla_cpu

DTYPES = ["float32", "float64", "complex64", "complex128"]


def rand(dtype, shape, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.standard_normal(shape)
    if np.issubdtype(np.dtype(dtype), np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def H(a):
    return np.conj(np.swapaxes(a, -1, -2))


def check_close(actual, expected, dtype, scale=1.0, factor=50):
    """|actual - expected| <= factor * eps * n * scale: residuals of a result computed in float64
    and rounded once to ``dtype`` are a few eps of the output type."""
    actual, expected = np.asarray(actual, np.complex128), np.asarray(expected, np.complex128)
    eps = np.finfo(np.dtype(dtype)).eps
    n = max(actual.shape[-1] if actual.ndim else 1, 1)
    err = np.max(np.abs(actual - expected)) if actual.size else 0.0
    assert err <= factor * eps * n * scale, f"error {err:.3g} > {factor * eps * n * scale:.3g}"


@pytest.fixture(params=DTYPES)
def dtype(request):
    with x64(request.param in ("float64", "complex128")):
        yield np.dtype(request.param)


# The costlier tests (XLA compiles per case): one real narrow and one complex wide type.
@pytest.fixture(params=["float32", "complex128"])
def dtype2(request):
    with x64(request.param == "complex128"):
        yield np.dtype(request.param)


def spd(dtype, n=5, batch=(), seed=0):
    a = rand(dtype, batch + (n, n), seed)
    return (a @ H(a) + n * np.eye(n)).astype(dtype)


def test_cholesky(dtype):
    a = spd(dtype, batch=(2,))
    garbage = a + np.triu(np.full_like(a, 1e3), 1)  # the upper triangle is not read
    chol = lambda x: L.cholesky(x, symmetrize_input=False)
    l = reference(chol, garbage)
    assert l.dtype == dtype
    assert_same_bits(l, reference(chol, a))
    assert np.all(np.triu(l, 1) == 0)
    check_close(l @ H(l), a, dtype, scale=np.abs(a).max())
    check_close(l, xla_cpu(L.cholesky, a), dtype, scale=np.abs(l).max())


def test_cholesky_not_positive_definite_is_nan(dtype):
    a = -spd(dtype)
    out = reference(L.cholesky, a)
    assert np.isnan(out[np.tril_indices(5)]).all()  # (the wrapper zeroes the upper triangle)
    assert_same_bits(out, xla_cpu(L.cholesky, a))


@pytest.mark.parametrize("shape,full,pivoting", [((6, 4), False, False), ((6, 4), True, False),
                                                 ((4, 6), False, False), ((5, 5), False, True),
                                                 ((6, 4), True, True)])
def test_qr(dtype2, shape, full, pivoting):
    dtype = dtype2
    a = rand(dtype, (2,) + shape)
    f = lambda x: L.qr(x, full_matrices=full, pivoting=pivoting)
    out, xla = reference(f, a), xla_cpu(f, a)
    q, r = out[:2]
    k = q.shape[-1]
    assert np.all(np.tril(r, -1) == 0)
    check_close(H(q) @ q, np.broadcast_to(np.eye(k), (2, k, k)), dtype)
    target = a
    if pivoting:
        p = out[2]
        assert_same_bits(p, xla[2])  # column pivots: exact
        target = np.take_along_axis(a, p[:, None, :], axis=-1)
    check_close(q @ r, target, dtype, scale=np.abs(a).max())
    # Same LAPACK Householder convention as XLA:CPU: R's diagonal has the same signs.
    d, dx = np.diagonal(r, axis1=-2, axis2=-1), np.diagonal(xla[1], axis1=-2, axis2=-1)
    check_close(d, dx, dtype, scale=np.abs(d).max())


def test_geqrf_householder_product_ormqr(dtype2):
    dtype = dtype2
    a, c = rand(dtype, (6, 4)), rand(dtype, (6, 3), seed=1)
    qr, taus = reference(L.geqrf, a)
    xqr, xtaus = xla_cpu(L.geqrf, a)
    check_close(qr, xqr, dtype, scale=np.abs(a).max())
    check_close(taus, xtaus, dtype)
    q = reference(L.householder_product, qr, taus)
    check_close(q @ np.triu(qr[:4]), a, dtype, scale=np.abs(a).max())
    for left, transpose in [(True, False), (True, True), (False, False), (False, True)]:
        cc = c if left else H(c)
        f = lambda qr, t, c: L.ormqr(qr, t, c, left=left, transpose=transpose)
        check_close(reference(f, qr, taus, cc), xla_cpu(f, qr, taus, cc), dtype, scale=4)


def test_lu_pivots_exact(dtype2):
    dtype = dtype2
    a = rand(dtype, (3, 6, 6))
    lu, piv, perm = reference(L.lu, a)
    xlu, xpiv, xperm = xla_cpu(L.lu, a)
    assert_same_bits(piv, xpiv)
    assert_same_bits(perm, xperm)
    eye = np.eye(6)
    lower = np.tril(lu, -1) + eye
    upper = np.triu(lu)
    check_close(lower @ upper, np.take_along_axis(a, perm[:, :, None], axis=1), dtype,
                scale=np.abs(a).max())
    check_close(lu, xlu, dtype, scale=np.abs(lu).max() * 10)


def test_lu_rectangular_and_singular():
    a = np.array([[0, 0, 1], [0, 0, 2], [1, 1, 0], [2, 2, 0]], np.float32)
    out, xla = reference(L.lu, a), xla_cpu(L.lu, a)
    for r, x in zip(out, xla):
        assert_same_bits(r, x)


def test_lu_pivots_to_permutation():
    piv = np.array([[2, 2, 3, 3], [0, 3, 2, 3]], np.int32)
    f = lambda p: L.lu_pivots_to_permutation(p, 6)
    out = reference(f, piv)
    assert_same_bits(out, xla_cpu(f, piv))
    assert_same_bits(out[0], np.array([2, 0, 3, 1, 4, 5], np.int32))  # by hand


def _phase_ok(v):
    k = np.argmax(np.abs(v), axis=-2)
    pivot = np.take_along_axis(v, k[..., None, :], axis=-2)
    assert np.all(np.imag(pivot) == 0) and np.all(np.real(pivot) > 0)


def test_eigh(dtype):
    a = spd(dtype, n=6, batch=(2,)) - 6 * np.eye(6, dtype=dtype)
    v, w = reference(L.eigh, a)
    xv, xw = xla_cpu(L.eigh, a)
    assert w.dtype == np.finfo(dtype).dtype and v.dtype == dtype
    assert np.all(np.diff(w, axis=-1) >= 0)
    scale = np.abs(w).max()
    check_close(w, xw, dtype, scale=scale)
    check_close(a @ v, v * w[..., None, :], dtype, scale=scale)
    check_close(H(v) @ v, np.broadcast_to(np.eye(6), v.shape), dtype)
    _phase_ok(v)
    sub = reference(lambda x: L.eigh(x, subset_by_index=(2, 5)), a)
    assert_same_bits(sub[1], w[:, 2:5])
    assert_same_bits(sub[0], v[:, :, 2:5])


def test_eig(dtype):
    a = rand(dtype, (5, 5))
    w, vl, vr = reference(L.eig, a)
    xw = xla_cpu(L.eig, a)[0]
    scale = np.abs(w).max()
    check_close(np.sort_complex(w), np.sort_complex(xw), dtype, scale=scale)
    check_close(a @ vr, vr * w, dtype, scale=scale)
    check_close(H(vl) @ a, w[:, None] * H(vl), dtype, scale=scale)
    check_close(np.linalg.norm(vr, axis=0), np.ones(5), dtype)
    _phase_ok(vr)
    _phase_ok(vl)


@pytest.mark.parametrize("impl", ["LAPACK", "MAGMA", "CUSOLVER"])
def test_eig_implementations(dtype2, impl):
    """Every EigImplementation is the same decomposition under the reference's conventions: the
    same bits as implementation=None (which test_eig checks against A v = w v, vl^H A = w vl^H,
    unit norms, the phase convention and XLA:CPU's eigenvalues); XLA:CPU itself accepts only
    LAPACK; CUSOLVER has no left eigenvectors (JAX's lowering raises, and so does the reference)."""
    dtype = dtype2
    a = rand(dtype, (2, 5, 5), seed=7)
    which = getattr(L.EigImplementation, impl)
    left = impl != "CUSOLVER"
    f = lambda x: L.eig(x, implementation=which, compute_left_eigenvectors=left)  # noqa: E731
    out, base = reference(f, a), reference(lambda x: L.eig(x, compute_left_eigenvectors=left), a)
    for o, b in zip(out, base):
        assert_same_bits(o, b)
    w, vr = out[0], out[-1]
    scale = np.abs(w).max()
    check_close(a @ vr, vr * w[..., None, :], dtype, scale=scale)
    _phase_ok(vr)
    if impl == "LAPACK":
        for o, x in zip(out, xla_cpu(f, a)):   # same convention: the vectors agree up to rounding
            check_close(o, x if o is w else _phase_normalized(x), dtype, scale=scale)
    else:
        with pytest.raises(ValueError, match="lapack"):
            xla_cpu(f, a)
    if impl == "CUSOLVER":
        with pytest.raises(interp.UnsupportedPrimitiveError, match="cusolver"):
            reference(lambda x: L.eig(x, implementation=which), a)


def _phase_normalized(v):
    """Columns scaled so that the first largest-magnitude entry is real positive."""
    k = np.argmax(np.abs(v), axis=-2)
    p = np.take_along_axis(v, k[..., None, :], axis=-2)
    return v * (np.conj(p) / np.abs(p))


@pytest.mark.parametrize("shape,full", [((6, 4), True), ((6, 4), False), ((3, 5), False)])
def test_svd(dtype2, shape, full):
    dtype = dtype2
    a = rand(dtype, (2,) + shape)
    u, s, vh = reference(lambda x: L.svd(x, full_matrices=full), a)
    xs = xla_cpu(lambda x: L.svd(x, full_matrices=full, compute_uv=False), a)
    k = min(shape)
    scale = s.max()
    check_close(s, xs, dtype, scale=scale)
    assert np.all(np.diff(s, axis=-1) <= 0)
    check_close((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a, dtype, scale=scale)
    check_close(H(u) @ u, np.broadcast_to(np.eye(u.shape[-1]), (2,) + (u.shape[-1],) * 2), dtype)
    _phase_ok(u[..., :k])
    assert_same_bits(reference(lambda x: L.svd(x, compute_uv=False), a), s)


@pytest.mark.parametrize("left_side,lower,transpose_a,conjugate_a,unit_diagonal", [
    (True, True, False, False, False), (True, False, True, False, True),
    (True, True, True, True, False), (False, True, False, False, True),
    (False, False, True, True, False), (False, True, False, True, False)])
def test_triangular_solve(left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    dtype = np.dtype(np.complex64)
    a = rand(dtype, (4, 4)) + 4 * np.eye(4, dtype=dtype)
    b = rand(dtype, (4, 3) if left_side else (3, 4), seed=2)
    f = lambda a, b: L.triangular_solve(a, b, left_side=left_side, lower=lower,
                                        transpose_a=transpose_a, conjugate_a=conjugate_a,
                                        unit_diagonal=unit_diagonal)
    x = reference(f, a, b)
    t = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        np.fill_diagonal(t, 1)
    op = np.conj(t) if conjugate_a else t
    op = op.T if transpose_a else op
    check_close(op @ x if left_side else x @ op, b, dtype, scale=8)
    check_close(x, xla_cpu(f, a, b), dtype, scale=8)


def test_triangular_solve_zero_pivot_is_ieee():
    a = np.array([[1.0, 0.0], [2.0, 0.0]], np.float32)
    b = np.array([[1.0], [3.0]], np.float32)
    f = lambda a, b: L.triangular_solve(a, b, left_side=True, lower=True)
    out = reference(f, a, b)
    assert out[0, 0] == 1 and np.isinf(out[1, 0])


def test_schur(dtype):
    a = rand(dtype, (5, 5))
    t, z = reference(L.schur, a)
    check_close(z @ t @ H(z), a, dtype, scale=np.abs(a).max() * 4)
    check_close(H(z) @ z, np.eye(5), dtype)
    assert np.all(np.tril(t, -2) == 0)
    if np.issubdtype(dtype, np.complexfloating):
        assert np.all(np.tril(t, -1) == 0)


def test_schur_sort_raises_like_jax_and_select_is_ignored():
    """JAX's only schur lowering raises NotImplementedError for sort_eig_vals and ignores
    select_callable; the reference does the same."""
    a = rand(np.float32, (4, 4))
    sort = lambda a: L.schur(a, sort_eig_vals=True)  # noqa: E731
    with pytest.raises(NotImplementedError):
        xla_cpu(sort, a)
    with pytest.raises(interp.UnsupportedPrimitiveError, match="sort feature"):
        reference(sort, a)
    sel = lambda a: L.schur(a, select_callable=lambda w: w.real > 0)  # noqa: E731
    t, z = reference(sel, a)
    t0, _ = reference(L.schur, a)
    assert_same_bits(t, t0)
    assert_same_bits(xla_cpu(sel, a)[0], xla_cpu(L.schur, a)[0])   # XLA:CPU ignores it too


def _hess_q(h, taus):
    n = h.shape[0]
    q = np.eye(n, dtype=np.complex128)
    for i in reversed(range(n - 1)):
        v = np.zeros(n, np.complex128)
        v[i + 1] = 1
        v[i + 2:] = h[i + 2:, i]
        q = q - taus[i] * np.outer(v, np.conj(v) @ q)
    return q


def test_hessenberg(dtype):
    a = rand(dtype, (5, 5))
    h, taus = reference(L.hessenberg, a)
    xh, xtaus = xla_cpu(L.hessenberg, a)
    q = _hess_q(h, taus)
    check_close(q @ np.triu(h, -1) @ H(q), a, dtype, scale=np.abs(a).max() * 4)
    check_close(np.triu(h, -1), np.triu(xh, -1), dtype, scale=np.abs(a).max() * 4)
    check_close(taus, xtaus, dtype)


def _hessenberg_abs_mp(a, prec=200):
    """|H| of a Householder Hessenberg reduction in ``prec``-bit arithmetic (mpmath): |H| does not
    depend on the reflectors' sign convention."""
    import mpmath
    n = a.shape[0]
    with mpmath.workprec(prec):
        m = mpmath.matrix(a.astype(np.float64).tolist())
        for k in range(n - 2):
            v = [m[i, k] for i in range(k + 1, n)]
            alpha = mpmath.sqrt(mpmath.fsum(t * t for t in v)) * (-1 if v[0] > 0 else 1)
            v[0] -= alpha
            vv = mpmath.fsum(t * t for t in v)
            if vv == 0:
                continue
            for j in range(n):
                s = 2 * mpmath.fsum(v[t] * m[k + 1 + t, j] for t in range(len(v))) / vv
                for t in range(len(v)):
                    m[k + 1 + t, j] -= s * v[t]
            for i in range(n):
                s = 2 * mpmath.fsum(m[i, k + 1 + t] * v[t] for t in range(len(v))) / vv
                for t in range(len(v)):
                    m[i, k + 1 + t] -= s * v[t]
        return np.array([[abs(float(m[i, j])) if i <= j + 1 else 0.0 for j in range(n)]
                         for i in range(n)])


def test_hessenberg_nightly_seed_287():
    """The nightly finding: at seed 287 XLA:CPU's float32 |H| was far from the reference (325
    eps*max|A| on one host, 96 on another: the figure depends on the host CPU, so it is not
    asserted). The reference is right (within an ulp of a 200-bit reduction); XLA:CPU's error is
    its backward error amplified by the reduction's conditioning (a subdiagonal of 0.014), which
    the case's condition-scaled bound (MODE_HESSENBERG) accounts for: the case passes on XLA:CPU."""
    from conformance.cases import lax_linalg as cases
    from conformance.execute import run_case
    case = next(c for c in cases.cases() if c.id == "lax_linalg/hessenberg/f32")
    a = case.make_inputs(287)[0]
    exact = _hessenberg_abs_mp(a)
    eps = np.finfo(np.float32).eps
    scale = np.abs(a).max()
    assert np.abs(reference(case.fn, a) - exact).max() <= eps * scale
    assert run_case(case, "xla:cpu", seed=287).outcome == "pass"


def test_tridiagonal(dtype):
    a = spd(dtype, n=5)
    _, d, e, taus = reference(L.tridiagonal, a)
    _, xd, xe, _ = xla_cpu(L.tridiagonal, a)
    scale = np.abs(a).max()
    check_close(d, xd, dtype, scale=scale)
    check_close(e, xe, dtype, scale=scale)
    t = np.diag(d.astype(np.float64)) + np.diag(e, 1) + np.diag(e, -1)
    check_close(np.linalg.eigvalsh(t), np.linalg.eigvalsh(a.astype(np.complex128)), dtype,
                scale=scale)


def test_tridiagonal_solve():
    rng = np.random.RandomState(3)
    dl, d, du = (rng.standard_normal((2, 6)).astype(np.float32) for _ in range(3))
    d += 4
    b = rng.standard_normal((2, 6, 3)).astype(np.float32)
    x = reference(L.tridiagonal_solve, dl, d, du, b)
    m = np.zeros((2, 6, 6))
    for k in range(2):
        m[k] = np.diag(d[k]) + np.diag(dl[k, 1:], -1) + np.diag(du[k, :-1], 1)
    check_close(m @ x, b, np.float32, scale=8)
    check_close(x, xla_cpu(L.tridiagonal_solve, dl, d, du, b), np.float32, scale=8)
    zero = np.zeros(6, np.float32)
    singular = reference(L.tridiagonal_solve, zero, zero, zero, b[0])
    assert_same_bits(singular, xla_cpu(L.tridiagonal_solve, zero, zero, zero, b[0]))


# --- tridiagonal_solve(perturb_singular=True): jaxlib's own kernel, run in the operand's precision --

# jaxlib 0.12's build of the kernel contracts its two scalar multiply-subtracts of the elimination
# (u -= factor * u', utmp - factor * d) into FMAs (vfnmadd in jaxlib/cpu/_lapack.so); 0.10.2's
# build does not. The reference is the program as written (two roundings); on 0.12 XLA:CPU is
# replayed bitwise with those two operations fused (spec/lax_linalg.py BACKEND_PROPERTIES).
XLA_FUSES_PERTURBED = tuple(int(p) for p in jax.__version__.split(".")[:2]) >= (0, 12)


def _fused_fms(c, a, b):
    """c - a * b rounded once, elementwise (an exact FMA for float32/float64, via rationals)."""
    from fractions import Fraction
    c, a, b = np.broadcast_arrays(c, a, b)
    out = np.array(c - a * b)
    t = c.dtype.type
    even = lambda y: int(np.asarray(y).view(np.int32 if t is np.float32 else np.int64)) & 1  # noqa: E731
    for i in np.ndindex(c.shape):
        if not (np.isfinite(a[i]) and np.isfinite(b[i]) and np.isfinite(c[i])):
            continue
        v = Fraction(float(c[i])) - Fraction(float(a[i])) * Fraction(float(b[i]))
        f = t(float(v))                  # nearest double, then the nearest candidate of type t
        cands = [y for y in (f, np.nextafter(f, t(np.inf)), np.nextafter(f, t(-np.inf))) if np.isfinite(y)]
        out[i] = min(cands, key=lambda y: (abs(Fraction(float(y)) - v), even(y)))
    return out


def _tridiagonal_systems(dtype, seed):
    """A batch of 4 systems (n = 6, 2 right-hand sides): nonsingular, exactly singular through a
    zero column, numerically singular (shifted by an eigenvalue), and with zero sub-diagonals."""
    rng = np.random.default_rng(seed)
    cplx = np.issubdtype(dtype, np.complexfloating)
    r = lambda *s: (rng.standard_normal(s) + (1j * rng.standard_normal(s) if cplx else 0)).astype(dtype)  # noqa: E731
    dl, d, du, b = r(4, 6), r(4, 6), r(4, 6), r(4, 6, 2)
    d[1, 2], dl[1, 3], du[1, 1] = 0, 0, 0                      # column 2 is zero
    t = np.diag(d[2].astype(np.complex128)) + np.diag(dl[2, 1:], -1) + np.diag(du[2, :-1], 1)
    lam = np.linalg.eigvals(t)[0]
    d[2] = (d[2] - (lam if cplx else lam.real)).astype(dtype)
    dl[3, ::2] = 0
    return dl, d, du, b


def _perturbed(dl, d, du, b):
    return L.tridiagonal_solve(dl, d, du, b, perturb_singular=True)


@pytest.mark.parametrize("seed", [0, 1])
def test_tridiagonal_solve_perturbed_vs_xla(dtype, seed):
    """Bitwise with XLA:CPU's kernel, singular systems included (where the result is made of
    rounding residues); on jaxlib 0.12 real types bitwise with the same procedure with its two
    multiply-subtracts fused."""
    args = _tridiagonal_systems(dtype, seed)
    got, want = reference(_perturbed, *args), xla_cpu(_perturbed, *args)
    assert np.isfinite(got).all()
    if XLA_FUSES_PERTURBED and not np.issubdtype(dtype, np.complexfloating):
        from interp.rules.lax_linalg import _gtsv_perturbed
        eqn = type("E", (), {"unsupported": staticmethod(RuntimeError)})()
        with np.errstate(all="ignore"):
            fused = _gtsv_perturbed(eqn, *args, fms=_fused_fms)
        assert_same_bits(fused, want)
        check_close(got[0], want[0], dtype, scale=np.abs(want[0]).max() * 8)  # nonsingular: accuracy
    else:
        assert_same_bits(got, want)


def test_tridiagonal_solve_perturbed_singular_residual(dtype):
    """A singular system's perturbed solution is large and satisfies T x = b to the perturbation's
    size: |T x - b| <= c eps |T| |x| (what inverse iteration relies on)."""
    dl, d, du, b = _tridiagonal_systems(dtype, 2)
    x = reference(_perturbed, dl, d, du, b).astype(np.complex128)
    for i in (1, 2):
        t = np.diag(d[i].astype(np.complex128)) + np.diag(dl[i, 1:], -1) + np.diag(du[i, :-1], 1)
        assert np.abs(x[i]).max() > 1e3 * np.abs(b[i]).max()
        check_close(t @ x[i], b[i], dtype, scale=np.abs(t).max() * np.abs(x[i]).max() / 6)


def test_tridiagonal_solve_perturbed_by_hand():
    """n = 1, d = 0, b = 1: the pivot 0 is moved to safemin = 2**-126 (perturb = eps * 0 is raised
    to safemin; 1 > safemin * bignum is false, so one step) and x = 1 / 2**-126 = 2**126."""
    one = np.ones((1, 1), np.float32)
    zero = np.zeros(1, np.float32)
    x = reference(_perturbed, zero, zero, zero, one)
    assert_same_bits(x, np.full((1, 1), 2.0 ** 126, np.float32))
    assert_same_bits(x, xla_cpu(_perturbed, zero, zero, zero, one))
    # Without perturbation the same system is singular: all-NaN.
    plain = reference(L.tridiagonal_solve, zero, zero, zero, one)
    assert np.isnan(plain).all()
    assert_same_bits(plain, xla_cpu(L.tridiagonal_solve, zero, zero, zero, one))


def test_perturbed_pivot_constants_are_lapack_safemin():
    """The pivot procedure's safe minimum (computed once per type) is LAPACK's own xLAMCH('S')."""
    import scipy.linalg.lapack as lapack
    from interp.rules.lax_linalg import _SAFEMIN
    for rt, lamch in ((np.float32, lapack.slamch), (np.float64, lapack.dlamch)):
        safemin, bignum = _SAFEMIN[rt]
        assert type(safemin) is rt and type(bignum) is rt
        assert safemin == rt(lamch("S")) and bignum == rt(1) / rt(lamch("S"))


def test_tridiagonal_solve_perturbed_loud_cases():
    """A NaN right-hand side meeting a tiny pivot: jaxlib's vectorised max is NaN or 1 depending
    on the NaN's position, and the two choices give different results: raise. float16 has no
    kernel: raise."""
    d = np.array([1e-39], np.float32)       # |pivot| < safemin
    b = np.array([[np.nan, 1.0]], np.float32)
    with pytest.raises(interp.UnsupportedPrimitiveError, match="order-dependent"):
        reference(_perturbed, d, d, d, b)
    h, hb = np.ones(3, np.float16), np.ones((3, 1), np.float16)
    try:
        jaxpr = jax.make_jaxpr(_perturbed)(h, h, h, hb)
    except TypeError:       # JAX 0.12 rejects float16 when tracing
        return
    with pytest.raises(interp.UnsupportedPrimitiveError, match="float16"):
        interp.eval_jaxpr(jaxpr, h, h, h, hb)


def test_cholesky_update():
    a = spd(np.float32, n=5)
    r = np.linalg.cholesky(a.astype(np.float64)).T.astype(np.float32)
    w = rand(np.float32, (5,), seed=4)
    out = reference(L.cholesky_update, r, w)
    assert np.all(np.tril(out, -1) == 0) and np.all(np.diag(out) > 0)
    expect = r.T.astype(np.float64) @ r + np.outer(w, w)
    check_close(out.T @ out, expect, np.float32, scale=np.abs(expect).max())
    check_close(out, xla_cpu(L.cholesky_update, r, w), np.float32, scale=np.abs(out).max())


def test_symmetric_product():
    a, c = rand(np.float32, (2, 4, 3)), spd(np.float32, n=4, batch=(2,))
    f = lambda a, c: L.symmetric_product(a, c, alpha=2.0, beta=-0.5)
    out, xla = reference(f, a, c), xla_cpu(f, a, c)
    check_close(np.tril(out), np.tril(xla), np.float32, scale=np.abs(out).max())
    check_close(out, 2 * a @ np.swapaxes(a, -1, -2) - 0.5 * c, np.float32,
                scale=np.abs(out).max())


def test_jnp_linalg_programs():
    a = spd(np.float32, n=4)
    b = rand(np.float32, (4, 2), seed=5)
    x = reference(jax.numpy.linalg.solve, a, b)
    check_close(a @ x, b, np.float32, scale=np.abs(a).max() * 4)
    check_close(reference(jax.numpy.linalg.det, a), xla_cpu(jax.numpy.linalg.det, a),
                np.float32, scale=abs(float(np.linalg.det(a))))


def test_coverage_lists_family():
    cov = interp.coverage()
    for name in ("cholesky", "qr", "lu", "lu_pivots_to_permutation", "eigh", "svd",
                 "triangular_solve", "hessenberg", "tridiagonal", "cholesky_update",
                 "symmetric_product", "geqrf", "householder_product", "ormqr"):
        assert cov[name] == "supported", (name, cov.get(name))
    assert cov["tridiagonal_solve"] == "supported" and cov["eig"] == "supported"


@pytest.mark.parametrize("shape,jpvt", [((6, 5), [0, 1, 0, 0, 1]), ((6, 5), [0, 0, 0, 3, -2]),
                                         ((6, 5), [1, 1, 1, 1, 1]), ((3, 5), [1, 0, 1, 1, 0]),
                                         ((3, 5), [0, 1, 0, 0, 0])])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=lambda d: np.dtype(d).name)
def test_geqp3_fixed_columns(shape, jpvt, dtype):
    """LAPACK semantics: columns with jpvt != 0 lead in their order, unpivoted; the free ones are
    pivoted on the trailing rows. jpvt bitwise with XLA:CPU (LAPACK), factors within float32
    rounding of it, and a[:, jpvt - 1] == Q R (the reference's own factors, in float64)."""
    rng = np.random.default_rng(sum(shape) + len(jpvt))
    a = rng.standard_normal(shape)
    if dtype == np.complex64:
        a = a + 1j * rng.standard_normal(shape)
    a = a.astype(dtype)
    p = np.array(jpvt, np.int32)
    fn = lambda a, p: L.geqp3(a, p)  # noqa: E731
    got, want = reference(fn, a, p), xla_cpu(fn, a, p)
    assert_same_bits(got[1], want[1])
    scale = np.abs(a).max() * np.sqrt(shape[0]) * 64 * np.finfo(np.float32).eps
    assert np.max(np.abs(got[0] - want[0])) <= scale and np.max(np.abs(got[2] - want[2])) <= 64 * np.finfo(np.float32).eps
    m, n = shape
    k = min(m, n)
    qr, taus = got[0].astype(np.complex128), got[2].astype(np.complex128)
    q = np.eye(m, dtype=np.complex128)
    for i in reversed(range(k)):
        v = np.zeros(m, np.complex128)
        v[i], v[i + 1:] = 1, qr[i + 1:, i]
        q -= taus[i] * np.outer(v, np.conj(v) @ q)
    assert np.allclose(q @ np.triu(qr), a[:, got[1] - 1], atol=scale)
    fixed = [j + 1 for j in range(n) if jpvt[j]]
    assert list(got[1][:len(fixed)]) == fixed


def test_every_rule_has_semantics():
    from interp.registry import RULES
    from interp.rules import lax_linalg
    from spec.lax_linalg import SEMANTICS
    mine = {n for n, r in RULES.items() if r.__module__ == lax_linalg.__name__}
    assert mine == set(SEMANTICS), mine ^ set(SEMANTICS)


@pytest.mark.parametrize("name", ["cholesky", "qr", "eigh", "svd", "solve", "triangular_solve"])
def test_grad_and_vmap(name):
    # AD and batching produce ordinary primitives at trace time: compare with XLA:CPU within the
    # accuracy of the float32 results (float64 intermediates in the reference).
    fns = {
        "cholesky": lambda a: jnp.sum(L.cholesky(a) ** 2),
        "qr": lambda a: jnp.sum(L.qr(a, full_matrices=False)[1] ** 2),
        "eigh": lambda a: jnp.sum(L.eigh(a)[1] ** 3),
        "svd": lambda a: jnp.sum(L.svd(a, compute_uv=False)),
        "solve": lambda a: jnp.sum(jnp.linalg.solve(a, jnp.ones((a.shape[-1],), a.dtype))),
        "triangular_solve": lambda a: jnp.sum(L.triangular_solve(a, a, left_side=True, lower=True)),
    }
    f = fns[name]
    a = spd(np.float32, n=4, batch=(3,))
    g = jax.vmap(jax.grad(f))
    want = xla_cpu(g, a)
    check_close(reference(g, a), want, np.float32, scale=np.abs(want).max())
