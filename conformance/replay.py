"""Equation-by-equation replays of a jaxpr: the reference under a backend allowance, and the
intermediate values of both sides (for the first divergent equation).

``reference_replay`` evaluates each top-level equation with the reference's own rule (calls such
as ``jit`` are inlined, so jnp functions are seen equation by equation), optionally transformed
the way a backend is allowed to compute:

- ``flush``: subnormal inputs and results of f32/bf16/f64 equations become signed zeros
  (XLA:CPU runs with FTZ/DAZ set), except where an equation only moves bits (MOVES_BITS);
- ``fma``: ``add``/``sub`` of a float32 ``mul`` is computed as one fused multiply-add
  (LLVM contracts fmul+fadd on XLA:CPU/GPU), also where the added operand is a product, or a
  block of one, that reached the add through a ref (a kernel's scratch); ``fma_operand`` picks
  which mul operand is fused;
- ``excess``: bf16/f16 elementwise chains stay in float32 and round once where a value leaves
  the chain (XLA's float normalization + SimplifyFPConversions on GPU/TPU);
- ``rewrites``: XLA's algebraic simplifications log(exp(x)) -> x (so log(exp2(x)) -> ln2 * x, as JAX
  lowers exp2), sqrt(x*x) -> |x|, exp(a) * exp(b) -> exp(a + b) (so integer_pow(exp(a), y) -> one exp)
  and exp(a) / exp(b) -> exp(a - b), a / sqrt(b) -> a * rsqrt(b) and a / rsqrt(b) -> a * sqrt(b)
  (so integer_pow(sqrt(b), -1), lowered to 1 / sqrt(b), -> rsqrt(b));
- ``tf32``: the float32 operands of Precision.DEFAULT ``dot_general``/``conv_general_dilated`` keep
  11 significant bits (TF32 tensor cores), rounded to nearest or truncated, before the exact
  product and the float32 result;
- ``packed_window_f64``: float64 ``select_and_gather_add`` operands rounded to 32 bits (11 exponent,
  20 mantissa), as JAX's GPU lowering packs both into one 64-bit word;
- ``scatter_winner``: a ``scatter`` (set) whose updates hit one element several times keeps the
  k-th of them (in application order, cyclically) instead of the last: :func:`scatter_candidates`
  replays k = 0, 1, ... so that every element's every candidate appears in some replay;
- ``minmax_daz``: bfloat16 ``max``/``min``/``clamp`` compare their operands with subnormals read
  as zero and return the chosen operand unflushed; on a tie under DAZ (both operands zero or
  subnormal) either operand, not decided by the operand order (XLA:CPU on hosts with AVX512-BF16).
  The value (0 .. MINMAX_TIE_PICKS - 1) picks the operand max and min take on such ties; the
  allowance replays every pick (:func:`minmax_tie_candidates`).

The replay runs in the interpreter's own evaluator (``conformance.observe``: ``interp.eval_jaxpr``
with an ``Options.observer``): every equation, inside loops, conditionals and calls too, passes
through the variant, and plans keep their prepared rules, step hooks and output checks.

``backend_intermediates`` evaluates the same equations with ``bind`` inside one jitted function
whose outputs are every intermediate value, so both sides can be compared equation by equation.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any

import numpy as np
import jax
import jax.extend.core as jcore

from interp import dtypes as D
from interp.evaluator import _lookup_rule, is_extended, split_jaxpr
from interp.options import Options
from interp.numerics import reduce_precision_bits

from .divergence_models import reciprocal_quotient
from .observe import CALLS, as_outputs, call_body, holds_jaxprs, observe

FLUSHED = tuple(np.dtype(t) for t in (np.float32, np.float64, D.bfloat16, np.complex64, np.complex128))
SHADOWED = (np.dtype(np.float16), D.bfloat16)
# Divisions XLA:CPU computes as a product with the float32 reciprocal (Variant.reciprocal_division).
RECIPROCAL_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), D.bfloat16)
# Primitives that compare values but only move them: under DAZ the comparison sees zeros, the
# outputs keep the original bits.
MOVES_VALUES = ("sort",)
# Primitives that move bits or flip a sign bit without arithmetic: FTZ/DAZ does not touch them
# (XLA:CPU, JAX 0.12.0.1: neg, abs, copysign, select, reshape of 2**-149 keep it; max, min, sign,
# round and floor flush it).
MOVES_BITS = ("neg", "abs", "copysign", "select_n", "reshape", "broadcast_in_dim", "transpose", "slice",
              "concatenate", "pad", "gather", "dynamic_slice", "dynamic_update_slice", "rev", "squeeze",
              "expand_dims", "copy", "copy_p", "get", "swap", "bitcast_convert_type", "scatter")


@dataclasses.dataclass(frozen=True)
class Variant:
    flush: bool = False
    fma: bool = False
    fma_operand: int = 0
    excess: bool = False
    excess_operands_rounded: bool = False   # with excess: bfloat16 only, each operation's operands
                                            # rounded, its float32 result passed on unrounded only to
                                            # a conversion to float32 or an operation computed in
                                            # float32 (XLA:CPU's float-normalization-bf16)
    rewrites: bool = False
    tf32: str = ""                  # "", "nearest" or "truncate"
    packed_window_f64: bool = False
    scatter_winner: int = -1        # >= 0: of the updates a scatter writes to one element, the k-th wins
    minmax_daz: int = -1            # >= 0: bf16 max/min/clamp under DAZ, ties resolved by these picks
    zero_added_kept: bool = False   # x + 0 and x - 0 (a literal zero) are x, bits kept (spec/divergences.py
                                    # xla-cpu-add-zero-keeps-negative-zero), loop bodies included
    reciprocal_division: bool = False   # x / c for a literal or broadcast divisor c is
                                        # x * fl(1 / c), each rounded in float32 (spec/divergences.py
                                        # xla-cpu-divide-by-constant-as-reciprocal), loop bodies included


DOTS = ("dot_general", "conv_general_dilated")
# Primitives whose jaxpr parameter is a combiner their rule applies itself (no nested equation is
# evaluated, hence observed): the replay transforms them as one equation.
COMBINERS = ("scatter", "scatter-add", "scatter_add", "scatter-sub", "scatter-mul", "scatter-min", "scatter-max")
TF32_BITS = 10                      # explicit mantissa bits of TF32 (11 significant bits)
PACKED_EXPONENT_BITS, PACKED_MANTISSA_BITS = 11, 20


def _default_precision(params) -> bool:
    """A dot/conv whose precision lets XLA:GPU use TF32 (None or DEFAULT for both operands)."""
    p = params.get("precision")
    if p is None:
        return True
    ps = p if isinstance(p, tuple) else (p, p)
    return all(q is None or "DEFAULT" in str(q).upper() for q in ps)


def round_significand(x: np.ndarray, mantissa_bits: int, mode: str) -> np.ndarray:
    """float32 ``x`` keeping ``mantissa_bits`` explicit mantissa bits: rounded to nearest even
    ("nearest") or truncated toward zero ("truncate"); NaN and inf unchanged."""
    x = np.asarray(x, np.float32)
    u = np.ascontiguousarray(x).view(np.uint32).astype(np.uint64)
    if mode == "nearest":
        out = reduce_precision_bits(u, (32, 8, 23), 8, mantissa_bits)
    elif mode == "truncate":
        out = u & np.uint64(~((1 << (23 - mantissa_bits)) - 1) & 0xFFFFFFFF)
    else:
        raise ValueError(f"unknown rounding {mode!r}")
    out = out.astype(np.uint32).view(np.float32).reshape(x.shape)
    return np.where(np.isfinite(x), out, x)


def reduce_precision_f64(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """XLA's reduce_precision of float64 ``x`` (round to nearest even)."""
    x = np.asarray(x, np.float64)
    u = np.ascontiguousarray(x).view(np.uint64)
    return reduce_precision_bits(u, (64, 11, 52), exponent_bits, mantissa_bits).view(np.float64).reshape(x.shape)


