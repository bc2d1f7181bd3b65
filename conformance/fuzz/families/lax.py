"""The ``lax`` family: straight-line programs over every lax operation the reference supports.

Each builder below appends one operation (or a short idiom) to a :class:`LaxBuilder`, picking
operands from the values computed so far (the last one half the time, so chains form) or making
new inputs. Everything is well typed and defined by construction:

- index operands of gather/scatter/dynamic_slice are inputs drawn in a range: within bounds for
  ``promise_in_bounds`` (JAX leaves out-of-bounds indices undefined there), anywhere (clamped,
  filled or dropped: defined) for the other modes; scatter indices often repeat;
- sort keys, top_k operands and bitcast sources whose bits are not defined (a float computed by
  arithmetic: the sign and payload of a NaN it produces are the implementation's) are not used;
- sorts of several operands are stable (the order of equal keys is otherwise unspecified);
- float products of many terms (reduce_prod, cumprod, scatter_mul) are not generated: their
  overflow and underflow depend on the order, which XLA leaves unspecified;
- select predicates are booleans (an out-of-range integer predicate is undefined);
- an integer divisor that is 0, or -1 under INT_MIN, becomes 1 (the quotient and remainder are
  implementation-defined there: lax.div and lax.rem).

Transformations of the whole function: ``vmap`` (a leading batch dimension on every input) and
``grad`` (the vector-Jacobian product of the first output, for programs of differentiable
operations with a float first output).
"""
from __future__ import annotations

import math

from ..build import DIMS, MAX_ELEMENTS, Builder, draw_shape
from ..choices import Choices
from ..ir import GRAD, PLAIN, VMAP, Program, Type

FLOATS = ("float32", "bfloat16", "float16", "float64")
SIGNED = ("int32", "int8", "int16", "int64")
UNSIGNED = ("uint8", "uint32", "uint16", "uint64")
INTS = SIGNED + UNSIGNED
BOOL = "bool"
# Conversion targets only (computed with by moving them around and converting them back).
NARROW_FLOATS = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz",
                 "float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "float4_e2m1fn")
NARROW = NARROW_FLOATS + ("int4", "uint4", "int2", "uint2")
WIDE = ("float64", "int64", "uint64", "complex128")

FLOAT_UNARY = ("neg", "abs", "sign", "floor", "ceil", "sqrt", "rsqrt", "cbrt", "exp", "exp2", "expm1", "log",
               "log1p", "tanh", "logistic", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
               "acosh", "atanh", "erf", "erfc", "erf_inv", "lgamma", "digamma", "square", "is_finite")
INT_UNARY = ("neg", "sign", "bitwise_not", "population_count", "clz", "square")
FLOAT_BINARY = ("add", "sub", "mul", "div", "max", "min", "pow", "atan2", "rem", "nextafter")
INT_BINARY = ("add", "sub", "mul", "div", "rem", "max", "min", "bitwise_and", "bitwise_or", "bitwise_xor",
              "shift_left", "shift_right_logical", "shift_right_arithmetic")
BOOL_BINARY = ("bitwise_and", "bitwise_or", "bitwise_xor", "max", "min")
# The arithmetic most programs are made of: first and most often.
FLOAT_BINARY_WEIGHTS = [(f, {"add": 4, "mul": 4, "sub": 3, "div": 2, "max": 2, "min": 2}.get(f, 1)) for f in FLOAT_BINARY]
# Float operations defined bit for bit (IEEE-exact or data movement): loop bodies use only these.
EXACT_FLOAT_UNARY = [(f, 1) for f in ("neg", "abs", "sign", "floor", "ceil", "sqrt", "square", "is_finite")]
EXACT_FLOAT_BINARY = ("add", "sub", "mul", "div", "max", "min", "rem", "nextafter")
# The functions models are mostly made of, more often than the special functions.
FLOAT_UNARY_WEIGHTS = [(f, {"exp": 4, "log": 3, "tanh": 3, "logistic": 2, "sqrt": 2, "rsqrt": 2, "neg": 2,
                            "abs": 2}.get(f, 1)) for f in FLOAT_UNARY]
INT_BINARY_WEIGHTS = [(f, {"add": 3, "mul": 3, "sub": 2}.get(f, 1)) for f in INT_BINARY]
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
# Operations whose results move or select their operands' bits without computing new ones.
MOVES = ("broadcast_in_dim", "reshape", "transpose", "rev", "slice", "concatenate", "dynamic_slice",
         "dynamic_update_slice", "gather", "pad", "select", "sort", "top_k", "iota", "constant")
# Differentiable operations (``grad`` is generated only for programs made of these).
DIFFERENTIABLE_UNARY = ("neg", "abs", "sqrt", "rsqrt", "cbrt", "exp", "exp2", "expm1", "log", "log1p", "tanh",
                        "logistic", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
                        "atanh", "erf", "erfc", "erf_inv", "lgamma", "square", "floor", "ceil", "sign")
DIFFERENTIABLE = ("broadcast_in_dim", "reshape", "transpose", "rev", "slice", "concatenate", "dynamic_slice",
                  "dynamic_update_slice", "pad", "select", "dot_general", "integer_pow", "scalar_binary",
                  "constant", "round", "reduce_precision", "cumulative", "reduce_window", "conv", "gather")


