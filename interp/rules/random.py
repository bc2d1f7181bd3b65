"""Rules: PRNG primitives, and structural primitives lifted to typed key arrays.

A typed key array (``key<fry>[3]``) is evaluated as a :class:`KeyArray`: the JAX PRNG
implementation and its ``uint32[*shape, *impl.key_shape]`` key data. The key operations run the
NumPy bit generators of :mod:`interp.prng`, bit-exact with XLA; implementations the reference
does not know natively (a user-registered ``PRNGImpl``) run the impl's own functions, traced by
JAX exactly as its lowering traces them, through the reference.

``jax_threefry_partitionable`` is read from ``jax.config`` when a rule runs, as JAX's lowering
reads it (it is not an equation parameter).
"""
from __future__ import annotations

import functools
import inspect
import threading
import weakref

import jax
import numpy as np
from jax._src import core as jax_core
from jax._src.random import prng as jax_prng

from .. import prng
from ..keys import KeyArray, as_key  # noqa: F401  (re-exported: the family's value type)
from ..pallas.tpu import hardware_prng
from ..pallas.grid import maybe_current_run
from ..evaluator import VALUE_CONVERTERS, EqnContext
from ..registry import EXTENDED_RULES, RULES, register

U32 = np.uint32


def _partitionable() -> bool:
    return bool(jax.config.jax_threefry_partitionable)


def _key_value(x):
    if isinstance(x, (KeyArray, jax_prng.PRNGKeyArray)):
        return as_key(x)
    return None


VALUE_CONVERTERS.append(_key_value)


def _is_key_dtype(dtype) -> bool:
    return isinstance(dtype, jax_prng.KeyTy)


# --- key operations --------------------------------------------------------------------------

def _native(impl):
    """The NumPy implementation of a JAX PRNG impl, or None where the reference has none."""
    native = prng.IMPLS.get(impl.name)
    return native if native is not None and jax_prng.prngs.get(impl.name) is impl else None


_traced_cache: dict = {}
_traced_lock = threading.Lock()


def _run_traced(eqn, fn, key, *args):
    """Evaluate ``fn`` (a function of JAX arrays) on reference values by tracing it with JAX, as
    ``mlir.lower_fun`` does in the primitive's lowering, and evaluating the jaxpr here."""
    specs = tuple(jax.ShapeDtypeStruct(np.shape(a), a.dtype) for a in (key, *args))
    ck = (fn, specs, jax.config.jax_threefry_partitionable, jax.config.jax_enable_x64)
    with _traced_lock:
        closed = _traced_cache.get(ck)
    if closed is None:
        closed = jax.make_jaxpr(fn)(*specs)
        with _traced_lock:
            _traced_cache[ck] = closed
    return eqn.eval_jaxpr(closed, key, *args)[0]


@functools.lru_cache(maxsize=None)
def _impl_fn(impl, op: str, ndim: int, *params):
    """The function JAX's lowering traces for ``op`` on keys of rank ``ndim`` (prng.py
    random_{seed,split,bits}_lowering: the impl function vmapped over the key dims)."""
    if op == "seed":
        fn = impl.seed
    elif op == "split":
        fn = lambda k: impl.split(k, params[0])  # noqa: E731
    elif op == "bits":
        fn = lambda k: impl.random_bits(k, params[0], params[1])  # noqa: E731
    elif op == "fold_in":  # keys shape params[0], msgs shape params[1]
        return jax_prng.iterated_vmap_binary_bcast(params[0], params[1], impl.fold_in)
    else:
        raise ValueError(op)
    return jax_prng.iterated_vmap_unary(ndim, fn)


# --- Pallas TPU keys -------------------------------------------------------------------------
# jax._src.pallas.mosaic.random registers two impls whose operations exist only inside Pallas TPU
# kernels: "pallas_tpu" keys (two uint32 seeds) draw from the core's hardware PRNG (random_bits
# seeds it with the key's scalars, then draws: _random_bits), fold_in mixes with one Threefry
# round (_fold_in), split is not defined; the stateful placeholder key of pltpu.stateful_* draws
# without seeding. Mosaic lowers random_bits / fold_in on these keys by tracing the impl function
# on the key itself (lowering.py random_bits_lowering / random_fold_in_lowering), not on the key
# data as JAX does elsewhere (where they fail): so does the reference.