# The operands a bf16 max and min may return on a DAZ tie: bit 0 of a pick is max's (0: the first
# operand), bit 1 min's; clamp(lo, x, hi) = min(max(x, lo), hi) is one of each.
MINMAX_TIE_PICKS = 4


def minmax_compared_under_daz(name: str, operands, picks: int) -> np.ndarray:
    """bfloat16 max/min/clamp as XLA:CPU computes them on a host with AVX512-BF16 (spec/allowances.py
    bf16-minmax-daz-compare): the comparison reads subnormals as zero (DAZ) and the operand it
    selects comes back unflushed. Where that decides, it is XLA's max/min (NaN, then the larger or
    smaller value: the reference's rule); on a tie under DAZ, both operands zero or subnormal, the
    operand ``picks`` names (one of the two, never a flushed or other value)."""
    from interp.rules.lax_elementwise import max_min
    tiny = float(D.finfo(D.bfloat16).tiny)

    def tied(v):
        with np.errstate(invalid="ignore"):
            return np.abs(v.astype(np.float32)) < tiny      # zero or subnormal (NaN: no)

    def select(take_max, x, y):
        second = (picks >> (0 if take_max else 1)) & 1
        return np.where(tied(x) & tied(y), y if second else x, max_min(x, y, take_max)).astype(x.dtype)

    arrays = np.broadcast_arrays(*[np.asarray(v) for v in operands])
    if name == "clamp":
        lo, x, hi = arrays
        return select(False, select(True, x, lo), hi)
    return select(name == "max", *arrays)


def flush_subnormals(x):
    x = np.asarray(x)
    if x.dtype not in FLUSHED:
        return x
    if D.is_complex(x.dtype):
        out = x.copy()
        out.real, out.imag = flush_subnormals(x.real), flush_subnormals(x.imag)
        return out
    tiny = float(D.finfo(x.dtype).tiny)
    with np.errstate(invalid="ignore"):
        sub = (np.abs(x.astype(np.float64)) < tiny) & (x != 0)
    if not sub.any():
        return x
    out = x.copy()
    out[sub] = np.copysign(np.zeros((), x.dtype), x[sub]).astype(x.dtype)
    return out


def fma_f64(a, b, c) -> np.ndarray:
    """a * b + c for float64 operands, rounded once (an FMA): the product split exactly into
    p + e (Dekker's TwoProduct, Veltkamp splitting), then the three terms added exactly and
    rounded once (math.fsum). Where the product or the sum is not finite, a * b + c."""
    import math
    a, b, c = np.broadcast_arrays(*(np.asarray(x, np.float64) for x in (a, b, c)))
    with np.errstate(all="ignore"):
        p = a * b
        split = 134217729.0                      # 2**27 + 1
        ah = a * split - (a * split - a)
        bh = b * split - (b * split - b)
        al, bl = a - ah, b - bh
        e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
        plain = p + c
    out = np.array(plain, np.float64)          # (an array also for rank 0: p + c of 0-d arrays is a scalar)
    for i in np.flatnonzero(np.isfinite(p) & np.isfinite(e) & np.isfinite(c) & np.isfinite(plain)):
        j = np.unravel_index(i, out.shape) if out.shape else ()
        try:
            out[j] = math.fsum((float(p[j]), float(e[j]), float(c[j])))
        except OverflowError:
            pass
    return out


def _zero_added_kept(eqn, invals):
    """x + 0, 0 + x or x - 0 with the zero a float literal (either sign): x itself, as XLA:CPU's
    code generator folds it; None for any other add or sub."""
    dtype = np.dtype(eqn.outvars[0].aval.dtype)
    if not D.is_float(dtype) or D.is_complex(dtype):
        return None
    sides = (1,) if eqn.primitive.name == "sub" else (1, 0)
    for z in sides:
        lit = eqn.invars[z]
        if isinstance(lit, jcore.Literal) and np.all(np.asarray(lit.val) == 0):
            x = np.asarray(invals[1 - z])
            return np.array(np.broadcast_to(x, eqn.outvars[0].aval.shape), dtype)
    return None


def nextafter_under_daz(x, y) -> np.ndarray:
    """XLA:CPU's nextafter with subnormal operands read as zero where it compares them: when the
    flushed operands are equal it returns y's own bits (nextafter(2**-149, -2**-149) = -2**-149);
    otherwise the step from x's own bits, which is bit arithmetic and not flushed
    (nextafter(2**-149, 1) = 2**-148). Measured on XLA:CPU, JAX 0.12.0.1."""
    x, y = np.broadcast_arrays(np.asarray(x), np.asarray(y))
    fx, fy = flush_subnormals(x), flush_subnormals(y)
    with np.errstate(invalid="ignore"):
        equal = fx.astype(np.float64) == fy.astype(np.float64)
    with np.errstate(over="ignore"):
        return np.where(equal, y, np.nextafter(x, y)).astype(x.dtype)


