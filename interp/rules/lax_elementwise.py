"""Rules: elementwise arithmetic, comparison, bitwise, shifts, rounding, select, clamp, complex parts.

How results are made exact (spec/lax_elementwise.py states every case and its source):
- Integers are computed in int64/uint64 and wrapped two's-complement into the dtype
  (``wrap_int``), so int2/int4 and every overflow wrap exactly as XLA does.
- float16/float32/float64 add, sub, mul, div, fmod use NumPy's IEEE operations, which are
  correctly rounded (float16 goes through float32: 24 >= 2*11+2 bits, so no harmful double
  rounding). Narrow ml_dtypes floats (bfloat16, float8, float4) are computed exactly or
  correctly rounded in float64 and rounded once by ``convert`` (round-to-odd keeps it one rounding).
- Exact operations on narrow floats (neg, abs, floor, compare, max...) read the values in float32,
  which holds every narrow-float value exactly, and select or convert back.
"""
from __future__ import annotations

import operator
import warnings

import ml_dtypes
import numpy as np
from jax.core import ShapedArray

from interp import dtypes
from interp.errors import UndefinedBehaviorError
from interp.evaluator import Literal, is_extended
from interp.registry import register
from interp.numerics import c_order, convert, int_wrapper, odd_sum, sign_extend, to_wide_int, wrap_int

_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu) if hasattr(ml_dtypes, "float8_e8m0fnu") else None


def _exact(x: np.ndarray) -> np.ndarray:
    """Float values in a NumPy float type that holds them exactly (narrow floats -> float32)."""
    x = np.asarray(x)
    return convert(x, np.float32) if x.dtype in dtypes.ML_FLOATS else x


def _wide(x: np.ndarray) -> np.ndarray:
    """Narrow float values as float64, where + - * / are correctly rounded before the final rounding."""
    return _exact(x).astype(np.float64)


# IEEE overflow/invalid/underflow are results here, not errors: NumPy's RuntimeWarnings for them
# are silenced for this module (cheaper than an errstate context around every hot-path operation).
warnings.filterwarnings("ignore", category=RuntimeWarning, module=__name__)


def _float_arith(fn, dtype, *xs):
    """``fn`` applied to float (or complex) operands of ``dtype``, rounded once to ``dtype``."""
    dtype = np.dtype(dtype)
    with np.errstate(all="ignore"):
        if dtype in dtypes.NATIVE_FLOATS or dtypes.is_complex(dtype):
            return np.asarray(fn(*xs)).astype(dtype, copy=False)
        return convert(np.asarray(fn(*[_wide(x) for x in xs])), dtype)


def _int_arith(fn, dtype, *xs):
    """``fn`` on int64/uint64 operands, wrapped into ``dtype``."""
    with np.errstate(all="ignore"):
        return wrap_int(fn(*[to_wide_int(x) for x in xs]), dtype)


def _arith(eqn, int_fn, float_fn, *xs, complex_fn=None, wraps_natively=False):
    """Dispatch on the output dtype. ``wraps_natively``: NumPy's same-type integer ``int_fn`` is
    already two's complement wrap-around (add, sub, mul, neg, abs, bitwise), so the common
    types skip the int64 round trip; float16/32/64 ``float_fn`` is IEEE in the type."""
    dtype = eqn.out_dtype
    if dtype in dtypes.NATIVE_FLOATS:
        return float_fn(*xs)
    if dtypes.is_int(dtype):
        if wraps_natively and dtype in dtypes.NATIVE_INTS:
            return int_fn(*xs)
        return _int_arith(int_fn, dtype, *xs)
    if dtypes.is_complex(dtype) and complex_fn is not None:
        return complex_fn(dtype, *xs)
    if dtypes.is_float(dtype) or dtypes.is_complex(dtype):
        return _float_arith(float_fn, dtype, *xs)
    raise eqn.unsupported(f"{eqn.name} of {dtype}")


# --- plan-time specialisation ---------------------------------------------------------------------
# Where the equation's operands and result share one NumPy-native dtype, the exact operation is a
# single NumPy ufunc (IEEE in float16/32/64, two's complement wrap-around in the integer types).
# ``prepare`` returns that ufunc as the rule (no per-call dtype dispatch: cheap on scalars) with an
# ``inplace`` variant, so the plan may compute the result into a dying input buffer (no fresh
# allocation per equation: see interp/evaluator.py DONATE_MIN_ELEMENTS).

def _same_native_dtype(ctx, natives, result=None) -> bool:
    """The operands share one dtype of ``natives`` and the result has it too (or is ``result``:
    bool for the comparisons)."""
    dtype = ctx.out_dtype if result is None else getattr(ctx.in_avals[0], "dtype", None)
    return (dtype in natives and (result is None or ctx.out_dtype == result)
            and all(getattr(a, "dtype", None) == dtype for a in ctx.in_avals))