def _pallas_kind(impl) -> "str | None":
    """"key" (pallas_tpu), "stateful" (pltpu.stateful_* placeholder) or None."""
    if impl.name not in ("pallas_tpu", "_pallas_internal_stateful"):
        return None
    from jax._src.pallas.mosaic import random as pl_random
    if impl is pl_random.tpu_key_impl:
        return "key"
    return "stateful" if impl is pl_random.tpu_internal_stateful_impl else None


def _kernel_run(eqn, what: str):
    run = maybe_current_run()
    if run is None:
        raise eqn.unsupported(f"pallas_tpu_key/in-kernel-only: {what} of a Pallas TPU key outside "
                              "a Pallas kernel (JAX lowers it only inside Pallas TPU kernels)")
    return run


def _pallas_bits(eqn, keys, kind, bit_width, shape):
    run = _kernel_run(eqn, "random_bits")
    if bit_width != 32:  # pallas/mosaic/random.py _random_bits: "Bit width must be 32"
        raise eqn.unsupported(f"pallas_tpu_key/bit-width: bit_width {bit_width}: the TPU hardware "
                              "PRNG draws 32-bit words")
    if kind == "key":
        if keys.shape:
            raise eqn.unsupported(f"pallas_tpu_key/scalar-key: random_bits of a Pallas key array "
                                  f"{keys.shape} (Mosaic seeds the hardware PRNG from one key)")
        hardware_prng.seed(run, keys.data.reshape(-1))
    return hardware_prng.draw(eqn, run, shape)


@register("random_seed")
def random_seed(eqn, seeds, *, impl):
    native = _native(impl)
    if native is None:
        data = _run_traced(eqn, _impl_fn(impl, "seed", np.ndim(seeds)), seeds)
        if _pallas_kind(impl) == "stateful":
            # The placeholder key's data (int32 zeros from its seed function) is never read;
            # its physical type is uint32 (KeyTyRules.physical_element_aval).
            data = np.asarray(data).astype(U32)
        return KeyArray(impl, data)
    return KeyArray(impl, native.seed(seeds))


@register("random_split")
def random_split(eqn, keys, *, shape):
    keys = as_key(keys)
    native = _native(keys.impl)
    shape = tuple(shape)
    if _pallas_kind(keys.impl):
        raise eqn.unsupported("pallas_tpu_key/no-split: JAX defines no split of Pallas TPU keys "
                              "(pallas/mosaic/random.py _split: 'Use fold_in instead')")
    if native is None:
        fn = _impl_fn(keys.impl, "split", keys.ndim, shape)
        return KeyArray(keys.impl, _run_traced(eqn, fn, keys.data))
    return KeyArray(keys.impl, native.split(keys.data, shape, _partitionable()))


@register("random_fold_in")
def random_fold_in(eqn, keys, msgs):
    keys = as_key(keys)
    native = _native(keys.impl)
    kind = _pallas_kind(keys.impl)
    if kind:
        _kernel_run(eqn, "fold_in")
        if kind != "key" or keys.shape or np.shape(msgs):
            raise eqn.unsupported(f"pallas_tpu_key/scalar-key: fold_in of a {keys.impl.name} key "
                                  f"array {keys.shape} with messages {np.shape(msgs)} (Mosaic "
                                  "folds one message into one pallas_tpu key)")
        # _fold_in on the typed key (prng_split, one Threefry round, prng_join), as Mosaic does
        return _run_traced(eqn, keys.impl.fold_in, keys, np.asarray(msgs).astype(U32))
    if native is None:
        fn = _impl_fn(keys.impl, "fold_in", keys.ndim, keys.shape, np.shape(msgs))
        return KeyArray(keys.impl, _run_traced(eqn, fn, keys.data, np.asarray(msgs)))
    # random.fold_in passes uint32 messages; other integers wrap as jnp.asarray(m, uint32) does
    return KeyArray(keys.impl, native.fold_in(keys.data, np.asarray(msgs).astype(U32)))


