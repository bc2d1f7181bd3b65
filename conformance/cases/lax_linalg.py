"""Linear algebra on well-conditioned inputs. Results that are unique (Cholesky factor,
triangular solves, eigenvalues, singular values, the reconstruction A = Q R) are compared under
ABS_REL bounds; factors that are unique only up to a convention (eigenvector signs, QR signs) are
compared through quantities that do not depend on it."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src.lax import linalg as _linalg   # geqrf / geqp3 have no public name

from spec import compliance as C

from ..case import Case, random_array

F32 = np.dtype(np.float32)
N = 8
# Measured on XLA:CPU (jax 0.12.0.1) against the same programs in float64, seeds 0..9: worst abs
# error 3.4 eps*max|in| (eigh; svd 2.4, qr 2.7, cholesky/solves < 0.2); the budget is 8x that plus a
# small relative term (source "measured").
MODE = C.abs_rel(32, 8, "measured")
# Orthogonal reductions to condensed forms (ormqr's Q^T C, hessenberg, tridiagonal, schur, eig): their
# backward error grows like n * ||A||_F rather than max|A|. Measured on XLA:CPU (jax 0.10.2 and
# 0.12.0.1), seeds 0..9: worst abs error 27.6 eps*max|in| (hessenberg; schur 16.5, tridiagonal 15.6,
# eig 13.2, ormqr 8.3); lu 3.0, geqrf/geqp3 + householder_product 2.6, symmetric_product 4.4 of its
# DOT_PRODUCT bound's scale, cholesky_update 0.6, tridiagonal_solve 0.03 stay under MODE. Budget: 8x the
# worst, rounded up to a power of two (source "measured").
MODE_REDUCTION = C.abs_rel(256, 8, "measured")
# The Hessenberg form's forward error is the backward error (~ n eps ||A||) times its condition,
# which grows as a subdiagonal entry of H gets small (the Arnoldi step divides by it): the nightly
# search found seed 287 (min |h[k+1, k]| = 0.014) at 325 eps*max|in| on XLA:CPU while the reference
# is within 0.5 eps of a 200-bit computation. So the bound scales with the first-order condition
# number kappa = max_ij sum_kl |d|H|_ij / dA_kl| (central differences in float64; |H| is free of
# the reflectors' sign convention): measured on XLA:CPU (jax 0.10.2 and 0.12.0.1), seeds 0..59 and
# 287: worst 0.27 eps * max|A| * kappa (kappa 16..2441). Budget 8x, to a power of two.
MODE_HESSENBERG = C.abs_rel(2, 8, "measured")


def _hessenberg_scale(a):
    """max|A| * kappa: the ABS_REL magnitude of the Hessenberg case (see MODE_HESSENBERG)."""
    import scipy.linalg
    a = np.asarray(a, np.float64)
    h = 1e-6 * np.abs(a).max()
    habs = lambda m: np.abs(np.triu(scipy.linalg.hessenberg(m), -1))   # noqa: E731
    sens = np.zeros(a.shape)
    for k, l in np.ndindex(*a.shape):
        e = np.zeros(a.shape)
        e[k, l] = h
        sens += np.abs(habs(a + e) - habs(a - e)) / (2 * h)
    return np.abs(a).max() * sens.max()


def _spd(rng):
    a = random_array(rng, F32, (N, N), specials=0, low=-1, high=1)
    return [(a @ a.T + N * np.eye(N, dtype=F32)).astype(F32)]


def _tri(rng):
    a = np.tril(random_array(rng, F32, (N, N), specials=0, low=-1, high=1)) + 4 * np.eye(N, dtype=F32)
    return [a.astype(F32), random_array(rng, F32, (N, 3), specials=0, low=-1, high=1)]


def _general(rng):
    return [random_array(rng, F32, (N, 5), specials=0, low=-1, high=1)]


def cases():
    fam = "lax_linalg"
    yield Case(id=f"{fam}/cholesky/f32", fn=lambda a: jnp.linalg.cholesky(a), inputs=_spd, modes=MODE,
               primitives=("cholesky",))
    yield Case(id=f"{fam}/triangular_solve/f32", fn=lambda a, b: lax.linalg.triangular_solve(
        a, b, left_side=True, lower=True), inputs=_tri, modes=MODE, primitives=("triangular_solve",))
    yield Case(id=f"{fam}/eigh_eigenvalues/f32", fn=lambda a: jnp.linalg.eigh(a)[0], inputs=_spd, modes=MODE,
               primitives=("eigh",))
    yield Case(id=f"{fam}/svd_values/f32", fn=lambda a: jnp.linalg.svd(a, compute_uv=False), inputs=_general,
               modes=MODE, primitives=("svd",))
    # Q R reconstruction and |R| diagonal: independent of the sign convention.
    yield Case(id=f"{fam}/qr_reconstruct/f32", fn=lambda a: (lambda q, r: (q @ r, jnp.abs(jnp.diag(r))))(
        *jnp.linalg.qr(a)), inputs=_general, modes=MODE, primitives=("geqrf", "householder_product"))
    yield Case(id=f"{fam}/lu_solve/f32", fn=lambda a, b: jnp.linalg.solve(a, b), inputs=_tri, modes=MODE,
               primitives=("lu",), profile="nightly")
    yield from _more_cases(fam)


def _square(rng, batch=()):
    return [random_array(rng, F32, batch + (N, N), specials=0, low=-1, high=1)]


def _upper_chol(rng):
    r = np.linalg.cholesky(_spd(rng)[0].astype(np.float64)).T.astype(F32)
    return [r, random_array(rng, F32, (N,), specials=0, low=-1, high=1)]


def _tridiagonal_system(rng):
    # Diagonally dominant (|d| >= 4 > |dl| + |du|): well conditioned, no pivoting needed or harmful.
    u = lambda *s: random_array(rng, F32, s, specials=0, low=-1, high=1)   # noqa: E731
    d = (4 + np.abs(u(N))) * np.sign(u(N) + 0.5).astype(F32)
    return [u(N), np.where(d == 0, 4, d).astype(F32), u(N), u(N, 3)]


def _sym(rng):
    a = random_array(rng, F32, (N, N), specials=0, low=-1, high=1)
    return [((a + a.T) / 2).astype(F32)]


def _q_r(packed, taus):
    """(Q R, |diag R|) from LAPACK's packed QR: independent of the reflectors' sign convention."""
    k = min(packed.shape[-2:])
    q = lax.linalg.householder_product(packed[..., :, :k], taus)
    r = jnp.triu(packed[..., :k, :])
    return q @ r, jnp.abs(jnp.diagonal(r, axis1=-2, axis2=-1))


def _eig_quantities(a):
    """Eigenvalues as sorted real parts and sorted |imaginary parts| (independent of LAPACK's order),
    and the largest residual |A v - w v| of the unit-norm right eigenvectors."""
    w, v = lax.linalg.eig(a, compute_left_eigenvectors=False)
    ac = a.astype(w.dtype)
    # HIGHEST: at DEFAULT precision XLA:GPU computes A v in TF32 and the residual measures that
    # (2.7e-4 on an H100), not the eigenvectors (revision 1; before it the product was DEFAULT).
    resid = jnp.max(jnp.abs(jnp.matmul(ac, v, precision=lax.Precision.HIGHEST) - v * w[None, :]))
    return jnp.sort(w.real), jnp.sort(jnp.abs(w.imag)), resid


def _schur_quantities(a):
    """Z T Z^T (= A), Z^T Z (= I) and the sorted diagonal of T (real parts of the eigenvalues: LAPACK
    standardises 2x2 blocks to equal diagonal entries): independent of the order of the blocks."""
    t, z = lax.linalg.schur(a)
    return z @ t @ z.T, z.T @ z, jnp.sort(jnp.diagonal(t))


def _more_cases(fam):
    exact = C.exact("definition")
    # LU with partial pivoting: the packed factors (unique given the pivots) and exact pivots and
    # permutation, batched (rank 3).
    yield Case(id=f"{fam}/lu/f32/2x{N}x{N}", fn=lambda a: lax.linalg.lu(a), inputs=lambda rng: _square(rng, (2,)),
               modes=[MODE, exact, exact], primitives=("lu",))
    yield Case(id=f"{fam}/lu_pivots_to_permutation/int32", fn=lambda p: lax.linalg.lu_pivots_to_permutation(p, 9),
               inputs=lambda rng: [np.stack([rng.integers(i, 9, size=3) for i in range(6)], -1).astype(np.int32)],
               primitives=("lu_pivots_to_permutation",))
    yield Case(id=f"{fam}/geqrf_householder_product/f32/2x{N}x5",
               fn=lambda a: _q_r(*_linalg.geqrf(a)), inputs=lambda rng: [random_array(
                   rng, F32, (2, N, 5), specials=0, low=-1, high=1)], modes=MODE,
               primitives=("geqrf", "householder_product"))
    # Column-pivoted QR: Q R reconstructs A[:, jpvt - 1]; jpvt (1-based, LAPACK) exact.
    yield Case(id=f"{fam}/geqp3/f32", fn=lambda a: (lambda p, j, t: _q_r(p, t) + (j,))(
        *_linalg.geqp3(a, jnp.zeros(a.shape[-1], jnp.int32))), inputs=_general, modes=[MODE, MODE, exact],
        primitives=("geqp3", "householder_product"))
    # |Q^T C|: the rows of Q^T C change sign with the reflector convention, their magnitudes do not.
    yield Case(id=f"{fam}/ormqr/f32", fn=lambda a, c: jnp.abs(lax.linalg.ormqr(
        *_linalg.geqrf(a), c, left=True, transpose=True)),
        inputs=lambda rng: _square(rng) + [random_array(rng, F32, (N, 3), specials=0, low=-1, high=1)],
        modes=MODE_REDUCTION, primitives=("ormqr", "geqrf"))
    # Hessenberg H = Q^T A Q is unique up to D H D (D = diag(+-1), implicit Q theorem): compare |H|.
    yield Case(id=f"{fam}/hessenberg/f32", fn=lambda a: jnp.abs(jnp.triu(lax.linalg.hessenberg(a)[0], -1)),
               inputs=_square, modes=MODE_HESSENBERG, magnitude=_hessenberg_scale, primitives=("hessenberg",))
    # Symmetric tridiagonal reduction: d is unique, e up to sign.
    yield Case(id=f"{fam}/tridiagonal/f32", fn=lambda a: (lambda _, d, e, t: (d, jnp.abs(e)))(
        *lax.linalg.tridiagonal(a, lower=True)), inputs=_sym, modes=MODE_REDUCTION, primitives=("tridiagonal",))
    yield Case(id=f"{fam}/schur/f32", fn=_schur_quantities, inputs=_square, modes=MODE_REDUCTION, primitives=("schur",))
    yield Case(id=f"{fam}/eig/f32", fn=_eig_quantities, inputs=_square, modes=MODE_REDUCTION, primitives=("eig",),
               revision=1)
    # alpha A A^T + beta C: a length-(K + 1) dot product per element (JAX guarantees the lower triangle).
    yield Case(id=f"{fam}/symmetric_product/f32", fn=lambda a, c: jnp.tril(
        lax.linalg.symmetric_product(a, c, alpha=0.75, beta=-1.5)),
        inputs=lambda rng: [random_array(rng, F32, (N, 6), specials=0, low=-2, high=2)] + _sym(rng),
        modes=C.dot_product(6 + 1), primitives=("symmetric_product",),
        dot_bound=lambda a, c: [np.tril(0.75 * np.abs(a.astype(np.float64)) @ np.abs(a.astype(np.float64)).T
                                        + 1.5 * np.abs(c.astype(np.float64)))])
    yield Case(id=f"{fam}/cholesky_update/f32", fn=lambda r, w: lax.linalg.cholesky_update(r, w),
               inputs=_upper_chol, modes=MODE, primitives=("cholesky_update",))
    yield Case(id=f"{fam}/tridiagonal_solve/f32", fn=lambda dl, d, du, b: lax.linalg.tridiagonal_solve(
        dl, d, du, b), inputs=_tridiagonal_system, modes=MODE, primitives=("tridiagonal_solve",))
    # perturb_singular=True runs jaxlib's own kernel: on a well-conditioned system its pivots are
    # never perturbed, and it is a plain pivoted solve (XLA:CPU 0.12 fuses two multiply-subtracts).
    yield Case(id=f"{fam}/tridiagonal_solve_perturbed/f32", fn=lambda dl, d, du, b: lax.linalg.tridiagonal_solve(
        dl, d, du, b, perturb_singular=True), inputs=_tridiagonal_system, modes=MODE,
        primitives=("tridiagonal_solve",))
