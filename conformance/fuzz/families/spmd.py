"""The ``spmd`` family: ``jax.shard_map`` programs with collectives over a mesh of host devices.

Each program is one ``shard_map`` (the IR operation ``shard_map`` holds the body as its block,
rendered by ``ops._shard_map``) over a mesh of one or two axes of 1-4 devices each (at most
:data:`DEVICES`: xla:cpu gets them from the worker's ``--xla_force_host_platform_device_count``,
conformance/isolation.py). Its inputs are split by ``in_specs`` whose dimensions are replicated
(``None``) or partitioned over one axis or both; its body mixes the lax family's operations
defined bit for bit (``LaxBuilder(exact_only=True)`` with ``SIMPLE_OPS``, as loop bodies) with
collectives: ``psum``/``pmax``/``pmin``, ``all_gather`` (tiled or not), ``psum_scatter`` (tiled
or not), ``ppermute`` (rings, reversals, partial permutations), ``all_to_all`` and ``axis_index``,
over one axis or both (in either order). Semantics: spec/spmd.py.

Defined by construction:

- a float all-reduce leaves its order to the implementation (spec/spmd.py: XLA operation semantics,
  AllReduce), and XLA:CPU's float pmax/pmin drop NaN (spec/divergences.py
  xla-cpu-all-reduce-extremum-nan-zero); the fuzz oracle has no per-collective budget (a collective
  cannot be evaluated alone, off its devices). So float psum/pmax/pmin/psum_scatter are generated
  only of small integers converted to a float type wide enough that every partial sum is exact
  (int8/int16/uint8 -> float32, float64; int8/uint8 -> float16): any order gives the same bits,
  and no NaN or -0.0 reaches them. Integer reductions wrap and are exact; data movement
  (all_gather, ppermute, all_to_all) is exact for every dtype;
- an output's ``out_specs`` names every mesh axis its value varies along (tracked through the
  body: an input varies along the axes its in_spec names, a reduction or gather over A makes a
  value invariant along A, a scatter, permutation, all_to_all or axis_index over A makes it vary
  along A); ``P()`` of a value that differs between devices is undefined and never generated (the
  reference raises UndefinedBehaviorError on one: a reference finding, i.e. a generator bug);
- ``check_vma=False`` throughout (the varying-axes type system is not what is tested, and its
  rules for invariant operands changed within the JAX range).
"""
from __future__ import annotations

import math

from ..build import MAX_ELEMENTS
from ..choices import Choices
from ..ir import Program, Type
from . import SPMD_DEVICES as DEVICES      # the most devices a program's mesh has (the family declares it)
from .lax import FLOATS, INTS, SIMPLE_OPS, LaxBuilder, body

AXES = ("x", "y")
# (small-integer source dtype, float type) pairs whose sums over DEVICES participants are exact
EXACT_FLOAT_SUMS = (("int16", "float32"), ("int8", "float32"), ("uint8", "float16"), ("int8", "float16"),
                    ("int16", "float64"))
REDUCTIONS = ("psum", "pmax", "pmin")
BLOCK_DIMS = (1, 2, 4, 3, 8, 5, 6)


def _draw_mesh(c: Choices) -> tuple[tuple[int, ...], tuple[str, ...]]:
    rank = c.weighted([(1, 3), (2, 2)])
    sizes: list[int] = []
    for _ in range(rank):
        options = [s for s in (2, 1, 4, 3) if math.prod(sizes) * s <= DEVICES]
        sizes.append(c.choice(options))
    return tuple(sizes), AXES[:rank]


class SpmdBuilder(LaxBuilder):
    """The body of a shard_map: the lax family's exact operations plus collectives."""

    def __init__(self, c: Choices, x64: bool, params_, mesh: dict[str, int]):
        super().__init__(c, x64, params_, can_add_inputs=False, exact_only=True)
        self.mesh = mesh

    def axes(self, mesh_order: bool = False) -> tuple[str, ...]:
        """One mesh axis or both (in either order, or in the mesh's)."""
        names = list(self.mesh)
        if len(names) == 1 or self.c.below(3):
            return (self.c.choice(names),)
        return tuple(names) if mesh_order or self.c.below(2) else tuple(reversed(names))

    def size(self, axes) -> int:
        return math.prod(self.mesh[a] for a in axes)

    def operand(self, ok) -> int | None:
        """A value of a collective: numbers (no bool, no narrow types), not zero-size."""
        return self.pick(lambda t: (t.dtype in FLOATS or t.dtype in INTS) and t.size > 0 and ok(t))


