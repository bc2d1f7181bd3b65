"""State: refs (jax.new_ref / empty_ref), get/swap/addupdate through indexers, freeze, free_ref,
run_state, the state family's broadcast_to and accum_grad_in_ref, and differentiation through a
ref. Every program's value is defined bit for bit (integer arithmetic, or float data movement and
single correctly rounded operations), so every output is EXACT.

``pin``/``unpin`` lower to the custom calls "Pin"/"Unpin", which XLA:CPU does not implement
("NOT_FOUND: No registered implementation for untyped custom call to Pin for Host"): their case runs
in the reference and is backend-unsupported on XLA:CPU with that message (a backend with the custom
calls is checked EXACT). Not here: ``with_memory_space_constraint`` only applies to pallas_call
operands (a Pallas case in pallas.py).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from spec import compliance as C

from ..case import Case, applicable_if, random_array

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)
_DEF = C.exact("definition")
_IEEE = C.exact("ieee754")


def _case(name, fn, inputs, primitives, modes=_DEF, **kw):
    return Case(id=f"state/{name}", fn=fn, inputs=inputs, modes=modes, primitives=tuple(primitives), **kw)


def _ref_api():
    import jax.ref as ref     # freeze, empty_ref, free_ref, addupdate: both ends of the JAX range
    return ref


def _scatter_add(x, idx, v):
    # addupdate with duplicate indices accumulates every one (integers: any order, one sum).
    ref = _ref_api()
    r = jax.new_ref(x)
    ref.addupdate(r, (idx,), v)
    old = ref.swap(r, (slice(0, 2),), v[:2] * 3)   # swap returns the previous rows
    return ref.freeze(r), old


def _rows_in_loop(x):
    # A ref carried through a loop and a jit-ed call: rows rewritten in place, in program order.
    r = jax.new_ref(x)

    def body(i, c):
        r[i] = -r[i + 1] + c
        return c * 2.0

    lax.fori_loop(0, x.shape[0] - 1, body, jnp.float32(0.5))
    jax.jit(lambda ref: ref.__setitem__(-1, ref[0] * 4.0))(r)
    return r[...]


def _ref_in_scan_and_cond(xs, y):
    # A ref closed over by a scan body and by the branches of a cond: each step writes one row
    # (chosen by a data-dependent cond) and reads the running total back.
    acc = jax.new_ref(jnp.zeros_like(xs))
    total = jax.new_ref(jnp.zeros_like(y))

    def step(c, xi):
        i, x = xi
        lax.cond(x[0] % 2 == 0, lambda: acc.__setitem__(i, x ^ c), lambda: acc.__setitem__(i, x - c))
        total[...] += x
        return c + total[...], None
    c, _ = lax.scan(step, y, (jnp.arange(xs.shape[0]), xs))
    return acc[...], total[...], c


def _vmapped_ref_program(xs):
    # vmap of a program that allocates and updates a ref: the ref is batched.
    def f(x):
        r = jax.new_ref(x)
        r[1:] = r[:-1] * 3
        r[0] = r[0] ^ x[-1]
        return r[...]
    return jax.vmap(f)(xs)


def _empty_ref(x):
    # Every element is written before it is read: the value never depends on fresh memory.
    ref = _ref_api()
    r = ref.empty_ref(jax.ShapeDtypeStruct(x.shape, x.dtype))
    r[...] = x * 3
    r[1:3] = r[0:2] ^ x[2:4]
    out = r[...]
    ref.free_ref(r)
    return out


def _run_state(a, b):
    from jax._src.state.discharge import run_state   # what Pallas' discharge and scan use

    def body(refs):
        a_ref, b_ref = refs
        b_ref[...] = a_ref[...] * 2 + b_ref[...]
        a_ref[1:4] = b_ref[0:3] ^ a_ref[2:5]
    return run_state(body)((a, b))


def _broadcast_to(x):
    from jax._src.state.primitives import broadcast_to   # Triton-style equal-rank broadcast
    return broadcast_to(x[:1], (4, 6)) - x


def _accum_grad_in_ref(x):
    from jax._src.core import accum_grad_in_ref
    return accum_grad_in_ref(x * 3) ^ x


def _pin_unpin(x):
    # pin/unpin place a value (memory space None, or "hbm") and return it unchanged.
    from jax._src.state.primitives import pin, unpin
    return unpin(pin(x * 3)) ^ unpin(pin(x, to="hbm"))


def _grad_through_ref(x):
    # The gradient of a program that accumulates into a ref: AD turns the ref's reads and writes
    # into addupdate / freeze of its tangent ref.
    def loss(v):
        r = jax.new_ref(jnp.zeros_like(v))
        r[...] += v * 2.0
        r[...] += v * 2.0
        return jnp.sum(r[...] * r[...])
    return jax.grad(loss)(x)


def _hijax_cells(x):
    # JAX 0.10's hijax Box and Log (jax/_src/hijax.py), created and used inside the program
    from jax._src import hijax
    box = hijax.new_box()
    hijax.box_set(box, (x * 3, x))
    a, b = hijax.box_get(box)
    hijax.box_set(box, a ^ b)
    log = hijax.new_log()
    hijax.log_extend(log, {"seen": [a]})
    return hijax.box_get(box) + 1


def _has_hijax_cells() -> bool:
    from jax._src import hijax
    return hasattr(hijax, "new_box")


def _ints(*shapes):
    return lambda rng: [random_array(rng, I32, s) for s in shapes]


def cases():
    yield _case("scatter_add_duplicates_swap_freeze/int32", _scatter_add,
                lambda rng: [random_array(rng, I32, (6, 3)), rng.integers(-6, 6, size=(9,)).astype(np.int32),
                             random_array(rng, I32, (9, 3))],
                ["new_ref", "addupdate", "swap", "freeze"])
    yield _case("rows_in_loop_and_call/float32", _rows_in_loop,
                lambda rng: [random_array(rng, F32, (6, 5), specials=0)], ["new_ref", "get", "swap"], _IEEE)
    yield _case("ref_in_scan_and_cond/int32", _ref_in_scan_and_cond, _ints((5, 4), (4,)),
                ["new_ref", "scan", "cond", "get", "swap"])
    yield _case("vmapped_ref_program/int32", _vmapped_ref_program, _ints((3, 6)), ["new_ref", "swap"])
    yield _case("empty_ref_free_ref/int32", _empty_ref, _ints((6,)), ["empty_ref", "free_ref"])
    yield _case("run_state/int32", _run_state, _ints((6,), (6,)), ["run_state"])
    yield _case("broadcast_to/int32", _broadcast_to, _ints((4, 6)), ["broadcast_to"])
    yield _case("accum_grad_in_ref/int32", _accum_grad_in_ref, _ints((7,)), ["accum_grad_in_ref"])
    yield _case("pin_unpin/int32", _pin_unpin, _ints((7,)), ["pin", "unpin"])
    yield _case("hijax_box_and_log/int32", _hijax_cells, _ints((7,)),
                ["new_box", "box_set", "box_get", "new_log", "log_extend"],
                not_applicable=applicable_if(_has_hijax_cells(), "JAX 0.11 removed the hijax Box "
                                             "and Log primitives (jax/_src/hijax.py)"))
    # r = 4v and the gradient 32v: every product and sum is a power of two times v, exact in f32
    # (inputs in [-8, 8] without subnormals), so no contraction or order can change a bit.
    yield _case("grad_through_ref/float32", _grad_through_ref,
                lambda rng: [random_array(rng, F32, (7,), specials=0, low=-8, high=8)],
                ["new_ref", "addupdate", "freeze"], _IEEE)