def _ufunc_rule(ufunc):
    if ufunc is np.multiply:     # mul's out_dtype (the specialisation applies where it is None)
        def rule(eqn, *xs, out_dtype=None):
            return ufunc(*xs)

        def inplace(eqn, out, *xs, out_dtype=None):
            return ufunc(*xs, out=out)
    else:
        def rule(eqn, *xs):
            return ufunc(*xs)

        def inplace(eqn, out, *xs):
            return ufunc(*xs, out=out)
    rule.inplace = inplace
    rule.__name__ = f"native_{ufunc.__name__}"
    return rule


_COMPARISONS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal}
_UFUNC_RULES = {u: _ufunc_rule(u) for u in (np.add, np.subtract, np.multiply, np.divide, np.negative,
                                            *_COMPARISONS.values())}
_OPERATORS = {np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
              np.divide: operator.truediv, np.equal: operator.eq, np.not_equal: operator.ne,
              np.less: operator.lt, np.less_equal: operator.le, np.greater: operator.gt,
              np.greater_equal: operator.ge}


def _scalar_rule(ufunc, ctx):
    """Rank-0 binary equations: Python's operator on NumPy scalars, which is NumPy's scalar math
    (the same IEEE / wrap-around result as the ufunc without its per-call machinery); a literal
    operand is held as a NumPy scalar (the plan's literals are 0-d arrays, which take the slow
    path). None where this does not apply."""
    op = _OPERATORS.get(ufunc)
    if op is None or any(getattr(a, "shape", None) != () for a in ctx.in_avals):
        return None
    dtype = ctx.in_avals[0].dtype      # the operands' (one) dtype: a literal is held in it
    lit = [np.asarray(v.val, dtype)[()] if isinstance(v, Literal) else None for v in ctx.eqn.invars]
    if lit[1] is not None:
        c = lit[1]
        rule = (lambda eqn, x, y, *, out_dtype=None: op(x, c)) if ufunc is np.multiply else \
            (lambda eqn, x, y: op(x, c))
    elif lit[0] is not None:
        c = lit[0]
        rule = (lambda eqn, x, y, *, out_dtype=None: op(c, y)) if ufunc is np.multiply else \
            (lambda eqn, x, y: op(c, y))
    else:
        rule = (lambda eqn, x, y, *, out_dtype=None: op(x, y)) if ufunc is np.multiply else \
            (lambda eqn, x, y: op(x, y))
    return rule


def _native(ufunc, natives, result=None):
    """The ufunc rule where the dtypes allow it (``_same_native_dtype``; not for mul's out_dtype),
    else None: one step of a ``prepare`` (:func:`_plan`)."""
    def native(ctx):
        if _same_native_dtype(ctx, natives, result) and ctx.params.get("out_dtype") is None:
            return _scalar_rule(ufunc, ctx) or _UFUNC_RULES[ufunc]
        return None
    return native


def _plan(*steps):
    """A rule's ``prepare`` (interp/registry.py register): the first of ``steps`` (``step(ctx)``
    -> a rule for the equation, or None) that applies; None (the rule itself) if none does."""
    def prepare(ctx):
        for step in steps:
            rule = step(ctx)
            if rule is not None:
                return rule
        return None
    return prepare


_NATIVE_NUMBERS = dtypes.NATIVE_FLOATS + dtypes.NATIVE_INTS


# --- rank-0 integer and bool equations on Python integers -----------------------------------------
# Kernels compute program ids, loop indices and buffer slots as rank-0 integers (a Mosaic GPU
# matmul evaluates ~6000 of them per call). NumPy spends microseconds on each: a 0-d array goes
# through the ufunc machinery, and div/rem/shifts/bitwise through the int64 round trip and masks
# of the general rules above (~100 us for a 0-d rem). Where every operand and the result are
# rank 0 and of one native integer dtype (or bool), the plan computes on Python integers instead:
# they are unbounded, so every result is exact before it is wrapped two's complement into the
# dtype (what wrap_int does), and it comes back as a NumPy scalar of the result dtype. Same
# semantics as the general rules (spec/lax_elementwise.py: x / 0 == -1, x % 0 == x, INT_MIN / -1
# wraps to INT_MIN, shift amounts read as unsigned); tests/test_lax_elementwise.py
# test_rank0_* checks each one bitwise against the general rule on arrays and against XLA:CPU,
# over every pair of int8 and bool values and the edge values of the wider types.

def _py_div(x: int, y: int) -> int:
    """Truncating division; x / 0 == -1 (all ones once wrapped unsigned); INT_MIN / -1 == -INT_MIN,
    which the wrap makes INT_MIN."""
    if y == 0:
        return -1
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def _py_rem(x: int, y: int) -> int:
    """Remainder with the dividend's sign; x % 0 == x (and INT_MIN % -1 == 0)."""
    if y == 0:
        return x
    r = abs(x) % abs(y)
    return -r if x < 0 else r


def _py_sign(x: int) -> int:
    return (x > 0) - (x < 0)


def _py_shift(kind: str, nbits: int):
    """A shift of ``nbits``-bit values; the amount is read as unsigned, so negative amounts are
    >= the bit width (left and logical: 0; arithmetic: the sign fill)."""
    mask = (1 << nbits) - 1
    as_signed = int_wrapper(nbits, signed=True)

    def shift(x: int, s: int) -> int:
        a = s & mask
        if kind == "left":
            return 0 if a >= nbits else x << a
        if kind == "logical":
            return 0 if a >= nbits else (x & mask) >> a
        v = as_signed(x)    # the bits as signed (unsigned dtypes: the top bit)
        return (-1 if v < 0 else 0) if a >= nbits else v >> a
    return shift