def op_reduce(b: SpmdBuilder) -> None:
    """psum/pmax/pmin, or psum_scatter: of integers, or of small integers converted to a float."""
    axes = b.axes()
    n = b.size(axes)
    fn = b.c.choice(REDUCTIONS + ("psum_scatter",))
    if b.c.below(3) == 0:
        src, to = b.c.choice([(s, f) for s, f in EXACT_FLOAT_SUMS if b.ok_dtype(f)])
        x = b.pick(lambda t: t.dtype == src and t.size > 0)
        if x is None:
            x = b.operand(lambda t: True)
            if x is None:
                return
            x = b.emit1("convert", [x], b.types[x].with_dtype(src), dtype=src)
        x = b.emit1("convert", [x], b.types[x].with_dtype(to), dtype=to)
    else:
        # (a psum_scatter wants a dimension the participants divide)
        x = (fn == "psum_scatter" and b.operand(lambda t: t.dtype in INTS and any(d % n == 0 for d in t.shape))
             or b.operand(lambda t: t.dtype in INTS))
        if x is None:
            return
    t = b.types[x]
    if fn != "psum_scatter":
        b.emit1("all_reduce", [x], t, fn=fn, axes=axes)
        return
    tiled = [d for d in range(t.rank) if t.shape[d] % n == 0]
    untiled = [d for d in range(t.rank) if t.shape[d] == n]
    if untiled and b.c.below(2) == 0:
        d = b.c.choice(untiled)
        b.emit1("psum_scatter", [x], t.with_shape(t.shape[:d] + t.shape[d + 1:]), axes=axes, dim=d, tiled=False)
    elif tiled:
        d = b.c.choice(tiled)
        shape = list(t.shape)
        shape[d] //= n
        b.emit1("psum_scatter", [x], t.with_shape(shape), axes=axes, dim=d, tiled=True)
    else:
        b.emit1("all_reduce", [x], t, fn="psum", axes=axes)


def op_all_gather(b: SpmdBuilder) -> None:
    axes = b.axes()
    n = b.size(axes)
    x = b.operand(lambda t: t.size * n <= MAX_ELEMENTS)
    if x is None:
        return
    t = b.types[x]
    if t.rank and b.c.below(2):
        d = b.c.below(t.rank)
        shape = list(t.shape)
        shape[d] *= n
        b.emit1("all_gather", [x], t.with_shape(shape), axes=axes, dim=d, tiled=True)
    else:
        d = b.c.below(t.rank + 1)
        b.emit1("all_gather", [x], t.with_shape(t.shape[:d] + (n,) + t.shape[d:]), axes=axes, dim=d, tiled=False)


def _permutation(c: Choices, n: int) -> tuple[tuple[int, int], ...]:
    """(source, destination) pairs: a ring shift, a reversal, or disjoint pairs (devices nobody
    sends to receive zeros)."""
    kind = c.weighted([("shift", 3), ("reverse", 1), ("pairs", 2)])
    if kind == "shift":
        k = c.between(0, max(0, n - 1))
        return tuple((j, (j + k) % n) for j in range(n))
    if kind == "reverse":
        return tuple((j, n - 1 - j) for j in range(n))
    return tuple((j, j + 1) for j in range(0, n - 1, 2))


def op_ppermute(b: SpmdBuilder) -> None:
    # (JAX 0.12 refuses a ppermute over axes in another order than the mesh's: "Make sure that the
    # axis_name passed to jax.lax.ppermute is in the same order as the axis_names declared on the mesh")
    axes = b.axes(mesh_order=True)
    x = b.operand(lambda t: True)
    if x is None:
        return
    b.emit1("ppermute", [x], b.types[x], axes=axes, perm=_permutation(b.c, b.size(axes)))


def op_all_to_all(b: SpmdBuilder) -> None:
    axes = b.axes()
    n = b.size(axes)
    x = b.operand(lambda t: any(s % n == 0 for s in t.shape))
    if x is None:
        return
    t = b.types[x]
    split = b.c.choice([d for d in range(t.rank) if t.shape[d] % n == 0])
    concat = b.c.below(t.rank)
    shape = list(t.shape)
    shape[split] //= n
    shape[concat] *= n
    b.emit1("all_to_all", [x], t.with_shape(shape), axes=axes, split=split, concat=concat)


def op_axis_index(b: SpmdBuilder) -> None:
    """axis_index, broadcast to the shape of a value so that arithmetic can combine them."""
    i = b.emit1("axis_index", [], Type("int32", ()), axes=b.axes())
    x = b.pick(lambda t: t.size > 0 and t.size <= MAX_ELEMENTS and t.rank > 0)
    if x is not None and b.c.below(3):
        shape = b.types[x].shape
        b.emit1("broadcast_in_dim", [i], Type("int32", shape), shape=shape, dims=())


