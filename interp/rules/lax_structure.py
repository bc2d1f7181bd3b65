"""Rules: lax_structure (broadcast_in_dim, reshape, squeeze, transpose, rev, concatenate, pad, iota,
split, copy, stage, tile, stack, unstack, empty, empty2, tie).

All of these move data without arithmetic, so every result is bit-exact for every dtype (the
ml_dtypes narrow types included: NumPy copies their storage bytes). Rules return fresh, writable
arrays (never read-only broadcast views): a later state rule may wrap a result in a mutable Ref.

Not registered: ``zeros_like`` (a legacy primitive with no abstract evaluation rule: it cannot
appear in a jaxpr; interp/registry.py NO_RULE says so in coverage()).
"""
from __future__ import annotations

import jax
import numpy as np

from interp import dtypes as D
from interp.errors import UninitializedReadError
from interp.evaluator import STEP_HOOKS
from interp.registry import register
from interp.uninitialized import TrackedRef, fill_uninitialized


def _static_only(eqn, dynamic) -> None:
    """Dynamic-shape operands (jax's experimental dynamic shapes) are not implemented."""
    if dynamic:
        raise eqn.unsupported("structure/no-dynamic-shapes: dynamic shapes (extra shape operands) "
                              "are not supported")


@register("broadcast_in_dim")
def broadcast_in_dim(eqn, x, *dynamic, shape, broadcast_dimensions, sharding=None):
    _static_only(eqn, dynamic)
    x = np.asarray(x)
    # Put each operand dim at its output position (size 1 elsewhere), then broadcast.
    expanded = [1] * len(shape)
    for src, dst in enumerate(broadcast_dimensions):
        expanded[dst] = x.shape[src]
    return np.array(np.broadcast_to(x.reshape(expanded), tuple(shape)), order="C")


@register("reshape")
def reshape(eqn, x, *dynamic, new_sizes, dimensions=None, sharding=None):
    _static_only(eqn, dynamic)
    x = np.asarray(x)
    if dimensions is not None:  # reshape of the transposed operand, row-major (XLA's order)
        x = np.transpose(x, dimensions)
    return np.array(np.reshape(x, tuple(new_sizes), order="C"))


@register("squeeze")
def squeeze(eqn, x, *, dimensions):
    return np.array(np.asarray(x).reshape(eqn.out_aval.shape), order="C")


@register("transpose")
def transpose(eqn, x, *, permutation):
    return np.array(np.transpose(x, permutation), order="C")


@register("rev")
def rev(eqn, x, *, dimensions):
    x = np.asarray(x)
    return np.array(np.flip(x, tuple(dimensions)), order="C")


@register("concatenate")
def concatenate(eqn, *xs, dimension):
    return np.concatenate([np.asarray(x) for x in xs], axis=dimension)


@register("pad")
def pad(eqn, x, padding_value, *, padding_config):
    """lo/hi padding (negative crops) and interior padding between elements (XLA Pad)."""
    x = np.asarray(x)
    # First pad with the non-negative parts of lo/hi, then crop the negative ones.
    full_shape, place, crop = [], [], []
    for n, (lo, hi, interior) in zip(x.shape, padding_config):
        if interior < 0:
            raise eqn.unsupported(f"pad/c3: negative interior padding {interior}")
        body = n + max(n - 1, 0) * interior
        size = max(lo, 0) + body + max(hi, 0)
        full_shape.append(size)
        place.append(slice(max(lo, 0), max(lo, 0) + body, interior + 1))
        crop.append(slice(max(-lo, 0), size - max(-hi, 0)))
    out = np.full(full_shape, np.asarray(padding_value, dtype=x.dtype), dtype=x.dtype)
    out[tuple(place)] = x
    return np.array(out[tuple(crop)], order="C")


@register("iota")
def iota(eqn, *dynamic, dtype, shape, dimension, sharding=None):
    """0, 1, 2... along ``dimension``, converted to ``dtype`` as XLA converts an integer: integers
    wrap modulo 2**bits (int8 iota of 300 reaches 127, -128, ...), floats round to nearest even
    (and overflow as that float type's conversion does)."""
    _static_only(eqn, dynamic)
    dtype = np.dtype(dtype)
    n = shape[dimension]
    if D.is_int(dtype):
        line = np.arange(n, dtype=np.int64).astype(dtype)  # two's complement wrap-around
    elif D.is_float(dtype) or D.is_complex(dtype):
        if n > 2 ** 53:
            raise eqn.unsupported("iota longer than 2**53 (not exact in float64)")
        with np.errstate(over="ignore"):
            line = np.arange(n, dtype=np.float64).astype(dtype)  # exact integers, one rounding
    else:
        raise eqn.unsupported(f"iota/c4: iota of dtype {dtype}")
    view = [1] * len(shape)
    view[dimension] = n
    return np.array(np.broadcast_to(line.reshape(view), tuple(shape)), order="C")