# name -> (Python function of ints, whether it applies to bool operands, arity); comparisons give
# bool results, the others the operands' dtype. Bool operands are 0/1.
_PY_INT_OPS = {
    "add": (operator.add, False, 2), "add_any": (operator.add, False, 2),
    "sub": (operator.sub, False, 2),
    "mul": (operator.mul, False, 2), "div": (_py_div, False, 2), "rem": (_py_rem, False, 2),
    "and": (operator.and_, True, 2), "or": (operator.or_, True, 2), "xor": (operator.xor, True, 2),
    "max": (max, True, 2), "min": (min, True, 2), "neg": (operator.neg, False, 1),
    "not": (operator.invert, True, 1), "sign": (_py_sign, False, 1), "abs": (abs, False, 1),
    **{name: (_OPERATORS[ufunc], True, 2) for name, ufunc in _COMPARISONS.items()},
}
_PY_SHIFTS = {"shift_left": "left", "shift_right_logical": "logical",
              "shift_right_arithmetic": "arithmetic"}
_BOOL = np.dtype(np.bool_)


_SCALARS: "dict[np.dtype, dict[int, np.generic]]" = {}
_SCALAR_CACHE_SIZE = 1 << 12


def _to_dtype(dtype: np.dtype):
    """Python int -> the NumPy scalar of ``dtype`` holding it wrapped two's complement.

    Making a NumPy scalar costs more than the arithmetic (~1 us: NumPy's generic constructor), so
    the scalars of the values met first (kernels keep meeting the same small ids and indices) are
    kept per dtype: NumPy scalars are immutable, so handing one out again is safe."""
    t = dtype.type
    if dtype == _BOOL:
        return lambda v: np.True_ if v & 1 else np.False_   # (not on 0/1: ~1 == -2 -> False)
    nbits = dtype.itemsize * 8
    wrap = int_wrapper(nbits, signed=dtype.kind == "i")
    cache = _SCALARS.setdefault(dtype, {})

    def to(v: int) -> np.generic:
        s = cache.get(v)
        if s is None:
            s = t(wrap(v))
            if len(cache) < _SCALAR_CACHE_SIZE:
                cache[v] = s
        return s
    return to


def _rank0(avals) -> bool:
    """Every aval a rank-0 plain array (not a ref)."""
    return all(type(a) is ShapedArray and a.shape == () for a in avals)


def _rank0_int_dtype(ctx) -> "np.dtype | None":
    """The operands' one native integer or bool dtype where every operand and the result are
    rank 0 (plain arrays, not refs), else None."""
    if not (_rank0(ctx.in_avals) and _rank0(ctx.out_avals)):
        return None
    dtype = ctx.in_avals[0].dtype
    if not (dtype in dtypes.NATIVE_INTS or dtype == _BOOL) or \
            any(a.dtype != dtype for a in ctx.in_avals):
        return None
    return np.dtype(dtype)


def _py_int_rule(ctx):
    """The Python-int rule of a rank-0 equation, or None where it does not apply."""
    dtype = _rank0_int_dtype(ctx)
    if dtype is None or ctx.params.get("out_dtype") is not None:
        return None
    name = ctx.name
    if name in _PY_SHIFTS:
        if dtype == _BOOL:
            return None
        fn, arity = _py_shift(_PY_SHIFTS[name], dtype.itemsize * 8), 2
    else:
        fn, on_bool, arity = _PY_INT_OPS[name]
        if (dtype == _BOOL and not on_bool) or (name == "abs" and dtype.kind == "u"):
            return None    # (JAX rejects abs of unsigned integers when tracing)
    result = np.dtype(ctx.out_dtype)
    if result != (_BOOL if name in _COMPARISONS else dtype):
        return None
    to = _to_dtype(result)
    if arity == 1:
        def rule(eqn, x):
            return to(fn(int(x)))
    elif name == "mul":      # (mul's out_dtype parameter: the fast path applies where it is None)
        def rule(eqn, x, y, *, out_dtype=None):
            return to(fn(int(x), int(y)))
    else:
        def rule(eqn, x, y):
            return to(fn(int(x), int(y)))
    rule.__name__ = f"py_int_{name}"
    return rule


def _select_out_of_range(which, ncases) -> UndefinedBehaviorError:
    return UndefinedBehaviorError(f"select_n: predicate value {which} is out of range for {ncases} "
                                  "cases (select_n/c2: the result is undefined in JAX/XLA)")


def _py_select_n(ctx):
    """select_n of rank-0 operands: the chosen case as a NumPy scalar (its bits unchanged), the
    predicate's range checked as the general rule does. None where it does not apply."""
    ncases = len(ctx.in_avals) - 1
    if ncases < 2 or not (_rank0(ctx.in_avals) and _rank0(ctx.out_avals)) \
            or any(a.dtype != ctx.out_dtype for a in ctx.in_avals[1:]) or is_extended(ctx.out_dtype):
        return None

    def rule(eqn, which, *cases):
        i = int(which)
        if 0 <= i < ncases:
            return cases[i][()]
        raise _select_out_of_range(i, ncases)
    rule.__name__ = "py_select_n"
    return rule


