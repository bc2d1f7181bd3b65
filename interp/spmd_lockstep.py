"""A ``shard_map`` body evaluated once per equation for all devices at once, where that is exactly
what running it on every device would give.

Interpreting the body once per device costs every equation's fixed overhead (planning is cached,
but each rule call, each small BLAS call, each certification pass has a fixed cost) once per
device: on small shards that, not arithmetic, is the time (issue 14: 8 devices took 7x one
device's time for the same total work). Here the devices' values are stacked along a leading
device axis (row-major device order, as ``interp.spmd.run_spmd`` numbers them) and:

* runs of equations between collectives whose primitives compute each output element from the
  corresponding elements of the operands' device slices alone (:data:`SLICEWISE`: elementwise
  arithmetic, dot_general, reductions over the operands' own axes, shape and layout changes) go
  through ``jax.vmap`` once per body and are evaluated by the reference's own rules on the
  stacked values. Every such rule's result is a function of its operand values (correctly
  rounded per element, or exact), so the slice of a batched result is bit for bit the result of
  the device's own equation;
* the varying-manual-axes casts (pvary, ...) pass their operand through, as their rule does;
* every other equation of the body's top level (a collective, axis_index) runs per device
  through ``interp.spmd.run_spmd`` exactly as in the per-device evaluation (same rule, same
  rendezvous, same participant order).

Only straight-line bodies qualify: no control flow, effects, nested shard_map or pallas_call at
the top level, so every device executes the same collectives in the same order (a program where
devices could diverge, deadlock or mismatch collectives keeps the per-device evaluation, which
detects that). Anything else, a body under an observer (replay sees equations one by one), or a
body inside another device, is evaluated per device as before: :func:`program` returns None.
"""
from __future__ import annotations

import math
import threading
import weakref

import jax
import numpy as np

from .evaluator import get_plan, split_jaxpr
from .schedule import current_device
from .spmd import Device, run_spmd

# Primitives whose result slice along a new leading axis depends only on the operands' slices,
# and whose vmap batching rule in every JAX in range binds the same primitive (with shifted
# dimensions) or one of this set: the reference's rules for them are per-element functions of
# their operands (correctly rounded or exact), so batching cannot change a single bit.
SLICEWISE = frozenset({
    # elementwise arithmetic and functions
    "neg", "sign", "floor", "ceil", "round", "is_finite", "abs", "exp", "exp2", "log", "log1p",
    "expm1", "tanh", "logistic", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
    "asinh", "acosh", "atanh", "sqrt", "rsqrt", "cbrt", "square", "integer_pow", "pow",
    "one_minus_square", "add", "add_any", "sub", "mul", "div", "rem", "max", "min", "atan2", "nextafter",
    "and", "or", "xor", "not", "eq", "ne", "lt", "le", "gt", "ge", "select_n", "clamp",
    "convert_element_type", "copy", "copy_p", "real", "imag", "conj", "complex",
    "shift_left", "shift_right_logical", "shift_right_arithmetic", "population_count", "clz",
    "erf", "erfc", "erf_inv", "lgamma", "digamma", "reduce_precision", "stop_gradient",
    # contractions and reductions over the operand's own axes
    "dot_general", "reduce_sum", "reduce_max", "reduce_min", "reduce_and", "reduce_or",
    "argmax", "argmin",
    # shape and layout
    "broadcast_in_dim", "reshape", "transpose", "squeeze", "expand_dims", "slice", "rev",
    "concatenate", "pad", "iota",
})

# Calls whose body is checked recursively (vmap batches through them).
CALLS = frozenset({"pjit", "jit", "closed_call", "core_call", "custom_jvp_call",
                   "custom_vjp_call", "custom_vjp_call_jaxpr", "remat", "checkpoint"})

# The varying-manual-axes casts: no device's value changes (interp/rules/spmd.py _cast).
CASTS = frozenset({"pvary", "preduced", "reduced_vary_cast", "reduced_vary_cast_p",
                   "vary_unreduced_cast", "vary_unreduced_cast_p"})

# psum over named axes: the participants' sum (interp/rules/spmd.py participants_sum, the rule's
# own combine) computed for every group at once; it is a function of each element's operands.
PSUMS = frozenset({"psum", "psum_invariant"})


def _axis_names(axes) -> tuple:
    return tuple(axes) if isinstance(axes, (tuple, list)) else (axes,)


# Equations run per device (with rendezvous) at the top level of a lockstep body: collectives
# whose operands and results are plain arrays, and axis queries.
PER_DEVICE = frozenset({"psum", "psum_invariant", "pmax", "pmin", "ppermute", "pbroadcast",
                        "all_gather", "all_gather_invariant", "reduce_scatter", "all_to_all",
                        "axis_index"})


def _sub_jaxprs(eqn):
    for v in eqn.params.values():
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            if hasattr(x, "eqns") or hasattr(getattr(x, "jaxpr", None), "eqns"):
                yield split_jaxpr(x)[0]