def fma_round_f32(p: np.ndarray, c: np.ndarray) -> np.ndarray:
    """p + c correctly rounded to float32, for float64 ``p`` and ``c`` (one rounding: an FMA).

    s = fl64(p + c) with its exact error e (TwoSum); rounding s to f32 is correct unless s lies
    exactly halfway between two f32 values and e is not 0, where e decides the direction.
    """
    p, c = np.broadcast_arrays(np.asarray(p, np.float64), np.asarray(c, np.float64))
    with np.errstate(all="ignore"):
        s = p + c
        bb = s - p
        e = (p - (s - bb)) + (c - bb)                    # TwoSum: s + e == p + c exactly
        r = s.astype(np.float32)
        toward = np.where(s > r.astype(np.float64), np.float32(np.inf), np.float32(-np.inf))
        other = np.nextafter(r, toward.astype(np.float32))
        midpoint = np.isfinite(s) & (r.astype(np.float64) != s) & \
            ((r.astype(np.float64) + other.astype(np.float64)) / 2 == s)
        # At a midpoint the exact value is beyond it in the direction of e.
        go_other = midpoint & (e != 0) & (np.sign(e) == np.sign(other.astype(np.float64) - s))
        return np.asarray(np.where(go_other, other, r), np.float32)


def _wide_f32(op: str, *xs):
    """float32 shadow arithmetic for excess precision (NumPy's f32 ops are correctly rounded)."""
    xs = [np.asarray(x, np.float32) for x in xs]
    with np.errstate(all="ignore"):
        return {
            "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "div": lambda a, b: a / b, "neg": lambda a: -a, "abs": np.abs, "max": np.maximum,
            "min": np.minimum, "sqrt": np.sqrt,
        }[op](*xs)


SHADOW_OPS = ("add", "sub", "mul", "div", "neg", "abs", "max", "min", "sqrt", "square", "integer_pow")


def _product_dot_factors(eqn, lhs, rhs):
    """The factors (a, b), each shaped like the output, of a dot_general that contracts nothing
    (an elementwise or outer product, batched or not: XLA emits a multiply per element, which LLVM
    contracts like one); None for a dot that sums."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    if lc or rc:
        return None
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    lf = [d for d in range(lhs.ndim) if d not in lb]
    rf = [d for d in range(rhs.ndim) if d not in rb]
    # output dimensions: batch, then lhs free, then rhs free
    a = np.transpose(lhs, list(lb) + lf).reshape(
        tuple(lhs.shape[d] for d in lb) + tuple(lhs.shape[d] for d in lf) + (1,) * len(rf))
    b = np.transpose(rhs, list(rb) + rf).reshape(
        tuple(rhs.shape[d] for d in rb) + (1,) * len(lf) + tuple(rhs.shape[d] for d in rf))
    shape = tuple(eqn.outvars[0].aval.shape)
    return np.broadcast_to(a, shape), np.broadcast_to(b, shape)


LN2 = 0.6931471805599453       # ln 2 correctly rounded to float64 (NumPy's log differs by host)


def _exp_of(s, dtype) -> np.ndarray:
    """The reference's (correctly rounded) exp of ``s`` in ``dtype``."""
    with np.errstate(all="ignore"):
        return np.asarray(_correctly_rounded("exp", np.asarray(s, np.float64), dtype)).astype(dtype)


def _correctly_rounded(name, x, dtype) -> np.ndarray:
    from interp.rules.lax_special import correctly_rounded
    return correctly_rounded(name, x, dtype=dtype)


def _bits_of(x) -> np.ndarray:
    """The bits of a float array (NaNs compared by their bits too)."""
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}") if x.dtype.kind == "f" else x


def _value_key(x):
    x = np.asarray(x)
    if x.size == 0 or x.size > 1 << 14:
        return None
    return (x.dtype.str, x.shape, x.tobytes())


def integer_pow_last_factors(x, y: int):
    """The operands (float32 or float64, as x) of the last multiplication of x ** y as JAX lowers
    integer_pow (see integer_pow_f32), or None (y < 2: no multiplication, or a division)."""
    if y < 2:
        return None
    x = np.asarray(x)
    acc, acc_factors, x_factors, n = None, None, None, y
    with np.errstate(all="ignore"):
        while n:
            if n & 1:
                if acc is None:
                    acc, acc_factors = x, x_factors
                else:
                    acc, acc_factors = acc * x, (acc, x)
            n >>= 1
            if n:
                x, x_factors = x * x, (x, x)
    return acc_factors


def integer_pow_f32(x, y: int, steps=np.float32):
    """x ** y in float32 as JAX lowers integer_pow (jax/_src/lax/lax.py _integer_pow: binary
    powering, acc * x for each set bit, x * x per step; 1 / that for y < 0), each product rounded
    to float32, or with ``steps`` (float16/bfloat16) each but the last rounded to that type."""
    x = np.asarray(x, np.float32)
    steps = np.dtype(steps)

    def rounded(v):
        return np.asarray(v, np.float32).astype(steps).astype(np.float32)
    acc, last, n = None, None, abs(y)      # last: the latest product before its rounding
    with np.errstate(all="ignore"):
        while n:
            if n & 1:
                if acc is None:
                    acc = x
                else:
                    last = acc * x
                    acc = rounded(last)
            n >>= 1
            if n:
                last = x * x
                x = rounded(last)
        if acc is None:
            return np.float32(1) / np.ones_like(x) if y < 0 else np.ones_like(x)
        if y < 0:
            return np.float32(1) / acc
        return acc if last is None else last      # (the top bit's step is the last product)


