"""Semantics of control flow, calls and callbacks (interp/rules/control_flow.py)."""
from __future__ import annotations

from .base import EXACT, Semantics, table

CF = "jax/_src/lax/control_flow/"
XLA_COND = "https://openxla.org/xla/operation_semantics#conditional"
XLA_WHILE = "https://openxla.org/xla/operation_semantics#while"
CALLBACK = "jax/_src/callback.py"

_CALL = "Evaluates the callee jaxpr on the operands; the value is the callee's value."

SEMANTICS = table(
    Semantics("cond", "Runs branches[index] on the operands.",
              {"cond/c1": "integer index outside [0, len(branches)) runs the LAST branch (XLA's default "
                          "branch); lax.switch clamps before binding, the raw primitive does not",
               "cond/c2": "a boolean index runs branch 0 for False and branch 1 for True",
               "cond/c3": "branches_platforms only records what platform_index selected"},
              (XLA_COND, CF + "conditionals.py _cond_lowering"), EXACT,
              "tests: tests/test_control_flow.py::test_cond_index_out_of_range_runs_last_branch "
              "confirms XLA:CPU for -1, 3, 100 and INT32_MIN."),
    Semantics("platform_index", "The branch index lax.platform_dependent lowers per platform.",
              {"platform_index/c1": "the reference evaluates as the platform it stands in for "
                                    "(Options.platform, 'cpu' by default): the index of the branch "
                                    "listing that platform, else the default (None) branch; no such "
                                    "branch raises UnsupportedPrimitiveError"},
              (CF + "conditionals.py _platform_index_lowering",), EXACT,
              "The conformance suite passes the platform of the runner the reference is compared with."),
    Semantics("while", "Runs body_jaxpr while cond_jaxpr is true; cond/body consts lead the operands.",
              {"while/c1": "cond_nconsts and body_nconsts operands are the cond's and body's constants",
               "while/c2": "a batched (non-scalar) predicate (vmap): the loop runs while any element is "
                           "true and elements whose predicate was false before the step keep their "
                           "carry value (select on the leading dimensions of the predicate), tokens are "
                           "joined",
               "while/c3": "the cond and body plans are compiled once and reused every iteration"},
              (XLA_WHILE, CF + "loops.py _while_lowering, _pred_bcast_select_hlo"), EXACT),
    Semantics("scan", "Loops over the leading axis of xs with a carry, stacking ys.",
              {"scan/c1": "operands are consts, carry, xs: JAX <= 0.10 gives num_consts/num_carry, JAX "
                          "0.12 the flat trees ft_in = (consts, carry, xs) and ft_out = (carry, ys)",
               "scan/c2": "reverse=True visits i = length-1 .. 0 and writes ys[i] (ys keep input order)",
               "scan/c3": "unroll (int or bool) changes the lowering only, never a value",
               "scan/c4": "length may exceed 0 with no xs (length-only scans); length 0 returns the "
                          "initial carry and empty ys"},
              (CF + "loops.py _scan_impl (both versions)",), EXACT),
    Semantics("jit", _CALL, {"jit/c1": "shardings, layouts, donation, inline and compiler options do "
                                       "not change values"}, ("jax/_src/pjit.py",), EXACT),
    Semantics("closed_call", _CALL, {}, ("jax/_src/core.py",), EXACT),
    Semantics("core_call", _CALL, {}, ("jax/_src/core.py",), EXACT),
    Semantics("call", _CALL + " (JAX 0.10's core.call_p; 0.11 merged it into eval_jaxpr)",
              {"call/c1": "the callee is an open jaxpr (call_jaxpr)"},
              ("jax/_src/core.py call_p, call_impl (JAX 0.10.2)",), EXACT),
    Semantics("program_order", _CALL + " (jax.experimental.overlap.program_order)",
              {"program_order/c1": "exclude_mask, enforce, strict_in and strict_out only order the "
                                   "callee's equations on the device (optimization barriers between "
                                   "consecutive equations): no value changes"},
              ("jax/_src/pjit.py program_order_p, eval_jaxpr_program_order (JAX 0.11)",
               "jax/_src/program_order.py (JAX 0.12)"), EXACT),
    Semantics("remat2", _CALL + " (jax.checkpoint)",
              {"remat2/c1": "policy, prevent_cse and differentiated only steer what autodiff saves"},
              ("jax/_src/ad_checkpoint.py",), EXACT),
    Semantics("eval_jaxpr", _CALL, {}, ("jax/_src/core.py eval_jaxpr_p",), EXACT),
    Semantics("composite", "Evaluates the decomposition jaxpr (name/attributes/version let a backend "
              "substitute a kernel; the meaning is the decomposition).", {},
              ("jax/_src/lax/lax.py _composite_impl",), EXACT),
    Semantics("custom_jvp_call", "Outside differentiation: the primal function call_jaxpr.",
              {"custom_jvp_call/c1": "jvp_jaxpr_fun/jvp_jaxpr_thunk, num_consts and symbolic_zeros "
                                     "matter only to AD; AD of a custom_jvp function is expanded by JAX "
                                     "at trace time (tests: grad of custom rules)"},
              ("jax/_src/custom_derivatives.py",), EXACT),
    Semantics("custom_vjp_call", "Outside differentiation: the primal function call_jaxpr.",
              {"custom_vjp_call/c1": "fwd/bwd are used by JAX when it differentiates, at trace time"},
              ("jax/_src/custom_derivatives.py",), EXACT),
    Semantics("custom_vjp_call_jaxpr", "Older JAX spelling: the primal fun_jaxpr.", {},
              ("jax/_src/custom_derivatives.py",), EXACT),
    Semantics("custom_vmap_call", _CALL, {}, ("jax/_src/custom_batching.py custom_vmap_impl",), EXACT),
    Semantics("linear_call", "The callee jaxpr (the transpose is used only by AD).", {},
              ("jax/_src/custom_derivatives.py _linear_call_impl",), EXACT),
    Semantics("custom_linear_solve", "The value of the `solve` jaxpr on (solve consts, b).",
              {"custom_linear_solve/c1": "matvec/vecmat/transpose_solve are used only by AD"},
              (CF + "solves.py _custom_linear_solve_impl",), EXACT),
    Semantics("call_hi_primitive", "A hijax primitive means its lojax expansion: prim.expand traced "
              "once per primitive instance into a jaxpr that is evaluated.",
              {"call_hi_primitive/c1": "e.g. jnp.searchsorted in JAX 0.12 (SearchSorted)",
               "call_hi_primitive/c2": "HiPrims over hi types (non-array avals) raise "
                                       "UnsupportedPrimitiveError"},
              ("jax/_src/hijax.py _call_hi_primitive_to_lojax", "jax/_src/numpy/hijax.py SearchSorted"),
              EXACT),
    Semantics("remat_opt", "The forward jaxpr's values (primal outputs and residuals).", {},
              ("jax/_src/custom_derivatives.py _remat_opt_impl",), EXACT),
    Semantics("xla_metadata_call", _CALL + " (the metadata annotates HLO only).", {},
              ("jax/_src/xla_metadata.py",), EXACT),
    Semantics("custom_partitioning", _CALL + " (partitioning callbacks only steer SPMD lowering).", {},
              ("jax/_src/custom_partitioning.py _custom_partitioning_impl",), EXACT),
    Semantics("custom_jvp_call_jaxpr", "Older JAX spelling: the primal fun_jaxpr.", {},
              ("jax/_src/custom_derivatives.py",), EXACT),
    Semantics("custom_lin", "Evaluating a linearized custom_vjp function forward raises TypeError "
              "(\"can't apply forward-mode autodiff (jvp) to a custom_vjp function.\"), as JAX does.", {},
              ("jax/_src/interpreters/ad.py raise_custom_vjp_error_on_jvp",), EXACT),
    Semantics("unreachable", "Raises exc_type(message) when evaluated.", {},
              ("jax/_src/custom_derivatives.py unreachable_impl",), EXACT),
    Semantics("check", "checkify: debug=True is a no-op (checkify.debug_check outside checkify); a "
              "functionalized error raises JaxRuntimeError when set.",
              {"check/c1": "pl.debug_check binds check[debug=True]. Inside a Pallas kernel, with "
                           "pl.enable_debug_checks on (read when the kernel runs, as Mosaic reads it "
                           "when it lowers), a false condition raises jax.errors.JaxRuntimeError "
                           "naming the kernel, the grid point and the message (Mosaic TPU / GPU: a "
                           "runtime assertion with the message); with debug checks off it does "
                           "nothing, as Mosaic compiles it out (interp/pallas/debug_checks.py)",
               "check/c2": "JAX's interpret modes (interpret=True, TPU interpret mode) never "
                           "evaluate a kernel's debug check, even with debug checks on or under "
                           "checkify (measured on JAX 0.10.2 and 0.12.0.1)"},
              ("jax/_src/checkify.py check_impl", "jax/_src/pallas/core.py debug_check",
               "jax/_src/pallas/mosaic/lowering.py _check_lowering_rule",
               "jax/_src/pallas/mosaic_gpu/lowering.py _check_lowering_rule"), EXACT),
    Semantics("sharding_constraint", "Identity on values (placement).", {}, ("jax/_src/pjit.py",), EXACT),
    Semantics("reshard", "Identity on values (placement).", {}, ("jax/_src/pjit.py",), EXACT),
    Semantics("layout_constraint", "Identity on values (layout).", {}, ("jax/_src/pjit.py",), EXACT),
    Semantics("relayout", "Identity on values (layout).", {}, ("jax/_src/pjit.py",), EXACT),
    Semantics("xla_metadata_value", "Identity on values (metadata).", {}, ("jax/_src/xla_metadata.py",),
              EXACT),
    Semantics("device_put", "Identity on every operand (one host, NumPy values).", {},
              ("jax/_src/dispatch.py device_put_p",), EXACT),
    Semantics("optimization_barrier", "Identity on all operands.", {},
              ("https://openxla.org/xla/operation_semantics#optimizationbarrier",), EXACT),
    Semantics("name", "Identity (checkpoint_name tags a value for remat policies).", {},
              ("jax/_src/ad_checkpoint.py name_p",), EXACT),
    Semantics("stop_gradient", "Identity on values.", {}, ("jax/_src/lax/lax.py",), EXACT),
    Semantics("create_token", "A token (carries nothing; orders effects).", {}, ("jax/_src/lax/lax.py",), EXACT),
    Semantics("after_all", "A token joining its operand tokens.", {}, ("jax/_src/lax/lax.py",), EXACT),
    Semantics("dce_sink", "Keeps its operands alive; no value.", {}, ("jax/_src/lax/lax.py",), EXACT),
    Semantics("pure_callback", "Calls the host function with NumPy arrays; checks its results.",
              {"pure_callback/c1": "operands are passed as np.ndarray (as XLA host callbacks do), in "
                                   "program order",
               "pure_callback/c2": "results are np.asarray'd and canonicalised (int64 -> int32 without "
                                   "x64); a wrong count, shape or dtype raises RuntimeError with JAX's "
                                   "messages",
               "pure_callback/c3": "vmap_method and sharding affect tracing/placement only"},
              (CALLBACK + " pure_callback_impl, _FlatCallback; emit_python_callback._wrapped_callback",),
              EXACT),
    Semantics("io_callback", "As pure_callback; calls happen once per evaluation in program order "
              "(which satisfies ordered=True; unordered calls are also made in program order).", {},
              (CALLBACK + " io_callback_impl",), EXACT),
    Semantics("debug_callback", "Calls the host function with NumPy arrays; no results.", {},
              ("jax/_src/debugging.py debug_callback_impl",), EXACT),
    Semantics("debug_print", "Formats and prints with JAX's own formatter (np_printoptions, fmt, "
              "static args), without placing values on a device.", {},
              ("jax/_src/debugging.py debug_print_impl, _format_print_callback",), EXACT),
)

# Other JAX spellings of the primitives above: {name: the primitive of its entry}.
ALIASES = {"pjit": "jit",              # before JAX 0.10.2 (interp/coverage.py RULE_NAME_RELEASES)
           "checkpoint": "remat2"}     # before JAX 0.10.2