# --- complex multiply / divide ------------------------------------------------------------------

def _complex_mul(dtype, x, y):
    """(a+bi)(c+di) = (ac-bd) + (ad+bc)i, each part of the textbook formula rounded once.

    complex64: the products are exact in float64 and the sum is rounded to odd, so each part is
    the correctly rounded value of the formula. complex128: computed in long double and rounded
    once (correctly rounded unless the two products cancel below long double's 64 bits).
    """
    with np.errstate(all="ignore"):
        if dtype == np.complex64:
            a, b = x.real.astype(np.float64), x.imag.astype(np.float64)
            c, d = y.real.astype(np.float64), y.imag.astype(np.float64)
            re, im = odd_sum(a * c, -(b * d)), odd_sum(a * d, b * c)
            out = np.empty(np.broadcast(re, im).shape, dtype)
            out.real, out.imag = re.astype(np.float32), im.astype(np.float32)
            return out
        w = np.clongdouble
        xa, ya = np.asarray(x).astype(w), np.asarray(y).astype(w)
        a, b, c, d = xa.real, xa.imag, ya.real, ya.imag
        out = np.empty(np.broadcast(a, c).shape, dtype)
        out.real, out.imag = (a * c - b * d).astype(np.float64), (a * d + b * c).astype(np.float64)
        return out


def _complex_div(dtype, x, y):
    """x / y computed in the wider complex type (NumPy's Smith algorithm) and rounded once."""
    wide = dtypes.wide_float(dtype)
    with np.errstate(all="ignore"):
        return (np.asarray(x).astype(wide) / np.asarray(y).astype(wide)).astype(dtype)


# --- arithmetic -----------------------------------------------------------------------------------

@register("add", "add_any", prepare=_plan(_py_int_rule, _native(np.add, _NATIVE_NUMBERS)))
def add(eqn, x, y):
    return _arith(eqn, np.add, np.add, x, y, wraps_natively=True)


@register("sub", prepare=_plan(_py_int_rule, _native(np.subtract, _NATIVE_NUMBERS)))
def sub(eqn, x, y):
    return _arith(eqn, np.subtract, np.subtract, x, y, wraps_natively=True)


@register("mul", prepare=_plan(_py_int_rule, _native(np.multiply, _NATIVE_NUMBERS)))
def mul(eqn, x, y, *, out_dtype=None):
    if out_dtype is not None:
        # JAX lowers mul(out_dtype=T) as convert(x, T) * convert(y, T) (jax/_src/lax/lax.py
        # _nary_lower_hlo)
        x, y = convert(x, out_dtype), convert(y, out_dtype)
    return _arith(eqn, np.multiply, np.multiply, x, y, complex_fn=_complex_mul, wraps_natively=True)


def _int_divmod(x, y):
    """XLA's integer division and remainder on int64/uint64 operands (truncating).

    x / 0 == -1 (all ones for unsigned), x % 0 == x; INT_MIN / -1 == INT_MIN (wraps), % == 0.
    """
    zero = y == 0
    if x.dtype == np.int64:
        minus_one = y == -1
        safe = np.where(zero | minus_one, 1, y)
        q = x // safe
        r = x - q * safe
        # floor -> truncation: step toward zero where the remainder's sign differs from x's
        adjust = (r != 0) & ((r < 0) != (x < 0))
        q = np.where(adjust, q + 1, q)
        r = np.where(adjust, r - safe, r)
        q = np.where(minus_one, -x, q)   # wraps: -INT_MIN == INT_MIN
        r = np.where(minus_one, 0, r)
        return np.where(zero, -1, q), np.where(zero, x, r)
    safe = np.where(zero, np.uint64(1), y)
    q, r = x // safe, x % safe
    return np.where(zero, ~np.uint64(0), q), np.where(zero, x, r)


@register("div", prepare=_plan(_py_int_rule, _native(np.divide, dtypes.NATIVE_FLOATS)))
def div(eqn, x, y):
    return _arith(eqn, lambda a, b: _int_divmod(a, b)[0], np.divide, x, y, complex_fn=_complex_div)


@register("rem", prepare=_plan(_py_int_rule))
def rem(eqn, x, y):
    # floats: C fmod (exact, sign of the dividend): XLA's kRemainder
    return _arith(eqn, lambda a, b: _int_divmod(a, b)[1], np.fmod, x, y)


@register("neg", prepare=_plan(_py_int_rule, _native(np.negative, _NATIVE_NUMBERS)))
def neg(eqn, x):
    if dtypes.is_float(x.dtype) and x.dtype not in dtypes.NATIVE_FLOATS:
        return convert(np.negative(_exact(x)), x.dtype)
    return _arith(eqn, np.negative, np.negative, x, wraps_natively=True)


@register("square")
def square(eqn, x):
    return mul(eqn, x, x)