def walk_inlining_calls(jaxpr, consts, args, eval_eqn, literal, after_call=None) -> list:
    """Evaluate ``jaxpr`` equation by equation, entering calls (``CALLS``) instead of evaluating
    them: ``eval_eqn(eqn, invals) -> outs`` sees every other equation; ``literal(lit)`` gives a
    literal's value; ``after_call(eqn, inner_jaxpr)`` runs after each call."""
    env: dict = {}

    def read(a):
        return literal(a) if isinstance(a, jcore.Literal) else env[a]

    for var, val in zip(list(jaxpr.constvars) + list(jaxpr.invars), list(consts) + list(args)):
        env[var] = val
    for eqn in jaxpr.eqns:
        invals = [read(a) for a in eqn.invars]
        sub = call_body(eqn) if eqn.primitive.name in CALLS else None
        if sub is not None:
            inner, inner_consts = split_jaxpr(sub)
            outs = walk_inlining_calls(inner, inner_consts, invals, eval_eqn, literal, after_call)
            if after_call is not None:
                after_call(eqn, inner)
        else:
            outs = eval_eqn(eqn, invals)
        for ov, o in zip(eqn.outvars, outs):
            if not isinstance(ov, jcore.DropVar):
                env[ov] = o
    return [read(a) for a in jaxpr.outvars]


def _top_level_eqns(jaxpr, out: set) -> set:
    """ids of the equations ``walk_inlining_calls`` evaluates (calls entered, not evaluated)."""
    for eqn in jaxpr.eqns:
        sub = call_body(eqn) if eqn.primitive.name in CALLS else None
        if sub is not None:
            _top_level_eqns(split_jaxpr(sub)[0], out)
        else:
            out.add(id(eqn))
    return out


