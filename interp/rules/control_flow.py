"""Rules: control flow and calls (cond, while, scan, jit, custom derivatives, remat, callbacks...).

Every sub-jaxpr is evaluated through its cached plan (``eqn.closed_plan``): a loop body is compiled
once and its plan reused for every iteration. Semantics and sources: ``spec/control_flow.py``.
"""
from __future__ import annotations

import weakref

import numpy as np
import jax
from jax.core import ShapedArray

from ..errors import UnsupportedPrimitiveError
from ..evaluator import TOKEN, Token, is_extended, scan_layout
from ..registry import register


def _run(eqn, jaxpr_like, args) -> list:
    plan, consts = eqn.closed_plan(jaxpr_like)
    return plan.run(consts, args)


# --- conditionals ------------------------------------------------------------------------------

@register("cond")
def cond(eqn, index, *args, branches, branches_platforms=None):
    # XLA Conditional: an out-of-range S32 index runs the last branch (N-1) as the default;
    # a PRED index runs branch 0 for false and branch 1 for true (operation_semantics#conditional).
    # branches_platforms (platform_dependent) only documents what platform_index chose.
    if np.shape(index) != ():
        raise eqn.unsupported(f"cond index must be a scalar, got shape {np.shape(index)}")
    i = int(index)
    if not 0 <= i < len(branches):
        i = len(branches) - 1
    return _run(eqn, branches[i], args)


# The reference evaluates programs as the platform it stands in for does (Options.platform, "cpu"
# unless told: the conformance suite passes the platform of the runner it compares with):
# platform_index picks the branch listing that platform, else the default (None) branch, as
# jax/_src/lax/control_flow/conditionals.py _platform_index_lowering does per lowering platform.
@register("platform_index")
def platform_index(eqn, *, platforms):
    platform = eqn.options.platform
    default = None
    for i, ps in enumerate(platforms):
        if ps is None:
            default = i
        elif platform in ps:
            return np.int32(i)
    if default is None:
        raise eqn.unsupported(f"platform_index/c1: no branch for platform {platform!r} and no default")
    return np.int32(default)


# --- loops ---------------------------------------------------------------------------------------

def _select_where(pred, new, old):
    """Batched while: rows whose predicate was false keep their old value (XLA lowering of a
    batched predicate, jax/_src/lax/control_flow/loops.py _pred_bcast_select_hlo)."""
    if isinstance(old, Token):
        return TOKEN
    if hasattr(old, "impl") and hasattr(old, "data"):  # typed key array: select its key data
        return type(old)(old.impl, _select_where(pred, new.data, old.data))
    p = np.reshape(pred, pred.shape + (1,) * (np.ndim(old) - pred.ndim))
    return np.where(p, new, old)