SPMD_OPS = ("all_reduce", "all_gather", "psum_scatter", "ppermute", "all_to_all", "axis_index")
COLLECTIVES = [(op_reduce, 5), (op_all_gather, 3), (op_ppermute, 3), (op_all_to_all, 2), (op_axis_index, 1)]


def varying(b: SpmdBuilder, in_axes: list[frozenset]) -> dict[int, frozenset]:
    """The mesh axes each value of the body may differ along (see the module docstring)."""
    out = dict(zip(b.params, in_axes))
    for name, args, p, _, _, hs in b.ops:
        v = frozenset().union(*(out[a] for a in args))
        axes = frozenset(dict(p).get("axes", ()))
        if name in ("all_reduce", "all_gather"):
            v = v - axes
        elif name in ("psum_scatter", "ppermute", "all_to_all", "axis_index"):
            v = v | axes
        for h in hs:
            out[h] = v
    return out


def _after_collective(b: SpmdBuilder) -> set[int]:
    """The values computed from a collective's result."""
    out: set[int] = set()
    for name, args, _, _, _, hs in b.ops:
        if name in SPMD_OPS or any(a in out for a in args):
            out.update(hs)
    return out


def _in_spec(c: Choices, rank: int, names) -> tuple:
    """A spec: per dimension None or a tuple of axes, each mesh axis at most once."""
    spec: list = [None] * rank
    for a in names:
        if rank and c.below(3):
            d = c.below(rank)
            spec[d] = (spec[d] or ()) + (a,)
    return tuple(spec)


def _global(shape, spec, mesh) -> tuple[int, ...]:
    return tuple(s * math.prod(mesh[a] for a in (axes or ())) for s, axes in zip(shape, spec))


def _out_spec(c: Choices, rank: int, must: frozenset, names) -> tuple:
    """A spec naming every axis of ``must`` (the value varies along them) and sometimes others (the
    value is then the same block repeated)."""
    spec: list = [None] * rank
    for a in names:
        if a in must or (rank and c.below(4) == 0):
            d = c.below(rank)
            spec[d] = (spec[d] or ()) + (a,)
    return tuple(spec)


def generate(c: Choices) -> Program:
    x64 = c.chance(15)
    sizes, names = _draw_mesh(c)
    mesh = dict(zip(names, sizes))
    top = LaxBuilder(c, x64)
    blocks, specs, in_axes = [], [], []
    for _ in range(c.between(1, 3)):
        dtype = top.int_dtype() if c.below(2) else top.float_dtype()
        rank = c.weighted([(1, 4), (2, 4), (0, 1), (3, 2)])
        shape = tuple(c.choice(BLOCK_DIMS) for _ in range(rank))
        spec = _in_spec(c, rank, names)
        glob = _global(shape, spec, mesh)
        if math.prod(glob) > MAX_ELEMENTS:
            spec, glob = (None,) * rank, shape
        top.input(Type(dtype, glob))
        blocks.append(Type(dtype, shape))
        specs.append(spec)
        in_axes.append(frozenset(a for axes in spec for a in (axes or ())))
    b = SpmdBuilder(c, x64, blocks, mesh)
    collectives = 0
    for _ in range(c.between(1, 8)):
        before = len(b.ops)
        if c.below(2):
            c.weighted(COLLECTIVES)(b)
            collectives += len(b.ops) > before
        else:
            body(b, 1, SIMPLE_OPS)
    if not collectives:
        op_all_gather(b)
    # outputs: unused values, those computed from a collective first
    reached = _after_collective(b)
    sinks = [h for h in b.sinks() if b.types[h].size <= MAX_ELEMENTS]
    sinks = [h for h in sinks if h in reached] + [h for h in sinks if h not in reached]
    outs = sinks[:c.between(1, 3)] or [len(b.types) - 1]
    results = []
    for h in outs:
        if not b.types[h].rank:       # a spec needs a dimension to name an axis on
            h = b.emit1("reshape", [h], b.types[h].with_shape((1,)), shape=(1,))
        results.append(h)
    v = varying(b, in_axes)
    out_specs, out_types = [], []
    for h in results:
        t = b.types[h]
        spec = _out_spec(c, t.rank, v[h], names)
        out_specs.append(spec)
        out_types.append(t.with_shape(_global(t.shape, spec, mesh)))
    sub = b.block(results)
    hs = top.emit("shard_map", top.params, out_types, [sub], mesh=sizes, axes=names, in_specs=tuple(specs),
                  out_specs=tuple(out_specs))
    return Program("spmd", tuple(top.inputs), top.block(hs), x64=x64)