class _Replay:
    """The watcher (conformance.observe) of a replay: every equation the evaluator runs, nested
    jaxprs included, goes through :meth:`step` (plans keep their ``prepare``d rules, step hooks
    and output checks: the replay only transforms operands and results)."""

    def __init__(self, variant: Variant, record_eqns: set | None):
        self.v = variant
        self.record_eqns = record_eqns       # ids of the equations whose values the trace keeps
        self.producer: dict[Any, Any] = {}   # var -> eqn that produced it
        self.alias: dict[Any, Any] = {}      # a call's inner invar -> the outer atom it is bound to
        self.shadow: dict[Any, np.ndarray] = {}
        self.trace: list[tuple[Any, Any, Any]] = []  # (eqn, outvar, value)
        self._operands: dict[int, list] = {}  # id(eqn) -> its operands as given, for fma/rewrites
        self.max_writers = 1                  # most updates a scatter wrote to one element
        self._products: dict = {}             # fma: a float32 product's bits -> its operands
        # fma: the latest (product, operands), to find a block of one in (bounded: a loop's products)
        self._product_arrays: collections.deque = collections.deque(maxlen=64)

    def step(self, ctx, rule, invals, params):
        eqn = ctx.eqn
        sub = call_body(eqn) if ctx.name in CALLS else None
        inner = split_jaxpr(sub)[0] if sub is not None else None
        if inner is not None:
            # Calls are transparent: the callee's operands are the caller's atoms.
            for iv, a in zip(inner.invars, eqn.invars):
                self.alias[iv] = a
                if not isinstance(a, jcore.Literal) and a in self.shadow:
                    self.shadow[iv] = self.shadow[a]
        if holds_jaxprs(eqn) and ctx.name not in COMBINERS:
            # Calls and control flow are transparent: the equations inside are observed one by
            # one (flushing at the boundary would flush values the program only moves).
            outs = as_outputs(ctx, rule(ctx, *invals, **params))
        else:
            outs = self.eval_eqn(ctx, rule, list(invals), params)
        for ov, o in zip(eqn.outvars, outs):
            if self.record_eqns is not None and id(eqn) in self.record_eqns:
                self.trace.append((eqn, ov, o))
            if not isinstance(ov, jcore.DropVar):
                self.producer[ov] = eqn
        if inner is not None:
            for ov, iv in zip(eqn.outvars, inner.outvars):
                if not isinstance(iv, jcore.Literal):
                    src = self._resolve(iv)
                    if src in self.producer:
                        self.producer[ov] = self.producer[src]
                    if iv in self.shadow:
                        self.shadow[ov] = self.shadow[iv]
        return outs if eqn.primitive.multiple_results else outs[0]

    def eval_eqn(self, ctx, rule, invals, params):
        eqn = ctx.eqn
        self._operands[id(eqn)] = invals
        v = self.v
        name = ctx.name
        if v.flush and name in MOVES_VALUES:
            return self._moved_under_daz(ctx, rule, invals, params)
        if v.flush and name == "nextafter" and np.dtype(ctx.out_dtype) in FLUSHED:
            return [nextafter_under_daz(*invals)]
        if v.minmax_daz >= 0 and name in ("max", "min", "clamp") and np.dtype(ctx.out_dtype) == D.bfloat16:
            return [minmax_compared_under_daz(name, invals, v.minmax_daz).reshape(ctx.out_aval.shape)]
        if v.zero_added_kept and name in ("add", "sub"):
            kept = _zero_added_kept(eqn, invals)
            if kept is not None:
                return [kept]                # (the code generator folds it: nothing flushed either)
        flush = v.flush and (name not in MOVES_BITS or self._select_as_minmax(eqn))
        touched = self._accumulated(ctx, rule, invals, params) if flush and name == "addupdate" else None
        if flush:
            invals = [flush_subnormals(x) if isinstance(x, (np.ndarray, np.generic)) else x for x in invals]
            if touched is not None:      # DAZ: the ref's elements the accumulation adds to are read flushed
                invals[0].array[touched] = flush_subnormals(invals[0].array[touched])
        if v.tf32 and name in DOTS and _default_precision(params) and all(
                np.dtype(getattr(a.aval, "dtype", None) or np.int8) == np.float32 for a in eqn.invars[:2]):
            invals = [round_significand(np.asarray(x), TF32_BITS, v.tf32) for x in invals[:2]] + invals[2:]
        if v.packed_window_f64 and name == "select_and_gather_add" and np.dtype(eqn.outvars[0].aval.dtype) == np.float64:
            invals = [reduce_precision_f64(np.asarray(x), PACKED_EXPONENT_BITS, PACKED_MANTISSA_BITS) for x in invals]
        out = None
        if v.scatter_winner >= 0 and name == "scatter":
            out = self._scatter_kth(ctx, invals, params)
        if out is None and v.reciprocal_division and name == "div":
            out = self._reciprocal_division(eqn, invals)
        if out is None and v.rewrites and eqn.outvars:      # (an addupdate has no outputs to rewrite)
            out = self._rewrite(eqn, invals)
        if out is None and v.fma and name == "addupdate":
            out = self._fma_accumulate(ctx, rule, invals, params)
        if out is None and v.fma:
            out = self._fma(eqn, invals)
        if out is None and v.excess and eqn.outvars:
            out = self._excess(eqn, invals)
        if out is None:
            out = as_outputs(ctx, rule(ctx, *invals, **params))
        if flush:
            out = [flush_subnormals(x) if isinstance(x, (np.ndarray, np.generic)) else x for x in out]
            if touched is not None:      # an accumulation into a ref: its result is the ref's new content
                invals[0].array[touched] = flush_subnormals(invals[0].array[touched])
        if v.fma and out:
            self._note_product(eqn, invals, out[0])
        return out

    def _moved_under_daz(self, ctx, rule, invals, params):
        """sort under DAZ: the keys compare as if subnormals were zero, but the values moved are
        the original ones (the comparator reads flushed values, the data is only copied)."""
        n = len(invals)
        keys = [flush_subnormals(x) for x in invals[:params["num_keys"]]]
        # The registered rule itself: the step's prepared function is specialised to the
        # equation's own operand count, and this call sorts the flushed keys with the values.
        out = _lookup_rule(ctx)(ctx, *keys, *invals, **params)
        return list(out)[-n:]

    def _scatter_kth(self, ctx, invals, params):
        from interp.rules import lax_indexing as rules
        update_jaxpr = params.get("update_jaxpr")
        if update_jaxpr is not None and not rules._is_set_jaxpr(update_jaxpr):
            return None
        operand, indices, updates = (np.asarray(x) for x in invals)
        out = np.array(operand, order="C", copy=True)
        if out.size == 0 or updates.size == 0:
            return [out]
        targets, values = rules._scatter_targets(ctx, out.shape, indices, updates, params["dimension_numbers"],
                                                 rules._mode_name(ctx, params["mode"]))
        order = np.argsort(targets, kind="stable")          # each target's writers, in application order
        sorted_targets = targets[order]
        first = np.flatnonzero(np.r_[True, sorted_targets[1:] != sorted_targets[:-1]])
        counts = np.diff(np.r_[first, sorted_targets.size])
        self.max_writers = max(self.max_writers, int(counts.max()))
        pick = order[first + self.v.scatter_winner % counts]
        out.reshape(-1)[targets[pick]] = values[pick]
        return [out]

    def _reciprocal_division(self, eqn, invals):
        """x / y as XLA's simplifier rewrites a division by a constant (a literal) or a broadcast
        value: x * fl(1 / y), both steps rounded in float32 (float16/bfloat16: computed in float32,
        rounded to the type once); None for any other division."""
        dtype = np.dtype(eqn.outvars[0].aval.dtype)
        if dtype not in RECIPROCAL_DTYPES:
            return None
        y = self._resolve(eqn.invars[1])
        if not isinstance(y, jcore.Literal) and self._from(y, "broadcast_in_dim") is None:
            return None
        with np.errstate(all="ignore"):
            return [reciprocal_quotient(invals[0], invals[1], dtype).reshape(eqn.outvars[0].aval.shape)]

    def _resolve(self, atom):
        while not isinstance(atom, jcore.Literal) and atom in self.alias:
            atom = self.alias[atom]
        return atom

    def _select_as_minmax(self, eqn) -> bool:
        """select(a > b, a, b) and its min/max relatives (a gt or lt of exactly the two selected
        values): LLVM emits them as x86 MAXPS/MINPS, which under DAZ read a subnormal as zero and
        return the zero (XLA:CPU, JAX 0.10.2 and 0.12.0.1: select(x > -1, x, -1) of -2**-149 is -0.0;
        select(x >= -1, x, -1) keeps the bits). Flushed like max and min, not moved like a select."""
        if eqn.primitive.name != "select_n" or len(eqn.invars) != 3 or \
                np.dtype(eqn.outvars[0].aval.dtype) not in FLUSHED:
            return False
        cmp = self._from(eqn.invars[0], "gt") or self._from(eqn.invars[0], "lt")
        if cmp is None:
            return False
        chosen = {self._resolve(a) for a in eqn.invars[1:]}
        compared = {self._resolve(a) for a in cmp.invars}
        return len(chosen) == 2 and chosen == compared

    def _from(self, atom, name):
        atom = self._resolve(atom)
        if isinstance(atom, jcore.Literal):
            return None
        e = self.producer.get(atom)
        return e if e is not None and e.primitive.name == name else None

    def _rewrite(self, eqn, invals):
        name = eqn.primitive.name
        if name == "log":
            e = self._from(eqn.invars[0], "exp")
            if e is not None:
                return [np.asarray(self._operands[id(e)][0])]
        if name == "sqrt":
            m = self._from(eqn.invars[0], "mul")
            if m is not None and m.invars[0] is m.invars[1]:
                return [np.abs(np.asarray(self._operands[id(m)][0]))]
        dtype = np.dtype(eqn.outvars[0].aval.dtype)
        if not D.is_float(dtype):
            return None
        if name == "log":
            e = self._from(eqn.invars[0], "exp2")
            if e is not None:
                # JAX lowers exp2(x) as exp(ln2 * x) (ln2 rounded to x's type); log(exp(y)) -> y
                x = np.asarray(self._operands[id(e)][0])
                with np.errstate(all="ignore"):
                    return [np.multiply(np.asarray(LN2, dtype), x).astype(dtype)]
        arg = self._exp_argument(eqn, name)
        if arg is not None:
            return [_exp_of(arg, dtype)]
        return self._root_quotient(eqn, name, invals, dtype)

    def _root_quotient(self, eqn, name, invals, dtype):
        """A / sqrt(B) as XLA's simplifier rewrites it, A * rsqrt(B) (and A / rsqrt(B) as
        A * sqrt(B)); JAX lowers integer_pow(x, -1) to 1 / x, so integer_pow(sqrt(B), -1) is
        rsqrt(B). The root of B correctly rounded, the product rounded once; None if no match."""
        if name == "div":
            numerator, divisor = invals[0], eqn.invars[1]
        elif name == "integer_pow" and eqn.params["y"] == -1:
            numerator, divisor = None, eqn.invars[0]
        else:
            return None
        for root, inverse in (("sqrt", "rsqrt"), ("rsqrt", "sqrt")):
            e = self._from(divisor, root)
            if e is None:
                continue
            b = np.asarray(self._operands[id(e)][0])
            with np.errstate(all="ignore"):
                r = np.asarray(_correctly_rounded(inverse, b.astype(np.float64), dtype)).astype(dtype)
                return [r if numerator is None else np.multiply(np.asarray(numerator), r).astype(dtype)]
        return None

    def _exp_arg(self, atom):
        """s where ``atom`` is exp(s), or exp2(x) as JAX lowers it, exp(fl(ln2 * x)); else None."""
        e = self._from(atom, "exp")
        if e is not None:
            return np.asarray(self._operands[id(e)][0])
        e = self._from(atom, "exp2")
        if e is None:
            return None
        x = np.asarray(self._operands[id(e)][0])
        with np.errstate(all="ignore"):
            return np.multiply(np.asarray(LN2, x.dtype), x).astype(x.dtype)

    def _exp_argument(self, eqn, name):
        """The argument s of the single exp(s) XLA's simplifier makes of a product or quotient of
        exps (exp(A) * exp(B) => exp(A+B), exp(A) / exp(B) => exp(A-B), and so of the multiplications
        JAX lowers integer_pow(exp(a), y >= 2) to), rounded as those adds are; None if none."""
        if name in ("mul", "div"):
            a, b = (self._exp_arg(v) for v in eqn.invars[:2])
            if a is None or b is None:
                return None
            with np.errstate(all="ignore"):
                return (a + b if name == "mul" else a - b).astype(a.dtype)
        if name == "square":
            a = self._exp_arg(eqn.invars[0])
            with np.errstate(all="ignore"):
                return None if a is None else (a + a).astype(a.dtype)
        if name == "integer_pow" and eqn.params["y"] >= 2:
            x, acc, y = self._exp_arg(eqn.invars[0]), None, eqn.params["y"]
            if x is None:
                return None
            with np.errstate(all="ignore"):
                while y > 0:          # jax._src.lax.lax._integer_pow, each mul an add of exponents
                    if y & 1:
                        acc = x if acc is None else (acc + x).astype(x.dtype)
                    y >>= 1
                    if y > 0:
                        x = (x + x).astype(x.dtype)
            return acc
        return None

    def _fma(self, eqn, invals):
        name = eqn.primitive.name
        if name == "polynomial" and np.dtype(eqn.outvars[0].aval.dtype) == np.float32:
            # Horner's acc * x + c, each step one FMA (LLVM contracts the lowering's mul + add).
            shape = eqn.outvars[0].aval.shape
            x, *coeffs = (np.broadcast_to(np.asarray(v, np.float64), shape) for v in invals)
            acc = coeffs[-1]
            with np.errstate(all="ignore"):
                for c in reversed(coeffs[:-1]):
                    acc = fma_round_f32(acc * x, c).astype(np.float64)   # f32 * f32 is exact in f64
            return [np.asarray(acc, np.float32).reshape(shape)]
        if name not in ("add", "add_any", "sub") or np.dtype(eqn.outvars[0].aval.dtype) not in (np.float32, np.float64):
            return None             # (add_any: the sum of cotangents autodiff makes)
        order = (0, 1) if self.v.fma_operand == 0 else (1, 0)
        for i in order:
            fused = self.fma_candidate(eqn, invals, i)
            if fused is not None:
                return [fused]
        return None

    @staticmethod
    def _accumulated(ctx, rule, invals, params):
        """The mask of the ref's elements an ``addupdate`` adds to (the rule itself accumulates ones
        into a zero probe of the ref's shape); None for a ref without a NumPy buffer. Only these are
        arithmetic: under FTZ/DAZ the others keep their bits (XLA:CPU flushes no data movement)."""
        from interp.refs import Ref
        ref = invals[0]
        if not isinstance(ref, Ref) or not isinstance(ref.array, np.ndarray):
            return None
        probe = Ref(np.zeros(ref.shape, np.float64), ref.name, ref.check_bounds)
        rule(ctx, probe, np.ones(np.shape(invals[1])), *invals[2:], **params)
        return probe.array > 0

    def _fma_accumulate(self, ctx, rule, invals, params):
        """An accumulation into a ref (``ref[i] += v``) as one FMA where ``v`` is a product
        (``ref[i] += a * b``) or the ref holds one (``ref[...] = a * b; ref[...] += v``): XLA lowers
        it to a load, an add and a store (folding the store of the product), and LLVM contracts the
        add with the product. None where neither is a product or an element is updated more than
        once (array indices)."""
        from interp.refs import Ref
        ref, value = invals[0], np.asarray(invals[1])
        if type(ref) is not Ref or ref.dtype not in (np.float32, np.float64):
            return None
        factors = self._product_factors(ctx.eqn.invars[1], value)
        # Where each element of the value lands: the rule itself accumulates the value's positions
        # (1-based) into a zero probe of the ref's shape.
        probe = Ref(np.zeros(ref.shape, np.float64), ref.name, ref.check_bounds)
        rule(ctx, probe, np.arange(1, value.size + 1, dtype=np.float64).reshape(value.shape), *invals[2:], **params)
        ones = Ref(np.zeros(ref.shape, np.float64), ref.name, ref.check_bounds)
        rule(ctx, ones, np.ones(value.shape), *invals[2:], **params)
        if (ones.array > 1).any() or not ref.array.flags.c_contiguous:
            return None
        where = np.flatnonzero(probe.array)
        k = probe.array.reshape(-1)[where].astype(np.int64) - 1
        flat = ref.array.reshape(-1)                # (a view; rank 0 included)
        old = flat[where]
        if factors is not None:
            addend = old
        elif where.size == value.size:
            # the ref's elements, laid out as the value: a product stored into the ref earlier?
            held = np.empty(value.size, ref.dtype)
            held[k] = old
            held = held.reshape(value.shape)
            factors = self._products.get(_value_key(held)) or self._product_block(held)
            if factors is None:
                return None
            addend = value.reshape(-1)[k]
        else:
            return None
        a, b = (np.broadcast_to(np.asarray(f), value.shape).reshape(-1)[k] for f in factors)
        with np.errstate(all="ignore"):
            if ref.dtype == np.float64:
                flat[where] = fma_f64(a, b, addend)
            else:
                flat[where] = fma_round_f32(np.asarray(a, np.float64) * np.asarray(b, np.float64),
                                            np.asarray(addend, np.float64))
        return []

    def fma_candidate(self, eqn, invals, i: int):
        """A float32 add/sub with its operand ``i`` computed as one FMA of the product that
        produced that operand (see _product_factors) and the other operand; None if operand ``i``
        is no product."""
        factors = self._product_factors(eqn.invars[i], invals[i])
        if factors is None:
            return None
        if np.dtype(eqn.outvars[0].aval.dtype) == np.float64:
            sign = -1.0 if eqn.primitive.name == "sub" else 1.0
            a, b = factors
            c = np.asarray(invals[1 - i], np.float64)
            if eqn.primitive.name == "sub" and i == 1:       # c - a * b
                return fma_f64(-np.asarray(a, np.float64), b, c)
            return fma_f64(a, b, sign * c)
        a, b = (np.asarray(x, np.float64) for x in factors)
        c = np.asarray(invals[1 - i], np.float64)
        with np.errstate(all="ignore"):
            prod = a * b  # exact: 48 significant bits fit in a double
            if eqn.primitive.name == "sub":
                prod, c = (prod, -c) if i == 0 else (-prod, c)
            return fma_round_f32(prod, c)

    def _product_factors(self, atom, value):
        """The float32 operands (a, b) of the multiplication whose rounded product is ``atom``: a
        ``mul``, a ``square``, the last multiplication of an ``integer_pow`` (y >= 2), or, where
        the value reached the add another way (a loop carry XLA hoisted out of its loop), a product
        computed earlier with exactly these bits, or the negation of one of these (-(a * b) is
        (-a) * b exactly: JAX's derivative of a quotient adds neg(g * x / y**2) to g / y). None if
        there is none."""
        n = self._from(atom, "neg")
        if n is not None:
            inner = self._product_factors(n.invars[0], self._operands[id(n)][0])
            if inner is not None:
                return -np.asarray(inner[0]), inner[1]
        for name in ("mul", "square", "integer_pow", "dot_general"):
            m = self._from(atom, name)
            if m is None or np.dtype(m.outvars[0].aval.dtype) not in (np.float32, np.float64):
                continue
            ops = self._operands[id(m)]
            if name == "dot_general":
                factors = _product_dot_factors(m, ops[0], ops[1])
                if factors is None:
                    continue
                return factors
            if name == "mul":
                return ops
            if name == "square":
                return ops[0], ops[0]
            return integer_pow_last_factors(ops[0], m.params["y"])
        return self._products.get(_value_key(value)) or self._product_block(value)

    def _product_block(self, value):
        """The operands of a block of a product computed earlier whose bits are exactly ``value``
        (a Pallas kernel stores a product into a ref and adds a block of it read back: XLA folds
        the ref's update and read, and LLVM contracts the multiply with the add). None unless the
        block is found, and found with the same operands wherever it is."""
        v = np.asarray(value)
        if v.ndim == 0 or v.size == 0:
            return None
        found = None
        for prod, factors in self._product_arrays:
            if prod.dtype != v.dtype or prod.ndim != v.ndim or any(a < b for a, b in zip(prod.shape, v.shape)):
                continue
            windows = np.lib.stride_tricks.sliding_window_view(prod, v.shape)
            same = np.all(_bits_of(windows) == _bits_of(v), axis=tuple(range(v.ndim, 2 * v.ndim)))
            for start in zip(*np.nonzero(same)):
                block = tuple(slice(i, i + n) for i, n in zip(start, v.shape))
                ops = tuple(np.asarray(f)[block] for f in factors)
                if found is not None and not all(_bits_of(a).tobytes() == _bits_of(b).tobytes()
                                                 for a, b in zip(found, ops)):
                    return None
                found = ops
        return found

    def _note_product(self, eqn, invals, out) -> None:
        """Remember a float32 product's operands by the product's bits (see _product_factors)."""
        name = eqn.primitive.name
        if name not in ("mul", "square", "integer_pow") or np.dtype(eqn.outvars[0].aval.dtype) not in (
                np.float32, np.float64):
            return
        factors = (invals[0], invals[1]) if name == "mul" else (invals[0], invals[0]) if name == "square" else \
            integer_pow_last_factors(invals[0], eqn.params["y"])
        key = _value_key(out)
        if factors is not None and key is not None:
            self._products[key] = tuple(np.broadcast_to(np.asarray(f), np.shape(out)) for f in factors)
            if 0 < np.ndim(out) and np.size(out) <= 1 << 12:
                self._product_arrays.append((np.asarray(out), self._products[key]))

    def _excess(self, eqn, invals):
        name = eqn.primitive.name
        dtype = getattr(eqn.outvars[0].aval, "dtype", None)
        if name == "convert_element_type":
            new = np.dtype(eqn.params["new_dtype"])
            src = eqn.invars[0]
            if new == np.float32 and not isinstance(src, jcore.Literal) and src in self.shadow:
                return [self.shadow[src]]   # convert(convert(x, bf16), f32) -> x
            if new in SHADOWED and np.dtype(eqn.invars[0].aval.dtype) == np.float32 and not self.v.excess_operands_rounded:
                # Even an explicit f32 -> bf16 rounding disappears when its consumers are upcast.
                self.shadow[eqn.outvars[0]] = np.asarray(invals[0], np.float32)
                return [np.asarray(invals[0]).astype(new)]
            return None
        if dtype is None or is_extended(dtype) or np.dtype(dtype) not in SHADOWED:
            return None             # (a PRNG key's dtype is no NumPy dtype)
        if self.v.excess_operands_rounded and name in ("cosh", "sinh") and np.dtype(dtype) == D.bfloat16:
            # XLA:CPU computes these in float32 (CHLO's upcast, no convert in the jaxpr): they read
            # their operand's float32 result unrounded as a convert back to float32 would
            src = self._resolve(eqn.invars[0])
            if isinstance(src, jcore.Literal) or src not in self.shadow:
                return None
            from interp.rules.lax_special import correctly_rounded
            return [correctly_rounded(name, self.shadow[src], dtype=dtype).reshape(eqn.outvars[0].aval.shape)]
        if name not in SHADOW_OPS:
            return None
        if self.v.excess_operands_rounded:
            if np.dtype(dtype) != D.bfloat16:
                return None
            wide = [np.asarray(x, np.float32) for x in invals]
            steps = dtype                # integer_pow: every product rounded but the last
        else:
            wide = [self.shadow.get(a, x) if not isinstance(a, jcore.Literal) else x
                    for a, x in zip(eqn.invars, invals)]
            steps = np.float32
        if name == "integer_pow":
            s = integer_pow_f32(wide[0], eqn.params["y"], steps=steps)
        elif name == "square":
            s = _wide_f32("mul", wide[0], wide[0])
        else:
            s = _wide_f32(name, *wide)
        self.shadow[eqn.outvars[0]] = s
        return [s.astype(dtype)]