@register("while")
def while_loop(eqn, *args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cplan, cconsts_own = eqn.closed_plan(cond_jaxpr)
    bplan, bconsts_own = eqn.closed_plan(body_jaxpr)
    cconsts = cconsts_own + list(args[:cond_nconsts])
    bconsts = bconsts_own + list(args[cond_nconsts:cond_nconsts + body_nconsts])
    carry = list(args[cond_nconsts + body_nconsts:])
    ncc, nbc = len(cconsts_own), len(bconsts_own)
    crun, brun = cplan.run, bplan.run
    # The plans take (closed-over consts, inputs); the primitive's consts are leading inputs.
    cc, ci = cconsts[:ncc], cconsts[ncc:]
    bc, bi = bconsts[:nbc], bconsts[nbc:]
    while True:
        pred = crun(cc, ci + carry)[0]
        if np.ndim(pred) == 0:
            if not pred:
                return carry
            carry = brun(bc, bi + carry)
        else:  # batched predicate (vmap): loop while any row runs, frozen rows keep their value
            if not pred.any():
                return carry
            new = brun(bc, bi + carry)
            carry = [_select_where(pred, n, o) for n, o in zip(new, carry)]


def _row(x, i):
    """x[i] for an array or a typed key array (the PRNG family's KeyArray: impl + key data)."""
    if hasattr(x, "impl") and hasattr(x, "data"):
        return type(x)(x.impl, x.data[i])
    return x[i]


@register("scan")
def scan(eqn, *args, jaxpr, length, reverse, unroll, num_consts=None, num_carry=None, ft_in=None,
         ft_out=None):
    # unroll only changes how XLA lowers the loop, never the result. The layout of the operands:
    # num_consts/num_carry (JAX 0.10) or the flat trees ft_in/ft_out (JAX 0.11 on).
    num_consts, num_carry = scan_layout(eqn.params)
    plan, own = eqn.closed_plan(jaxpr)
    run = plan.run
    consts = list(args[:num_consts])
    carry = list(args[num_consts:num_consts + num_carry])
    xs = args[num_consts + num_carry:]
    y_avals = eqn.out_avals[num_carry:]
    # ys are preallocated (the out avals include the length axis); key-array ys are collected.
    ys = [[None] * length if is_extended(a.dtype) else np.empty(a.shape, a.dtype) for a in y_avals]
    plain_xs = not any(hasattr(x, "impl") for x in xs)
    for t in range(length):
        i = length - 1 - t if reverse else t
        rows = [x[i] for x in xs] if plain_xs else [_row(x, i) for x in xs]
        out = run(own, consts + carry + rows)
        carry = out[:num_carry]
        for y, v in zip(ys, out[num_carry:]):
            y[i] = v
    return carry + [_stack_keys(y, a) if isinstance(y, list) else y for y, a in zip(ys, y_avals)]


def _stack_keys(values, aval):
    if not values:
        raise UnsupportedPrimitiveError("scan", {}, "empty scan over key-array ys")
    first = values[0]
    return type(first)(first.impl, np.stack([v.data for v in values]))


# --- calls: evaluate the callee jaxpr -----------------------------------------------------------

@register("jit", "pjit")
def jit(eqn, *args, jaxpr, name, donated_invars, inline, keep_unused, in_shardings, out_shardings,
        in_layouts, out_layouts, ctx_mesh, compiler_options_kvs):
    # The value is the callee's: the name, donation, inlining, unused-argument, sharding, layout,
    # mesh and compiler-option parameters steer how XLA compiles and places the call, and a
    # compiler option that changed the meaning (a fast-math flag) is the backend's deviation the
    # suite measures, not the program's meaning.
    return _run(eqn, jaxpr, args)


@register("closed_call", "core_call", "custom_vmap_call", "call")
def closed_call(eqn, *args, call_jaxpr=None, call=None, in_tree=None, out_tree=None, rule=None):
    # custom_vmap_call (call, in_tree, out_tree, rule): the vmap rule only acts under vmap.
    # call: JAX 0.10's core.call_p, an open call_jaxpr (core.py call_impl: the callee's value).
    return _run(eqn, call_jaxpr if call_jaxpr is not None else call, args)


@register("remat2", "checkpoint")
def remat(eqn, *args, jaxpr, prevent_cse, differentiated, policy):
    # prevent_cse/policy/differentiated only steer what autodiff saves and XLA's CSE; the primal
    # value is the callee's.
    return _run(eqn, jaxpr, args)


@register("eval_jaxpr")
def eval_jaxpr_call(eqn, *args, call_jaxpr=None, jaxpr=None):
    # the callee is call_jaxpr (JAX 0.11 on) or jaxpr (JAX 0.10)
    return _run(eqn, call_jaxpr if call_jaxpr is not None else jaxpr, args)


@register("program_order")
def program_order(eqn, *args, call_jaxpr, exclude_mask, enforce=None, strict_in=None,
                  strict_out=None):
    # jax.experimental.overlap.program_order: the callee's value. The parameters only order its
    # equations on the device (optimization barriers between them: pjit.py / program_order.py
    # eval_jaxpr_program_order; enforce, strict_in and strict_out from JAX 0.12).
    return _run(eqn, call_jaxpr, args)


@register("composite")
def composite(eqn, *args, name, attributes, version, jaxpr=None, call_jaxpr=None):
    # A composite means its decomposition (name/attributes only let a backend substitute a kernel).
    return _run(eqn, call_jaxpr if call_jaxpr is not None else jaxpr, args)


@register("custom_jvp_call")
def custom_jvp_call(eqn, *args, call_jaxpr, jvp_jaxpr_fun, num_consts, symbolic_zeros):
    # Outside differentiation a custom_jvp function is its primal function (the jvp rule and
    # symbolic_zeros only act under jvp); the consts (num_consts) are the callee's leading inputs.
    return _run(eqn, call_jaxpr, args)


@register("custom_vjp_call")
def custom_vjp_call(eqn, *args, call_jaxpr, fwd_jaxpr_thunk, bwd, num_consts, out_trees,
                    symbolic_zeros):
    # the fwd/bwd rules only act under differentiation; the value is call_jaxpr's
    return _run(eqn, call_jaxpr, args)


@register("custom_vjp_call_jaxpr")
def custom_vjp_call_jaxpr(eqn, *args, fun_jaxpr, fwd_jaxpr_thunk=None, bwd=None, num_consts=None,
                          out_trees=None, symbolic_zeros=None):
    # (the spelling of custom_vjp_call before JAX 0.4.36; the rules act under differentiation only)
    return _run(eqn, fun_jaxpr, args)


@register("linear_call")
def linear_call(eqn, *args, callee, transpose_thunk, num_callee_consts, num_res):
    # the transpose only acts under transposition; the callee's consts are its leading inputs
    return _run(eqn, callee, args)


def _split_linear_solve(args, const_lengths):
    counts = list(const_lengths)  # (matvec, vecmat, solve, transpose_solve)
    starts = np.cumsum([0] + counts)
    groups = [list(args[starts[k]:starts[k + 1]]) for k in range(len(counts))]
    return groups, list(args[starts[-1]:])


@register("custom_linear_solve")
def custom_linear_solve(eqn, *args, const_lengths, jaxprs):
    # The forward value is solve(matvec, b) (jax/_src/lax/control_flow/solves.py impl).
    groups, b = _split_linear_solve(args, const_lengths)
    return _run(eqn, jaxprs.solve, groups[2] + b)


@register("call_hi_primitive",
          partial="only HiPrims over plain arrays whose expand() traces with jax.make_jaxpr "
                  "(e.g. SearchSorted); hi types (non-array avals) are unsupported")
def call_hi_primitive(eqn, *args, _prim):
    # A hijax primitive means its lojax expansion (jax/_src/hijax.py _call_hi_primitive_to_lojax):
    # trace prim.expand once per prim into a jaxpr and evaluate that.
    return _run(eqn, _hi_expansion(eqn, _prim), args)


# One expansion per equation (EqnContexts hash by identity). Not keyed by the HiPrim: HiPrim
# equality compares type and params only, not the avals (two shapes would share an expansion).
_HI_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _hi_expansion(eqn, prim):
    key = eqn
    closed = _HI_CACHE.get(key)
    if closed is None:
        avals = prim.in_avals_flat
        if not all(type(a) is ShapedArray for a in avals):
            raise eqn.unsupported(f"{type(prim).__name__} takes non-array (hi) types {avals}")
        in_tree, out_tree = prim.in_tree, prim.out_tree

        def lo(*flat):
            ans = prim.expand(*jax.tree_util.tree_unflatten(in_tree, flat))
            leaves = jax.tree_util.tree_leaves(ans)
            assert len(leaves) == out_tree.num_leaves
            return leaves

        closed = jax.make_jaxpr(lo)(*[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals])
        _HI_CACHE[key] = closed
    return closed


@register("remat_opt")
def remat_opt(eqn, *args, fwd_jaxpr, fun_jaxpr_thunk, num_consts, num_res):
    # The primal value and residuals are fwd_jaxpr's (custom_derivatives.py _remat_opt_impl).
    return _run(eqn, fwd_jaxpr, args)


@register("xla_metadata_call")
def xla_metadata_call(eqn, *args, jaxpr, xla_metadata, ad_metadata=None):
    return _run(eqn, jaxpr, args)  # metadata annotates the HLO, not the values


@register("custom_partitioning")
def custom_partitioning(eqn, *args, call, in_tree, out_tree, static_args, partition,
                        infer_sharding_from_operands, propagate_user_sharding, decode_shardings,
                        sharding_rule):
    return _run(eqn, call, args)  # partitioning callbacks only matter to SPMD lowering


@register("custom_jvp_call_jaxpr")
def custom_jvp_call_jaxpr(eqn, *args, fun_jaxpr, jvp_jaxpr_thunk=None, num_consts=None,
                          symbolic_zeros=None):
    return _run(eqn, fun_jaxpr, args)  # older JAX spelling of custom_jvp_call


@register("custom_lin")
def custom_lin(eqn, *args, num_res, bwd, out_avals, symbolic_zeros, in_zeros=None):
    # A linearized custom_vjp function evaluated forward: JAX raises this (ad.py
    # raise_custom_vjp_error_on_jvp), and so does XLA:CPU's jit of the same program.
    raise TypeError("can't apply forward-mode autodiff (jvp) to a custom_vjp function.")


@register("unreachable")
def unreachable(eqn, *args, out_avals, exc_type, message):
    # Evaluating it raises, as its impl does (custom_derivatives.py unreachable_impl).
    raise exc_type(message)


@register("check")
def check(eqn, *args, err_tree, debug):
    # checkify: debug checks are no-ops unless checkify discharges them; a functionalized error
    # raises when it is set (checkify.py check_impl).
    if debug:
        # ... except in a Pallas kernel (pl.debug_check), where Mosaic asserts it when
        # pl.enable_debug_checks is on: interp/pallas/debug_checks.py.
        from ..pallas.debug_checks import kernel_debug_check
        return kernel_debug_check(eqn, args, err_tree)
    from jax._src import checkify as _checkify
    exc = jax.tree_util.tree_unflatten(err_tree, list(args)).get_exception()
    if exc:
        raise _checkify.JaxRuntimeError(str(exc)) from exc
    return []


# --- placement and sharding: identities on one host ---------------------------------------------
# (their parameters say where and how a value lives, never what it is)

@register("sharding_constraint")
def sharding_constraint(eqn, x, *, sharding, layout, context_mesh, unconstrained_dims):
    return x


@register("reshard")
def reshard(eqn, x, *, dst_sharding, concrete_mesh):
    return x


@register("layout_constraint")
def layout_constraint(eqn, x, *, layout):
    return x


@register("relayout")
def relayout(eqn, x, *, dst_layout):
    return x


@register("xla_metadata_value")
def xla_metadata_value(eqn, x, *, xla_metadata_kvs):
    return x


@register("device_put")
def device_put(eqn, *xs, devices, srcs, copy_semantics):
    return list(xs)


# --- identities ---------------------------------------------------------------------------------

@register("optimization_barrier")
def optimization_barrier(eqn, *args):
    return list(args)


@register("name")
def name(eqn, x, *, name):
    return x  # checkpoint_name: a tag for remat policies


@register("stop_gradient")
def stop_gradient(eqn, x):
    return x  # the value is unchanged; only differentiation sees it


@register("create_token", "after_all")
def create_token(eqn, *tokens):
    return TOKEN


@register("dce_sink")
def dce_sink(eqn, *args, prevent_mlir_dce=None):
    return [] if eqn.primitive.multiple_results else TOKEN


# --- callbacks: call the host function with NumPy arrays, in program order ---------------------

def _host_args(args):
    return [np.asarray(a) if not isinstance(a, np.ndarray) else a for a in args]


def _check_results(eqn, outs, result_avals):
    """Checks of jax/_src/callback.py emit_python_callback._wrapped_callback, same messages."""
    outs = list(outs)
    if len(outs) != len(result_avals):
        raise RuntimeError("Mismatched number of outputs from callback. "
                           f"Expected: {len(result_avals)}, Actual: {len(outs)} (pure_callback/c2)")
    checked = []
    for i, (v, aval) in enumerate(zip(outs, result_avals)):
        v = np.asarray(v)
        # JAX canonicalizes Python/NumPy results (int64 -> int32 without x64) before checking.
        canon = jax.dtypes.canonicalize_dtype(v.dtype)
        if canon != v.dtype:
            v = v.astype(canon)
        if v.shape != tuple(aval.shape):
            raise RuntimeError(f"Incorrect output shape for return value #{i}: "
                               f"Expected: {aval.shape}, Actual: {v.shape} (pure_callback/c2)")
        if v.dtype != aval.dtype:
            raise RuntimeError(f"Incorrect output dtype for return value #{i}: "
                               f"Expected: {aval.dtype}, Actual: {v.dtype} (pure_callback/c2)")
        checked.append(v)
    return checked


@register("pure_callback")
def pure_callback(eqn, *args, callback, result_avals, sharding, vmap_method):
    # vmap_method only changes how the callback is batched at trace time; sharding is irrelevant
    # on one host.
    return _check_results(eqn, callback(*_host_args(args)), result_avals)


@register("io_callback")
def io_callback(eqn, *args, callback, result_avals, sharding, ordered=False):
    # Sequential evaluation runs callbacks in program order, which satisfies ordered=True.
    return _check_results(eqn, callback(*_host_args(args)), result_avals)


@register("debug_callback")
def debug_callback(eqn, *args, callback, effect, partitioned):
    # effect (ordered or not) is satisfied by sequential evaluation; partitioned only matters to
    # SPMD lowering
    callback(*_host_args(args))
    return []


@register("debug_print")
def debug_print(eqn, *args, fmt, in_tree, static_args, np_printoptions, has_placeholders,
                ordered, partitioned, logging_record=None):
    # JAX's own formatting (jax/_src/debugging.py debug_print_impl), without device_put.
    from jax._src import debugging
    callback = debugging._make_flat_callback(
        in_tree, lambda *a, **k: debugging._format_print_callback(
            fmt, dict(np_printoptions), has_placeholders, logging_record, *a, **k),
        static_args)
    callback(*_host_args(args))
    return []
