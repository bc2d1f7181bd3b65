"""Conformance cases of the call / state / Pallas kernel-body primitives (conformance/cases/
control_flow.py, state.py, pallas.py): each case runs the primitives it names, the families
together exercise every primitive those rule modules implement (except the few no CPU runner can
run, listed with the reason), every case ends in an accepted outcome on the CPU runners, and each
gate that turns a JAX interpret-mode failure into backend-unsupported still matches what JAX does.
"""
from __future__ import annotations

import jax
import pytest

import interp
from conformance.cases import all_cases
from conformance.cli import case_primitives
from conformance.execute import run_case

# Cases added for the call, state and kernel-body primitives (the older control_flow/pallas
# cases are the loops/conditionals and the kernel families, run by the conformance suite).
NEW = ("control_flow/composite", "control_flow/custom_", "control_flow/linear_call", "control_flow/remat_opt",
       "control_flow/remat_policy", "control_flow/optimization_barrier", "control_flow/placement",
       "control_flow/xla_metadata", "control_flow/tokens", "control_flow/platform_dependent",
       "control_flow/dce_sink", "control_flow/checkify", "control_flow/searchsorted", "control_flow/pure_callback",
       "control_flow/io_callback", "control_flow/debug_callback", "control_flow/program_order",
       "control_flow/core_call", "state/",
       "pallas/dynamic_grid", "pallas/triton_", "pallas/tpu_roll", "pallas/tpu_touch", "pallas/tpu_trace",
       "pallas/tpu_pack", "pallas/tpu_prng_key", "pallas/delay_", "pallas/semaphores",
       "pallas/barrier_semaphore", "pallas/get_global", "pallas/has_memory_space",
       "pallas/with_memory_space_constraint", "pallas/reciprocal", "pallas/core_mesh",
       "pallas/tpu_emit_pipeline", "pallas/tpu_threefry_key")
FAMILIES = ("control_flow", "state", "pallas", "pallas_triton", "pallas_tpu")
# Version-dependent spellings: a case naming several of these needs only the one its JAX stages.
ALTERNATIVES = ({"eval_jaxpr", "closed_call"}, {"debug_barrier", "debug_barrier_p"})   # interp/coverage.py RULE_NAME_RELEASES
# Only JAX 0.12 stages these for the program (0.10.2 traces plain lax ops / a different primitive).
ONLY_NEWER = {"call_hi_primitive": "jnp.searchsorted is a hijax primitive from JAX 0.12 on"}

# Primitives of the call/state/Pallas rule modules that no case can run on the CPU runners.
NOT_IN_A_CASE = {
    "custom_lin": "a linearized custom_vjp evaluated forward: JAX raises at lowering (XLA:CPU cannot "
                  "run it; tests/test_control_flow.py::test_linearized_custom_vjp_raises_like_jax)",
    "unreachable": "its MLIR lowering raises by design (custom_derivatives.py): no XLA program holds it",
    "pipeline_body": "bound only inside emit_pipeline's expansion (pallas/mosaic/pipeline.py "
                     "emit_pipeline_to_jaxpr), never in a traced program: the case "
                     "pallas/tpu_emit_pipeline_primitive runs it",
    "custom_jvp_call_jaxpr": "defined but never bound by JAX 0.10.2 / 0.12 (an older spelling)",
    "custom_vjp_call_jaxpr": "defined but never bound by JAX 0.10.2 / 0.12 (an older spelling)",
    "core_call": "no longer bound by JAX 0.10.2 / 0.12",
    "stop_gradient": "JAX applies it at trace time; no jaxpr holds it",
    "mutable_array": "the older name of new_ref (not bound by JAX 0.10.2 / 0.12)",
    "create_linear": "its value is uninitialized memory and XLA:CPU has no CreateBuffer "
                     "implementation (tests/test_state.py::test_create_linear_is_uninitialized_memory)",
}
NOT_IN_A_CASE_BEFORE_0_12 = {
    "eval_jaxpr": "JAX 0.10.2 stages eval_jaxpr_p as closed_call (lax/eval_jaxpr.py), so no jaxpr holds it",
}
ACCEPTED = {"pass", "pass-with-allowance", "known-divergence", "backend-unsupported"}


def _new_cases():
    return {cid: c for cid, c in all_cases("nightly").items() if cid.startswith(NEW)}


def _newer_jax():
    from spec.divergences import _vtuple
    return _vtuple(jax.__version__) >= (0, 12)


@pytest.mark.parametrize("case_id", sorted(_new_cases()))
def test_case_runs_the_primitives_it_names(case_id):
    case = _new_cases()[case_id]
    if case.not_applicable:
        pytest.skip(case.not_applicable)
    seen = case_primitives(case)
    for p in case.primitives:
        group = next((g for g in ALTERNATIVES if p in g), {p})
        if p in ONLY_NEWER and not _newer_jax():
            continue
        assert group & seen, f"{case_id} names {p} but its jaxpr has none of {sorted(group)}"


def _rule_module_primitives():
    from interp.registry import RULES
    mine = ("interp.rules.control_flow", "interp.rules.state", "interp.rules.pallas")
    return {name for name, rule in RULES.items()   # (dialect modules pallas_*: their own tests)
            if getattr(rule, "__module__", "") in mine
            or getattr(rule, "__module__", "").startswith("interp.pallas.")}


