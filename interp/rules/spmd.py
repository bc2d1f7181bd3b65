"""SPMD: shard_map (and jax.pmap, which every JAX in range traces to jit(shard_map)), collectives,
axis queries and the varying-manual-axes casts. Semantics: spec/spmd.py.

shard_map runs its body once per coordinate of its newly manual mesh axes on interpreted devices
(interp/spmd.py); a collective is a rendezvous of the devices it spans, and the last device to
arrive computes every participant's result from all operands in participant order.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from ..errors import UndefinedBehaviorError, UnsupportedPrimitiveError
from ..evaluator import STEP_HOOKS, VALUE_CONVERTERS
from ..registry import register
from .. import spmd_lockstep
from ..schedule import current_device
from ..spmd import run_spmd
from .. import dtypes
from ..numerics import F64, UNIT, certified_round, round_float, sum_error_bound
# psum/pmax/pmin are reduce_sum/reduce_max/reduce_min over the participants (the rules' own semantics)
from .lax_reductions import extremum, move_last, sum_last


# --- shard_map -----------------------------------------------------------------------------------

def _spec_entries(spec, ndim: int) -> list[tuple[str, ...]]:
    """The mesh axis names each array dimension is split over (major to minor)."""
    # (spec.partitions: iterating a spec with unreduced/reduced axes raises in JAX)
    parts = tuple(getattr(spec, "partitions", spec))
    entries = list(parts) + [None] * (ndim - len(parts))
    return [() if e is None else (tuple(e) if isinstance(e, (tuple, list)) else (e,)) for e in entries]


def _unreduced_axes(spec, manual) -> frozenset:
    """The manual axes a spec says hold partial values (PartitionSpec.unreduced, JAX >= 0.10)."""
    return frozenset(getattr(spec, "unreduced", ()) or ()) & manual


def _unreduced_kind(spec) -> str:
    """How an unreduced array's partials combine: "sum" (JAX 0.10.2 has only that), "max", "min"
    (PartitionSpec.unreduced_kind, JAX >= 0.11)."""
    kind = getattr(spec, "unreduced_kind", None)
    return "sum" if kind is None else kind.name


def _row_major(names, coords: dict, sizes: dict) -> int:
    """The row-major index of a device's coordinates along ``names``, in that order."""
    linear = 0
    for n in names:
        linear = linear * sizes[n] + coords[n]
    return linear


def _block(entries, coords: dict, sizes: dict, shape) -> tuple:
    """Index of this device's block of a global array of ``shape`` split as ``entries`` say."""
    index = []
    for names, dim in zip(entries, shape):
        count = math.prod(sizes[n] for n in names)
        linear = _row_major(names, coords, sizes)
        size = dim // count
        index.append(slice(linear * size, (linear + 1) * size))
    return tuple(index)


def _manual_axes(mesh, newly_manual_axes) -> list[tuple[str, int]]:
    shape = dict(mesh.shape)
    return [(n, shape[n]) for n in mesh.axis_names if n in set(newly_manual_axes)]


_UNREDUCED_IN_PARTIAL = (
    "in_specs with unreduced axes: each device gets its partial where the operand comes from a "
    "shard_map's unreduced out_specs (through jit and reshards keeping them) or from "
    "unreduced_array_value (a jax.Array argument); refused for other unreduced operands, whose "
    "partials XLA's partitioner chooses or which hold local dot_general/elementwise results the "
    "reference does not track outside shard_map (spec/spmd.py UNREDUCED_OPERANDS)")


