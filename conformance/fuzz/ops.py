"""The operations of the IR and how each renders to Python (``jax.lax`` / ``jax.numpy`` calls).

One entry per IR operation name: ``RENDER[name](op, args, outs) -> lines``, where ``args`` are the
Python names of its operands and ``outs`` the names its results get. Operations that need an API
some JAX in range lacks name it in ``NEEDS`` (probed by :func:`missing_api`), so that a program
that cannot be rendered on the installed JAX says why instead of failing somewhere else.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .ir import Op

NUMPY_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64", "complex64", "complex128")


def dt(name: str) -> str:
    """Python source of a dtype."""
    if name == "bool":
        return "np.bool_"
    if name in NUMPY_DTYPES:
        return f"np.{name}"
    return f"ml_dtypes.{name}"


def lit(v) -> str:
    """Python source of a literal parameter value (floats exactly, non-finite ones included)."""
    if isinstance(v, float):
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "-float('inf')"
        return repr(v)
    if isinstance(v, tuple):
        return "(" + "".join(lit(x) + ", " for x in v) + ")"
    return repr(v)


def scalar(value, dtype: str) -> str:
    return f"np.array({lit(value)}, {dt(dtype)})"


def _tuple_out(outs, expr) -> list[str]:
    return [f"{', '.join(outs)}{',' if len(outs) == 1 else ''} = {expr}"]


def _one(fn: Callable[[dict, list[str]], str]):
    def render(op: Op, args, outs):
        return [f"{outs[0]} = {fn(op.p, args)}"]
    return render


def _unary(p, a):
    return f"lax.{p['fn']}({a[0]})"


def _binary(p, a):
    return f"lax.{p['fn']}({a[0]}, {a[1]})"


def _round(p, a):
    return f"lax.round({a[0]}, lax.RoundingMethod.{p['method']})"


def _const(p, a):
    return f"jnp.full({lit(tuple(p['shape']))}, {scalar(p['value'], p['dtype'])})"


def _scalar_binary(p, a):
    # an operation with a constant operand (x * 1, x + 0, ...): the literal on the side given
    c = scalar(p["value"], p["dtype"])
    return f"lax.{p['fn']}({a[0]}, {c})" if p["side"] == 0 else f"lax.{p['fn']}({c}, {a[0]})"


def _index_expr(axis: int, idx: str) -> str:
    return "".join(":, " for _ in range(axis)) + idx


def _gather(p, a):
    fill = f", fill_value={scalar(p['fill'], p['dtype'])}" if p["mode"] == "fill" and p.get("fill") is not None else ""
    return f"{a[0]}.at[{_index_expr(p['axis'], a[1])}].get(mode={p['mode']!r}{fill})"


def _scatter(p, a):
    return f"{a[0]}.at[{_index_expr(p['axis'], a[1])}].{p['fn']}({a[2]}, mode={p['mode']!r})"


def _reduce_window(p, a):
    init = scalar(p["init"], p["dtype"])
    return (f"lax.reduce_window({a[0]}, {init}, lax.{p['fn']}, {lit(p['window'])}, {lit(p['strides'])}, "
            f"{lit(p['padding'])}, {lit(p['base_dilation'])}, {lit(p['window_dilation'])})")


def _precision(p) -> str:
    prec = p.get("precision")
    return "None" if prec is None else f"lax.Precision.{prec}"


def _preferred(p) -> str:
    pref = p.get("preferred")
    return "None" if pref is None else dt(pref)


def _dot_general(p, a):
    return (f"lax.dot_general({a[0]}, {a[1]}, ({lit(p['contract'])}, {lit(p['batch'])}), "
            f"precision={_precision(p)}, preferred_element_type={_preferred(p)})")


def _conv(p, a):
    return (f"lax.conv_general_dilated({a[0]}, {a[1]}, {lit(p['strides'])}, {lit(p['padding'])}, "
            f"lhs_dilation={lit(p['lhs_dilation'])}, rhs_dilation={lit(p['rhs_dilation'])}, "
            f"dimension_numbers={lit(p['dimension_numbers'])}, feature_group_count={p['groups']}, "
            f"precision={_precision(p)}, preferred_element_type={_preferred(p)})")


def _sort(op: Op, args, outs):
    p = op.p
    return _tuple_out(outs, f"lax.sort(({', '.join(args)},), dimension={p['dimension']}, is_stable=True, "
                            f"num_keys={p['num_keys']})")


def _top_k(op: Op, args, outs):
    return _tuple_out(outs, f"lax.top_k({args[0]}, {op.p['k']})")


def _pad(p, a):
    return f"lax.pad({a[0]}, {scalar(p['value'], p['dtype'])}, {lit(p['config'])})"


def _concat(p, a):
    return f"lax.concatenate([{', '.join(a)}], {p['dim']})"


def _dynamic_slice(p, a):
    return f"lax.dynamic_slice({a[0]}, [{', '.join(a[1:])}], {lit(p['sizes'])})"


def _dynamic_update_slice(p, a):
    return f"lax.dynamic_update_slice({a[0]}, {a[1]}, [{', '.join(a[2:])}])"


def _rng_bit_generator(op: Op, args, outs):
    p = op.p
    return _tuple_out(outs, f"lax.rng_bit_generator({args[0]}, {lit(tuple(p['shape']))}, dtype={dt(p['dtype'])}, "
                            f"algorithm=lax.RandomAlgorithm.{p['algorithm']})")


def _random(p, a):
    fn, shape = p["fn"], lit(tuple(p["shape"]))
    if fn == "bits":
        return f"jax.random.bits({a[0]}, {shape}, {dt(p['dtype'])})"
    if fn in ("uniform", "normal", "gumbel", "exponential", "logistic", "truncated_normal"):
        extra = f", {lit(p['lo'])}, {lit(p['hi'])}" if fn in ("uniform", "truncated_normal") else ""
        if fn == "uniform":
            return f"jax.random.uniform({a[0]}, {shape}, {dt(p['dtype'])}{extra})"
        if fn == "truncated_normal":
            return f"jax.random.truncated_normal({a[0]}{extra}, {shape}, {dt(p['dtype'])})"
        return f"jax.random.{fn}({a[0]}, {shape}, {dt(p['dtype'])})"
    if fn == "randint":
        return f"jax.random.randint({a[0]}, {shape}, {p['lo']}, {p['hi']}, {dt(p['dtype'])})"
    if fn == "bernoulli":
        return f"jax.random.bernoulli({a[0]}, {lit(p['p'])}, {shape})"
    if fn == "permutation":
        return f"jax.random.permutation({a[0]}, {a[1]}, axis={p['axis']}, independent={p['independent']})"
    if fn == "choice":
        return f"jax.random.choice({a[0]}, {a[1]}, {shape}, replace={p['replace']}, axis={p['axis']})"
    if fn == "categorical":
        return f"jax.random.categorical({a[0]}, {a[1]}, axis={p['axis']})"
    raise ValueError(f"unknown random function {fn}")


# --- Control flow: the op's blocks are rendered as nested functions by render.py; these lines call them.
def _switch(op: Op, args, outs, fns):
    return _tuple_out(outs, f"lax.switch({args[0]}, [{', '.join(fns)}], {', '.join(args[1:])})")


def _while(op: Op, args, outs, fns):
    # blocks: (cond, body); the counter is operand 0, the trip count a parameter
    return _tuple_out(outs, f"lax.while_loop({fns[0]}, {fns[1]}, ({', '.join(args)},))")


def _fori(op: Op, args, outs, fns):
    p = op.p
    return _tuple_out(outs, f"lax.fori_loop({p['lo']}, {p['hi']}, {fns[0]}, ({', '.join(args)},)"
                            + (f", unroll={p['unroll']})" if p.get("unroll") else ")"))


def _scan(op: Op, args, outs, fns):
    p = op.p
    n = p["n_carry"]
    carry, xs = args[:n], args[n:]
    return [f"({', '.join(outs[:n])}{',' if n == 1 else ''}), ({', '.join(outs[n:])}{',' if len(outs) - n == 1 else ''}) = "
            f"lax.scan({fns[0]}, ({', '.join(carry)}{',' if n == 1 else ''}), ({', '.join(xs)}{',' if len(xs) == 1 else ''}), "
            f"reverse={p['reverse']}, unroll={p['unroll']})"]


def _call(op: Op, args, outs, fns):
    return _tuple_out(outs, f"jax.jit({fns[0]})({', '.join(args)})")


def _cond(op: Op, args, outs, fns):
    return _tuple_out(outs, f"lax.cond({args[0]}, {fns[0]}, {fns[1]}, {', '.join(args[1:])})")


# --- State
def _ref_index(p, a, first: int, subscript: bool = True) -> str:
    """The indexer of a ref access: static slices/ints (p['index']) with dynamic scalars a[first:];
    ``subscript``: as written inside ``ref[...]``, else as a tuple expression."""
    parts, k = [], first
    for item in p["index"]:
        if item == "dyn":
            parts.append(a[k])
            k += 1
        elif isinstance(item, (tuple, list)):
            parts.append(f"{item[0]}:{item[1]}" if subscript else f"slice({item[0]}, {item[1]})")
        elif item is None:
            parts.append(":" if subscript else "slice(None)")
        else:
            parts.append(str(item))
    if not parts:
        return "..."
    return ", ".join(parts) if subscript else "(" + "".join(x + ", " for x in parts) + ")"


def _ref_get(op: Op, args, outs):
    return [f"{outs[0]} = {args[0]}[{_ref_index(op.p, args, 1)}]"]


def _ref_set(op: Op, args, outs):
    return [f"{args[0]}[{_ref_index(op.p, args, 2)}] = {args[1]}"]


def _ref_addupdate(op: Op, args, outs):
    return [f"jax.ref.addupdate({args[0]}, {_ref_index(op.p, args, 2, False)}, {args[1]})"]


def _ref_swap(op: Op, args, outs):
    return [f"{outs[0]} = jax.ref.swap({args[0]}, {_ref_index(op.p, args, 2, False)}, {args[1]})"]


def _safe_divisor(p, a):
    x, y = a
    bad = f"lax.eq({y}, lax.full_like({y}, 0))"
    if p["signed"]:
        bad = (f"lax.bitwise_or({bad}, lax.bitwise_and(lax.eq({x}, lax.full_like({x}, jnp.iinfo({x}.dtype).min)), "
               f"lax.eq({y}, lax.full_like({y}, -1))))")
    return f"lax.select({bad}, lax.full_like({y}, 1), {y})"


# --- Pallas kernels (conformance/fuzz/families/pallas.py): the kernel body's operations and the call
DMA_SEMAPHORE = "dma_semaphore"     # the dtype name of a DMA semaphore array (TPU scratch)

# Block-index expressions of an index map: ("g", a) the grid index of axis a, ("c", v) a constant,
# ("div", a, d) / ("mod", a, m) revisits, ("lin", a, b, n) a * n + b, ("s", a) the scalar-prefetch
# table at a's index. Each renders over ``pid(axis)`` (a grid index's source) and the table's name.
_BLOCK_INDEX = {
    "g": lambda e, pid, table: pid(e[1]),
    "c": lambda e, pid, table: str(e[1]),
    "div": lambda e, pid, table: f"{pid(e[1])} // {e[2]}",
    "mod": lambda e, pid, table: f"{pid(e[1])} % {e[2]}",
    "lin": lambda e, pid, table: f"{pid(e[1])} * {e[3]} + {pid(e[2])}",
    "s": lambda e, pid, table: f"{table}[{pid(e[1])}]",
}


def block_index(e, pid, table: str = "") -> str:
    """Python source of one block-index expression (see _BLOCK_INDEX)."""
    return _BLOCK_INDEX[e[0]](e, pid, table)


def _kernel_pid(a: int) -> str:
    return f"pl.program_id({a})"


def _k_load(op: Op, args, outs):
    """A load of a whole block; masked (0 outside the array) along the dimensions whose last block
    sticks out of the array: p['mask'] = ((dim, block index expression, block size, array size), ...)."""
    lines = [f"{outs[0]} = {args[0]}[...]"]
    table = args[1] if len(args) > 1 else ""
    conds = [f"(lax.broadcasted_iota(jnp.int32, {outs[0]}.shape, {d}) + ({block_index(e, _kernel_pid, table)}) * {b}"
             f" < {n})" for d, e, b, n in op.p["mask"]]
    if conds:
        lines.append(f"{outs[0]} = jnp.where({' & '.join(conds)}, {outs[0]}, jnp.zeros_like({outs[0]}))")
    return lines


def _k_dma(op: Op, args, what: str) -> list[str]:
    """A local DMA of a window of an array (each dimension: block index expression * size, size)
    into a VMEM buffer, signalling slot p['slot'] of a DMA semaphore array; started, or waited for
    (a descriptor of the same copy, as kernels write it)."""
    table = args[3] if len(args) > 3 else ""
    window = ", ".join(f"pl.ds(({block_index(e, _kernel_pid, table)}) * {n}, {n})" for e, n in op.p["window"])
    return [f"pltpu.make_async_copy({args[0]}.at[{window}], {args[1]}, {args[2]}.at[{op.p['slot']}]).{what}()"]


def _k_init(op: Op, args, outs):
    """The refs set to zero at the first step of the accumulation axis."""
    return ([f"@pl.when(pl.program_id({op.p['axis']}) == 0)", "def _init():"] +
            [f"    {r}[...] = jnp.zeros({r}.shape, {r}.dtype)" for r in args])


def _k_rows(op: Op, args, outs):
    """A fori_loop over the first ``n`` rows of a ref, combining each row into the carry."""
    return [f"{outs[0]} = lax.fori_loop(0, {op.p['n']}, lambda t, c: lax.{op.p['fn']}(c, {args[0]}[pl.ds(t, 1), :]), "
            f"{args[1]})"]


def _spec(block, index_map, grid_rank: int, n_tables: int) -> str:
    if block is None:        # the whole array where it lies, for the kernel's DMAs
        return "pl.BlockSpec(memory_space=pl.ANY)"
    names = [f"i{a}" for a in range(grid_rank)] + [f"s{t}" for t in range(n_tables)]
    body = block_index_tuple(index_map, lambda a: f"i{a}", "s0")
    return f"pl.BlockSpec({lit(tuple(block))}, lambda {', '.join(names)}: {body})"


def block_index_tuple(index_map, pid, table: str) -> str:
    return "(" + "".join(block_index(e, pid, table) + ", " for e in index_map) + ")"


def _pallas_call(op: Op, args, outs, fns):
    """pl.pallas_call of the kernel block: generic (grid and BlockSpecs) or TPU (scalar prefetch
    grid spec, VMEM scratch, dimension semantics); ``interpret`` is the Pallas mode's argument."""
    p = op.p
    g = len(p["grid"])
    nt = p["n_prefetch"]
    ins = "[" + ", ".join(_spec(b, m, g, nt) for b, m in p["in_specs"]) + "]"
    outs_ = "[" + ", ".join(_spec(b, m, g, nt) for b, m in p["out_specs"]) + "]"
    shapes = "[" + ", ".join(f"jax.ShapeDtypeStruct({lit(tuple(t.shape))}, {dt(t.dtype)})" for t in op.outs) + "]"
    if p["target"] == "tpu":
        scratch = "[" + ", ".join(f"pltpu.SemaphoreType.DMA({lit(tuple(s))})" if d == DMA_SEMAPHORE else
                                  f"pltpu.VMEM({lit(tuple(s))}, {dt(d)})" for s, d in p["scratch"]) + "]"
        spec = (f"grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch={nt}, grid={lit(tuple(p['grid']))}, "
                f"in_specs={ins}, out_specs={outs_}, scratch_shapes={scratch}), ")
        params = f"compiler_params=pltpu.CompilerParams(dimension_semantics={lit(tuple(p['semantics']))}), "
    else:
        spec = f"grid={lit(tuple(p['grid']))}, in_specs={ins}, out_specs={outs_}, "
        params = ""
    return _tuple_out(outs, f"pl.pallas_call({fns[0]}, {spec}out_shape={shapes}, {params}"
                            f"interpret=interpret)({', '.join(args)})")


