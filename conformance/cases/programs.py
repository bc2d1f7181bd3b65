"""Whole programs (small MLP, attention, layer norm, conv net), forward and backward (jax.grad).

Errors compound through many rounded operations, so these use ABS_REL bounds in units of
eps(dtype): |backend - reference| <= atol * eps * max|input| + rtol * eps * |reference|. The
multipliers were measured (XLA:CPU f32 against the same program in float64, all seeds 0..19,
worst case x 8 margin) and are recorded per program below with that source.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from spec import compliance as C

from ..case import Case, random_array

F32 = np.dtype(np.float32)


def mlp(x, w1, b1, w2, y):
    h = jnp.tanh(x @ w1 + b1)
    return jnp.mean((h @ w2 - y) ** 2)


def attention(q, k, v):
    s = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(q.shape[-1]).astype(np.float32)
    mask = jnp.tril(jnp.ones(s.shape[-2:], bool))
    s = jnp.where(mask, s, -1e30)
    return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, axis=-1), v)


def layer_norm(x, g, b):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + 1e-5) * g + b


def conv_net(x, w1, w2):
    h = lax.conv_general_dilated(x, w1, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    h = jax.nn.relu(h)
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = lax.conv_general_dilated(h, w2, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jnp.mean(h, axis=(1, 2))


def _scalar_loss(f):
    return lambda *a: jnp.sum(jnp.sin(f(*a)))


PROGRAMS = {
    # name: (fn, shapes, input scale, (atol, rtol) forward, (atol, rtol) backward), in eps units.
    # Measured worst atol (XLA:CPU f32 vs float64, seeds 0..19, jax 0.12.0.1): mlp 5.2 / 2.2,
    # attention 0.9 / 4.0, layer_norm 2.4 / 4.6, conv_net 4.4 / 11.0; budgets are 8x those.
    "mlp": (mlp, [(8, 16), (16, 32), (32,), (32, 4), (8, 4)], 1.0, (48, 8), (24, 8)),
    "attention": (attention, [(2, 8, 16), (2, 8, 16), (2, 8, 16)], 1.0, (8, 8), (32, 8)),
    "layer_norm": (layer_norm, [(4, 64), (64,), (64,)], 3.0, (24, 8), (40, 8)),
    "conv_net": (conv_net, [(2, 8, 8, 3), (3, 3, 3, 4), (2, 2, 4, 5)], 1.0, (40, 8), (96, 8)),
}


def _inputs(shapes, scale):
    return lambda rng: [(random_array(rng, F32, s, specials=0, low=-1, high=1) * np.float32(scale)).astype(F32)
                        for s in shapes]


def cases():
    for name, (fn, shapes, scale, fwd_tol, bwd_tol) in PROGRAMS.items():
        yield Case(id=f"programs/{name}/forward/float32", fn=fn, inputs=_inputs(shapes, scale),
                   modes=C.abs_rel(*fwd_tol, source="measured"), primitives=("dot_general",), tags=("program",))
        grad = jax.grad(_scalar_loss(fn) if name in ("attention", "layer_norm", "conv_net") else fn,
                        argnums=tuple(range(len(shapes) - (1 if name == "mlp" else 0))))
        yield Case(id=f"programs/{name}/backward/float32", fn=grad, inputs=_inputs(shapes, scale),
                   modes=C.abs_rel(*bwd_tol, source="measured"), primitives=("dot_general",), tags=("program",))