@register("split")
def split(eqn, x, *, sizes, axis):
    x = np.asarray(x)
    cuts = np.cumsum(sizes)[:-1]
    return [np.array(part, order="C") for part in np.split(x, cuts, axis=axis)]


@register("copy")
def copy(eqn, x):
    return np.array(x, order="C", copy=True)


@register("stage")
def stage(eqn, x):
    # lax.stage: the identity (lax.py stage_p: impl returns x, lowering returns the operand).
    # Tracing never records it (every trace's stage_value lifts the value without an equation);
    # a jaxpr built by hand may hold it.
    return np.array(x, copy=True)


@register("tile")
def tile(eqn, x, *, reps):
    return np.tile(np.asarray(x), tuple(reps))


@register("stack")
def stack(eqn, *xs, axis):
    return np.stack([np.asarray(x) for x in xs], axis=axis)


@register("unstack")
def unstack(eqn, x, *, axis):
    x = np.asarray(x)
    return [np.array(np.take(x, i, axis=axis), order="C") for i in range(x.shape[axis])]


def uninitialized_fill(eqn, shape, dtype) -> np.ndarray:
    """The contents of never-written memory under the ``uninitialized`` option
    (interp/uninitialized.py: the same poison values as Pallas buffers)."""
    if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
        raise eqn.unsupported(f"empty/c4: uninitialized value of extended dtype {dtype}")
    try:
        return fill_uninitialized(shape, dtype, eqn.options.uninitialized)
    except NotImplementedError as e:
        raise eqn.unsupported(str(e)) from None


# --- lax.empty / empty2 ------------------------------------------------------------------------
# JAX emits `empty` for lax.empty, jnp.empty (JAX 0.12; 0.10.2's is zeros), Pallas mpmd's output
# buffers (new_ref(lax.empty(...))), and when run_state's empty_ref is discharged; `empty2` only
# inside scan's lowering (_scan_impl), never in a traced jaxpr.
#
# Under uninitialized="raise" the result is an `Unwritten` value: the poison data and a mask of
# the elements written so far. A plan-time hook (evaluator.STEP_HOOKS, installed below) wraps each
# step under that option only: structural primitives that only move elements (dynamic_update_slice,
# scatter, slices, gathers, reshapes, concatenate, pad, select_n, conversions...) compute the data
# and, with the same rule, where its never-written elements went; new_ref turns the value into a
# TrackedRef with that mask; calls and loops (pjit, while, cond, scan...) pass it to their bodies,
# whose steps are wrapped too. Any other use reads the elements and raises UninitializedReadError
# when one was never written, and so does every escape of the data (NumPy conversion, arithmetic,
# indexing, the program's outputs, which the caller reads): the mask is never dropped silently. A
# fully written value becomes a plain array again, so the normal path pays nothing.


class Unwritten:
    """A lax.empty result (or a value moved from one) with elements never written."""
    __slots__ = ("data", "written", "origin")

    def __init__(self, data: np.ndarray, written: np.ndarray, origin: str):
        self.data, self.written, self.origin = data, written, origin

    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)

    def read_error(self, reader: str) -> UninitializedReadError:
        where = tuple(int(i) for i in np.argwhere(~self.written)[0]) if self.ndim else ()
        return UninitializedReadError(
            f"{reader} reads elements of a lax.empty array ({self.origin}) that were never written "
            f"({int(self.size - np.count_nonzero(self.written))} of {self.size}, first at index "
            f"{where}); uninitialized='raise' (empty/c3)")

    def _read(self, *args, **kwargs):
        raise self.read_error("a use of its data (a program output, or a rule reading it)")

    __array__ = __array_ufunc__ = __array_function__ = __getitem__ = __setitem__ = _read
    __bool__ = __int__ = __float__ = __complex__ = __index__ = __len__ = __iter__ = _read
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __neg__ = _read

    def __getattr__(self, name):     # (an AttributeError too: hasattr() probes answer False)
        err = self.read_error(f"attribute {name!r}")
        raise _UnwrittenAttributeError(*err.args)


class _UnwrittenAttributeError(UninitializedReadError, AttributeError):
    pass