def reference_replay(closed_jaxpr, args, variant: Variant = Variant(), *, options: Options | None = None,
                     record: bool = False, watcher=None):
    """(outputs, trace) of the reference evaluated under ``variant`` by the interpreter's own
    evaluator (interp/evaluator.py Plan.run with an observer on every equation, nested ones
    included). With ``record``, the trace holds the value of every equation that
    ``walk_inlining_calls`` evaluates (the top level, calls entered), in evaluation order.
    ``watcher(variant, record_eqns)``: the watcher to replay with (default :class:`_Replay`; a
    subclass may compute some equations another way, as the program fuzzer's oracle does)."""
    outs, replay = _replay_with_state(closed_jaxpr, args, variant, options, record, watcher)
    return outs, replay.trace


def _replay_with_state(closed_jaxpr, args, variant, options, record=False, watcher=None):
    jaxpr, _ = split_jaxpr(closed_jaxpr)
    replay = (watcher or _Replay)(variant, _top_level_eqns(jaxpr, set()) if record else None)
    # (keyed by the variant: replays under one variant share their plans)
    outs = observe(closed_jaxpr, args, replay, key=variant, options=options)
    return [np.asarray(o) if isinstance(o, (np.ndarray, np.generic)) else o for o in outs], replay


def program_ops(closed_jaxpr) -> list[tuple[str, str, dict]]:
    """(primitive, output dtype name, params) of every equation of a program, nested jaxprs
    (loop bodies, branches, calls, custom rules) included: what an allowance may require."""
    out: list = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            dtype = getattr(eqn.outvars[0].aval, "dtype", None) if eqn.outvars else None
            name = np.dtype(dtype).name if dtype is not None and not is_extended(dtype) else ""
            out.append((eqn.primitive.name, name, eqn.params))
            for v in eqn.params.values():
                for x in (v if isinstance(v, (tuple, list)) else (v,)):
                    inner = getattr(x, "jaxpr", x)
                    if hasattr(inner, "eqns"):
                        walk(inner)
    walk(split_jaxpr(closed_jaxpr)[0])
    return out


