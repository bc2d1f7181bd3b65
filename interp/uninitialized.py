"""What never-written memory holds (``Options.uninitialized``): one convention for the whole
reference — Pallas buffers, ``lax.empty``, refs created without a value.

"nan" (default) fills it with :func:`poison_value`; "zero" with zeros (what XLA:CPU's lowering
of ``lax.empty`` gives); "raise" raises :class:`UninitializedReadError` at the first read of
never-written data, wherever reads are tracked: Pallas kernel refs, refs created without a value
(``empty_ref``: :class:`TrackedRef`), and ``lax.empty`` results (:class:`Unwritten`: a written-mask
carried through data-moving primitives).
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .errors import UninitializedReadError
from .refs import Ref


def poison_value(dtype):
    """floats and complex: NaN (quiet, positive); signed ints: the minimum (as JAX's interpret
    mode); unsigned ints: the maximum (all ones: 0 would look like valid data); bool: True (JAX's
    interpret mode uses False, which is indistinguishable from a real False)."""
    dtype = np.dtype(dtype)
    if dtypes.is_float(dtype) or dtypes.is_complex(dtype):
        return np.array(np.nan).astype(dtype)[()]
    if dtypes.is_signed(dtype):
        return dtype.type(dtypes.iinfo(dtype).min)
    if dtypes.is_unsigned(dtype):
        return dtype.type(dtypes.iinfo(dtype).max)
    if dtypes.is_bool(dtype):
        return np.True_
    raise NotImplementedError(f"no poison value for dtype {dtype}")


def fill_uninitialized(shape, dtype, mode: str) -> np.ndarray:
    """A fresh buffer of never-written memory under ``mode`` ("nan", "zero" or "raise")."""
    if mode == "zero":
        return np.zeros(shape, dtype)
    return np.full(shape, poison_value(dtype), dtype)


class TrackedRef(Ref):
    """A ref created without a value under ``uninitialized="raise"``: it remembers which elements
    were written, and a read (get, swap, addupdate, freeze) touching an element never written
    raises :class:`UninitializedReadError`. Unwritten elements hold the poison value, so what
    never reaches a read is the same memory as under "nan"."""

    __slots__ = ("written",)

    def __init__(self, shape, dtype, name: str = "ref", check_bounds: bool = True):
        super().__init__(np.full(shape, poison_value(dtype), dtype), name, check_bounds)
        self.written = np.zeros(shape, bool)

    def _check_written(self, index: tuple) -> None:
        done = self.written[index]
        if not np.all(done):
            where = np.argwhere(~np.asarray(done))[0] if np.ndim(done) else ()
            raise UninitializedReadError(
                f"{self.describe()}: read of an element never written (index {tuple(int(i) for i in where)} "
                f"of the accessed region, {int(np.size(done) - np.count_nonzero(done))} such elements); "
                "uninitialized='raise' (empty_ref/c1)")

    def read(self, index: tuple) -> np.ndarray:
        self.check_index(index)
        self._check_written(index)
        return super().read(index)

    def write(self, index: tuple, value) -> None:
        super().write(index, value)
        self.written[index] = True

    def swap(self, index: tuple, value) -> np.ndarray:
        # `ref[i] = v` is a swap whose old value is unused (the jaxpr still binds it to a Var): a
        # swap is not a checked read of never-written memory; its old value there is the poison.
        old = Ref.read(self, index)
        self.write(index, value)
        return old

    def accumulate(self, index: tuple, value) -> None:
        self.check_index(index)
        self._check_written(index)      # += reads the old value
        super().accumulate(index, value)

# --- lax.empty (interp/rules/lax_structure.py): values with elements never written -----------------
# Under uninitialized="raise" a lax.empty result is an `Unwritten` value: the poison data and a mask
# of the elements written so far. A plan-time hook (``track_unwritten``, an evaluator.STEP_HOOKS
# entry the lax_structure rules install) wraps each step under that option only: structural
# primitives that only move elements (dynamic_update_slice, scatter, slices, gathers, reshapes,
# concatenate, pad, select_n, conversions...) compute the data and, with the same rule, where its
# never-written elements went; new_ref turns the value into a TrackedRef with that mask; calls and
# loops (pjit, while, cond, scan...) pass it to their bodies, whose steps are wrapped too. Any other
# use reads the elements and raises UninitializedReadError when one was never written, and so does
# every escape of the data (NumPy conversion, arithmetic, indexing, the program's outputs, which the
# caller reads): the mask is never dropped silently. A fully written value becomes a plain array
# again, so the normal path pays nothing.


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


def track_unwritten(ctx, rule):
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