def is_float(d: str) -> bool:
    return d in FLOATS


def is_int(d: str) -> bool:
    return d in INTS


def is_arith(d: str) -> bool:
    return d in FLOATS or d in INTS or d == BOOL


class LaxBuilder(Builder):
    """A builder that knows the program's dtypes (64-bit ones only under x64) and which values'
    bits are defined (see the module docstring)."""

    def __init__(self, c: Choices, x64: bool, params_=None, can_add_inputs=True, defined=None,
                 exact_only: bool = False):
        super().__init__(c, params_, can_add_inputs)
        self.x64 = x64
        # Loop bodies use only operations defined bit for bit: the oracle judges a loop at its
        # boundary, and XLA:CPU may compute an inexact operation (atan) inside a loop other than it
        # does alone (1 ulp, within its budget), which nothing outside the loop can tell apart.
        self.exact_only = exact_only
        self.defined: set[int] = set(self.params if defined is None else defined)

    def ok_dtype(self, d: str) -> bool:
        return self.x64 or d not in WIDE

    def input(self, type_, kind="data", lo=0, hi=0, specials=None):
        h = super().input(type_, kind, lo, hi, specials)
        if h is not None:
            self.defined.add(h)
        return h

    def emit(self, name, args, outs, blocks=(), **p):
        hs = super().emit(name, args, outs, blocks, **p)
        movement = name in MOVES or (name == "scatter" and p.get("fn") == "set")
        for h, t in zip(hs, outs):
            no_nan = not is_float(t.dtype) and t.dtype not in NARROW_FLOATS
            if no_nan or (movement and all(a in self.defined for a in args)):
                self.defined.add(h)
        return hs

    # -- dtype and shape draws ---------------------------------------------------------------
    def float_dtype(self) -> str:
        return self.c.weighted([(d, w) for d, w in (("float32", 8), ("bfloat16", 2), ("float16", 2), ("float64", 2))
                                if self.ok_dtype(d)])

    def int_dtype(self) -> str:
        return self.c.weighted([(d, w) for d, w in (("int32", 4), ("uint8", 1), ("int8", 1), ("uint32", 1),
                                                    ("int16", 1), ("uint16", 1), ("int64", 1), ("uint64", 1))
                                if self.ok_dtype(d)])

    def arith_dtype(self) -> str:
        kind = self.c.weighted([("float", 6), ("int", 3), ("bool", 1)])
        return self.float_dtype() if kind == "float" else self.int_dtype() if kind == "int" else BOOL

    def shape(self, max_rank=5) -> tuple[int, ...]:
        return draw_shape(self.c, max_rank)

    def value(self, ok, dtype: str | None = None, shape=None, dtypes=None, min_rank: int = 0) -> int | None:
        """An existing value satisfying ``ok``, or a new input: of ``dtype`` (else one drawn by
        ``dtypes()``, else any arithmetic dtype) and ``shape`` (else a drawn shape of rank >=
        ``min_rank``); None if that input would not satisfy ``ok`` either."""
        def fresh():
            d = dtype or (dtypes or self.arith_dtype)()
            s = tuple(shape) if shape is not None else self.shape()
            if len(s) < min_rank:
                s = s + (2,) * (min_rank - len(s))
            return Type(d, s)
        h = self.pick(lambda t: not t.is_key and ok(t), fresh)
        return h if h is not None and ok(self.types[h]) else None

    def counter_type(self) -> Type:
        """The type of a fori_loop counter (int64 under jax_enable_x64, whatever the bounds' type)."""
        return Type("int64" if self.x64 else "int32", ())

    def numeric_dtype(self) -> str:
        return self.float_dtype() if self.c.below(3) else self.int_dtype()


def _fits(shape) -> bool:
    return math.prod(shape) <= MAX_ELEMENTS


# ============================================================================================
# Builders: each appends one operation (or an idiom), or nothing where it does not apply.
# ============================================================================================
def op_unary(b: LaxBuilder) -> None:
    x = b.value(lambda t: is_arith(t.dtype))
    if x is None:
        return
    t = b.types[x]
    if is_float(t.dtype):
        kind = b.c.weighted([("fn", 12), ("round", 1), ("integer_pow", 2), ("reduce_precision", 1)])
        if kind == "fn":
            fn = b.c.weighted(EXACT_FLOAT_UNARY if b.exact_only else FLOAT_UNARY_WEIGHTS)
            b.emit1("unary", [x], t.with_dtype("bool") if fn == "is_finite" else t, fn=fn)
        elif kind == "round":
            b.emit1("round", [x], t, method=b.c.choice(("AWAY_FROM_ZERO", "TO_NEAREST_EVEN")))
        elif kind == "integer_pow":
            b.emit1("integer_pow", [x], t, y=b.c.choice((2, 3, -1, 0, 1, -2, 5, 4, -3)))
        else:
            exp_bits = {"float32": 8, "bfloat16": 8, "float16": 5, "float64": 11}[t.dtype]
            man_bits = {"float32": 23, "bfloat16": 7, "float16": 10, "float64": 52}[t.dtype]
            b.emit1("reduce_precision", [x], t, exponent_bits=b.c.between(1, exp_bits),
                    mantissa_bits=b.c.between(0, man_bits))
    elif is_int(t.dtype):
        if b.c.below(4) == 0:
            b.emit1("integer_pow", [x], t, y=b.c.choice((2, 3, 0, 1, 5)))
        else:
            fn = b.c.choice(INT_UNARY + (("abs",) if t.dtype in SIGNED else ()))
            b.emit1("unary", [x], t, fn=fn)
    else:
        b.emit1("unary", [x], t, fn="bitwise_not")