@register("abs", prepare=_plan(_py_int_rule))
def abs_(eqn, x):
    if dtypes.is_complex(x.dtype):
        wide = dtypes.wide_float(dtypes.component_dtype(x.dtype))
        with np.errstate(all="ignore"):
            return np.hypot(x.real.astype(wide), x.imag.astype(wide)).astype(eqn.out_dtype)
    if dtypes.is_float(x.dtype):
        return convert(np.abs(_exact(x)), x.dtype)
    return _int_arith(np.abs, x.dtype, x)   # abs(INT_MIN) wraps to INT_MIN


@register("sign", prepare=_plan(_py_int_rule))
def sign(eqn, x):
    dtype = x.dtype
    if dtypes.is_int(dtype):
        return _int_arith(np.sign, dtype, x)
    if dtypes.is_complex(dtype):
        # x / |x|, and 0 for 0 (XLA EmitComplexSign)
        wide = dtypes.wide_float(dtype)
        xw = x.astype(wide)
        with np.errstate(all="ignore"):
            mag = np.abs(xw)
            return np.where(mag == 0, xw, xw / np.where(mag == 0, 1, mag)).astype(dtype)
    e = _exact(x)
    # +-1, and the input itself for +-0 and NaN (sign(-0.0) == -0.0)
    out = np.where((e == 0) | np.isnan(e), e, np.where(e > 0, 1.0, -1.0).astype(e.dtype))
    return convert(out.astype(e.dtype), dtype)


@register("integer_pow")
def integer_pow(eqn, x, *, y):
    """JAX's lowering of integer_pow: binary exponentiation, every product rounded to the dtype,
    a negative exponent as 1 / x**|y| (jax/_src/lax/lax.py _integer_pow / _integer_pow_lowering;
    its special cases y in {1, 2, 3, -1} give the same values: y == 3 is (x*x)*x there and
    x*(x*x) here, the same rounded product)."""
    def times(a, b):
        return mul(eqn, a, b)

    if y == 0:
        return np.ones_like(x)   # ones also for NaN/inf/0 inputs
    n = -y if y < 0 else y
    acc, base = None, x
    while n > 0:
        if n & 1:
            acc = base if acc is None else times(acc, base)
        n >>= 1
        if n > 0:
            base = times(base, base)
    if y < 0:
        return div(eqn, np.ones_like(acc), acc)
    return acc


@register("mulhi")
def mulhi(eqn, x, y):
    """The high half of the 2N-bit product (chlo.mulhi)."""
    dtype = x.dtype
    nbits = dtypes.bit_width(dtype)
    with np.errstate(all="ignore"):
        if nbits < 64:
            return wrap_int(to_wide_int(x) * to_wide_int(y) >> nbits, dtype) if dtypes.is_signed(dtype) \
                else wrap_int((to_wide_int(x).astype(np.uint64) * to_wide_int(y).astype(np.uint64))
                              >> np.uint64(nbits), dtype)
        u, v = x.astype(np.uint64), y.astype(np.uint64)
        m32, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
        ul, uh, vl, vh = u & m32, u >> s32, v & m32, v >> s32
        ll, lh, hl, hh = ul * vl, ul * vh, uh * vl, uh * vh
        mid = (lh & m32) + (hl & m32) + (ll >> s32)
        hi = hh + (lh >> s32) + (hl >> s32) + (mid >> s32)
        if dtypes.is_signed(dtype):
            # signed high half = unsigned high half - (x<0 ? y : 0) - (y<0 ? x : 0)  (mod 2**64)
            hi = hi - np.where(x < 0, v, np.uint64(0)) - np.where(y < 0, u, np.uint64(0))
        return hi.astype(np.uint64).view(np.int64).astype(dtype) if dtypes.is_signed(dtype) else hi


# --- max / min / clamp ----------------------------------------------------------------------------

def max_min(x, y, take_max: bool):
    """XLA's max/min: NaN if either is NaN; max(-0, +0) = +0, min(-0, +0) = -0."""
    x, y = np.asarray(x), np.asarray(y)
    if dtypes.is_bool(x.dtype):
        return (x | y) if take_max else (x & y)
    if dtypes.is_int(x.dtype):
        return np.asarray((np.maximum if take_max else np.minimum)(x, y), dtype=x.dtype)
    ex, ey = _exact(x), _exact(y)
    pick_x = (ex > ey) if take_max else (ex < ey)
    both_zero = (ex == 0) & (ey == 0)
    # among equal zeros prefer +0 for max, -0 for min
    pick_x = np.where(both_zero, np.signbit(ex) != take_max, pick_x)
    pick_x = pick_x | np.isnan(ex)   # (a NaN y is picked already: comparisons with NaN are false)
    return np.asarray(np.where(pick_x, x, y), dtype=x.dtype)


def _complex_max_min(x, y, take_max: bool):
    """XLA:CPU's complex max/min: lexicographic on (real, imag), as ``x > y ? x : y`` (max) and
    ``x < y ? x : y`` (min), so a NaN part makes the comparison false and y is returned."""
    xr, xi, yr, yi = np.real(x), np.imag(x), np.real(y), np.imag(y)
    if take_max:
        pick_x = (xr > yr) | ((xr == yr) & (xi > yi))
    else:
        pick_x = (xr < yr) | ((xr == yr) & (xi < yi))
    return np.asarray(np.where(pick_x, x, y), dtype=np.result_type(x, y))


