"""Transcendental and special functions: ULP budgets per dtype (spec/compliance.py), every
primitive x float dtype x shape and the special values."""
from __future__ import annotations

import numpy as np
from jax import lax

from ._elementwise import BF16, F16, F32, F64, Op, elementwise_cases

Q, N = (F32, BF16, F16), (F64,)

OPS = [
    Op("exp", lax.exp, 1, Q, nightly_dtypes=N, low=-100, high=100),
    Op("exp2", lax.exp2, 1, Q, nightly_dtypes=N, low=-100, high=100),
    Op("expm1", lax.expm1, 1, Q, nightly_dtypes=N),
    Op("log", lax.log, 1, Q, nightly_dtypes=N, positive=True, high=1e6),
    Op("log1p", lax.log1p, 1, Q, nightly_dtypes=N, low=-1, high=1e6),
    Op("tanh", lax.tanh, 1, Q, nightly_dtypes=N),
    Op("logistic", lax.logistic, 1, Q, nightly_dtypes=N, low=-50, high=50),
    Op("sqrt", lax.sqrt, 1, Q, nightly_dtypes=N, positive=True, high=1e6),
    Op("rsqrt", lax.rsqrt, 1, Q, nightly_dtypes=N, positive=True, high=1e6),
    Op("cbrt", lax.cbrt, 1, Q, nightly_dtypes=N, low=-1e6, high=1e6),
    Op("sin", lax.sin, 1, Q, nightly_dtypes=N),
    Op("cos", lax.cos, 1, Q, nightly_dtypes=N),
    Op("tan", lax.tan, 1, Q, nightly_dtypes=N, low=-1.5, high=1.5),
    Op("asin", lax.asin, 1, (F32,), nightly_dtypes=N + (BF16,), low=-1, high=1),
    Op("acos", lax.acos, 1, (F32,), nightly_dtypes=N + (BF16,), low=-1, high=1),
    Op("atan", lax.atan, 1, (F32,), nightly_dtypes=N + (BF16,)),
    Op("atan2", lax.atan2, 2, (F32,), nightly_dtypes=N + (BF16,)),
    Op("sinh", lax.sinh, 1, (F32,), nightly_dtypes=N),
    Op("cosh", lax.cosh, 1, (F32,), nightly_dtypes=N),
    Op("asinh", lax.asinh, 1, (F32,), nightly_dtypes=N),
    Op("acosh", lax.acosh, 1, (F32,), nightly_dtypes=N, low=1, high=1e4),
    Op("atanh", lax.atanh, 1, (F32,), nightly_dtypes=N, low=-1, high=1),
    Op("erf", lax.erf, 1, Q, nightly_dtypes=N, low=-5, high=5),
    Op("erfc", lax.erfc, 1, (F32,), nightly_dtypes=N, low=-5, high=10),
    Op("erf_inv", lax.erf_inv, 1, (F32,), nightly_dtypes=N + (BF16,), low=-1, high=1),
    Op("lgamma", lax.lgamma, 1, (F32,), nightly_dtypes=N, low=-20, high=100),
    Op("digamma", lax.digamma, 1, (F32,), nightly_dtypes=N, low=-20, high=100),
    Op("bessel_i0e", lax.bessel_i0e, 1, (F32,), nightly_dtypes=N, low=-50, high=50),
    Op("bessel_i1e", lax.bessel_i1e, 1, (F32,), nightly_dtypes=N, low=-50, high=50),
    Op("igamma", lax.igamma, 2, (), nightly_dtypes=(F32, F64), positive=True, high=30),
    Op("igammac", lax.igammac, 2, (), nightly_dtypes=(F32, F64), positive=True, high=30),
    Op("zeta", lax.zeta, 2, (), nightly_dtypes=(F32,), low=1, high=20),
    Op("polygamma", lambda x: lax.polygamma(np.float32(1), x) if x.dtype == np.float32 else
       lax.polygamma(np.float64(1), x), 1, (), nightly_dtypes=(F32,), positive=True, high=20),
] + ([Op("log2", lax.log2, 1, (F32,), nightly_dtypes=N + (BF16,), positive=True, high=1e6)]
     if hasattr(lax, "log2") else [])


def cases():
    return elementwise_cases("lax_special", OPS)