def _second(b: LaxBuilder, x: int) -> int | None:
    """A second operand of ``x``'s type: the same type, or a lower-rank value broadcast to it."""
    t = b.types[x]
    if t.rank and b.c.chance(20):
        keep = tuple(d for d in range(t.rank) if b.c.below(2) == 0)
        small = Type(t.dtype, tuple(t.shape[d] for d in keep))
        y = b.pick(lambda u: u == small, lambda: small)
        if y is None:
            return None
        return b.emit1("broadcast_in_dim", [y], t, shape=t.shape, dims=keep)
    return b.same_type(x)


def op_binary(b: LaxBuilder) -> None:
    x = b.value(lambda t: is_arith(t.dtype))
    if x is None:
        return
    t = b.types[x]
    y = _second(b, x)
    if y is None:
        return
    if is_float(t.dtype):
        fn = b.c.weighted([(f, w) for f, w in FLOAT_BINARY_WEIGHTS if not b.exact_only or f in EXACT_FLOAT_BINARY])
    elif is_int(t.dtype):
        fn = b.c.weighted(INT_BINARY_WEIGHTS)
    else:
        fn = b.c.choice(BOOL_BINARY)
    args = [x, y] if b.c.below(2) == 0 else [y, x]
    if fn in ("div", "rem") and is_int(t.dtype):
        # integer division by zero and INT_MIN / -1 give an implementation-defined value (lax.div,
        # lax.rem docstrings): such divisors become 1
        args[1] = b.emit1("safe_divisor", args, t, signed=t.dtype in SIGNED)
    b.emit1("binary", args, t, fn=fn)


def op_compare_select(b: LaxBuilder) -> None:
    x = b.value(lambda t: is_arith(t.dtype))
    if x is None:
        return
    t = b.types[x]
    kind = b.c.weighted([("select", 3), ("compare", 2), ("clamp", 1)])
    if kind == "clamp":
        if t.dtype == BOOL:
            return
        scalar = Type(t.dtype, ())
        lo = b.pick(lambda u: u == scalar, lambda: scalar) if b.c.below(2) else b.same_type(x)
        if lo is None:
            return
        # (lo and hi are both scalars or both of x's shape)
        hi = b.same_type(x) if b.types[lo].rank else b.pick(lambda u: u == scalar, lambda: scalar)
        if hi is None or b.types[hi].shape != b.types[lo].shape:
            return
        b.emit1("clamp", [lo, x, hi], t)
        return
    y = _second(b, x)
    if y is None:
        return
    p = b.emit1("binary", [x, y], t.with_dtype(BOOL), fn=b.c.choice(COMPARE)) if b.c.below(3) else None
    if p is None:
        p = b.value(lambda u: u.dtype == BOOL and u.shape == t.shape, BOOL, t.shape)
        if p is None:
            return
    if kind == "compare":
        return
    # select between two values of one type, of the predicate's shape
    a = b.pick(lambda u: u.shape == t.shape and is_arith(u.dtype) and not u.is_key, lambda: t)
    if a is None:
        return
    c2 = b.same_type(a)
    if c2 is None:
        return
    b.emit1("select", [p, a, c2], b.types[a])


