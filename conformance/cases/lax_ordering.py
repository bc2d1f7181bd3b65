"""approx_max_k / approx_min_k (approx_top_k) and sort/top_k on more dtypes and shapes.

Off TPU XLA computes approx_top_k exactly (spec/lax_ordering.py); its order of NaN and of signed-zero
ties is not the reference's for every k, so those cases draw inputs without NaN and zeros
(specials=0; distinct random floats). sort and top_k are exact on special values too."""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ._elementwise import BF16, F16, F32, F64, I8, I32, U8
from ._programs import program_cases


def cases():
    P = program_cases
    fam = "lax_ordering"
    yield from P(fam, "approx_max_k", lambda x: lax.approx_max_k(x, 4), [(3, 40)], (F32, BF16),
                 primitives=["approx_top_k"], specials=0, nightly_dtypes=(F16, F64))
    yield from P(fam, "approx_min_k_dim0", lambda x: lax.approx_min_k(x, 3, reduction_dimension=0),
                 [(20, 3)], (F32,), primitives=["approx_top_k"], specials=0, nightly_dtypes=(F64,))
    yield from P(fam, "approx_max_k_k_eq_n", lambda x: lax.approx_max_k(x, 16), [(2, 16)], (F32,),
                 primitives=["approx_top_k"], specials=0)
    yield from P(fam, "sort_rank3_dim1", lambda x: lax.sort(x, dimension=1), [(2, 9, 3)], (F32, I32, U8, F16),
                 primitives=["sort"], specials=0.4, nightly_dtypes=(F64, I8, BF16))
    yield from P(fam, "sort_scalar_rows", lambda x: jnp.sort(x, axis=1), [(4, 1)], (F32,), primitives=["sort"])
    yield from P(fam, "top_k_rank3", lambda x: lax.top_k(x, 3), [(2, 3, 7)], (F32, I32, BF16),
                 primitives=["top_k"], specials=0.3, nightly_dtypes=(F16, F64, U8))
