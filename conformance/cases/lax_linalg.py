"""Linear algebra on well-conditioned inputs. Results that are unique (Cholesky factor,
triangular solves, eigenvalues, singular values, the reconstruction A = Q R) are compared under
ABS_REL bounds; factors that are unique only up to a convention (eigenvector signs, QR signs) are
compared through quantities that do not depend on it."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from spec import compliance as C

from ..case import Case, random_array

F32 = np.dtype(np.float32)
N = 8
# Measured on XLA:CPU (jax 0.12.0.1) against the same programs in float64, seeds 0..9: worst abs
# error 3.4 eps*max|in| (eigh; svd 2.4, qr 2.7, cholesky/solves < 0.2); the budget is 8x that plus a
# small relative term (source "measured").
MODE = C.abs_rel(32, 8, "measured")


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