@register("shard_map", partial=_UNREDUCED_IN_PARTIAL)
def shard_map(eqn, *args, jaxpr, mesh, in_specs, out_specs, newly_manual_axes,
              check_vma):   # a typing discipline (varying manual axes): values the same either way
    manual = frozenset(newly_manual_axes)
    args = [_partials_in(eqn, a, s, manual, dict(mesh.shape)) if _unreduced_axes(s, manual) else a
            for a, s in zip(args, in_specs)]
    axes = _manual_axes(mesh, newly_manual_axes)
    plan, consts = eqn.closed_plan(jaxpr)

    def local(device):
        # (np.asarray(order="C"), not np.ascontiguousarray: that makes a rank-0 block rank 1)
        return [np.asarray(a.block(device) if isinstance(a, _PartialsIn) else
                           a[_block(_spec_entries(s, np.ndim(a)), device.coords, device.sizes, np.shape(a))],
                           order="C")
                for a, s in zip(args, in_specs)]

    lockstep = spmd_lockstep.program(plan.jaxpr, eqn.options, axes)
    if lockstep is not None:   # every device's equations at once (interp/spmd_lockstep.py)
        devices = spmd_lockstep.devices(axes)
        blocks = [local(d) for d in devices]
        stacked = [np.stack([b[k] for b in blocks]) for k in range(len(args))]
        outs = lockstep.run(axes, consts, stacked, participants_sum)
        per_device = [(d, [o[i] for o in outs]) for i, d in enumerate(devices)]
    else:
        per_device = run_spmd(axes, lambda device: plan.run(consts, local(device)))
    results = []
    for i, (spec, aval) in enumerate(zip(out_specs, eqn.out_avals)):
        unreduced = _unreduced_axes(spec, manual)
        value = _assemble(eqn, i, spec, aval, _reduce_unreduced(eqn, i, spec, unreduced, per_device))
        results.append(_partials_out(eqn, i, spec, aval, unreduced, per_device, value) if unreduced
                       else value)
    return results


def _reduce_unreduced(eqn, i: int, spec, unreduced: frozenset, per_device) -> list:
    """An output ``spec`` leaves unreduced over axes U holds partials: its global value is their
    reduction (``unreduced_kind``) over U, computed as psum/pmax/pmin would (correctly rounded
    exact sum). Returns (device, outputs) pairs with output ``i`` reduced over U, one device per
    group (the one at coordinate 0 along U)."""
    if not unreduced:
        return per_device
    kind = _unreduced_kind(spec)
    reduced = []
    for members in _groups(per_device, unreduced, across=True).values():
        stacked = np.stack([np.asarray(outs[i]) for _, outs in members], axis=-1)
        value = _combine(eqn, kind, stacked, eqn.out_avals[i].dtype)
        device, outs = members[0]
        reduced.append((device, [*outs[:i], value, *outs[i + 1:]]))
    return reduced


def _combine(eqn, kind: str, stacked: np.ndarray, dtype) -> np.ndarray:
    """The reduction of the partials along the last axis by ``kind`` (sum, max, min)."""
    if kind == "sum":
        return np.asarray(participants_sum(eqn, stacked, dtype), dtype)
    np_fn = np.max if kind == "max" else np.min
    return np.asarray(extremum(eqn, stacked, kind, lambda k: np_fn(k, axis=-1)), dtype)


def _groups(per_device, axes: frozenset, across: bool) -> dict:
    """(device, outputs) pairs grouped by their coordinates off ``axes`` (across=True: the
    members of a group differ only along ``axes``) or along ``axes`` (across=False)."""
    groups: dict = {}
    for device, outs in per_device:
        key = tuple((n, c) for n, c in device.coords.items() if (n not in axes) == across)
        groups.setdefault(key, []).append((device, outs))
    return groups


# --- unreduced values between shard_maps ----------------------------------------------------------
# Outside a shard_map the reference holds an unreduced array by its global value (the reduction of
# its partials): every other rule sees that value. A shard_map whose in_specs take the array
# unreduced gets, on XLA, each device's partial as the producer left it (spec/spmd.py shard_map);
# so the producing shard_map records the partials of the value it returns in a side table keyed by
# the returned object, and a consuming shard_map looks them up. The returned object is a view
# (never a base array): the evaluator reuses only base arrays in place (evaluator._run_donating),
# so no later equation can overwrite it while it is recorded. A step that passes a recorded object
# on under another unreduced type (a reshard to other unreduced axes or to a reduced array) hands on
# a copy instead (_keep_partials_honest below): partials then are the partitioner's choice.