def minmax_tie_candidates(closed_jaxpr, args, variant: Variant = Variant(), *, options: Options | None = None,
                          replay=None) -> list[list]:
    """The outputs replayed under every tie pick of ``minmax_daz`` (MINMAX_TIE_PICKS replays): an
    element whose bf16 max/min/clamp ties under DAZ equals, in one of them, each operand it may
    return. (A program with several such equations meeting in one element is accepted where their
    ties pick alike per kind: narrower than either operand of each, never wider.) ``replay(variant)``
    gives one replay's list of output lists (default: one reference_replay)."""
    replay = replay or (lambda v: [reference_replay(closed_jaxpr, args, v, options=options)[0]])
    return [outs for k in range(MINMAX_TIE_PICKS) for outs in replay(dataclasses.replace(variant, minmax_daz=k))]


def scatter_candidates(closed_jaxpr, args, variant: Variant = Variant(), *, options: Options | None = None,
                       limit: int = 64, watcher=None) -> list[list]:
    """The reference's outputs replayed once per duplicate rank (``scatter_winner`` = 0, 1, ...,
    up to the most updates any scatter wrote to one element, at most ``limit``): an element that a
    scatter set from duplicate indices equals, in one of them, each update targeting it."""
    first, replay = _replay_with_state(closed_jaxpr, args, dataclasses.replace(variant, scatter_winner=0), options,
                                       watcher=watcher)
    outs = [first]
    for k in range(1, min(replay.max_writers, limit)):
        outs.append(reference_replay(closed_jaxpr, args, dataclasses.replace(variant, scatter_winner=k),
                                     options=options, watcher=watcher)[0])
    return outs


