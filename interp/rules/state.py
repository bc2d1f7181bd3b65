"""Rules: state (mutable refs): new_ref/empty_ref/freeze, get/swap/addupdate, run_state...

A ref-typed jaxpr value is an :class:`interp.refs.Ref`. get/swap/addupdate receive the ref, the
value and the flat leaves of their transform pytree (``tree``): an NDIndexer (ints, Slices with
strides, integer arrays), possibly after or before reshape/transpose/bitcast transforms. These
are resolved (``interp/ref_indexing.py``) into the Ref's normalized index (one int/slice/int-array
per dimension of the ref's buffer), so every access goes through ``Ref.read``/``write``/
``accumulate``.
Semantics and sources: ``spec/state.py``.
"""
from __future__ import annotations

import numpy as np

from ..ref_indexing import _resolve, _whole, compile_indexer
from ..refs import Ref
from ..registry import register
from ..uninitialized import TrackedRef, fill_uninitialized


def _as_view(x, dtype):
    x = np.asarray(x)
    return x if x.dtype == dtype else x.view(dtype)


def _check_ref(eqn, ref):
    if not isinstance(ref, Ref):
        raise eqn.unsupported(f"expected a ref, got {type(ref).__name__}")


# --- access -------------------------------------------------------------------------------------

# Each access is a small function of (ref, normalized index, dtype the view is read as); the
# registered rule resolves the transform pytree per call, and its ``prepare`` (run once per
# equation by the plan) swaps in ``compile_indexer``'s precompiled index where it applies.

def _get(eqn, ref, index, dtype):
    return _as_view(ref.read(index), dtype)


def _swap(eqn, ref, index, dtype, val):
    return _as_view(ref.swap(index, _as_view(val, ref.dtype)), dtype)


def _addupdate(eqn, ref, index, dtype, val):
    if dtype != ref.dtype:  # JAX: "addupdate (+=) is not supported on bitcast views"
        raise eqn.unsupported("addupdate/c2: addupdate through a bitcast view")
    ref.accumulate(index, np.asarray(val))
    return []


def _access_rule(name, access, n_values):
    """Register the rule of an access primitive whose operands are (ref, ``n_values`` values,
    *flat index leaves), with its per-equation ``prepare``."""
    def rule(eqn, ref, *args, tree=None):
        _check_ref(eqn, ref)
        index, dtype = _resolve(eqn, ref, args[n_values:], tree)
        return access(eqn, ref, index, dtype, *args[:n_values])

    def prepare(ctx):
        index = compile_indexer(ctx.params.get("tree"), ctx.eqn.invars[1 + n_values:])
        if index is None:
            return None

        def compiled(eqn, ref, *args, tree=None):
            if not isinstance(ref, Ref):
                _check_ref(eqn, ref)   # (raises)
            i = index(args[n_values:], ref.shape, ref.wraps_negative_indices)
            return access(eqn, ref, i, ref.dtype, *args[:n_values])
        return compiled

    rule.__name__ = name
    return register(name, prepare=prepare)(rule)


get = _access_rule("get", _get, 0)
swap = _access_rule("swap", _swap, 1)
addupdate = _access_rule("addupdate", _addupdate, 1)


# --- creation and end of life -------------------------------------------------------------------

def _new_ref(eqn, array):
    return Ref(array, name=f"{eqn.name}@{id(eqn):x}", check_bounds=eqn.options.check_bounds)


@register("new_ref", "mutable_array")
def new_ref(eqn, init, *, memory_space, kind=None, pin=None):
    # The ref owns a copy: later writes never alias the initial value. memory_space and pin (JAX
    # 0.11 on) place the ref, kind states its mutation semantics under rematerialisation (jax/_src/
    # core.py new_ref): none changes values. (mutable_array, the older spelling, has no kind.)
    dtype = eqn.out_aval.inner_aval.dtype if hasattr(eqn.out_aval, "inner_aval") else init.dtype
    return _new_ref(eqn, np.array(init, dtype=dtype, copy=True))


def uninitialized_fill(eqn, shape, dtype) -> np.ndarray:
    """Fresh memory under options.uninitialized (interp/uninitialized.py); 'raise' needs read
    tracking the plain Ref does not have."""
    if eqn.options.uninitialized == "raise":
        raise eqn.unsupported("create_linear/c1: uninitialized='raise' for refs created without a "
                              "value")
    return fill_uninitialized(shape, dtype, eqn.options.uninitialized)


@register("empty_ref")
def empty_ref(eqn, *, ty, memory_space, pin=None):
    # (memory_space and pin, JAX 0.11 on, place the ref; they do not change values)
    if eqn.options.uninitialized == "raise":
        # Reads of elements never written raise (interp/uninitialized.py TrackedRef).
        return TrackedRef(ty.shape, ty.dtype, name=f"{eqn.name}@{id(eqn):x}",
                          check_bounds=eqn.options.check_bounds)
    return _new_ref(eqn, uninitialized_fill(eqn, ty.shape, ty.dtype))


@register("create_linear")
def create_linear(eqn, *, ty, memory_space):
    # A fresh linear buffer (state/primitives.py: lowered to XLA's CreateBuffer custom call, which
    # no runtime implements yet, discharge.py's TODO): uninitialized memory, as for empty_ref;
    # memory_space only places it. pin/unpin pass its value on.
    return uninitialized_fill(eqn, ty.shape, ty.dtype)


