"""Transcendental and special functions: ULP budgets per dtype (spec/compliance.py), every
primitive x float dtype x shape and the special values."""
from __future__ import annotations

import numpy as np
from jax import lax

from ..case import Case, applicable_if
from ._elementwise import BF16, F16, F32, F64, I32, U8, Op, elementwise_cases, exhaustive_cases

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
    # The incomplete gamma family, zeta, polygamma and betainc: float32 in the quick profile (their
    # float64 reference evaluates mpmath for many elements). Random inputs from spec/lax_special.py
    # DOMAINS without special values (those are the specials grid's), so the random cases measure
    # accuracy where it is defined. XLA:CPU compiles igamma/igammac/igamma_grad_a/betainc for about
    # 5 s each: one quick shape.
    Op("igamma", lax.igamma, 2, (F32,), nightly_dtypes=(F64, BF16, F16), domains=((0.1, 50), (0.01, 60)),
       random_specials=0, specials_profile="nightly", quick_shapes=False),
    Op("igammac", lax.igammac, 2, (F32,), nightly_dtypes=(F64, BF16, F16), domains=((0.1, 50), (0.01, 60)),
       random_specials=0, specials_profile="nightly", quick_shapes=False),
    # mpmath for every element (about 25 ms each): no all-pairs special-value grid in any profile.
    Op("igamma_grad_a", lax.igamma_grad_a, 2, (F32,), nightly_dtypes=(F64,), domains=((0.1, 20), (0.01, 30)),
       specials=False, random_specials=0, quick_shapes=False),
    Op("zeta", lax.zeta, 2, (F32,), nightly_dtypes=(F64, BF16), domains=((1.01, 20), (0.1, 50)), random_specials=0),
    Op("polygamma", lambda x: lax.polygamma(np.asarray(1, x.dtype), x), 1, (F32,), nightly_dtypes=(F64, BF16),
       domains=((0.1, 50),), random_specials=0),
    # Three operands: the all-triples special grid is 27**3 elements, too many for the reference.
    Op("regularized_incomplete_beta", lax.betainc, 3, (F32,), nightly_dtypes=(F64, BF16),
       domains=((0.1, 20), (0.1, 20), (0.0, 1.0)), specials=False, random_specials=0, quick_shapes=False),
    Op("log2", getattr(lax, "log2", None), 1, (F32,), nightly_dtypes=N + (BF16,), positive=True, high=1e6,
       not_applicable=applicable_if(hasattr(lax, "log2"), "no lax.log2 (jnp.log2 lowers to log / log(2))")),
    # Horner's rule, each multiply and add rounded (JAX >= 0.12); integers wrap. XLA:CPU contracts
    # the multiply-add into an FMA: the allowance fma-contraction (its replay models float32 FMAs;
    # XLA:CPU contracts float64 too, so float64 is left out).
    Op("polynomial", lambda x: lax.polynomial(x, (3, -2, 0.5, 1.25, -0.75) if x.dtype.kind == "f" or
                                              x.dtype == BF16 else (3, 2, 7, 1, 5)),
       1, (F32, BF16, I32), nightly_dtypes=(F16, U8), low=-4, high=4,
       not_applicable=applicable_if(hasattr(lax, "polynomial"), "no lax.polynomial")),
]


# Every value of the one-byte floats (correctly rounded through float32 on XLA:CPU for these four).
# Left out: sqrt of float4_e2m1fn (the reference rounds sqrt's NaN to +0.0 there, where
# convert_element_type's NaN -> -0.0 applies: a reference bug, reported); exp2, logistic, asin, acos
# (XLA:CPU findings of up to 7 ulp / NaN, not yet recorded); asinh (XLA:CPU compiles it for minutes).
EXHAUSTIVE = ("exp", "log", "tanh", "sqrt")


def _betainc_large(dtype):
    """betainc with a and b log-uniform in [1e2, 1e12] and x within 6 standard deviations of the
    mean (uniformly in units of sd): the bulk of the distribution, where I is neither 0 nor 1.
    XLA:CPU loses accuracy there as a + b grows and returns anything once its continued fraction
    needs more than its iteration cap (spec/divergences.py xla-betainc-prefactor-and-iteration-cap)."""
    def make(rng):
        from interp.rules.lax_special import correctly_rounded
        a, b = correctly_rounded("pow", 10.0, rng.uniform(2, 12, size=(2, 4, 8)))   # (np.power: host-dependent)
        mean, sd = a / (a + b), np.sqrt(a * b / (a + b) ** 2 / (a + b + 1))
        x = np.clip(mean + rng.uniform(-6, 6, size=a.shape) * sd, 0, 1)
        return [v.astype(dtype) for v in (a, b, x)]
    return make


def cases():
    yield from exhaustive_cases("lax_special", [op for op in OPS if op.primitive in EXHAUSTIVE],
                                skip={("sqrt", "float4_e2m1fn")})
    yield from elementwise_cases("lax_special", OPS)
    # Large parameters (the reference: Temme's expansion or the continued fraction, up to ~35 ms an
    # element): nightly only, one small shape. XLA:CPU's values are mostly explained by the
    # divergence whatever they are (docs/conformance.md): these cases test the reference's
    # certification and the backend's crashes and hangs there.
    for dtype in (F32, F64):
        yield Case(id=f"lax_special/regularized_incomplete_beta/{np.dtype(dtype).name}/large-parameters",
                   fn=lax.betainc, inputs=_betainc_large(dtype), x64=dtype == F64,
                   primitives=("regularized_incomplete_beta",), profile="nightly")