class _Partials:
    """The partials of a global value: for each coordinate along the unreduced axes (mesh order),
    the global array that the devices at that coordinate hold (their blocks assembled)."""
    __slots__ = ("axes", "sizes", "kind", "by_coords", "problem")

    def __init__(self, axes: tuple, sizes: dict, kind: str, by_coords: dict, problem: str | None):
        self.axes, self.sizes, self.kind, self.by_coords, self.problem = axes, sizes, kind, by_coords, problem

    def restricted(self, eqn, axes: tuple, dtype) -> "_Partials":
        """The partials over ``axes`` (a subset): those over the other axes reduced by kind."""
        if axes == self.axes:
            return self
        by_coords: dict = {}
        for coords, value in self.by_coords.items():
            key = tuple(c for n, c in zip(self.axes, coords) if n in axes)
            by_coords.setdefault(key, []).append(value)
        reduced = {k: _combine(eqn, self.kind, np.stack(v, axis=-1), dtype) for k, v in by_coords.items()}
        return _Partials(axes, self.sizes, self.kind, reduced, self.problem)


class _PartialsIn:
    """A consuming shard_map's view of an operand's partials: a device's block of its partial."""
    __slots__ = ("partials", "entries")

    def __init__(self, partials: _Partials, entries):
        self.partials, self.entries = partials, entries

    def block(self, device) -> np.ndarray:
        p = self.partials
        value = p.by_coords[tuple(device.coords[n] for n in p.axes)]
        return value[_block(self.entries, device.coords, device.sizes, value.shape)]


_RECORDED: dict[int, tuple] = {}   # id(value) -> (weakref to value, _Partials)


def _record(value: np.ndarray, partials: _Partials) -> np.ndarray:
    view = value.view()
    key = id(view)
    _RECORDED[key] = (weakref.ref(view, lambda _, key=key: _RECORDED.pop(key, None)), partials)
    return view


def _recorded(value) -> "_Partials | None":
    entry = _RECORDED.get(id(value))
    if entry is None or entry[0]() is not value:
        return None
    return entry[1]


def _partials_out(eqn, i: int, spec, aval, unreduced: frozenset, per_device, value) -> np.ndarray:
    """Output ``i``'s global value, recorded with its partials (one global array per coordinate
    along the unreduced axes)."""
    axes = tuple(n for n in per_device[0][0].coords if n in unreduced)
    plain = _partitions_only(spec)
    by_coords, problem = {}, None
    for members in _groups(per_device, unreduced, across=False).values():
        coords = tuple(members[0][0].coords[n] for n in axes)
        try:
            by_coords[coords] = _assemble(eqn, i, plain, aval, members)
        except UndefinedBehaviorError as e:   # only an error if a shard_map takes these partials
            problem = problem or f"out_specs {spec}, the partials at {dict(zip(axes, coords))}: {e}"
    sizes = {n: per_device[0][0].sizes[n] for n in axes}
    return _record(value, _Partials(axes, sizes, _unreduced_kind(spec), by_coords, problem))


class _Argument:
    """Stands for the equation in errors about a program argument."""
    name = "<argument>"

    def __init__(self, sharding):
        self.sharding = sharding

    def unsupported(self, reason: str) -> UnsupportedPrimitiveError:
        return UnsupportedPrimitiveError(self.name, {"sharding": self.sharding}, reason)


def unreduced_array_value(x) -> np.ndarray:
    """The reference value of a jax.Array left unreduced (a jit's result whose sharding says
    unreduced: NumPy conversion refuses it in JAX): the reduction of the partials its devices
    hold, recorded with them, so that a shard_map taking it unreduced gets each device's own."""
    sharding = x.sharding
    spec, mesh = sharding.spec, sharding.mesh
    names = tuple(mesh.axis_names)
    axes = tuple(n for n in names if n in spec.unreduced)
    sizes = dict(mesh.shape)
    entries = _spec_entries(_partitions_only(spec), x.ndim)
    where = {d.id: dict(zip(names, (int(i) for i in idx))) for idx, d in np.ndenumerate(mesh.devices)}
    by_coords: dict = {}
    for shard in x.addressable_shards:
        coords = where[shard.device.id]
        partial = by_coords.setdefault(tuple(coords[n] for n in axes), np.empty(x.shape, x.dtype))
        partial[_block(entries, coords, sizes, x.shape)] = np.asarray(shard.data)
    argument = _Argument(sharding)
    if len(by_coords) != math.prod(sizes[n] for n in axes):
        raise argument.unsupported("an unreduced jax.Array whose devices are not all addressable")
    kind = _unreduced_kind(spec)
    order = sorted(by_coords)
    value = _combine(argument, kind, np.stack([by_coords[c] for c in order], axis=-1), x.dtype)
    return _record(value, _Partials(axes, {n: sizes[n] for n in axes}, kind, by_coords, None))