@register("random_bits", partial="threefry2x32 with jax_threefry_partitionable=False and 2**32 - 1 "
                                  "or more output words (16 GiB; JAX splits the key into blocks) raises")
def random_bits(eqn, keys, *, bit_width, shape):
    keys = as_key(keys)
    if bit_width not in (8, 16, 32, 64):
        raise eqn.unsupported(f"bit_width {bit_width}")
    native = _native(keys.impl)
    shape = tuple(shape)
    kind = _pallas_kind(keys.impl)
    if kind:
        return _pallas_bits(eqn, keys, kind, bit_width, shape)
    if native is None:
        return _run_traced(eqn, _impl_fn(keys.impl, "bits", keys.ndim, bit_width, shape), keys.data)
    if bit_width == 64 and eqn.out_dtype != np.uint64:
        # jax_enable_x64=False: inside the impl uint64 is canonicalised to uint32, so the rbg impls
        # ask rng_bit_generator for 32-bit draws and the others keep the low word (hi << 32 is 0).
        if native.name in ("rbg", "unsafe_rbg"):
            return native.random_bits(keys.data, 32, shape, _partitionable())
        return native.random_bits(keys.data, 64, shape, _partitionable()).astype(U32)
    return native.random_bits(keys.data, bit_width, shape, _partitionable())


@register("random_wrap")
def random_wrap(eqn, base_arr, *, impl):
    return KeyArray(impl, np.asarray(base_arr))


@register("random_unwrap")
def random_unwrap(eqn, keys):
    return as_key(keys).data


@register("random_clone")
def random_clone(eqn, keys):
    return as_key(keys)  # a copy for key-reuse checking only; the keys are the same


@register("random_gamma")
def random_gamma(eqn, keys, a, *, log_space):
    # Defined by its lowering: jax.random's _gamma_impl (a rejection loop of lax ops on split keys)
    # traced with use_vmap=True as on every platform; evaluated here op by op.
    return _run_traced(eqn, _gamma_fn(log_space), as_key(keys), np.asarray(a))


@functools.lru_cache(maxsize=None)
def _gamma_fn(log_space: bool):
    from jax._src.random import core as jax_random_core
    return functools.partial(jax_random_core._gamma_impl, log_space=log_space, use_vmap=True)


# --- the hash primitives ----------------------------------------------------------------------

def _hash_rule(core_fn):
    def rule(eqn, *args):
        outs = core_fn(*(np.asarray(a, U32) for a in args))
        shape = eqn.out_avals[0].shape  # the inputs' broadcast shape already
        return [o if o.shape == shape else np.broadcast_to(o, shape).copy() for o in outs]
    return rule


register("threefry2x32")(_hash_rule(prng.threefry2x32))
register("threefry4x32")(_hash_rule(prng.threefry4x32))
register("philox4x32")(_hash_rule(prng.philox4x32))
register("philox2x32")(_hash_rule(prng.philox2x32))


@register("iota_2x32_shape")
def iota_2x32_shape(eqn, *, shape):
    return list(prng.iota_2x32_shape(tuple(shape)))


@register("rng_bit_generator")
def rng_bit_generator(eqn, key, *, shape, dtype, algorithm, out_sharding):
    name = getattr(algorithm, "name", str(algorithm))
    new_key, bits = prng.rng_bit_generator(np.asarray(key), tuple(shape), dtype, name)
    return [new_key.astype(eqn.out_avals[0].dtype), bits]


# rng_uniform is XLA's stateful Rng op: XLA:CPU draws from a hidden global state, so two calls of
# the same program give different values (measured) and no bit pattern is defined.
_uniform_draws: "weakref.WeakKeyDictionary[EqnContext, int]" = weakref.WeakKeyDictionary()


@register("rng_uniform", partial="values are a deterministic emulation (XLA's Rng op is stateful "
                                 "and unreproducible): only the distribution is defined")