def _plain(aval) -> bool:
    """An array of a dtype the batched trace reproduces (no 64-bit type, which the trace would
    narrow without x64; no extended dtype)."""
    dtype = getattr(aval, "dtype", None)
    shape = getattr(aval, "shape", None)
    if dtype is None or shape is None:
        return False
    dtype = np.dtype(dtype) if not hasattr(dtype, "_rules") else None
    return dtype is not None and dtype.kind in "biufc" and dtype.itemsize <= 4 + 4 * (dtype.kind == "c")


def _slicewise(eqn) -> bool:
    if eqn.effects or not all(_plain(v.aval) for v in eqn.outvars):
        return False
    name = eqn.primitive.name
    if name in SLICEWISE:
        return not any(True for _ in _sub_jaxprs(eqn))
    if name in CALLS:
        return all(_slicewise(e) for j in _sub_jaxprs(eqn) for e in j.eqns)
    return False


def _named_axis_effects_only(eqn) -> bool:
    """A collective's only effects: the named axes it spans (no ordering or IO effect)."""
    return all(type(e).__name__ == "NamedAxisEffect" for e in eqn.effects)


def _kind(eqn) -> "str | None":
    if _slicewise(eqn):
        return "batched"
    name = eqn.primitive.name
    if name in CASTS and not eqn.effects:
        return "cast"
    if name in PSUMS and _named_axis_effects_only(eqn) and eqn.params.get("axis_index_groups") is None \
            and all(not isinstance(a, int) for a in _axis_names(eqn.params["axes"])) \
            and all(_plain(v.aval) for v in eqn.outvars):
        return "psum"
    if name in PER_DEVICE and _named_axis_effects_only(eqn) and not any(True for _ in _sub_jaxprs(eqn)) \
            and eqn.params.get("axis_index_groups") is None \
            and all(_plain(v.aval) for v in eqn.outvars):
        return "device"
    return None


class Program:
    """The steps of one body: ("batched", (plan, consts), in vars, out vars), ("psum", (context,
    axis names), in vars, out vars) or ("device", (plan, consts), in vars, out vars); casts are
    no step (their outputs alias their operands)."""

    def __init__(self, jaxpr, options, num_devices: int):
        from jax._src import core
        self.jaxpr = jaxpr
        self.steps = []
        segment: list = []

        def flush():
            if not segment:
                return
            defined = {id(v) for e in segment for v in e.outvars}
            ins, seen = [], set()
            for e in segment:
                for v in e.invars:
                    if isinstance(v, core.Var) and id(v) not in defined and id(v) not in seen:
                        seen.add(id(v))
                        ins.append(v)
            outs = [v for e in segment for v in e.outvars if not isinstance(v, core.DropVar)]
            sub = core.Jaxpr([], ins, outs, list(segment), core.no_effects)
            def fun(*xs, sub=sub):
                return core.eval_jaxpr(sub, [], *xs)
            structs = [jax.ShapeDtypeStruct((num_devices, *v.aval.shape), v.aval.dtype) for v in ins]
            # (axis_size: a segment may read no value, e.g. an iota and what is computed from it)
            batched = jax.make_jaxpr(jax.vmap(fun, axis_size=num_devices))(*structs)
            plan = get_plan(batched.jaxpr, options)
            consts = [np.asarray(c) for c in batched.consts]
            self.steps.append(("batched", (plan, consts), ins, outs))
            segment.clear()

        alias: dict = {}   # a cast's output -> the value it passes through

        def resolved(atoms):
            return [alias.get(v, v) if isinstance(v, core.Var) else v for v in atoms]

        for eqn in jaxpr.eqns:
            kind = _kind(eqn)
            if kind == "cast":   # no step: later equations read the operand itself
                for i, o in zip(resolved(eqn.invars), eqn.outvars):
                    alias[o] = i
                continue
            if kind == "batched":
                if any(isinstance(v, core.Var) and v in alias for v in eqn.invars):
                    eqn = eqn.replace(invars=resolved(eqn.invars))
                segment.append(eqn)
                continue
            flush()
            if kind == "psum":
                from .evaluator import EqnContext
                self.steps.append(("psum", (EqnContext(eqn, options), _axis_names(eqn.params["axes"])),
                                   resolved(eqn.invars), list(eqn.outvars)))
            else:
                if any(isinstance(v, core.Var) and v in alias for v in eqn.invars):
                    eqn = eqn.replace(invars=resolved(eqn.invars))
                ins = [v for v in eqn.invars if isinstance(v, core.Var)]
                sub = core.Jaxpr([], ins, list(eqn.outvars), [eqn], eqn.effects)
                self.steps.append(("device", (get_plan(sub, options), []), ins,
                                   [v for v in eqn.outvars]))
        self.outvars = resolved(jaxpr.outvars)
        flush()

    def run(self, axes, consts, stacked_args, participants_sum) -> list:
        """The body's outputs, stacked over the devices, from its stacked inputs.
        ``participants_sum(ctx, stacked, dtype)``: the psum rule's sum over a last axis of
        participants (interp/rules/spmd.py; passed in: the engine imports no rule module)."""
        from jax._src import core
        jaxpr = self.jaxpr
        env = {}
        n = math.prod(s for _, s in axes)

        def read(v):
            if isinstance(v, core.Literal):
                return np.broadcast_to(np.asarray(v.val, v.aval.dtype), (n, *np.shape(v.val)))
            return env[v]

        for v, c in zip(jaxpr.constvars, consts):
            env[v] = np.broadcast_to(np.asarray(c), (n, *np.shape(c)))
        for v, a in zip(jaxpr.invars, stacked_args):
            env[v] = a
        for kind, planned, ins, outs in self.steps:
            if kind == "psum":
                ctx, names = planned
                for i, o in zip(ins, outs):
                    if not isinstance(o, core.DropVar):
                        env[o] = _psum(ctx, axes, names, read(i), o.aval.dtype, participants_sum)
                continue
            plan, pconsts = planned
            args = [read(v) for v in ins]
            if kind == "batched":
                results = plan.run(pconsts, args)
            else:
                per_device = run_spmd(axes, lambda device: plan.run(
                    pconsts, [a[device.key[-1]] for a in args]))
                results = [np.stack([np.asarray(outs_[k]) for _, outs_ in per_device])
                           for k in range(len(outs))]
            for o, r in zip(outs, results):
                if not isinstance(o, core.DropVar):
                    env[o] = r
        return [read(v) for v in self.outvars]