def _native_max_min(take_max: bool):
    """max/min of float16/32/64 (or native integer) operands: NumPy's maximum/minimum, which
    propagate NaN as XLA does and return one of the operands. Among equal zeros they may return
    either, so a max can be wrong only where it returned -0.0 (the other operand may be +0.0)
    and a min only where it returned +0.0. Those bit patterns are the extremes of the result's
    integer view (-0.0 is the most negative signed integer, +0.0 the least unsigned one): one
    integer min-reduction (SIMD, read-only) says whether any is there, and only then are those
    elements redone by :func:`max_min`."""
    ufunc = np.maximum if take_max else np.minimum

    def rule(eqn, x, y):
        r = ufunc(x, y)
        if not dtypes.is_float(r.dtype):
            return r
        if type(r) is not np.ndarray or r.ndim == 0:
            # a scalar: only a zero result can be the wrong one of two equal zeros
            return r if r != 0 else max_min(x, y, take_max)
        if take_max:
            bits = r.view(dtypes.INT_OF_BYTES[r.itemsize])
            suspect = np.iinfo(bits.dtype).min          # -0.0
        else:
            bits = r.view(dtypes.UINT_OF_BYTES[r.itemsize])
            suspect = 0                                 # +0.0
        if r.size == 0 or bits.min() != suspect:
            return r
        fix = bits == suspect
        shape = r.shape
        r[fix] = max_min(np.broadcast_to(x, shape)[fix], np.broadcast_to(y, shape)[fix], take_max)
        return r
    return rule


_NATIVE_MAX_MIN = {True: _native_max_min(True), False: _native_max_min(False)}


def _native_max_min_step(take_max: bool):
    def native(ctx):
        return _NATIVE_MAX_MIN[take_max] if _same_native_dtype(ctx, _NATIVE_NUMBERS) else None
    return native


@register("max", prepare=_plan(_py_int_rule, _native_max_min_step(True)))
def max_(eqn, x, y):
    if dtypes.is_complex(eqn.out_dtype):
        return _complex_max_min(x, y, True)
    return max_min(x, y, True)


@register("min", prepare=_plan(_py_int_rule, _native_max_min_step(False)))
def min_(eqn, x, y):
    if dtypes.is_complex(eqn.out_dtype):
        return _complex_max_min(x, y, False)
    return max_min(x, y, False)


@register("clamp")
def clamp(eqn, lo, x, hi):
    # StableHLO: clamp(lo, x, hi) = minimum(maximum(x, lo), hi), so lo > hi gives hi. Complex
    # operands use the lexicographic complex maximum/minimum of the spec (what XLA:CPU's max and
    # min compute); XLA:CPU's own complex clamp compares real parts only (spec/lax_elementwise.py
    # BACKEND_PROPERTIES complex-clamp).
    shape = np.shape(x)
    lo, hi = np.broadcast_to(lo, shape), np.broadcast_to(hi, shape)
    if dtypes.is_complex(x.dtype):
        out = _complex_max_min(_complex_max_min(x, lo, True), hi, False)
    else:
        out = max_min(max_min(x, lo, True), hi, False)
    return np.asarray(np.broadcast_to(out, eqn.out_aval.shape), dtype=eqn.out_dtype)


# --- comparisons -----------------------------------------------------------------------------------

def _cmp_operands(x, y):
    if dtypes.is_float(x.dtype):
        return _exact(x), _exact(y)
    return x, y


def _compare(op):
    def rule(eqn, x, y):
        a, b = _cmp_operands(x, y)
        with np.errstate(all="ignore"):
            return np.asarray(op(a, b), dtype=np.bool_)
    return rule


def _compare_plan(op):
    """Operands of one NumPy-native dtype are compared exactly by NumPy itself (IEEE: NaN
    unordered, -0.0 == +0.0; integers by value), which is what the general rule does for them after
    its dispatch: plan the ufunc (or, on scalars, Python's operator on NumPy scalars) directly.
    Narrow floats keep the general rule (read exactly in float32 first)."""
    natives = _NATIVE_NUMBERS + (np.dtype(np.bool_),)
    if op in (np.equal, np.not_equal):
        natives += (np.dtype(np.complex64), np.dtype(np.complex128))
    return _plan(_py_int_rule, _native(op, natives, result=np.dtype(np.bool_)))


register("eq", prepare=_compare_plan(np.equal))(_compare(np.equal))
register("ne", prepare=_compare_plan(np.not_equal))(_compare(np.not_equal))
register("lt", prepare=_compare_plan(np.less))(_compare(np.less))
register("le", prepare=_compare_plan(np.less_equal))(_compare(np.less_equal))
register("gt", prepare=_compare_plan(np.greater))(_compare(np.greater))
register("ge", prepare=_compare_plan(np.greater_equal))(_compare(np.greater_equal))