def rng_uniform(eqn, a, b, *, shape):
    """Uniform on [a, b): Threefry bits keyed by (options.seed, how often this equation ran)."""
    dtype = np.dtype(eqn.out_dtype)
    a, b = np.asarray(a), np.asarray(b)
    if not b > a:
        raise eqn.unsupported("rng_uniform/c1: rng_uniform with b <= a is undefined")
    draw = _uniform_draws.get(eqn, 0)
    _uniform_draws[eqn] = draw + 1
    fry = prng.IMPLS["threefry2x32"]
    key = fry.fold_in(fry.seed(np.int64(eqn.options.seed)), U32(draw))
    shape = tuple(shape)
    if dtype.kind in "iu":
        span = np.uint64(int(b) - int(a))
        offset = np.uint64(int(a) % 2**64)
        with np.errstate(over="ignore"):  # modulo 2**64, exact once cast back: a + r < b fits
            return ((fry.random_bits(key, 64, shape, True) % span) + offset).astype(dtype)
    if dtype not in _UNIFORM_FLOATS:  # the float types XLA's Rng takes (RngExpander)
        raise eqn.unsupported(f"rng_uniform/c2: rng_uniform of {dtype}")
    # u on the 2**-23 grid (2**-52 for float64; float16/bfloat16 from float32 draws, as XLA's
    # RngExpander makes them); a + u * (b - a) computed wider and rounded toward a, so that every
    # representable value of [a, b) gets its share (also in ranges of a few ulps) and b is never
    # reached (XLA:CPU's round-to-nearest does reach it: spec/divergences.py).
    mant, width = (52, 64) if dtype == np.float64 else (23, 32)
    wide = np.longdouble if dtype == np.float64 else np.float64
    u = (fry.random_bits(key, width, shape, True) >> (width - mant)).astype(wide) * wide(2.0 ** -mant)
    value = u * (b.astype(wide) - a.astype(wide)) + a.astype(wide)
    out = value.astype(dtype)
    out = np.where(out.astype(wide) > value, np.nextafter(out, a), out)
    return np.minimum(out, np.nextafter(b, a)).astype(dtype)


_UNIFORM_FLOATS = tuple(np.dtype(t) for t in ("float16", jax.numpy.bfloat16, "float32", "float64"))


# --- structural primitives on key arrays ------------------------------------------------------
# JAX lowers these on the key data with the key's trailing dimensions appended (KeyTyRules,
# mlir.broadcast_in_dim, _gather_lower_opaque, _scatter_lower_opaque): the same here, calling the
# registered rule of the plain primitive on the data.

def _physical_aval(aval):
    return jax_core.physical_aval(aval) if _is_key_dtype(getattr(aval, "dtype", None)) else aval


_ctx_cache: "weakref.WeakKeyDictionary[EqnContext, tuple]" = weakref.WeakKeyDictionary()


def _physical_ctx(eqn, params, extra_in_avals=()):
    """An EqnContext for the plain rule: physical avals and the rewritten params."""
    hit = _ctx_cache.get(eqn)
    if hit is not None:
        return hit
    ctx = object.__new__(EqnContext)
    ctx.eqn, ctx.primitive, ctx.name = eqn.eqn, eqn.primitive, eqn.name
    ctx.params = params
    ctx.in_avals = tuple(map(_physical_aval, eqn.in_avals)) + tuple(extra_in_avals)
    ctx.out_avals = tuple(map(_physical_aval, eqn.out_avals))
    ctx.options, ctx.source_info = eqn.options, eqn.source_info
    _ctx_cache[eqn] = ctx
    return ctx


def _key_dtype_of(eqn):
    for a in eqn.in_avals + eqn.out_avals:
        if _is_key_dtype(getattr(a, "dtype", None)):
            return a.dtype
    raise AssertionError("extended rule without a key dtype")