# --- SPMD (conformance/fuzz/families/spmd.py): collectives in a shard_map body, and the shard_map
def _pspec(spec) -> str:
    """A PartitionSpec: per dimension None or a tuple of mesh axis names."""
    return "jax.sharding.PartitionSpec(" + ", ".join(lit(d) for d in spec) + ")"


def _shard_map(op: Op, args, outs, fns):
    """jax.shard_map of the body over a Mesh of the first prod(mesh) devices (xla:cpu: host devices
    from --xla_force_host_platform_device_count), check_vma=False."""
    p = op.p
    mesh = (f"jax.sharding.Mesh(np.array(jax.devices()[:{math.prod(p['mesh'])}]).reshape({lit(p['mesh'])}), "
            f"{lit(p['axes'])})")
    specs = lambda ss: "(" + "".join(_pspec(s) + ", " for s in ss) + ")"    # noqa: E731
    return _tuple_out(outs, f"jax.shard_map({fns[0]}, mesh={mesh}, in_specs={specs(p['in_specs'])}, "
                            f"out_specs={specs(p['out_specs'])}, check_vma=False)({', '.join(args)})")


SPMD_RENDER: dict[str, Callable] = {
    "all_reduce": _one(lambda p, a: f"lax.{p['fn']}({a[0]}, {lit(p['axes'])})"),
    "all_gather": _one(lambda p, a: f"lax.all_gather({a[0]}, {lit(p['axes'])}, axis={p['dim']}, tiled={p['tiled']})"),
    "psum_scatter": _one(lambda p, a: f"lax.psum_scatter({a[0]}, {lit(p['axes'])}, scatter_dimension={p['dim']}, "
                                      f"tiled={p['tiled']})"),
    "ppermute": _one(lambda p, a: f"lax.ppermute({a[0]}, {lit(p['axes'])}, {lit(p['perm'])})"),
    "all_to_all": _one(lambda p, a: f"lax.all_to_all({a[0]}, {lit(p['axes'])}, {p['split']}, {p['concat']}, "
                                    f"tiled=True)"),
    "axis_index": _one(lambda p, a: f"lax.axis_index({lit(p['axes'])})"),
}