def _unreduced_argument(x):
    """A program argument that is a jax.Array left unreduced: its value with its partials."""
    spec = getattr(getattr(x, "sharding", None), "spec", None)
    if not getattr(spec, "unreduced", None):
        return None
    return unreduced_array_value(x)


VALUE_CONVERTERS.append(_unreduced_argument)


def _partitions_only(spec):
    """``spec`` without its unreduced/reduced axes (the layout of one coordinate's partials)."""
    return type(spec)(*getattr(spec, "partitions", spec))


def _partials_in(eqn, value, spec, manual: frozenset, mesh_sizes: dict) -> _PartialsIn:
    """The partials a shard_map taking ``value`` with in_spec ``spec`` (unreduced over some of its
    manual axes) gives each device, or the reason the reference has none."""
    axes = _unreduced_axes(spec, manual)
    partials = _recorded(value)
    if partials is None:
        raise eqn.unsupported(
            f"shard_map/c6: in_specs {spec}: the operand is unreduced over {sorted(axes)}, but not as a "
            "shard_map's unreduced out_specs left it (the reference carries per-device partials "
            "from one shard_map to another, through jit and reshards that keep the unreduced "
            "axes, and from unreduced_array_value, nowhere else). A reshard, broadcast_in_dim, convert_element_type or jit "
            "out_shardings that makes a value unreduced leaves the partials to XLA's partitioner "
            "(JAX promises only their reduction; XLA:CPU puts the value on one device of each "
            "group, or each device's block of the source, and zeros elsewhere); dot_general and "
            "elementwise results left unreduced hold each device's local result, which the "
            "reference does not track outside shard_map (spec/spmd.py UNREDUCED_OPERANDS)")
    if partials.problem is not None:
        raise UndefinedBehaviorError(f"shard_map/c7: in_specs {spec}: the producer's partials are not "
                                     f"determined: {partials.problem}")
    missing = [n for n in axes if n not in partials.axes or partials.sizes[n] != mesh_sizes[n]]
    if missing or _unreduced_kind(spec) != partials.kind:
        raise eqn.unsupported(f"shard_map/c6: in_specs {spec}: the operand's partials are over axes "
                              f"{partials.axes} of sizes {partials.sizes} by {partials.kind}, "
                              "not what this shard_map takes")
    order = tuple(n for n in partials.axes if n in axes)
    return _PartialsIn(partials.restricted(eqn, order, value.dtype), _spec_entries(spec, np.ndim(value)))


def _unreduced_type(aval) -> tuple:
    """(unreduced axes, kind) of a global value's type (its sharding's spec), () if none."""
    spec = getattr(getattr(aval, "sharding", None), "spec", None)
    axes = frozenset(getattr(spec, "unreduced", ()) or ())
    return (axes, _unreduced_kind(spec)) if axes else ()


def _keep_partials_honest(ctx, rule):
    """evaluator.STEP_HOOKS entry: a step taking an unreduced global value that returns a recorded
    value under another unreduced type (a reshard to other unreduced axes or kind, or to a reduced
    array) returns a copy, which has no partials: XLA chooses the new partials (measured: the
    reduction on one device of each group, zeros elsewhere). Steps of any other kind run as they
    are."""
    eqn = ctx.eqn
    if not any(_unreduced_type(getattr(v, "aval", None)) for v in eqn.invars):
        return rule
    out_types = [_unreduced_type(v.aval) for v in eqn.outvars]

    def step(ctx, *args, **params):
        result = rule(ctx, *args, **params)
        outs = result if eqn.primitive.multiple_results else [result]
        fixed = []
        for out, out_type in zip(outs, out_types):
            partials = _recorded(out) if type(out) is np.ndarray else None
            if partials is not None and out_type != (frozenset(partials.axes), partials.kind):
                out = out.copy()
            fixed.append(out)
        return fixed if eqn.primitive.multiple_results else fixed[0]
    return step