def _lifted(name, rewrite=None):
    """Register the key-array version of ``name``: ``rewrite(eqn, key_shape, params)`` gives the
    params for the key data (and optionally extra trailing operands)."""

    def rule(eqn, *args, **params):
        key_shape = tuple(_key_dtype_of(eqn)._impl.key_shape)
        new_params, extra = dict(params), ()
        if rewrite is not None:
            new_params, extra = rewrite(eqn, key_shape, dict(params))
        base = RULES.get(name)
        if base is None:
            raise eqn.unsupported(f"the plain rule for '{name}' (which key arrays are lifted to) "
                                  "is not available")
        data = [as_key(a).data if _is_key_dtype(getattr(av, "dtype", None)) else a
                for a, av in zip(args, eqn.in_avals)]
        ctx = _physical_ctx(eqn, new_params, tuple(jax_core.ShapedArray((), np.dtype(e.dtype))
                                                   for e in extra))
        out = base(ctx, *data, *extra, **new_params)
        if eqn.primitive.multiple_results:
            return [KeyArray(av.dtype._impl, o) if _is_key_dtype(av.dtype) else o
                    for o, av in zip(out, eqn.out_avals)]
        av = eqn.out_avals[0]
        return KeyArray(av.dtype._impl, out) if _is_key_dtype(av.dtype) else out

    rule.__signature__ = _lifted_signature(RULES.get(name))
    register(name, extended=True)(rule)


def _lifted_signature(base) -> inspect.Signature:
    """A lifted rule declares the parameters of the plain rule it calls (the rewrites keep their
    names): (eqn, *args, <base's keyword-only parameters>). check_params refuses any other, so
    the ``**params`` that passes them on never sees an undeclared one."""
    keyword_only = ([p for p in inspect.signature(base).parameters.values() if p.kind is p.KEYWORD_ONLY]
                    if base is not None else [])
    return inspect.Signature([inspect.Parameter("eqn", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                              inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL), *keyword_only])


def _trailing(n, t):
    return tuple(range(n, n + t))


def _rw_broadcast_in_dim(eqn, ks, p):
    n = len(p["shape"])
    p.update(shape=(*p["shape"], *ks),
             broadcast_dimensions=(*p["broadcast_dimensions"], *_trailing(n, len(ks))))
    return p, ()


def _rw_reshape(eqn, ks, p):
    if p.get("dimensions") is not None:
        p["dimensions"] = (*p["dimensions"], *_trailing(eqn.in_avals[0].ndim, len(ks)))
    p["new_sizes"] = (*p["new_sizes"], *ks)
    return p, ()


def _rw_transpose(eqn, ks, p):
    p["permutation"] = (*p["permutation"], *_trailing(len(p["permutation"]), len(ks)))
    return p, ()


def _rw_slice(eqn, ks, p):
    p["start_indices"] = (*p["start_indices"], *(0,) * len(ks))
    p["limit_indices"] = (*p["limit_indices"], *ks)
    if p.get("strides") is not None:
        p["strides"] = (*p["strides"], *(1,) * len(ks))
    return p, ()


def _zero_indices(eqn, ks):
    idx_dtype = eqn.in_avals[-1].dtype if len(eqn.in_avals) > 1 else np.dtype(np.int32)
    return tuple(np.zeros((), idx_dtype) for _ in ks)


def _rw_dynamic_slice(eqn, ks, p):
    p["slice_sizes"] = (*p["slice_sizes"], *ks)
    return p, _zero_indices(eqn, ks)


def _rw_dynamic_update_slice(eqn, ks, p):
    return p, _zero_indices(eqn, ks)


def _rw_gather(eqn, ks, p):
    dn = p["dimension_numbers"]
    n = eqn.out_avals[0].ndim
    p["dimension_numbers"] = dn._replace(offset_dims=(*dn.offset_dims, *_trailing(n, len(ks))))
    p["slice_sizes"] = (*p["slice_sizes"], *ks)
    return p, ()


def _rw_scatter(eqn, ks, p):
    dn = p["dimension_numbers"]
    n = eqn.in_avals[2].ndim
    p["dimension_numbers"] = dn._replace(
        update_window_dims=(*dn.update_window_dims, *_trailing(n, len(ks))))
    return p, ()


