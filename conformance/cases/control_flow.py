"""cond, while/fori_loop, scan, custom_jvp/vjp, remat: the loop bodies are computed exactly as
written. Float bodies here avoid mul-feeding-add patterns on purpose: FMA contraction inside a loop
body is a backend allowance the equation replay does not reach (it replays top-level equations)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from spec import compliance as C

from ._elementwise import F32, I32, U8
from ._programs import program_cases


def _fori_int(x):
    return lax.fori_loop(0, 7, lambda i, c: c * 3 + i ^ (c >> 2), x)


def _while_collatz(x):
    def cond(s):
        return (s[0] != 1) & (s[1] < 50)

    def body(s):
        v, n = s
        return jnp.where(v % 2 == 0, v // 2, 3 * v + 1), n + 1
    return jax.vmap(lambda v: lax.while_loop(cond, body, (v, jnp.int32(0))))(jnp.abs(x) % 1000 + 1)


def _scan_cumulative(x):
    return lax.scan(lambda c, v: (jnp.maximum(c, v) + v, c - v), jnp.zeros(x.shape[1:], x.dtype), x)


def _cond(p, x):
    return lax.cond(p[0] > 0, lambda x: x * 2, lambda x: x - 1, x)


def _switch(i, x):
    return lax.switch(i[0], [lambda x: x + 1, lambda x: -x, lambda x: x * x], x)


@jax.custom_jvp
def _clip_grad(x):
    return jnp.tanh(x)


_clip_grad.defjvp(lambda p, t: (_clip_grad(p[0]), t[0] * 0.5))   # a tangent rule unlike tanh's


def cases():
    P = program_cases
    fam = "control_flow"
    yield from P(fam, "fori_loop_int", _fori_int, [(3, 4)], (I32, U8), primitives=["while"])
    yield from P(fam, "while_collatz", _while_collatz, [(16,)], (I32,), primitives=["while"], specials=0)
    yield from P(fam, "scan_max_add", _scan_cumulative, [(6, 5)], (F32, I32), primitives=["scan"])
    yield from P(fam, "cond", _cond, [(3, 4)], (F32, I32), int_inputs={0: (-1, 1, (1,))}, primitives=["cond"])
    yield from P(fam, "switch_clamped_index", _switch, [(5,)], (F32, I32), int_inputs={0: (-2, 4, (1,))},
                 primitives=["cond"])
    yield from P(fam, "custom_jvp_grad", jax.grad(lambda x: jnp.sum(_clip_grad(x) * 3)), [(7,)], (F32,),
                 primitives=["custom_jvp_call", "mul"], specials=0)
    yield from P(fam, "remat_grad", jax.grad(lambda x: jnp.sum(jax.checkpoint(lambda y: jnp.sin(y) * y)(x))),
                 [(6,)], (F32,), primitives=["remat", "sin", "cos"], specials=0,
                 modes=C.ulp(8, "xla-accuracy-budget"))
