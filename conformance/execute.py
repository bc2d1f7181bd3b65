"""Run one (case, runner, seed) and judge it: the record of the reference and the backend on the
case's inputs (reports/schema.py ``Record``).

The suite's entry points: :func:`run_case` (run a case on a runner and judge it) and
:func:`recheck` (judge saved backend outputs again, without the backend). What happens on the way
lives in its own module: the runners (hardware_runners/), what a failure was
(conformance/classify.py), the judgement (conformance/judge.py: compliance, allowances, known
divergences, the first divergent equation). The reference's outputs are cached here, so that
several runners of one case in one worker share them.
"""
from __future__ import annotations

import time

from hardware_runners.base import BackendUnsupported, ReferenceRunner, describe_device, get_runner
from reports.schema import BACKEND_UNSUPPORTED, CRASH, REFERENCE_UNSUPPORTED, Record

from .case import Case, jaxpr_primitives
from .classify import classify_failure, short_traceback
from .judge import compare, explain_outcome, judge_reference


def reproducer(case_id: str, runner: str, seed: int) -> str:
    return f"jax-conformance repro {case_id} --runner {runner} --seed {seed}"


def base_record(case_id: str, runner: str, seed: int) -> Record:
    """A record of (case, runner, seed) before anything ran: who it is and how to reproduce it."""
    return Record(case=case_id, family=case_id.split("/", 1)[0], runner=runner, seed=seed,
                  reproducer=reproducer(case_id, runner, seed))


_REF_CACHE: dict = {}


def reference_run(case: Case, seed: int, platform: str = "cpu"):
    """(inputs, outputs or exception, seconds, CPU seconds) of the reference standing in for
    ``platform`` (lax.platform_dependent follows it): cached so several runners in one worker
    share it (runners of other platforms too, for programs that do not branch on the platform)."""
    if platform != "cpu" and not _branches_on_platform(case, seed):
        platform = "cpu"
    key = (case.id, seed, id(case), platform)
    if key not in _REF_CACHE:
        if len(_REF_CACHE) >= 16:   # room for every seed of a nightly search (the runners share them)
            _REF_CACHE.pop(next(iter(_REF_CACHE)))
        _REF_CACHE[key] = (case, _compute_reference(case, seed, platform))   # the case is kept: id() stays unique
    return _REF_CACHE[key][1]


def _branches_on_platform(case: Case, seed: int) -> bool:
    """Whether the case's reference program contains platform_index (lax.platform_dependent)."""
    import jax
    try:
        with case.context():
            return "platform_index" in jaxpr_primitives(jax.make_jaxpr(case.reference_program())(
                *case.make_inputs(seed)))
    except Exception:  # noqa: BLE001  (the reference run itself reports what fails to trace)
        return False


def _compute_reference(case: Case, seed: int, platform: str = "cpu"):
    inputs = case.make_inputs(seed)
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        with case.context():
            outs = ReferenceRunner(platform).run(case.as_program(), inputs)
    except Exception as e:  # noqa: BLE001  (a reference failure is recorded, never raised)
        outs = e
    return inputs, outs, time.perf_counter() - t0, time.process_time() - cpu0


def _case_record(case: Case, runner_name: str, seed: int) -> Record:
    import jax
    rec = base_record(case.id, runner_name, seed)
    rec.jax_version = jax.__version__
    return rec


def _reference_for(case: Case, seed: int, rec: Record):
    """(inputs, reference outputs) for the record's platform, or None after filling ``rec`` with
    the outcome when the reference cannot run the case."""
    import interp
    inputs, ref, ref_s, ref_cpu = reference_run(case, seed, rec.platform or "cpu")
    rec.reference_duration_s = round(ref_s, 6)
    rec.reference_cpu_s = round(ref_cpu, 6)
    if isinstance(ref, interp.UnsupportedPrimitiveError):
        rec.outcome, rec.detail = REFERENCE_UNSUPPORTED, str(ref)[:1000]
        return None
    if isinstance(ref, BaseException):
        rec.outcome, rec.detail = CRASH, f"the reference raised {type(ref).__name__}: {str(ref)[:500]}"
        rec.output, rec.crashed = short_traceback(ref), "reference"
        return None
    return inputs, ref


def run_case(case: Case, runner_name: str, seed: int = 0, *, first_divergence: bool = True,
             keep_outputs: list | None = None) -> Record:
    """The record of (case, runner, seed): the runner runs the case's program on the case's inputs
    and its outputs are judged against the reference's. ``first_divergence``: locate a fail at its
    first divergent equation. ``keep_outputs``: a list the backend's outputs are appended to
    (``run --save-outputs``)."""
    rec = _case_record(case, runner_name, seed)
    t_start = time.perf_counter()
    runner = get_runner(runner_name)
    program = case.as_program()
    ok, why = runner.available()
    if ok:
        ok, why = runner.supports(program)
    if not ok:
        rec.outcome, rec.detail = BACKEND_UNSUPPORTED, why
        return rec
    if runner_name != "reference":
        rec.device = describe_device(runner.device())
    rec.platform = runner.platform

    got = _reference_for(case, seed, rec)
    if got is None:
        return rec
    inputs, ref = got
    if runner_name == "reference":
        judge_reference(case, inputs, ref, rec)
        return rec

    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        with case.context():
            outs = runner.run(program, inputs)
    except BackendUnsupported as e:
        rec.outcome, rec.detail = BACKEND_UNSUPPORTED, str(e)
        return rec
    except Exception as e:  # noqa: BLE001  (the backend's failure is the result)
        outcome, facts = classify_failure(e)
        rec.outcome, rec.failure, rec.detail = outcome, facts, f"{facts['type']}: {facts['message'][:500]}"
        if outcome == CRASH:
            rec.output, rec.crashed = short_traceback(e), "backend"
            explain_outcome(rec, tuple(case.primitives))
        return rec
    rec.duration_s = round(time.perf_counter() - t0, 6)
    if keep_outputs is not None:
        keep_outputs.extend(outs)

    with case.context():
        compare(case, runner_name, inputs, ref, outs, rec, first_divergence=first_divergence)
    rec.total_s = round(time.perf_counter() - t_start, 6)
    rec.cpu_s = round(time.process_time() - cpu0, 6)   # the backend run and the comparison
    return rec


def recheck(case: Case, runner_name: str, seed: int, outs) -> Record:
    """The record of saved backend outputs ``outs`` of (case, runner, seed), judged now with this
    checkout's reference and spec, without the backend (``jax-conformance recheck``)."""
    rec = _case_record(case, runner_name, seed)
    try:
        rec.platform = get_runner(runner_name).platform
    except KeyError:       # a runner this JAX does not know (a PJRT plugin's xla:<platform>)
        rec.platform = runner_name.split(":", 1)[1] if runner_name.startswith("xla:") else "cpu"
    rec.rechecked = True
    got = _reference_for(case, seed, rec)
    if got is None:
        return rec
    inputs, ref = got
    with case.context():
        compare(case, runner_name, inputs, ref, list(outs), rec, first_divergence=False)
    return rec