def _rw_tile(eqn, ks, p):
    p["reps"] = (*p["reps"], *(1,) * len(ks))
    return p, ()


_lifted("broadcast_in_dim", _rw_broadcast_in_dim)
_lifted("reshape", _rw_reshape)
_lifted("transpose", _rw_transpose)
_lifted("slice", _rw_slice)
_lifted("dynamic_slice", _rw_dynamic_slice)
_lifted("dynamic_update_slice", _rw_dynamic_update_slice)
_lifted("gather", _rw_gather)
_lifted("scatter", _rw_scatter)
_lifted("tile", _rw_tile)
# Leading-dimension parameters are unchanged on the key data.
_lifted("squeeze")
_lifted("rev")
_lifted("concatenate")
_lifted("copy")
_lifted("split")
_lifted("stack")
_lifted("unstack")


@register("select_n", extended=True)
def select_n(eqn, which, *cases):
    # _select_hlo_lowering_opaque: the predicate is broadcast over the key's trailing dims.
    cases = [as_key(c) for c in cases]
    t = len(cases[0].impl.key_shape)
    which = np.asarray(which)
    which = which.reshape(which.shape + (1,) * t)
    idx = np.broadcast_to(which.astype(np.intp), cases[0].data.shape)
    return KeyArray(cases[0].impl, np.choose(idx, [c.data for c in cases]))


def _key_eq(eqn, x, y):
    x, y = as_key(x), as_key(y)
    t = len(x.impl.key_shape)
    return np.all(x.data == y.data, axis=tuple(range(-t, 0)))


@register("eq", extended=True)
def eq(eqn, x, y):
    # _opaque_eq_hlo: keys are equal when all their words are
    return _key_eq(eqn, x, y)


@register("ne", extended=True)
def ne(eqn, x, y):
    return ~_key_eq(eqn, x, y)


# --- refs of keys (a typed key operand of a pallas_call, key scratch) --------------------------
# The ref holds the key data (uint32[*shape, *key_shape]); its indexers name the key dimensions,
# the trailing key-data dimensions are taken whole (Mosaic: _prng_key_load_lowering_rule loads a
# key's scalars; physicalized loads append whole slices).

def _key_ref_index(eqn, ref, flat_idx, tree):
    from ..ref_indexing import NDIndexer, _whole, normalize_indexer
    transforms = jax.tree_util.tree_unflatten(tree, flat_idx) if tree is not None else ()
    if len(transforms) > 1 or (transforms and type(transforms[0]) is not NDIndexer):
        raise eqn.unsupported(f"ref transforms {[type(t).__name__ for t in transforms]} on a "
                              "ref of keys (only indexing)")
    n = ref.array.ndim - len(_key_dtype_of(eqn)._impl.key_shape)
    keys, key_data = ref.array.shape[:n], ref.array.shape[n:]
    index = (normalize_indexer(transforms[0], keys, ref.wraps_negative_indices) if transforms
             else _whole(keys))
    return index + _whole(key_data)


@register("get", extended=True)
def get(eqn, ref, *flat_idx, tree=None):
    if not _is_key_dtype(eqn.out_aval.dtype):   # other extended dtypes (semaphores)
        return RULES["get"](eqn, ref, *flat_idx, tree=tree)
    return KeyArray(eqn.out_aval.dtype._impl, ref.read(_key_ref_index(eqn, ref, flat_idx, tree)))


@register("swap", extended=True)
def swap(eqn, ref, val, *flat_idx, tree=None):
    if not _is_key_dtype(eqn.out_aval.dtype):
        return RULES["swap"](eqn, ref, val, *flat_idx, tree=tree)
    index = _key_ref_index(eqn, ref, flat_idx, tree)
    old = ref.read(index)
    ref.write(index, as_key(val).data)
    return KeyArray(eqn.out_aval.dtype._impl, old)


# The primitives this family implements (a missing one of these is a bug here, not elsewhere).
OWN_PRIMITIVES = frozenset(
    [n for n, f in RULES.items() if f.__module__ == __name__]
    + [n for n, f in EXTENDED_RULES.items() if f.__module__ == __name__])