STEP_HOOKS.append(_keep_partials_honest)


def _assemble(eqn, i: int, spec, aval, per_device) -> np.ndarray:
    """The global value of output ``i``: every device's block at its place. Devices sharing a block
    (the axes ``spec`` leaves out replicate it; ``reduced`` axes too) must hold the same bits."""
    shape = tuple(aval.shape)
    out = np.empty(shape, aval.dtype)
    entries = _spec_entries(spec, len(shape))
    seen: dict = {}
    for device, outs in per_device:
        coords = device.coords
        value = np.asarray(outs[i])
        index = _block(entries, coords, device.sizes, shape) if shape else ()
        key = tuple((s.start, s.stop) for s in index)
        first = seen.get(key)
        if first is None:
            seen[key] = (coords, value)
            out[index] = value
        elif np.ascontiguousarray(first[1]).tobytes() != np.ascontiguousarray(value).tobytes():
            raise UndefinedBehaviorError(
                f"shard_map output {i} with out_specs {spec}: devices {first[0]} and {coords} hold "
                "different values for the same block, but the spec says it is replicated over the "
                "axes it leaves out (check_vma=False lets this through; which copy XLA returns is "
                "unspecified: shard_map/c2)")
    return out


# --- participation in a collective ---------------------------------------------------------------

def _names(axis_name) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _device(eqn):
    device = current_device()
    if device is None:
        raise eqn.unsupported("collective outside shard_map/pmap: no interpreted devices are bound")
    return device


def _linear(eqn, device, names) -> tuple[int, int]:
    """(row-major index over ``names`` in the given order, number of such devices)."""
    for n in names:
        if n not in device.coords:
            raise eqn.unsupported(f"axis {n!r} is not a manual axis of an enclosing shard_map/pmap "
                                  f"(bound: {tuple(device.coords)})")
    return _row_major(names, device.coords, device.sizes), math.prod(device.sizes[n] for n in names)


def collective(eqn, axis_name, operand, combine, groups=None):
    """This device's result of a collective over ``axis_name``: ``combine(operands of every
    participant, in participant order)`` gives every participant's result."""
    device = _device(eqn)
    names = _names(axis_name)
    linear, size = _linear(eqn, device, names)
    group_id = None
    if groups is not None:
        for g, members in enumerate(groups):
            if linear in members:
                group_id, linear, size = g, list(members).index(linear), len(members)
                break
        else:
            raise eqn.unsupported(f"axis index {linear} is in no axis_index_groups group {groups}")
    others = tuple((n, c) for n, c in device.coords.items() if n not in names)
    group = (names, others, group_id)
    return device.world.rendezvous(device, group, linear, size, eqn.name, operand, combine)


def _shared(value, n: int) -> list:
    """One result for every participant (copies: a device may later update its own in place)."""
    value = np.asarray(value)
    return [value] + [value.copy() for _ in range(n - 1)]


def _dtype(aval):
    """The result dtype; an async start's result is a future of it."""
    return getattr(aval, "inner_aval", aval).dtype


# --- reductions -----------------------------------------------------------------------------------

def _split_axes(axes) -> tuple[tuple, tuple]:
    axes = _names(axes)
    return tuple(a for a in axes if not isinstance(a, int)), tuple(a for a in axes if isinstance(a, int))