def _psum(ctx, axes, names, x, out_dtype, participants_sum) -> np.ndarray:
    """Every device's psum over ``names`` of its slice of ``x`` (stacked in device order): the
    participants of each group in rank order (row-major over ``names`` as listed, as
    interp/rules/spmd.py collective ranks them) along a last axis, summed by the rule's
    participants_sum."""
    mesh_names = [n for n, _ in axes]
    sizes = [s for _, s in axes]
    shape = x.shape[1:]
    grid = x.reshape(*sizes, *shape)
    k, nd = len(mesh_names), len(shape)
    reduced = [mesh_names.index(n) for n in names]
    kept = [a for a in range(k) if a not in reduced]
    moved = grid.transpose(*kept, *range(k, k + nd), *reduced)
    stacked = moved.reshape(*moved.shape[:len(kept) + nd], -1)
    total = participants_sum(ctx, np.ascontiguousarray(stacked), out_dtype)
    # back to every device: the sum of its group, broadcast over the reduced axes
    expanded = total.reshape(*total.shape, *([1] * len(reduced)))
    order = kept + list(range(k, k + nd)) + reduced            # axes of ``expanded``
    full = np.broadcast_to(expanded.transpose(*np.argsort(order)),
                           (*sizes, *shape))
    return np.ascontiguousarray(full).reshape(x.shape[0], *shape)


# Lockstep pays where fixed per-equation costs dominate: small shards. On larger ones the batched
# temporaries (n devices' worth at once) outgrow the rules' scratch buffers and caches, and the
# per-device evaluation was measured faster (bench/spmd.py, 8 devices: (256, 256, 1024), 64Ki
# elements per device, 2.9-3.2x of one device in lockstep against 2.4-2.5x per device).
MAX_ELEMENTS = 1 << 14


def _largest(jaxpr) -> int:
    """The most elements of any value of the body (one device's)."""
    avals = [v.aval for v in (*jaxpr.invars, *jaxpr.constvars)]
    avals += [v.aval for e in jaxpr.eqns for v in e.outvars]
    return max((math.prod(getattr(a, "shape", ())) for a in avals), default=0)


_programs: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def program(jaxpr, options, axes) -> "Program | None":
    """The lockstep program of a shard_map body (an open jaxpr), or None where the body must run
    per device (see the module docstring)."""
    if current_device() is not None or getattr(options, "observer", None) is not None:
        return None
    n = math.prod(s for _, s in axes)
    key = (options, n)
    with _lock:
        per = _programs.setdefault(jaxpr, {})
        if key in per:
            return per[key]
    prog = None
    if n > 1 and _largest(jaxpr) <= MAX_ELEMENTS and all(_plain(v.aval) for v in (*jaxpr.invars, *jaxpr.constvars, *jaxpr.outvars)) \
            and all(_kind(e) is not None for e in jaxpr.eqns):
        prog = Program(jaxpr, options, n)
    with _lock:
        per[key] = prog
    return prog


def devices(axes) -> list[Device]:
    """The top-level devices of ``axes`` in run_spmd's order (for assembling outputs)."""
    sizes = dict(axes)
    out = []
    for linear in range(math.prod(s for _, s in axes)):
        coords, rest = {}, linear
        for name, size in reversed(axes):
            rest, coords[name] = divmod(rest, size)
        out.append(Device(None, {nm: coords[nm] for nm, _ in axes}, sizes, (linear,)))
    return out