@register("freeze")
def freeze(eqn, ref):
    _check_ref(eqn, ref)
    return ref.read(_whole(ref.shape))   # a read of every element


@register("free_ref")
def free_ref(eqn, ref):
    return []


# Called after every run_state body, ``hook() -> None``: a dialect's own end-of-body semantics
# (Mosaic GPU awaits the body's wgmma: interp/rules/pallas_mosaic_gpu.py).
RUN_STATE_EXIT: list = []


@register("run_state")
def run_state(eqn, *args, jaxpr, which_linear=None, is_initialized=None):
    # Discharged semantics (jax/_src/state/discharge.py _run_state_impl): the body runs on fresh
    # refs holding the inputs (uninitialized ones as JAX's default initialization) and the
    # results are the refs' final values.
    plan, consts = eqn.closed_plan(jaxpr)
    invars = plan.jaxpr.invars
    if is_initialized is None:
        is_initialized = (True,) * len(invars)
    it = iter(args)
    refs = []
    for init, var in zip(is_initialized, invars):
        aval = getattr(var.aval, "inner_aval", var.aval)
        if init:
            value = next(it)
            if isinstance(value, Ref):
                # A ref the body closes over (hoisted to an operand: Pallas kernels' run_state
                # over kernel memory): the body works on that memory itself.
                refs.append(value)
                continue
            refs.append(_new_ref(eqn, np.array(value, dtype=aval.dtype, copy=True)))
        else:
            refs.append(_new_ref(eqn, uninitialized_fill(eqn, aval.shape, aval.dtype)))
    plan.run(consts, refs)
    for hook in RUN_STATE_EXIT:
        hook()
    return [r if isinstance(a, Ref) else np.array(r.array, copy=True)
            for r, a in zip(refs, _operands_by_invar(args, is_initialized))]


def _operands_by_invar(args, is_initialized) -> list:
    """run_state's operand for each body input (None for the uninitialized ones)."""
    it = iter(args)
    return [next(it) if init else None for init in is_initialized]


# --- value-level helpers ------------------------------------------------------------------------

@register("broadcast_to")
def broadcast_to(eqn, a, *, shape):
    return np.array(np.broadcast_to(a, shape), copy=True)


@register("pin")
def pin(eqn, x, *, to):
    return x  # placement only


@register("unpin", "accum_grad_in_ref")
def unpin(eqn, x):
    return x  # placement only; accum_grad_in_ref marks a ref for autodiff


@register("with_memory_space_constraint")
def with_memory_space_constraint(eqn, x, *, memory_space):
    return x  # placement only


# --- JAX 0.10's hijax Box and Log (jax/_src/hijax.py; removed in JAX 0.11) ------------------------
# A Box is a mutable cell holding a pytree, a Log a dict of lists that only grows; their meaning
# is their to_lojax rules. Cells the program creates are the reference's own; a Box or Log passed
# in is JAX's object, read at entry and written back at exit by jax.jit (MutableHiType
# read_loval / update_from_loval): that round trip is not modelled and is refused.

class _Cell:
    """The reference's Box (``leaves``: the flat value) or Log (``entries``: key -> list)."""
    __slots__ = ("leaves", "entries")

    def __init__(self):
        self.leaves, self.entries = [], {}


def _cell(eqn, x) -> _Cell:
    if not isinstance(x, _Cell):
        raise eqn.unsupported(f"{'new_log/c1' if 'log' in eqn.name else 'new_box/c1'}: a hijax Box "
                              "or Log passed into the program: jax.jit reads it at "
                              "entry and writes it back at exit, which the reference does not "
                              "model (only cells the program creates are supported)")
    return x


@register("new_box", "new_log")
def new_cell(eqn, *, treedef=None):
    # NewBox.to_lojax: Box._new(None) (treedef: that of None); NewLog.to_lojax: Log._new()
    return _Cell()


@register("box_set")
def box_set(eqn, box, *leaves, treedef):
    # BoxSet.to_lojax: the box holds tree_unflatten(treedef, leaves); treedef only regroups them
    _cell(eqn, box).leaves = [np.array(v, copy=True) for v in leaves]
    return []


@register("box_get")
def box_get(eqn, box, *, avals):
    # BoxGet.to_lojax: tree_leaves of the held value (avals: their types at this point)
    leaves = _cell(eqn, box).leaves
    if len(leaves) != len(avals):
        raise eqn.unsupported(f"the box holds {len(leaves)} leaves, the equation reads {len(avals)}")
    return [np.array(v, copy=True) for v in leaves]


@register("log_extend")
def log_extend(eqn, log, *leaves, treedef):
    # LogExtend.to_lojax: each key's list grows by the given list (the log is never read back
    # inside a program: ReadLog.abstract_eval raises, so log_read cannot be traced)
    import jax
    updates = jax.tree_util.tree_unflatten(treedef, [np.array(v, copy=True) for v in leaves])
    for key, values in updates.items():
        _cell(eqn, log).entries.setdefault(key, []).extend(values)
    return []