KERNEL_RENDER: dict[str, Callable] = {
    "k_load": _k_load,
    "k_store": lambda op, a, o: [f"{a[0]}[...] = {a[1]}"],
    "k_accum": lambda op, a, o: [f"{a[0]}[...] += {a[1]}"],
    "k_masked_store": lambda op, a, o: [f"{a[0]}[...] = jnp.where({a[1]}, {a[2]}, {a[0]}[...])"],
    "k_init": _k_init,
    "k_dma_start": lambda op, a, o: _k_dma(op, a, "start"),
    "k_dma_wait": lambda op, a, o: _k_dma(op, a, "wait"),
    "k_dot": _one(lambda p, a: f"jnp.dot({a[0]}, {a[1]}, preferred_element_type={dt(p['dtype'])})"),
    "k_reduce": _one(lambda p, a: f"jnp.broadcast_to(jnp.{p['fn']}({a[0]}, axis={p['axis']}, keepdims=True), "
                                  f"{a[0]}.shape)"),
    "k_rows": _k_rows,
    "k_broadcast": _one(lambda p, a: f"jnp.broadcast_to({a[0]}, {lit(tuple(p['to']))})"),
}


RENDER: dict[str, Callable] = {
    "safe_divisor": _one(_safe_divisor),
    "unary": _one(_unary),
    "binary": _one(_binary),
    "round": _one(_round),
    "integer_pow": _one(lambda p, a: f"lax.integer_pow({a[0]}, {p['y']})"),
    "scalar_binary": _one(_scalar_binary),
    "constant": _one(_const),
    "select": _one(lambda p, a: f"lax.select({a[0]}, {a[1]}, {a[2]})"),
    "clamp": _one(lambda p, a: f"lax.clamp({a[0]}, {a[1]}, {a[2]})"),
    "convert": _one(lambda p, a: f"lax.convert_element_type({a[0]}, {dt(p['dtype'])})"),
    "bitcast": _one(lambda p, a: f"lax.bitcast_convert_type({a[0]}, {dt(p['dtype'])})"),
    "reduce_precision": _one(lambda p, a: f"lax.reduce_precision({a[0]}, exponent_bits={p['exponent_bits']}, "
                                          f"mantissa_bits={p['mantissa_bits']})"),
    "broadcast_in_dim": _one(lambda p, a: f"lax.broadcast_in_dim({a[0]}, {lit(p['shape'])}, {lit(p['dims'])})"),
    "reshape": _one(lambda p, a: f"lax.reshape({a[0]}, {lit(p['shape'])})"),
    "transpose": _one(lambda p, a: f"lax.transpose({a[0]}, {lit(p['perm'])})"),
    "rev": _one(lambda p, a: f"lax.rev({a[0]}, {lit(p['dims'])})"),
    "pad": _one(_pad),
    "concatenate": _one(_concat),
    "slice": _one(lambda p, a: f"lax.slice({a[0]}, {lit(p['start'])}, {lit(p['limit'])}, {lit(p['strides'])})"),
    "dynamic_slice": _one(_dynamic_slice),
    "dynamic_update_slice": _one(_dynamic_update_slice),
    "iota": _one(lambda p, a: f"lax.broadcasted_iota({dt(p['dtype'])}, {lit(p['shape'])}, {p['dim']})"),
    "gather": _one(_gather),
    "scatter": _one(_scatter),
    "reduce": _one(lambda p, a: f"lax.reduce_{p['fn']}({a[0]}, {lit(p['axes'])})"),
    "argminmax": _one(lambda p, a: f"lax.{p['fn']}({a[0]}, {p['axis']}, {dt(p['index_dtype'])})"),
    "reduce_window": _one(_reduce_window),
    "cumulative": _one(lambda p, a: f"lax.{p['fn']}({a[0]}, axis={p['axis']}, reverse={p['reverse']})"),
    "dot_general": _one(_dot_general),
    "conv": _one(_conv),
    "sort": _sort,
    "top_k": _top_k,
    "rng_bit_generator": _rng_bit_generator,
    "wrap_key": _one(lambda p, a: f"jax.random.wrap_key_data({a[0]}, impl={p['impl']!r})"),
    "key_data": _one(lambda p, a: f"jax.random.key_data({a[0]})"),
    "split": _one(lambda p, a: f"jax.random.split({a[0]}, {p['n']})"),
    "fold_in": _one(lambda p, a: f"jax.random.fold_in({a[0]}, {a[1]})"),
    "random": _one(_random),
    "new_ref": _one(lambda p, a: f"jax.new_ref({a[0]})"),
    "ref_get": _ref_get,
    "ref_set": _ref_set,
    "ref_addupdate": _ref_addupdate,
    "ref_swap": _ref_swap,
    "freeze": _one(lambda p, a: f"jax.ref.freeze({a[0]})"),
    **KERNEL_RENDER,
    **SPMD_RENDER,
}

