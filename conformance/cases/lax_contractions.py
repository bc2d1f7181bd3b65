"""dot_general and conv_general_dilated: DOT_PRODUCT bounds (K, sum |a||b|), exact for integers."""
from __future__ import annotations

import numpy as np
import jax.numpy as jnp
from jax import lax

from spec import compliance as C

from ..case import Case, random_array
from ._elementwise import BF16, F16, F32, F64, I8, I32, X64


def _a(x):
    return np.abs(np.asarray(x, np.float64))


def _conv_bound(x, w):
    """sum |x||w| for a VALID NCHW/OIHW convolution with unit strides, in float64."""
    from numpy.lib.stride_tricks import sliding_window_view
    kh, kw = w.shape[2:]
    win = sliding_window_view(_a(x), (kh, kw), axis=(2, 3))      # N C H' W' kh kw
    return [np.einsum("nchwij,ocij->nohw", win, _a(w))]


DOTS = [
    # name, fn, shapes, K, bound
    ("matmul", lambda a, b: lax.dot(a, b), [(4, 32), (32, 3)], 32, lambda a, b: [_a(a) @ _a(b)]),
    ("batched_rank3", lambda a, b: lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,)))), [(2, 3, 17), (2, 17, 5)],
     17, lambda a, b: [np.einsum("bik,bkj->bij", _a(a), _a(b))]),
    ("contract_dim0", lambda a, b: lax.dot_general(a, b, (((0,), (0,)), ((), ()))), [(64, 3), (64, 2)], 64,
     lambda a, b: [_a(a).T @ _a(b)]),
    ("matvec_long", lambda a, b: lax.dot(a, b), [(3, 500), (500,)], 500, lambda a, b: [_a(a) @ _a(b)]),
]


def cases():
    for name, fn, shapes, k, bound in DOTS:
        for dtype, prof in ((F32, "quick"), (BF16, "quick"), (F16, "nightly"), (F64, "nightly")):
            yield Case(id=f"lax_contractions/dot_general/{name}/{dtype.name}", fn=fn,
                       inputs=lambda rng, shapes=shapes, dtype=dtype: [random_array(rng, dtype, s, specials=0,
                                                                                    low=-2, high=2) for s in shapes],
                       modes=C.dot_product(k), dot_bound=bound, primitives=("dot_general",), x64=dtype in X64,
                       profile=prof)
        for dtype in (I32, I8):
            yield Case(id=f"lax_contractions/dot_general/{name}/{dtype.name}",
                       fn=lambda a, b, fn=fn: fn(a, b) if a.dtype == np.int32 else
                       fn(a.astype(np.int32), b.astype(np.int32)),
                       inputs=lambda rng, shapes=shapes, dtype=dtype: [random_array(rng, dtype, s, specials=0,
                                                                                    low=-100, high=100)
                                                                       for s in shapes],
                       primitives=("dot_general",), profile="quick" if dtype == I32 else "nightly")
    # bf16 x bf16 -> f32 (preferred_element_type): the products are exact in f32.
    yield Case(id="lax_contractions/dot_general/bf16_to_f32", fn=lambda a, b: lax.dot(
        a, b, preferred_element_type=np.float32), inputs=lambda rng: [random_array(rng, BF16, (8, 64), specials=0),
                                                                     random_array(rng, BF16, (64, 8), specials=0)],
        modes=C.dot_product(64), dot_bound=lambda a, b: [_a(a) @ _a(b)], primitives=("dot_general",))
    # ragged_dot: rows of lhs grouped, each group multiplied by its own rhs matrix.
    yield Case(id="lax_contractions/ragged_dot/f32", fn=lambda a, b, g: lax.ragged_dot(a, b, g),
               inputs=lambda rng: [random_array(rng, F32, (10, 16), specials=0), random_array(rng, F32, (3, 16, 4),
                                                                                        specials=0),
                                   np.array([3, 0, 7], np.int32)],
               modes=C.dot_product(16), primitives=("ragged_dot_general",),
               dot_bound=lambda a, b, g: [np.concatenate([_a(a[s:e]) @ _a(b[k]) for k, (s, e) in enumerate(
                   zip(np.cumsum(np.r_[0, g[:-1]]), np.cumsum(g)))])])
    # fft: error bound c * log2(n) * eps * sum |x| (Cooley-Tukey; sum |x| bounds every output).
    yield Case(id="lax_contractions/fft/c64/64", fn=lambda x: jnp.fft.fft(x),
               inputs=lambda rng: [random_array(rng, np.complex64, (3, 64), specials=0)],
               modes=C.dot_product(4 * 6), primitives=("fft",),
               dot_bound=lambda x: [np.repeat(np.abs(x.astype(np.complex128)).sum(-1, keepdims=True), 64, -1)])
    yield Case(id="lax_contractions/rfft_irfft/f32/32", fn=lambda x: jnp.fft.irfft(jnp.fft.rfft(x), n=32),
               inputs=lambda rng: [random_array(rng, F32, (2, 32), specials=0)],
               modes=C.dot_product(8 * 5), primitives=("fft",),
               dot_bound=lambda x: [np.repeat(2 * _a(x).sum(-1, keepdims=True), 32, -1)])
    conv = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID")   # noqa: E731
    for dtype, prof in ((F32, "quick"), (BF16, "nightly")):
        yield Case(id=f"lax_contractions/conv_general_dilated/nchw_valid/{dtype.name}", fn=conv,
                   inputs=lambda rng, dtype=dtype: [random_array(rng, dtype, (2, 3, 7, 6), specials=0),
                                                    random_array(rng, dtype, (4, 3, 3, 2), specials=0)],
                   modes=C.dot_product(18), dot_bound=_conv_bound, primitives=("conv_general_dilated",),
                   profile=prof)