def _total_order_key(x: np.ndarray) -> np.ndarray:
    """XLA's TOTALORDER comparison key (int64): -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN.

    IEEE layouts: the bits as a sign-magnitude integer made two's complement. XLA:CPU compares
    the fnuz float8 types as their float32 upcast, where the NaN pattern 0x80 is -NaN (below
    everything), and float8_e8m0fnu (no sign bit) in bit order with NaN (0xFF) on top.
    """
    if not dtypes.is_float(x.dtype):
        return x
    nbits = dtypes.bit_width(x.dtype)
    u = c_order(x).view(dtypes.storage_uint(x.dtype))
    if x.dtype == _E8M0:
        return u.astype(np.int64)
    if nbits == 64:
        s = u.view(np.int64)
        return np.where(s < 0, s ^ np.int64(0x7FFFFFFFFFFFFFFF), s)
    u = u.astype(np.int64) & ((1 << nbits) - 1)
    signed = sign_extend(u, nbits)
    key = np.where(signed < 0, signed ^ ((1 << (nbits - 1)) - 1), signed)
    if x.dtype.name.endswith("fnuz"):
        key = np.where(u == (1 << (nbits - 1)), -(1 << nbits), key)   # the NaN: -NaN, lowest
    return key


def _total_compare(op):
    def rule(eqn, x, y):
        if dtypes.is_complex(x.dtype):
            # StableHLO compare: complex operands compare (real, imag) lexicographically with the
            # given compare type. JAX accepts complex only for eq_to (le_to/lt_to take ordered
            # types); equality of both parts' total-order keys is that comparison for EQ.
            if op is not np.equal:
                raise eqn.unsupported(f"total_order/complex-lexicographic: {eqn.name} of complex "
                                      "operands (JAX rejects them)")
            return np.asarray((_total_order_key(np.real(x)) == _total_order_key(np.real(y)))
                              & (_total_order_key(np.imag(x)) == _total_order_key(np.imag(y))), dtype=np.bool_)
        return np.asarray(op(_total_order_key(x), _total_order_key(y)), dtype=np.bool_)
    return rule


register("eq_to")(_total_compare(np.equal))
register("le_to")(_total_compare(np.less_equal))
register("lt_to")(_total_compare(np.less))


@register("is_finite")
def is_finite(eqn, x):
    return np.asarray(np.isfinite(_exact(x)), dtype=np.bool_)


# --- bitwise and shifts ----------------------------------------------------------------------------

def _bitwise(op):
    def rule(eqn, x, y):
        if dtypes.is_bool(x.dtype):
            return np.asarray(op(x, y), dtype=np.bool_)
        return _int_arith(op, x.dtype, x, y)
    return rule


register("and", prepare=_plan(_py_int_rule))(_bitwise(np.bitwise_and))
register("or", prepare=_plan(_py_int_rule))(_bitwise(np.bitwise_or))
register("xor", prepare=_plan(_py_int_rule))(_bitwise(np.bitwise_xor))


@register("not", prepare=_plan(_py_int_rule))
def not_(eqn, x):
    if dtypes.is_bool(x.dtype):
        return np.logical_not(x)
    return _int_arith(np.invert, x.dtype, x)


def _unsigned_bits(x: np.ndarray) -> np.ndarray:
    """The n-bit two's complement pattern of integers as uint64."""
    nbits = dtypes.bit_width(x.dtype)
    u = to_wide_int(x).astype(np.uint64)
    return u & np.uint64((1 << nbits) - 1) if nbits < 64 else u


def _shift(kind: str):
    def rule(eqn, x, s):
        dtype = eqn.out_dtype
        nbits = dtypes.bit_width(dtype)
        # the shift amount is read as unsigned: negative amounts are >= the bit width
        amount = _unsigned_bits(np.asarray(s, dtype=dtype))
        big = amount >= np.uint64(nbits)
        a = np.where(big, np.uint64(0), amount)
        with np.errstate(all="ignore"):
            if kind == "left":
                out = np.where(big, np.uint64(0), _unsigned_bits(x) << a)
            elif kind == "logical":
                out = np.where(big, np.uint64(0), _unsigned_bits(x) >> a)
            else:
                # arithmetic: sign-extended value shifted; >= width fills with the sign
                v = to_wide_int(x)
                if v.dtype == np.uint64:   # uint64: the sign is the top bit
                    v = v.view(np.int64)
                elif dtypes.is_unsigned(dtype):
                    v = sign_extend(v, nbits)
                out = np.where(big, np.where(v < 0, -1, 0), v >> a.astype(np.int64))
        return wrap_int(out, dtype)
    return rule


register("shift_left", prepare=_plan(_py_int_rule))(_shift("left"))
register("shift_right_logical", prepare=_plan(_py_int_rule))(_shift("logical"))
register("shift_right_arithmetic", prepare=_plan(_py_int_rule))(_shift("arithmetic"))


@register("population_count")
def population_count(eqn, x):
    return wrap_int(np.bitwise_count(_unsigned_bits(x)).astype(np.int64), x.dtype)