def comparable(aval) -> bool:
    dtype = getattr(aval, "dtype", None)
    return dtype is not None and not is_extended(dtype) and type(aval).__name__ == "ShapedArray"


def backend_intermediates(closed_jaxpr, args, device=None) -> list:
    """Every top-level (calls inlined) comparable intermediate value computed by the backend,
    in the order ``reference_replay(..., record=True)`` records them."""
    jaxpr, consts = split_jaxpr(closed_jaxpr)

    def bind_and_record(rec):
        def eval_eqn(eqn, invals):
            outs = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(eqn.params))
            outs = list(outs) if eqn.primitive.multiple_results else [outs]
            rec.extend(o for ov, o in zip(eqn.outvars, outs) if comparable(ov.aval))
            return outs
        return eval_eqn

    def all_intermediates(*a):
        rec: list = []
        walk_inlining_calls(jaxpr, consts, a, bind_and_record(rec), lambda lit: lit.val)
        return rec

    if device is not None:
        args = [jax.device_put(a, device) for a in args]
    return [np.asarray(o) for o in jax.jit(all_intermediates)(*args)]


def eqn_text(eqn) -> str:
    """One line naming an equation: 'c:f32[3] = mul a b' (source location if known)."""
    try:
        s = str(eqn).strip().splitlines()[0]
    except Exception:  # noqa: BLE001  (printing a jaxpr equation must never hide the result)
        s = eqn.primitive.name
    return s[:200]