def participants_sum(eqn, stacked: np.ndarray, out_dtype) -> np.ndarray:
    """The correctly rounded sum over the last axis (the participants' operands).

    Real floats up to float32: a float64 sum with its error carried exactly (TwoSum, Knuth TAOCP
    vol. 2, 4.2.2), so exact cancellations and exactly representable sums (common between
    devices: replicated partial results, zero gradients) certify at once instead of going to the
    exact per-element tier of float_sum_last; the error terms' own float64 sum is bounded by
    gamma_k sum|e| (Higham eq. 4.4) and its rounding into s + E by u |s + E|. Where every error
    term is zero, s is exact (the sum of a few float32 values with near exponents often is, and
    often falls on a float32 midpoint, which no error interval can certify): rounded once."""
    out_dtype = np.dtype(out_dtype)
    if not (dtypes.is_float(out_dtype) and dtypes.is_float(stacked.dtype) and dtypes.bit_width(stacked.dtype) <= 32
            and stacked.shape[-1] > 1):
        return sum_last(eqn, stacked, out_dtype)
    if stacked.shape[-1] == 2 and stacked.dtype == np.float32 and out_dtype == np.float32:
        # Two float32 participants (a pmean over a pair of devices): IEEE float32 addition is
        # the correctly rounded sum (IEEE 754-2019 5.4.1); an exact zero sum is +0.0 as below.
        # Non-finite results take the general path (its NaN and overflow handling).
        with np.errstate(invalid="ignore", over="ignore"):
            total = np.add(stacked[..., 0], stacked[..., 1])
        if np.isfinite(total).all():
            return total + np.float32(0.0)
    terms = stacked.astype(F64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = terms[..., 0].copy()
        err = np.zeros_like(s)
        err_abs = np.zeros_like(s)
        for j in range(1, terms.shape[-1]):
            x = terms[..., j]
            t = s + x
            z = t - s
            e = (s - (t - z)) + (x - z)          # TwoSum: s + x == t + e exactly (finite values)
            err += e
            err_abs += np.abs(e)
            s = t
        s += 0.0                         # an exact zero sum is +0.0 (as float_sum_last; XLA:CPU)
        finite = np.isfinite(s)          # (inf/NaN sums: s is already the exact result)
        inexact = finite & (err_abs != 0)
        total = np.where(inexact, s + err, s)
        bound = np.where(inexact, sum_error_bound(err_abs, terms.shape[-1], F64) + np.abs(total) * UNIT[F64], 0.0)
    # Where no addition rounded, s is the exact sum: one rounding (ties to even) is the answer.
    out = round_float(total, out_dtype)
    todo = np.flatnonzero(inexact)
    if todo.size:
        rows = terms.reshape(-1, terms.shape[-1])
        out.flat[todo] = certified_round(total.flat[todo], bound.flat[todo], out_dtype, lambda i: (rows[todo[i]],))
    return out


def _reduction(kind: str):
    """psum/pmax/pmin over named axes (and positional ones: those reduce the operand's own
    dimensions too, in the same single rounding)."""

    def reduce_one(eqn, x, positional, out_dtype):
        def combine(ops):
            stacked = np.stack([move_last(np.asarray(o), positional) if positional else
                                np.asarray(o)[..., None] for o in ops], axis=-2)
            stacked = stacked.reshape(stacked.shape[:-2] + (-1,))
            if kind == "sum":
                return _shared(participants_sum(eqn, stacked, out_dtype), len(ops))
            np_fn = np.max if kind == "max" else np.min
            return _shared(extremum(eqn, stacked, kind, lambda k: np_fn(k, axis=-1)), len(ops))
        return combine

    def rule(eqn, *xs, axes,
             axis_index_groups=None):   # absent from psum_invariant and the unreduced_* forms
        named, positional = _split_axes(axes)
        outs = [collective(eqn, named, x, reduce_one(eqn, x, positional, _dtype(aval)), axis_index_groups)
                for x, aval in zip(xs, eqn.out_avals)]
        return outs if eqn.primitive.multiple_results else outs[0]
    return rule


register("psum", "psum_invariant", "unreduced_psum", "psum_start", "psum_invariant_start",
         "unreduced_psum_start")(_reduction("sum"))
register("pmax", "unreduced_pmax")(_reduction("max"))
register("pmin", "unreduced_pmin")(_reduction("min"))


# --- data movement ------------------------------------------------------------------------------

@register("ppermute", "ppermute_start")
def ppermute(eqn, x, *, axis_name, perm):
    def combine(ops):
        out = [np.zeros_like(np.asarray(o)) for o in ops]   # a device nobody sends to gets zeros
        for src, dst in perm:
            out[dst] = np.array(ops[src], copy=True)
        return out
    return collective(eqn, axis_name, x, combine)


@register("pbroadcast", "pbroadcast_start")
def pbroadcast(eqn, x, *, axis_name, source):
    return collective(eqn, axis_name, x, lambda ops: _shared(ops[source], len(ops)))


@register("pbroadcast_dynamic")
def pbroadcast_dynamic(eqn, x, source, *, axis_name):
    def combine(ops):
        sources = {int(s) for _, s in ops}
        if len(sources) != 1:
            raise UndefinedBehaviorError(f"pbroadcast_dynamic/c1: devices name different sources "
                                         f"{sorted(sources)}")
        src = sources.pop()
        if not 0 <= src < len(ops):
            raise UndefinedBehaviorError(f"pbroadcast_dynamic/c1: source {src} outside the {len(ops)} "
                                         "devices")
        return _shared(ops[src][0], len(ops))
    return collective(eqn, axis_name, (x, source), combine)


def _gather(eqn, x, *, all_gather_dimension, axis_name, tiled,
            axis_size,                 # the participant count, which the group already gives
            axis_index_groups=None):   # absent from all_gather_invariant / _reduced
    def combine(ops):
        parts = [np.asarray(o) for o in ops]
        whole = (np.concatenate(parts, axis=all_gather_dimension) if tiled
                 else np.stack(parts, axis=all_gather_dimension))
        return _shared(whole, len(ops))
    return collective(eqn, axis_name, x, combine, axis_index_groups)


register("all_gather", "all_gather_invariant", "all_gather_reduced", "all_gather_start",
         "all_gather_reduced_start")(_gather)


def _reduce_scatter(eqn, x, *, scatter_dimension, axis_name, tiled,
                    axis_size,                 # the participant count, which the group gives
                    axis_index_groups=None):   # absent from unreduced_reduce_scatter
    out_dtype = _dtype(eqn.out_aval)

    def combine(ops):
        stacked = np.stack([np.asarray(o) for o in ops], axis=-1)
        total = participants_sum(eqn, stacked, out_dtype)       # each element rounded once
        pieces = np.split(total, len(ops), axis=scatter_dimension)
        return [np.asarray(p if tiled else np.squeeze(p, scatter_dimension), order="C") for p in pieces]
    return collective(eqn, axis_name, x, combine, axis_index_groups)


register("reduce_scatter", "unreduced_reduce_scatter", "reduce_scatter_start",
         "unreduced_reduce_scatter_start")(_reduce_scatter)


@register("all_to_all", "all_to_all_start")
def all_to_all(eqn, x, *, axis_name, split_axis, concat_axis, axis_index_groups,
               tiled):   # lax.all_to_all reshapes around the primitive (abstract eval: del tiled)
    def combine(ops):
        chunks = [np.split(np.asarray(o), len(ops), axis=split_axis) for o in ops]
        return [np.concatenate([chunks[src][dst] for src in range(len(ops))], axis=concat_axis)
                for dst in range(len(ops))]
    return collective(eqn, axis_name, x, combine, axis_index_groups)


@register("ragged_all_to_all")
def ragged_all_to_all(eqn, operand, output, input_offsets, send_sizes, output_offsets, recv_sizes,
                      *, axis_name, axis_index_groups):
    def combine(ops):
        n = len(ops)
        results = []
        for dst in range(n):
            out = np.array(ops[dst][1], copy=True)
            written = np.zeros(out.shape[:1], bool)
            for src, (x, _, in_off, send, out_off, _) in enumerate(ops):
                per = len(in_off) // n
                for k in range(dst * per, (dst + 1) * per):
                    lo, size, at = int(in_off[k]), int(send[k]), int(out_off[k])
                    if size < 0 or lo < 0 or lo + size > x.shape[0] or at < 0 or at + size > out.shape[0]:
                        raise UndefinedBehaviorError(
                            f"ragged_all_to_all: device {src} sends rows [{lo}, {lo + size}) of "
                            f"{x.shape[0]} to rows [{at}, {at + size}) of device {dst}'s "
                            f"{out.shape[0]}: out of bounds (ragged_all_to_all/c1)")
                    if written[at:at + size].any():
                        raise UndefinedBehaviorError(
                            f"ragged_all_to_all: rows [{at}, {at + size}) of device {dst}'s output "
                            "are written by two sends (the order XLA writes them is unspecified: "
                            "ragged_all_to_all/c2)")
                    written[at:at + size] = True
                    out[at:at + size] = x[lo:lo + size]
            results.append(out)
        return results
    operands = tuple(np.asarray(v) for v in (operand, output, input_offsets, send_sizes, output_offsets,
                                             recv_sizes))
    if len(operands[2]) % _linear(eqn, _device(eqn), _names(axis_name))[1]:
        raise eqn.unsupported("ragged_all_to_all offsets not a multiple of the axis size")
    return collective(eqn, axis_name, operands, combine, axis_index_groups)


# --- async completion and casts: identities on the values -----------------------------------------

@register("all_gather_done", "psum_done", "reduce_scatter_done", "all_to_all_done", "ppermute_done",
          "pbroadcast_done")
def collective_done(eqn, x):
    return x


def _cast(eqn, *xs, axes):
    # The varying/unreduced/reduced manual-axis types change what JAX's type checker allows, not
    # any device's value.
    return list(xs) if eqn.primitive.multiple_results else xs[0]


register("pvary", "preduced", "reduced_vary_cast", "reduced_vary_cast_p", "vary_unreduced_cast",
         "vary_unreduced_cast_p")(_cast)


def _pallas_run():
    """The running Pallas kernel of this thread (its mesh axes take precedence), or None.
    (Imported on first use: the Pallas engine imports the rule families; axis_index runs per
    warpgroup and step in Mosaic GPU kernels, where a function-level import costs more than the
    rule.)"""
    global _maybe_current_run
    if _maybe_current_run is None:
        from ..pallas.grid import maybe_current_run
        _maybe_current_run = maybe_current_run
    return _maybe_current_run()


_maybe_current_run = None


# --- axis queries --------------------------------------------------------------------------------

@register("axis_index")
def axis_index(eqn, *, axis_name):
    run = _pallas_run()
    names = _names(axis_name)
    if run is not None:     # the running kernel's own axes (core mesh, named grid) come first
        from .pallas import kernel_axis_index
        idx = kernel_axis_index(run, axis_name)
        if idx is not None:
            return idx
    return np.int32(_linear(eqn, _device(eqn), names)[0])


_PSEND_REFUSAL = ("refused: JAX documents psend/precv semantics as platform-specific (NCCL "
                  "send/recv on GPU, the only platform that lowers them; deprecated in JAX 0.12)")


@register("psend", "precv", partial=_PSEND_REFUSAL)
def psend_precv(eqn, *args, axis_name, perm, out_shape=None):   # out_shape: precv only
    raise eqn.unsupported(_PSEND_REFUSAL)


# --- jax.debug.inspect_array_sharding -------------------------------------------------------------

_INSPECT_SHARDING_REFUSAL = (
    "jax.debug.inspect_array_sharding calls back with the sharding XLA chose for the value on "
    "real devices (jax/_src/debugging.py _inspect_sharding_lowering_rule: from the SPMD "
    "partitioner through the InspectSharding custom call, or at lowering with a replicated "
    "sharding of the one device compiled for): a jax.sharding.Sharding naming devices, which the "
    "reference, evaluating the program on no device, has none of to give")


@register("inspect_sharding", refused=_INSPECT_SHARDING_REFUSAL)
def inspect_sharding(eqn, value, **params):   # (refused whatever its callback)
    raise eqn.unsupported(_INSPECT_SHARDING_REFUSAL)