def op_idiom(b: LaxBuilder) -> None:
    """Patterns a compiler's algebraic simplifier rewrites (or must not): identities, round trips,
    cancellations."""
    x = b.value(lambda t: is_arith(t.dtype))
    if x is None:
        return
    t = b.types[x]
    fl = is_float(t.dtype)
    kinds = [("mul_one", 2), ("add_zero", 2), ("neg_neg", 1), ("transpose_back", 2), ("reshape_back", 2),
             ("convert_back", 3), ("slice_of_concat", 1), ("pad_then_slice", 1), ("select_same", 1),
             ("self_binary", 2), ("broadcast_reduce", 2)]
    if fl:
        kinds += [("sqrt_square", 2), ("mul_div", 1), ("mul_zero", 1)] + ([] if b.exact_only else [("log_exp", 2)])
    kind = b.c.weighted(kinds)
    if kind == "mul_one" and t.dtype != BOOL:
        fn = b.c.choice(("mul", "div"))
        b.emit1("scalar_binary", [x], t, fn=fn, value=1.0 if fl else 1, dtype=t.dtype,
                side=0 if fn == "div" else b.c.below(2))
    elif kind == "add_zero" and t.dtype != BOOL:
        zero = b.c.choice((0.0, -0.0)) if fl else 0
        b.emit1("scalar_binary", [x], t, fn=b.c.choice(("add", "sub")), value=zero, dtype=t.dtype, side=0)
    elif kind == "neg_neg" and t.dtype not in UNSIGNED and t.dtype != BOOL:
        fn = b.c.choice(("neg", "abs")) if t.dtype not in UNSIGNED else "neg"
        y = b.emit1("unary", [x], t, fn=fn)
        b.emit1("unary", [y], t, fn=fn)
    elif kind == "transpose_back" and t.rank >= 2:
        perm = _perm(b.c, t.rank)
        y = b.emit1("transpose", [x], t.with_shape([t.shape[p] for p in perm]), perm=perm)
        inv = tuple(sorted(range(t.rank), key=lambda i: perm[i]))
        b.emit1("transpose", [y], t, perm=inv)
    elif kind == "reshape_back" and t.rank >= 1:
        flat = t.with_shape((t.size,))
        y = b.emit1("reshape", [x], flat, shape=flat.shape)
        b.emit1("reshape", [y], t, shape=t.shape)
    elif kind == "convert_back":
        via = b.c.choice(tuple(d for d in FLOATS + INTS + (BOOL,) + NARROW if b.ok_dtype(d) and d != t.dtype))
        y = b.emit1("convert", [x], t.with_dtype(via), dtype=via)
        b.emit1("convert", [y], t, dtype=t.dtype)
    elif kind == "slice_of_concat" and t.rank >= 1:
        dim = b.c.below(t.rank)
        other = b.value(lambda u: u.dtype == t.dtype and u.rank == t.rank and all(
            u.shape[d] == t.shape[d] for d in range(t.rank) if d != dim), t.dtype,
            tuple(t.shape[d] if d != dim else b.c.choice(DIMS[:6]) for d in range(t.rank)))
        if other is None:
            return
        o = b.types[other]
        shape = list(t.shape)
        shape[dim] += o.shape[dim]
        if not _fits(shape):
            return
        first = b.c.below(2) == 0
        y = b.emit1("concatenate", [x, other] if first else [other, x], t.with_shape(shape), dim=dim)
        start = [0] * t.rank
        if not first:
            start[dim] = o.shape[dim]
        limit = [s + d for s, d in zip(start, t.shape)]
        b.emit1("slice", [y], t, start=tuple(start), limit=tuple(limit), strides=(1,) * t.rank)
    elif kind == "pad_then_slice" and t.rank >= 1:
        cfg = tuple((b.c.below(3), b.c.below(3), 0) for _ in range(t.rank))
        shape = tuple(lo + hi + d for (lo, hi, _), d in zip(cfg, t.shape))
        if not _fits(shape):
            return
        y = b.emit1("pad", [x], t.with_shape(shape), value=_pad_value(b, t.dtype), dtype=t.dtype, config=cfg)
        b.emit1("slice", [y], t, start=tuple(c[0] for c in cfg), limit=tuple(c[0] + d for c, d in zip(cfg, t.shape)),
                strides=(1,) * t.rank)
    elif kind == "select_same":
        p = b.value(lambda u: u.dtype == BOOL and u.shape == t.shape, BOOL, t.shape)
        if p is not None:
            b.emit1("select", [p, x, x], t)
    elif kind == "self_binary":
        fns = (("sub", "div", "max", "min", "add", "mul") if fl else
               ("sub", "max", "min", "bitwise_xor", "bitwise_and") if is_int(t.dtype) else ("bitwise_xor", "bitwise_and"))
        b.emit1("binary", [x, x], t, fn=b.c.choice(fns))
    elif kind == "broadcast_reduce" and t.dtype != BOOL and t.rank < 5:
        n = b.c.choice((3, 2, 1, 7, 0))
        if not _fits(t.shape + (n,)):
            return
        at = b.c.below(t.rank + 1)
        shape = t.shape[:at] + (n,) + t.shape[at:]
        y = b.emit1("broadcast_in_dim", [x], t.with_shape(shape), shape=shape,
                    dims=tuple(d if d < at else d + 1 for d in range(t.rank)))
        b.emit1("reduce", [y], t, fn=b.c.choice(("sum", "max", "min")), axes=(at,))
    elif kind == "log_exp":
        y = b.emit1("unary", [x], t, fn="exp")
        b.emit1("unary", [y], t, fn="log")
    elif kind == "sqrt_square":
        y = b.emit1("binary", [x, x], t, fn="mul")
        b.emit1("unary", [y], t, fn="sqrt")
    elif kind == "mul_div":
        c2 = b.c.choice((2.0, 3.0, 0.5, 10.0))
        y = b.emit1("scalar_binary", [x], t, fn="mul", value=c2, dtype=t.dtype, side=0)
        b.emit1("scalar_binary", [y], t, fn="div", value=c2, dtype=t.dtype, side=0)
    elif kind == "mul_zero":
        b.emit1("scalar_binary", [x], t, fn="mul", value=b.c.choice((0.0, -0.0)), dtype=t.dtype,
                side=b.c.below(2))


def _perm(c: Choices, n: int) -> tuple[int, ...]:
    rest = list(range(n))
    out = []
    while rest:
        out.append(rest.pop(c.below(len(rest))))
    if out == list(range(n)) and n > 1:
        out = out[1:] + out[:1]
    return tuple(out)


def _pad_value(b: LaxBuilder, dtype: str):
    if is_float(dtype):
        return b.c.choice((0.0, 1.0, -0.0, float("inf"), -2.5, float("nan")))
    if dtype == BOOL:
        return b.c.choice((False, True))
    return b.c.choice((0, 1, -1 if dtype in SIGNED else 255, 7))


