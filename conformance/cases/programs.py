"""Whole programs (small MLP, attention, layer norm, conv net, an RNN by lax.scan, a pre-norm
transformer block), forward and backward (jax.grad), and three SGD steps of the MLP in a loop.

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


def _dot(f, a, b, tap=None):
    """The matmul f(a, b); ``tap`` (see _matmul_sensitivity) sees every matmul of a program. Without
    one the program traces exactly as f(a, b)."""
    return f(a, b) if tap is None else tap(f, a, b)


def _einsum(spec):
    return lambda a, b: jnp.einsum(spec, a, b)


def attention(q, k, v, tap=None):
    s = _dot(_einsum("bqd,bkd->bqk"), q, k, tap) / np.sqrt(q.shape[-1]).astype(np.float32)
    mask = jnp.tril(jnp.ones(s.shape[-2:], bool))
    s = jnp.where(mask, s, -1e30)
    return _dot(_einsum("bqk,bkd->bqd"), jax.nn.softmax(s, axis=-1), v, tap)


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


def rnn(x, w, u, b):
    # Elman RNN over the leading (time) axis of x, by lax.scan: h' = tanh(h W + x_t U + b).
    def step(h, xt):
        h = jnp.tanh(h @ w + xt @ u + b)
        return h, h
    return lax.scan(step, jnp.zeros((x.shape[1], w.shape[0]), x.dtype), x)[1]


def transformer_block(x, g1, wq, wk, wv, wo, g2, w1, w2, tap=None):
    # Pre-norm block: x + attention(ln(x)), then + mlp(ln(.)), causal single-head attention.
    def ln(v, g):
        mu = jnp.mean(v, axis=-1, keepdims=True)
        return (v - mu) * lax.rsqrt(jnp.mean((v - mu) ** 2, axis=-1, keepdims=True) + 1e-5) * g

    def mm(a, b):
        return _dot(jnp.matmul, a, b, tap)
    h = ln(x, g1)
    x = x + mm(attention(mm(h, wq), mm(h, wk), mm(h, wv), tap), wo)
    return x + mm(jax.nn.gelu(mm(ln(x, g2), w1), approximate=True), w2)


def _matmul_sensitivity(fn):
    """The dot_bound of a program whose ABS_REL mode has ``dot_sensitivity`` (spec/compliance.py):
    per output, sum over the program's matmuls P_k = A_k B_k of |d out / d P_k| . (|A_k| |B_k|).

    If a backend rounds every matmul input to u_in (TF32: u_in = 2^-11), each product moves by at
    most (2 u_in + u_in^2) |A_k||B_k| elementwise (the DOT_PRODUCT input term), and the output by
    that times this sensitivity, to first order in u_in. The TF32 replay alone cannot bound this:
    TF32 rounding is discontinuous, so a 1-ulp float32 difference upstream of a matmul (layer
    norm's rsqrt, softmax's exp and division on a GPU) moves an operand across a TF32 rounding
    boundary by one TF32 ulp, which no replay of the reference reproduces (docs/gpu-triage.md).
    Evaluated with JAX at Precision.HIGHEST in float32, on the CPU where JAX has one (a bound needs a
    few correct digits, not the last one): ``fn`` takes ``tap`` and routes every matmul through it."""
    def bound(*inputs):
        try:
            device = jax.devices("cpu")[0]
        except RuntimeError:        # JAX_PLATFORMS without cpu: HIGHEST keeps the accelerator's f32
            device = None
        with jax.default_device(device), jax.default_matmul_precision("highest"):
            args = [jnp.asarray(a) for a in inputs]
            sizes = []

            def record(f, a, b):
                sizes.append(f(jnp.abs(a), jnp.abs(b)))
                return f(a, b)
            fn(*args, tap=record)

            def perturbed(deltas):
                it = iter(deltas)
                return fn(*args, tap=lambda f, a, b: f(a, b) + next(it))
            jac = jax.jacrev(perturbed)([jnp.zeros_like(m) for m in sizes])
            return [sum(np.tensordot(np.abs(np.asarray(j, np.float64)), np.asarray(m, np.float64), axes=m.ndim)
                        for j, m in zip(jac, sizes))]
    return bound


def mlp_sgd_steps(x, w1, b1, w2, y):
    # Three SGD steps of the MLP inside a fori_loop (gradients taken inside the loop body).
    def step(i, params):
        grads = jax.grad(lambda p: mlp(x, *p, y))(params)
        return tuple(p - 0.125 * g for p, g in zip(params, grads))
    return lax.fori_loop(0, 3, step, (w1, b1, w2))


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
    # Measured worst atol, the larger of XLA:CPU f32 vs float64 (seeds 0..19) and XLA:CPU vs the
    # reference (seeds 0..2), on both jax 0.12.0.1 and 0.10.2: rnn 2.6 / 16.6, transformer_block
    # 3.0 / 25.4, mlp_sgd_steps 0.13 (forward only); budgets are 8x those, rounded up.
    "rnn": (rnn, [(6, 4, 8), (16, 16), (8, 16), (16,)], 0.5, (24, 8), (136, 8)),
    "transformer_block": (transformer_block, [(2, 8, 16), (16,), (16, 16), (16, 16), (16, 16), (16, 16), (16,),
                                              (16, 32), (32, 16)], 0.5, (32, 8), (208, 8)),
    "mlp_sgd_steps": (mlp_sgd_steps, [(8, 16), (16, 32), (32,), (32, 4), (8, 4)], 1.0, (2, 8), None),
}
# Programs with control flow: forward only where the program already differentiates inside.
FORWARD_ONLY = ("mlp_sgd_steps",)
SCALAR_LOSS = ("attention", "layer_norm", "conv_net", "rnn", "transformer_block")
# XLA:CPU compiles the transformer block's gradient in about 8 s: nightly only.
NIGHTLY = ("transformer_block/backward",)


def _inputs(shapes, scale):
    return lambda rng: [(random_array(rng, F32, s, specials=0, low=-1, high=1) * np.float32(scale)).astype(F32)
                        for s in shapes]


# Forward programs that route their matmuls through ``tap``: their ABS_REL mode carries the first-
# order matmul sensitivity, so a matmul-precision allowance (TF32 on NVIDIA GPUs) can bound them.
MATMUL_SENSITIVITY = ("transformer_block",)


def cases():
    for name, (fn, shapes, scale, fwd_tol, bwd_tol) in PROGRAMS.items():
        tapped = name in MATMUL_SENSITIVITY
        yield Case(id=f"programs/{name}/forward/float32", fn=fn, inputs=_inputs(shapes, scale),
                   modes=C.abs_rel(*fwd_tol, source="measured", dot_sensitivity=tapped),
                   dot_bound=_matmul_sensitivity(fn) if tapped else None,
                   primitives=("dot_general",), tags=("program",))
        if name in FORWARD_ONLY:
            continue
        grad = jax.grad(_scalar_loss(fn) if name in SCALAR_LOSS else fn,
                        argnums=tuple(range(len(shapes) - (1 if name == "mlp" else 0))))
        yield Case(id=f"programs/{name}/backward/float32", fn=grad, inputs=_inputs(shapes, scale),
                   modes=C.abs_rel(*bwd_tol, source="measured"), primitives=("dot_general",), tags=("program",),
                   profile="nightly" if f"{name}/backward" in NIGHTLY else "quick")