def _moved(ctx, rule, args, params, data_pos):
    """A structural step on Unwritten operands: the data by ``rule``, and where never-written
    elements went by running ``rule`` twice on indicators (unwritten -> 1 then 0, written -> 0
    then 1: an output element came from a never-written one iff it is 1 then 0; constants the
    rule inserts, such as padding or gather's fill, are equal in both runs)."""
    for i, a in enumerate(args):
        if type(a) is Unwritten and i not in data_pos:
            raise a.read_error(f"'{ctx.name}' (as an index or predicate)")
    if any(np.dtype(args[i].dtype).name == "float8_e8m0fnu" for i in data_pos) or \
            np.dtype(ctx.out_dtype).name == "float8_e8m0fnu":      # no zero to encode with
        raise ctx.unsupported("uninitialized='raise' tracking of float8_e8m0fnu data")
    data = [a.data if type(a) is Unwritten else a for a in args]
    out = rule(ctx, *data, **params)
    runs = []
    for hi, lo in ((1, 0), (0, 1)):
        ind = list(data)
        for i in data_pos:
            a = args[i]
            unwritten = ~a.written if type(a) is Unwritten else np.zeros(np.shape(a), bool)
            ind[i] = np.where(unwritten, hi, lo).astype(np.dtype(a.dtype))
        runs.append(np.asarray(rule(ctx, *ind, **params)))
    one, zero = (np.asarray(v).astype(runs[0].dtype) for v in (1, 0))
    never = (runs[0] == one) & (runs[1] == zero)
    if not never.any():
        return out
    origin = next(a.origin for a in args if type(a) is Unwritten)
    return Unwritten(np.asarray(out), ~never, origin)


# Primitive -> operand positions that are moved data (the others are indices or predicates):
# "all" operands, or "cases" (select_n: all but the predicate).
_STRUCTURAL = {name: (0,) for name in (
    "reshape", "transpose", "broadcast_in_dim", "squeeze", "rev", "copy", "slice",
    "dynamic_slice", "gather", "convert_element_type")}
_STRUCTURAL.update({"dynamic_update_slice": (0, 1), "scatter": (0, 2), "pad": (0, 1),
                    "concatenate": "all", "select_n": "cases"})
# Calls and loops hand their operands to sub-jaxprs, whose steps are tracked in turn.
_PASS_THROUGH = frozenset((
    "pjit", "jit", "closed_call", "core_call", "custom_vmap_call", "while", "cond", "scan", "remat2",
    "checkpoint", "remat_opt", "eval_jaxpr", "composite", "xla_metadata_call", "custom_partitioning",
    "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "custom_jvp_call_jaxpr",
    "optimization_barrier", "sharding_constraint", "reshard", "layout_constraint", "relayout",
    "xla_metadata_value", "device_put", "name", "stop_gradient", "tie"))


def _track_unwritten(ctx, rule):
    """evaluator.STEP_HOOKS entry: under uninitialized="raise", wrap the step so that Unwritten
    operands are moved, passed on, turned into tracked refs or reported as read."""
    if ctx.options.uninitialized != "raise":
        return rule
    name = ctx.name
    moved = _STRUCTURAL.get(name)
    if moved is not None:     # operand positions whose data the primitive moves
        n = len(ctx.eqn.invars)
        moved = tuple({"all": range(n), "cases": range(1, n)}.get(moved, moved))

    def step(ctx, *args, **params):
        for a in args:
            if type(a) is Unwritten:
                return tracked(ctx, args, params)
        return rule(ctx, *args, **params)

    def tracked(ctx, args, params):
        if moved is not None:
            return _moved(ctx, rule, args, params, moved)
        if name in ("new_ref", "mutable_array") and type(args[0]) is Unwritten:
            ref = TrackedRef(args[0].shape, args[0].dtype, name=f"{name}@{id(ctx.eqn):x}",
                             check_bounds=ctx.options.check_bounds)
            ref.array[...] = args[0].data
            ref.written[...] = args[0].written
            return ref
        if name in _PASS_THROUGH:
            return rule(ctx, *args, **params)
        raise next(a for a in args if type(a) is Unwritten).read_error(f"'{name}'")

    inplace = getattr(rule, "inplace", None)
    if inplace is not None:     # keep the plan's buffer reuse (evaluator DONATE_MIN_ELEMENTS)
        def step_inplace(ctx, out, *args, **params):
            for a in args:
                if type(a) is Unwritten:
                    return tracked(ctx, args, params)
            return inplace(ctx, out, *args, **params)
        step.inplace = step_inplace
    return step


STEP_HOOKS.append(_track_unwritten)


def _empty_value(eqn, shape, dtype):
    data = uninitialized_fill(eqn, shape, dtype)
    if eqn.options.uninitialized != "raise" or data.size == 0:
        return data
    return Unwritten(data, np.zeros(shape, bool), f"{eqn.name} at {_where(eqn)}")


def _where(eqn) -> str:
    try:
        from jax._src import source_info_util
        return source_info_util.summarize(eqn.source_info)
    except Exception:     # (source information is best effort)
        return "unknown location"


@register("empty")
def empty(eqn, *, shape, dtype, out_sharding=None):
    return _empty_value(eqn, tuple(shape), dtype)


@register("empty2")
def empty2(eqn, *, dtype, memory_space=None):
    return _empty_value(eqn, (), dtype)


@register("tie")
def tie(eqn, x, y):
    """tie(x, y) is y; x only orders effects (jax/_src/lax/lax.py tie_p)."""
    return y