def op_convert(b: LaxBuilder) -> None:
    x = b.value(lambda t: True)
    if x is None:
        return
    t = b.types[x]
    if b.c.below(6) == 0:
        # bitcast between types of one width, from values whose bits are defined
        widths = {8: ("int8", "uint8", "float8_e4m3fn", "float8_e5m2"), 16: ("int16", "uint16", "float16", "bfloat16"),
                  32: ("int32", "uint32", "float32"), 64: ("int64", "uint64", "float64")}
        from ..ops import numpy_dtype
        w = numpy_dtype(t.dtype).itemsize * 8
        if x not in b.defined or t.dtype in (BOOL,) + NARROW[8:] or w not in widths:
            return
        targets = tuple(d for d in widths[w] if d != t.dtype and b.ok_dtype(d))
        if targets:
            to = b.c.choice(targets)
            b.emit1("bitcast", [x], t.with_dtype(to), dtype=to)
        return
    targets = tuple(d for d in FLOATS + INTS + (BOOL,) + NARROW if b.ok_dtype(d) and d != t.dtype)
    to = b.c.choice(targets)
    b.emit1("convert", [x], t.with_dtype(to), dtype=to)


def op_structure(b: LaxBuilder) -> None:
    x = b.value(lambda t: True)
    if x is None:
        return
    t = b.types[x]
    kind = b.c.weighted([("reshape", 3), ("transpose", 3), ("broadcast", 3), ("slice", 3), ("pad", 2), ("rev", 1),
                         ("concatenate", 2), ("dynamic_slice", 2), ("dynamic_update_slice", 2), ("iota", 1)])
    if kind == "reshape":
        shape = _reshape_target(b.c, t.shape)
        b.emit1("reshape", [x], t.with_shape(shape), shape=shape)
    elif kind == "transpose" and t.rank >= 2:
        perm = _perm(b.c, t.rank)
        b.emit1("transpose", [x], t.with_shape([t.shape[p] for p in perm]), perm=perm)
    elif kind == "broadcast" and t.rank < 5:
        extra = b.c.between(1, 5 - t.rank)
        shape, dims, k = [], [], 0
        positions = sorted(b.c.below(t.rank + extra) for _ in range(extra))
        slots = [None] * (t.rank + extra)
        taken = set()
        for p in positions:
            while p in taken:
                p = (p + 1) % len(slots)
            taken.add(p)
        for pos in range(len(slots)):
            if pos in taken:
                shape.append(b.c.choice(DIMS[:8]))
            else:
                d = t.shape[k]
                dims.append(pos)
                shape.append(d if d != 1 or b.c.below(2) else b.c.choice(DIMS[:8]))
                k += 1
        if _fits(shape):
            b.emit1("broadcast_in_dim", [x], t.with_shape(shape), shape=tuple(shape), dims=tuple(dims))
    elif kind == "slice" and t.rank >= 1:
        start, limit, strides = [], [], []
        for d in t.shape:
            s = b.c.between(0, d)
            e = b.c.between(s, d)
            start.append(s)
            limit.append(e)
            strides.append(b.c.choice((1, 2, 3)))
        shape = tuple(0 if e == s else (e - s - 1) // st + 1 for s, e, st in zip(start, limit, strides))
        b.emit1("slice", [x], t.with_shape(shape), start=tuple(start), limit=tuple(limit), strides=tuple(strides))
    elif kind == "pad" and t.rank >= 1:
        cfg, shape = [], []
        for d in t.shape:
            lo, hi, interior = b.c.between(-2, 3), b.c.between(-2, 3), b.c.choice((0, 1, 2))
            dilated = d + max(d - 1, 0) * interior
            lo, hi = max(lo, -dilated), max(hi, -dilated)
            if dilated + lo + hi < 0:
                hi = -dilated - lo
            cfg.append((lo, hi, interior))
            shape.append(dilated + lo + hi)
        if _fits(shape):
            b.emit1("pad", [x], t.with_shape(shape), value=_pad_value(b, t.dtype), dtype=t.dtype, config=tuple(cfg))
    elif kind == "rev" and t.rank >= 1:
        dims = tuple(d for d in range(t.rank) if b.c.below(2) == 0) or (0,)
        b.emit1("rev", [x], t, dims=dims)
    elif kind == "concatenate" and t.rank >= 1:
        dim = b.c.below(t.rank)
        parts = [x]
        for _ in range(b.c.between(1, 2)):
            n = b.c.choice(DIMS[:8])
            shape = tuple(n if d == dim else t.shape[d] for d in range(t.rank))
            y = b.value(lambda u, s=shape: u.dtype == t.dtype and u.shape == s, t.dtype, shape)
            if y is None:
                return
            parts.insert(b.c.below(len(parts) + 1), y)
        shape = list(t.shape)
        shape[dim] = sum(b.types[p].shape[dim] for p in parts)
        if _fits(shape):
            b.emit1("concatenate", parts, t.with_shape(shape), dim=dim)
    elif kind == "dynamic_slice" and t.rank >= 1:
        sizes = tuple(b.c.between(0, d) if b.c.below(3) else d for d in t.shape)
        idx = [b.index_input((), -3, d + 3) for d in t.shape]
        if None in idx:
            return
        b.emit1("dynamic_slice", [x] + idx, t.with_shape(sizes), sizes=sizes)
    elif kind == "dynamic_update_slice" and t.rank >= 1:
        shape = tuple(b.c.between(0, d) for d in t.shape)
        u = b.value(lambda v: v.dtype == t.dtype and v.shape == shape, t.dtype, shape)
        idx = [b.index_input((), -3, d + 3) for d in t.shape]
        if u is None or None in idx:
            return
        b.emit1("dynamic_update_slice", [x, u] + idx, t)
    elif kind == "iota":
        shape = b.shape(3)
        if shape:
            d = b.c.choice(("int32", "float32", "uint8", "int8"))
            b.emit1("iota", [], Type(d, shape), dtype=d, shape=shape, dim=b.c.below(len(shape)))


def _reshape_target(c: Choices, shape) -> tuple[int, ...]:
    n = math.prod(shape)
    kind = c.below(3)
    if kind == 0 or n == 0:
        return (n,) if tuple(shape) != (n,) else (1, n)
    if kind == 1 and len(shape) >= 2:
        i = c.below(len(shape) - 1)
        return tuple(shape[:i]) + (shape[i] * shape[i + 1],) + tuple(shape[i + 2:])
    # a random factorization into at most 5 dimensions
    out, rest = [], n
    while rest > 1 and len(out) < 4:
        divs = [d for d in range(2, rest + 1) if rest % d == 0]
        d = c.choice(divs)
        out.append(d)
        rest //= d
    if rest > 1:
        out.append(rest)
    if c.below(3) == 0 and len(out) < 5:
        out.insert(c.below(len(out) + 1), 1)
    return tuple(out)


def op_indexing(b: LaxBuilder) -> None:
    x = b.value(lambda t: t.rank >= 1 and is_arith(t.dtype), min_rank=1)
    if x is None:
        return
    t = b.types[x]
    axis = b.c.below(t.rank)
    d = t.shape[axis]
    if d == 0:
        return      # jnp refuses any index into an empty axis (an IndexError while tracing)
    gather = b.c.below(2) == 0
    modes = ("clip", "fill", "promise_in_bounds") if gather else ("clip", "drop", "promise_in_bounds")
    mode = b.c.choice(modes)
    if mode == "promise_in_bounds" and d == 0:
        mode = modes[0]
    ishape = b.c.choice(((3,), (), (2,), (5,), (2, 2), (1,), (8,)))
    if mode == "promise_in_bounds":
        lo, hi = -d, d - 1          # (jnp wraps negative indices once)
    elif b.c.below(2) == 0:
        lo, hi = 0, min(max(d - 1, 0), 2)   # few distinct indices: duplicates
    else:
        lo, hi = -d - 3, d + 3
    out_shape = t.shape[:axis] + ishape + t.shape[axis + 1:]
    if not _fits(out_shape):
        return
    idx = b.index_input(ishape, lo, hi)
    if idx is None:
        return
    if gather:
        fill = None
        if mode == "fill" and b.c.below(2):
            fill = _pad_value(b, t.dtype)
        b.emit1("gather", [x, idx], t.with_shape(out_shape), axis=axis, mode=mode, fill=fill, dtype=t.dtype)
        return
    fns = ["set", "add", "max", "min"] + (["mul"] if not is_float(t.dtype) else [])
    if t.dtype == BOOL:
        fns = ["set", "max", "min"]
    fn = b.c.choice(fns)
    u = b.value(lambda v: v.dtype == t.dtype and v.shape == out_shape, t.dtype, out_shape)
    if u is None:
        return
    b.emit1("scatter", [x, idx, u], t, axis=axis, mode=mode, fn=fn)


def op_reduce(b: LaxBuilder) -> None:
    x = b.value(lambda t: is_arith(t.dtype))
    if x is None:
        return
    t = b.types[x]
    if b.c.below(4) == 0 and t.rank >= 1 and t.dtype != BOOL:
        axis = b.c.below(t.rank)
        if t.shape[axis] == 0:
            return      # argmax of an empty axis is an error
        b.emit1("argminmax", [x], Type("int32", t.shape[:axis] + t.shape[axis + 1:]),
                fn=b.c.choice(("argmax", "argmin")), axis=axis, index_dtype="int32")
        return
    axes = tuple(d for d in range(t.rank) if b.c.below(3))
    if is_float(t.dtype):
        fn = b.c.choice(("sum", "max", "min"))
    elif t.dtype == BOOL:
        fn = b.c.choice(("or", "and", "xor", "max", "min"))
    else:
        fn = b.c.choice(("sum", "max", "min", "prod", "and", "or", "xor"))
    b.emit1("reduce", [x], t.with_shape(tuple(s for d, s in enumerate(t.shape) if d not in axes)), fn=fn, axes=axes)


def _identity(fn: str, dtype: str):
    from ..ops import numpy_dtype
    from interp import dtypes as D
    if fn == "add":
        return 0.0 if is_float(dtype) else 0
    if is_float(dtype):
        return -float("inf") if fn == "max" else float("inf")
    info = D.iinfo(numpy_dtype(dtype))
    return int(info.min) if fn == "max" else int(info.max)


def op_window(b: LaxBuilder) -> None:
    x = b.value(lambda t: t.rank >= 1 and (is_float(t.dtype) or is_int(t.dtype)), dtypes=b.numeric_dtype, min_rank=1)
    if x is None:
        return
    t = b.types[x]
    fn = b.c.choice(("max", "add", "min"))
    window, strides, padding, bdil, wdil, shape = [], [], [], [], [], []
    for d in t.shape:
        bd, wd = b.c.choice((1, 2)), b.c.choice((1, 1, 2))
        lo, hi = b.c.below(3), b.c.below(3)
        dilated = (d - 1) * bd + 1 if d else 0
        padded = dilated + lo + hi
        w = b.c.between(1, max(1, min(4, padded)))
        eff = (w - 1) * wd + 1
        s = b.c.choice((1, 2, 3))
        out = (padded - eff) // s + 1 if padded >= eff else 0
        window.append(w)
        strides.append(s)
        padding.append((lo, hi))
        bdil.append(bd)
        wdil.append(wd)
        shape.append(out)
    b.emit1("reduce_window", [x], t.with_shape(shape), fn=fn, init=_identity(fn, t.dtype), dtype=t.dtype,
            window=tuple(window), strides=tuple(strides), padding=tuple(padding), base_dilation=tuple(bdil),
            window_dilation=tuple(wdil))


def op_cumulative(b: LaxBuilder) -> None:
    x = b.value(lambda t: t.rank >= 1 and (is_float(t.dtype) or is_int(t.dtype)), dtypes=b.numeric_dtype, min_rank=1)
    if x is None:
        return
    t = b.types[x]
    fn = b.c.choice(("cumsum", "cummax", "cummin") + (("cumprod",) if is_int(t.dtype) else ()))
    b.emit1("cumulative", [x], t, fn=fn, axis=b.c.below(t.rank), reverse=b.c.below(2) == 1)


def op_contraction(b: LaxBuilder) -> None:
    if b.c.below(4) == 0:
        _conv(b)
        return
    kind = b.c.weighted([("float", 4), ("int", 1)])
    if kind == "float":
        dtype = b.float_dtype()
        pref = b.c.choice((None, None, "float32")) if dtype in ("bfloat16", "float16") else None
    else:
        dtype = b.c.choice(("int32", "int8"))
        pref = b.c.choice((None, "int32")) if dtype == "int8" else None
    nb, nc = b.c.below(2), b.c.between(0, 2)
    nfl, nfr = b.c.below(2), b.c.below(2)
    small = (1, 2, 3, 4, 5, 8, 7, 16, 0)
    batch = [b.c.choice(small[:6]) for _ in range(nb)]
    contract = [b.c.choice(small) for _ in range(nc)]
    fl = [b.c.choice(small) for _ in range(nfl)]
    fr = [b.c.choice(small) for _ in range(nfr)]
    lhs = Type(dtype, tuple(batch + fl + contract))
    rhs = Type(dtype, tuple(batch + contract + fr))
    out = Type(pref or dtype, tuple(batch + fl + fr))
    if not (_fits(lhs.shape) and _fits(rhs.shape) and _fits(out.shape)):
        return
    a = b.value(lambda u: u == lhs, dtype, lhs.shape)
    c2 = b.value(lambda u: u == rhs, dtype, rhs.shape)
    if a is None or c2 is None:
        return
    dims = ((tuple(range(nb + nfl, nb + nfl + nc)), tuple(range(nb, nb + nc))),
            (tuple(range(nb)), tuple(range(nb))))
    b.emit1("dot_general", [a, c2], out, contract=dims[0], batch=dims[1],
            precision=b.c.choice((None, "DEFAULT", "HIGHEST", "HIGH")), preferred=pref)


def _conv(b: LaxBuilder) -> None:
    dtype = b.float_dtype()
    nd = b.c.choice((1, 2))
    groups = b.c.choice((1, 2))
    n, cin_g, cout_g = b.c.choice((1, 2)), b.c.choice((1, 2, 3)), b.c.choice((1, 2))
    cin, cout = cin_g * groups, cout_g * groups
    spatial = [b.c.choice((4, 5, 3, 8, 1)) for _ in range(nd)]
    kernel = [b.c.choice((1, 2, 3)) for _ in range(nd)]
    strides = tuple(b.c.choice((1, 2)) for _ in range(nd))
    padding = tuple((b.c.below(2), b.c.below(2)) for _ in range(nd))
    lhs_dil = tuple(b.c.choice((1, 1, 2)) for _ in range(nd))
    rhs_dil = tuple(b.c.choice((1, 1, 2)) for _ in range(nd))
    out_sp = []
    for s, k, st, (lo, hi), ld, rd in zip(spatial, kernel, strides, padding, lhs_dil, rhs_dil):
        size = (s - 1) * ld + 1 + lo + hi
        eff = (k - 1) * rd + 1
        out_sp.append((size - eff) // st + 1 if size >= eff else 0)
    lhs = Type(dtype, (n, cin, *spatial))
    rhs = Type(dtype, (cout, cin_g, *kernel))
    pref = b.c.choice((None, "float32")) if dtype in ("bfloat16", "float16") else None
    out = Type(pref or dtype, (n, cout, *out_sp))
    a = b.value(lambda u: u == lhs, dtype, lhs.shape)
    k = b.value(lambda u: u == rhs, dtype, rhs.shape)
    if a is None or k is None:
        return
    spec = ("NCH", "OIH", "NCH") if nd == 1 else ("NCHW", "OIHW", "NCHW")
    b.emit1("conv", [a, k], out, strides=strides, padding=padding, lhs_dilation=lhs_dil, rhs_dilation=rhs_dil,
            dimension_numbers=spec, groups=groups, precision=b.c.choice((None, "HIGHEST")), preferred=pref)


def op_sort(b: LaxBuilder) -> None:
    x = b.value(lambda t: t.rank >= 1 and is_arith(t.dtype), min_rank=1)
    if x is None:
        return
    t = b.types[x]
    if is_float(t.dtype) and x not in b.defined:
        return
    if b.c.below(3) == 0 and t.dtype != BOOL and t.shape[-1] >= 1:
        k = b.c.between(1, t.shape[-1])
        shape = t.shape[:-1] + (k,)
        b.emit("top_k", [x], [t.with_shape(shape), Type("int32", shape)], k=k)
        return
    ops = [x]
    for _ in range(b.c.below(3)):
        y = b.value(lambda u: u.shape == t.shape and is_arith(u.dtype), None, t.shape)
        if y is None:
            break
        ops.append(y)
    num_keys = b.c.between(1, len(ops))
    if any(is_float(b.types[o].dtype) and o not in b.defined for o in ops[:num_keys]):
        num_keys = 1
    b.emit("sort", ops, [b.types[o] for o in ops], dimension=b.c.below(t.rank), num_keys=num_keys)


def op_call(b: LaxBuilder) -> None:
    """A jit boundary: a few operations inside a nested ``jax.jit``."""
    args = []
    for _ in range(b.c.between(1, 2)):
        a = b.value(lambda t: is_arith(t.dtype))
        if a is None:
            return
        args.append(a)
    sub = LaxBuilder(b.c, b.x64, [b.types[a] for a in args], can_add_inputs=False,
                     defined=[i for i, a in enumerate(args) if a in b.defined])
    for _ in range(b.c.between(1, 4)):
        b.c.weighted(SIMPLE_OPS)(sub)
    outs = sub.sinks()[:2] or [len(args) - 1]
    blk = sub.block(outs)
    b.emit("call", args, [sub.types[o] for o in outs], [blk])


# (builder, weight): the first is the simplest, so shrinking moves toward it.
SIMPLE_OPS = [(op_unary, 6), (op_binary, 6), (op_idiom, 3), (op_compare_select, 2), (op_convert, 2),
              (op_structure, 3)]
LAX_OPS = [(op_unary, 10), (op_binary, 14), (op_idiom, 6), (op_compare_select, 4), (op_convert, 5),
           (op_structure, 8), (op_reduce, 4), (op_indexing, 4), (op_window, 2), (op_cumulative, 2),
           (op_contraction, 3), (op_sort, 2), (op_call, 1)]


def body(b: LaxBuilder, n_ops: int, ops=LAX_OPS) -> None:
    for _ in range(n_ops):
        before = len(b.ops)
        b.c.weighted(ops)(b)
        if len(b.ops) == before and b.last is not None:
            op_unary(b)     # the drawn operation did not apply here: extend the chain instead


def outputs(b: LaxBuilder, most: int = 3) -> list[int]:
    sinks = b.sinks()
    out = sinks[:max(1, b.c.between(1, most))] if sinks else []
    if not out:
        out = [len(b.types) - 1]
    return out


def differentiable(block, first_out_dtype: str) -> bool:
    """Whether ``grad`` of the block's first output is defined: float first output, and only
    operations JAX differentiates (integer-valued ones such as comparisons may feed selects)."""
    if not is_float(first_out_dtype):
        return False
    for op in block.ops:
        p = op.p
        if op.blocks or op.name in ("scatter", "sort", "top_k", "argminmax", "bitcast", "iota", "clamp"):
            return False
        if op.name == "unary" and p["fn"] not in DIFFERENTIABLE_UNARY and is_float(op.outs[0].dtype):
            return False
        if op.name == "binary" and is_float(op.outs[0].dtype) and p["fn"] not in (
                "add", "sub", "mul", "div", "max", "min", "pow", "atan2"):
            return False
        if op.name == "reduce" and is_float(op.outs[0].dtype) and p["fn"] not in ("sum", "max", "min"):
            return False
        if op.name == "convert" and not is_float(op.outs[0].dtype):
            return False
    return True


def generate(c: Choices, family: str = "lax") -> Program:
    x64 = c.chance(20)
    b = LaxBuilder(c, x64)
    b.input(Type(b.arith_dtype(), b.shape()))
    n_ops = c.between(1, 12)
    body(b, n_ops)
    outs = outputs(b)
    blk = b.block(outs)
    transform = c.weighted([(PLAIN, 17), (VMAP, 2), (GRAD, 1)])
    vmap_size = 0
    if transform == VMAP:
        vmap_size = c.choice((2, 3, 1, 4))
        if any(math.prod(i.type.shape) * vmap_size > MAX_ELEMENTS for i in b.inputs):
            transform = PLAIN
    if transform == GRAD and not differentiable(blk, b.types[outs[0]].dtype):
        transform = PLAIN
    if transform != VMAP:
        vmap_size = 0
    return Program(family, tuple(b.inputs), blk, transform, x64, vmap_size=vmap_size)