@register("clz")
def clz(eqn, x):
    u = _unsigned_bits(x)
    nbits = dtypes.bit_width(x.dtype)
    length = np.zeros(u.shape, np.int64)   # bit length by binary search over 32, 16, ..., 1
    for step in (32, 16, 8, 4, 2, 1):
        has = (u >> np.uint64(step)) != 0
        length = np.where(has, length + step, length)
        u = np.where(has, u >> np.uint64(step), u)
    length = length + (u != 0)
    return wrap_int(nbits - length, x.dtype)


# --- rounding ----------------------------------------------------------------------------------------

@register("floor")
def floor(eqn, x):
    return convert(np.floor(_exact(x)), x.dtype)


@register("ceil")
def ceil(eqn, x):
    return convert(np.ceil(_exact(x)), x.dtype)


@register("round")
def round_(eqn, x, *, rounding_method):
    e = _exact(x)
    method = getattr(rounding_method, "name", rounding_method)
    if method in ("TO_NEAREST_EVEN", 1):
        out = np.rint(e)
    elif method in ("AWAY_FROM_ZERO", 0):
        t = np.trunc(e)
        with np.errstate(all="ignore"):
            # |e - t| is exact (the fraction part); step away from zero from one half up
            out = np.where(np.abs(e - t) >= 0.5, t + np.sign(e), t)
    else:
        raise eqn.unsupported(f"rounding_method={rounding_method!r}")
    return convert(out.astype(e.dtype), x.dtype)


@register("nextafter")
def nextafter(eqn, x, y):
    """chlo.next_after: NaN if either is NaN; y if x == y; from +-0 the smallest subnormal with
    y's sign; else the bit pattern of x stepped by one toward y."""
    dtype = eqn.out_dtype
    if dtype in dtypes.NATIVE_FLOATS:
        # x == y -> y explicitly: NumPy's float16 nextafter(-0.0, +0.0) gives -0.0 before NumPy 2.5
        return np.asarray(np.where(x == y, y, np.nextafter(x, y)), dtype=dtype)
    # Narrow floats: chlo's expansion itself (stablehlo/transforms/ChloLegalizeToStablehlo.cpp
    # materializeNextAfter), on the bit patterns with the top bit taken as the sign. For
    # float8_e8m0fnu (no sign, no zero) that bit is the exponent's top bit, so 0x00 (2**-127) and
    # 0x80 (2**1) are both "zero" and the steps cross that bit: what XLA computes on every backend.
    shape = eqn.out_aval.shape
    x, y = np.broadcast_to(x, shape), np.broadcast_to(y, shape)
    ex, ey = _exact(x), _exact(y)
    nbits = dtypes.bit_width(dtype)
    ut = dtypes.storage_uint(dtype)
    mask, sign = (1 << nbits) - 1, 1 << (nbits - 1)
    xb = c_order(x).view(ut).astype(np.int64) & mask
    yb = c_order(y).view(ut).astype(np.int64) & mask
    x_abs, y_abs = xb & (sign - 1), yb & (sign - 1)
    toward_zero = ((xb & sign) != (yb & sign)) | (x_abs > y_abs)
    out = np.where(toward_zero, xb - 1, xb + 1)
    out = np.where(x_abs == 0, np.where(y_abs == 0, yb, (yb & sign) | 1), out)
    out = np.where(ex == ey, yb, out)                        # (float compare: -0 == +0)
    out = np.asarray(out & mask).astype(ut).view(dtype)
    return np.where(np.isnan(ex) | np.isnan(ey), np.array(np.nan, dtype), out).astype(dtype)


# --- select -------------------------------------------------------------------------------------------

@register("select_n", prepare=_plan(_py_select_n))
def select_n(eqn, which, *cases):
    if len(cases) == 1:
        return np.asarray(np.broadcast_to(cases[0], eqn.out_aval.shape), dtype=eqn.out_dtype).copy()
    w = np.asarray(which)
    if dtypes.is_bool(w.dtype):
        idx = w.astype(np.int64)
    else:
        idx = to_wide_int(w)
        if np.any((idx < 0) | (idx >= len(cases))):
            raise _select_out_of_range(idx[(idx < 0) | (idx >= len(cases))].ravel()[0], len(cases))
    out = np.asarray(np.broadcast_to(cases[0], eqn.out_aval.shape), dtype=eqn.out_dtype).copy()
    for k in range(1, len(cases)):
        out = np.where(idx == k, cases[k], out)
    return np.asarray(out, dtype=eqn.out_dtype)


# --- complex parts ------------------------------------------------------------------------------------

@register("complex")
def complex_(eqn, x, y):
    out = np.empty(eqn.out_aval.shape, eqn.out_dtype)
    out.real, out.imag = x, y
    return out


@register("real")
def real(eqn, x):
    return c_order(np.real(x)).astype(eqn.out_dtype)


@register("imag")
def imag(eqn, x):
    return c_order(np.imag(x)).astype(eqn.out_dtype)


@register("conj")
def conj(eqn, x, *, input_dtype=None):
    # jax/_src/lax/lax.py _conj_impl: complex(real(x), -imag(x)); complex(x, 0) for real x
    out = np.empty(eqn.out_aval.shape, eqn.out_dtype)
    if dtypes.is_complex(x.dtype):
        out.real, out.imag = x.real, np.negative(x.imag)
    else:
        out.real, out.imag = x, 0
    return out
