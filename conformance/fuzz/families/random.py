"""The ``random`` family: PRNG keys from key data, split/fold_in chains, samplers, and lax
operations on what they draw; ``lax.rng_bit_generator`` with an explicit algorithm (XLA's
``RNG_DEFAULT`` is the platform's choice, so it is not generated).

Bits are bit-exact by definition; samplers that go through transcendental functions (normal:
erf_inv; exponential: log1p; gumbel: log) are judged by those functions' budgets, one equation at a
time. ``jax_threefry_partitionable`` is drawn per program (both modes define the bits).
"""
from __future__ import annotations

from ..choices import Choices
from ..ir import KEY_DATA, Program, Type
from .lax import FLOATS, LaxBuilder, body, outputs

# impl -> (key data words, the dtype name the IR gives its keys)
IMPLS = {"threefry2x32": 2, "rbg": 4, "unsafe_rbg": 4}
SAMPLERS = ("bits", "uniform", "randint", "bernoulli", "normal", "exponential", "gumbel", "permutation",
            "categorical", "truncated_normal")


def _key_type(impl: str, shape=()) -> Type:
    return Type(f"key<{impl}>", tuple(shape))


def _new_key(b: LaxBuilder, impl: str) -> int:
    data = b.input(Type("uint32", (IMPLS[impl],)), KEY_DATA)
    return b.emit1("wrap_key", [data], _key_type(impl), impl=impl)


def _sample(b: LaxBuilder, key: int) -> None:
    fn = b.c.choice(SAMPLERS)
    shape = b.shape(3)
    if fn == "bits":
        d = b.c.choice(("uint32", "uint8", "uint16") + (("uint64",) if b.x64 else ()))
        b.emit1("random", [key], Type(d, shape), fn=fn, shape=shape, dtype=d)
    elif fn in ("uniform", "normal", "exponential", "gumbel", "truncated_normal"):
        d = b.c.choice(tuple(f for f in FLOATS if b.ok_dtype(f)))
        lo, hi = b.c.choice(((0.0, 1.0), (-2.0, 3.0), (-1.0, 1.0), (0.5, 0.75)))
        b.emit1("random", [key], Type(d, shape), fn=fn, shape=shape, dtype=d, lo=lo, hi=hi)
    elif fn == "randint":
        d = b.c.choice(("int32", "uint8", "int8"))
        lo, hi = b.c.choice(((0, 10), (-7, 1000), (0, 256), (-128, 127), (5, 6)))
        if d == "uint8":
            lo, hi = max(lo, 0), min(max(hi, 1), 256)
        if d == "int8":
            lo, hi = max(lo, -128), min(hi, 128)
        if hi <= lo:
            hi = lo + 1
        b.emit1("random", [key], Type(d, shape), fn=fn, shape=shape, dtype=d, lo=lo, hi=hi)
    elif fn == "bernoulli":
        b.emit1("random", [key], Type("bool", shape), fn=fn, shape=shape, p=b.c.choice((0.5, 0.3, 0.0, 1.0, 0.9)))
    elif fn == "permutation":
        x = b.value(lambda t: t.rank >= 1, min_rank=1)
        if x is None:
            return
        t = b.types[x]
        b.emit1("random", [key, x], t, fn=fn, shape=(), axis=b.c.below(t.rank), independent=b.c.below(2) == 1)
    elif fn == "categorical":
        x = b.value(lambda t: t.rank >= 1 and t.dtype in FLOATS and t.shape[-1] >= 1, dtypes=b.float_dtype, min_rank=1)
        if x is None:
            return
        t = b.types[x]
        axis = t.rank - 1
        b.emit1("random", [key, x], Type("int32", t.shape[:axis]), fn=fn, shape=(), axis=-1)


def op_random(b: LaxBuilder, keys: list[int]) -> None:
    kind = b.c.weighted([("sample", 6), ("split", 2), ("fold_in", 2), ("key_data", 1), ("rbg", 1)])
    key = b.c.choice(keys)
    kt = b.types[key]
    if kind == "sample":
        _sample(b, key)
    elif kind == "split":
        n = b.c.between(1, 4)
        ks = b.emit1("split", [key], kt.with_shape((n,)), n=n)
        for j in range(n):
            if b.c.below(2) == 0:
                keys.append(b.emit1("slice", [ks], kt.with_shape((1,)), start=(j,), limit=(j + 1,), strides=(1,)))
                keys[-1] = b.emit1("reshape", [keys[-1]], kt, shape=())
    elif kind == "fold_in":
        d = b.index_input((), 0, 2 ** 31 - 1, b.c.choice(("uint32", "int32")))
        keys.append(b.emit1("fold_in", [key, d], kt))
    elif kind == "key_data":
        b.emit1("key_data", [key], Type("uint32", (IMPLS[kt.dtype[4:-1]],)))
    else:
        data = b.input(Type("uint32", (4,)), KEY_DATA)
        shape = b.shape(3)
        d = b.c.choice(("uint32", "uint8", "uint64" if b.x64 else "uint16"))
        b.emit("rng_bit_generator", [data], [Type("uint32", (4,)), Type(d, shape)], shape=shape, dtype=d,
               algorithm=b.c.choice(("RNG_THREE_FRY", "RNG_PHILOX")))


def generate(c: Choices) -> Program:
    x64 = c.chance(15)
    partitionable = c.below(2) == 0
    b = LaxBuilder(c, x64)
    impl = c.weighted([("threefry2x32", 4), ("rbg", 1), ("unsafe_rbg", 1)])
    keys = [_new_key(b, impl)]
    for _ in range(c.between(1, 6)):
        op_random(b, keys)
    body(b, c.between(0, 4))
    outs = [o for o in outputs(b) if not b.types[o].is_key] or [b.emit1("key_data", [keys[-1]],
                                                                       Type("uint32", (IMPLS[impl],)))]
    return Program("random", tuple(b.inputs), b.block(outs), x64=x64,
                   config=(("jax_threefry_partitionable", partitionable),))