def test_every_call_state_and_kernel_primitive_is_in_a_case():
    # `jax-conformance coverage` for these rule modules: every primitive this JAX defines and the
    # reference implements is in the jaxpr of some case of the three families.
    defined = {p for p, s in interp.coverage().items() if not s.startswith("unsupported")}
    wanted = (_rule_module_primitives() & defined) - set(NOT_IN_A_CASE)
    if not _newer_jax():
        wanted -= set(NOT_IN_A_CASE_BEFORE_0_12)
    seen: set = set()
    for cid, case in all_cases("quick").items():
        if case.family in FAMILIES and case.not_applicable:
            # a case this JAX cannot trace (relayout on 0.11.2) accounts for its primitives with
            # the reason it records on every runner
            seen |= set(case.primitives)
        elif case.family in FAMILIES:
            try:
                seen |= case_primitives(case)
            except Exception:  # noqa: BLE001  (an untraceable case exercises nothing)
                pass
    assert not wanted - seen, (f"in no case: {sorted(wanted - seen)}: add a case that runs it to "
                               "conformance/cases/{control_flow,state,pallas}.py, or list it in NOT_IN_A_CASE "
                               "with the reason no CPU runner can run it")


def _runners(case):
    return ("reference", "xla:cpu") if case.kind == "lax" else ("reference", "pallas:interpret",
                                                                "pallas:tpu-interpret")


@pytest.mark.parametrize("case_id", sorted(c for c in _new_cases() if not c.startswith("pallas/")))
def test_call_and_state_cases_agree_with_xla_cpu(case_id):
    case = _new_cases()[case_id]
    if case.not_applicable:   # every runner records it backend-unsupported with the reason
        assert run_case(case, "reference").detail == case.not_applicable
        pytest.skip(case.not_applicable)
    for runner in _runners(case):
        rec = run_case(case, runner, first_divergence=False)
        if runner in XLA_CPU_UNSUPPORTED.get(case_id, {}):
            # the backend's own message, as backend-unsupported (not a crash)
            assert rec.outcome == "backend-unsupported", (runner, rec.outcome, rec.detail)
            assert XLA_CPU_UNSUPPORTED[case_id][runner] in rec.detail, rec.detail
            continue
        assert rec.outcome in ("pass", "pass-with-allowance"), (runner, rec.outcome, rec.detail)


# Cases a CPU runner cannot run, with the message it says so in.
XLA_CPU_UNSUPPORTED = {
    "state/pin_unpin/int32": {"xla:cpu": "No registered implementation for untyped custom call to Pin"},
}


# One Pallas case per outcome kind on the interpret modes (each costs about a second per mode).
PALLAS_EXPECTED = {
    "pallas/dynamic_grid_num_programs/i32/32x128": {"pallas:interpret": "pass", "pallas:tpu-interpret": "pass"},
    "pallas/semaphores_signal_wait_read": {"pallas:interpret": "pass",
                                           "pallas:tpu-interpret": "backend-unsupported"},
    "pallas/triton_atomics_add_max_cas/duplicates_indices/i32": {"pallas:interpret": "known-divergence"},
    "pallas/triton_atomics_add_max_cas/distinct_indices/i32": {"pallas:interpret": "pass"},
    "pallas/core_mesh_axis_index/i32/16x128": {"pallas:interpret": "backend-unsupported"},
}


@pytest.mark.parametrize("case_id", sorted(PALLAS_EXPECTED))
def test_pallas_case_outcomes(case_id):
    case = _new_cases()[case_id]
    assert run_case(case, "reference").outcome == "pass"
    for runner, want in PALLAS_EXPECTED[case_id].items():
        rec = run_case(case, runner, first_divergence=False)
        assert rec.outcome == want, (runner, rec.outcome, rec.detail)


def _gates():
    for cid, case in _new_cases().items():
        for mode, gate in getattr(case.build, "gates", {}).items():
            yield pytest.param(cid, mode, gate, id=f"{cid}-{mode}")


@pytest.mark.parametrize("case_id,mode,gate", list(_gates()))
def test_interpret_mode_gates_still_hold(case_id, mode, gate):
    # The gate's evidence: JAX's own mode, run on the kernel without the gate, raises what the
    # gate says (on the JAX versions the gate covers), and runs it on the versions it does not
    # cover (its fixed_in is checked on every release CI tests). Once JAX runs the kernel, drop
    # the gate.
    case = _new_cases()[case_id]
    if case.not_applicable:
        pytest.skip(case.not_applicable)
    if mode == "hlo_interpret":
        interpret = True
    else:
        from jax.experimental.pallas import tpu as pltpu
        interpret = pltpu.InterpretParams()
    program = case.build.ungated(interpret)
    if not gate.applies():   # JAX >= fixed_in runs the kernel: the case runs ungated here
        with case.context():
            jax.block_until_ready(jax.jit(program)(*case.make_inputs(0)))
        return
    with pytest.raises(Exception) as err:
        with case.context():
            jax.block_until_ready(jax.jit(program)(*case.make_inputs(0)))
    assert any(type(err.value).__name__ == t and m in str(err.value) for t, m in gate.errors), \
        (type(err.value), str(err.value)[:300])