# Operations with blocks: render(op, args, outs, block function names) -> lines.
RENDER_BLOCKS: dict[str, Callable] = {
    "switch": _switch, "cond": _cond, "while": _while, "fori": _fori, "scan": _scan, "call": _call,
    "pallas_call": _pallas_call, "shard_map": _shard_map,
}

# APIs an operation needs that some JAX in range may lack: (module path, attribute).
NEEDS: dict[str, tuple[str, str]] = {
    "new_ref": ("jax", "new_ref"),
    "freeze": ("jax.ref", "freeze"),
    "ref_addupdate": ("jax.ref", "addupdate"),
    "ref_swap": ("jax.ref", "swap"),
    # Pallas kernels (present from JAX 0.10.2 to 0.12.0.1; probed so that another JAX says why)
    "pallas_call": ("jax.experimental.pallas.tpu", "CompilerParams"),
    "k_rows": ("jax.experimental.pallas", "ds"),
    "k_dma_start": ("jax.experimental.pallas.tpu", "make_async_copy"),
    "shard_map": ("jax", "shard_map"),
}


def missing_api(names) -> str:
    """Why the installed JAX cannot run operations ``names`` (empty if it can)."""
    import importlib
    for name in sorted(set(names)):
        need = NEEDS.get(name)
        if need is None:
            continue
        try:
            mod = importlib.import_module(need[0])
        except ImportError:
            mod = None
        if mod is None or not hasattr(mod, need[1]):
            import jax
            return f"JAX {jax.__version__} has no {need[0]}.{need[1]} (needed by the IR operation {name!r})"
    return ""


def special_float_values() -> tuple[float, ...]:
    return (0.0, -0.0, 1.0, -1.0, float("inf"), -float("inf"), float("nan"), 0.5, 2.0)


def numpy_dtype(name: str) -> np.dtype:
    import ml_dtypes
    return np.dtype(getattr(ml_dtypes, name)) if name not in NUMPY_DTYPES else np.dtype(name)
