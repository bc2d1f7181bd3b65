"""Run one (case, runner, seed): reference, backend, compliance check, allowance, known divergence,
first divergent equation. Returns one results record (reports/schema.py)."""
from __future__ import annotations

import time
import traceback

import numpy as np

from spec import allowances as A
from spec import compliance as C
from spec import divergences as DV

from . import checks
from .case import LAX, Case, max_abs

PASS, PASS_ALLOWANCE, FAIL = "pass", "pass-with-allowance", "fail"
CRASH, TIMEOUT = "crash", "timeout"
BACKEND_UNSUPPORTED, REFERENCE_UNSUPPORTED, KNOWN_DIVERGENCE = (
    "backend-unsupported", "reference-unsupported", "known-divergence")
OUTCOMES = (PASS, PASS_ALLOWANCE, FAIL, CRASH, TIMEOUT, BACKEND_UNSUPPORTED, REFERENCE_UNSUPPORTED,
            KNOWN_DIVERGENCE)

_UNSUPPORTED_MARKERS = ("not implemented", "unimplemented", "not supported", "unsupported",
                        "translation rule for primitive", "no lowering", "cannot lower")


def reproducer(case_id: str, runner: str, seed: int) -> str:
    return f"jax-conformance repro {case_id} --runner {runner} --seed {seed}"


def base_record(case_id: str, runner: str, seed: int) -> dict:
    from reports.schema import new_record
    return new_record(case=case_id, runner=runner, seed=seed, reproducer=reproducer(case_id, runner, seed))


def _looks_unsupported(e: BaseException) -> bool:
    if isinstance(e, NotImplementedError):
        return True
    msg = str(e).lower()
    return any(m in msg for m in _UNSUPPORTED_MARKERS)


def _short_tb(e: BaseException, limit: int = 4000) -> str:
    s = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return s[-limit:]


_REF_CACHE: dict = {}


def _reference(case: Case, seed: int):
    """(inputs, outputs or exception, seconds): cached so several runners in one worker share it."""
    key = (case.id, seed, id(case))
    if key not in _REF_CACHE:
        if len(_REF_CACHE) >= 8:
            _REF_CACHE.pop(next(iter(_REF_CACHE)))
        _REF_CACHE[key] = (case, _compute_reference(case, seed))   # the case is kept: id() stays unique
    return _REF_CACHE[key][1]


def _compute_reference(case: Case, seed: int):
    import interp
    inputs = case.make_inputs(seed)
    t0 = time.perf_counter()
    try:
        from hardware_runners.base import ReferenceRunner
        with case.context():
            outs = ReferenceRunner().run(case, inputs)
        return inputs, outs, time.perf_counter() - t0
    except interp.UnsupportedPrimitiveError as e:
        return inputs, e, time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001  (a reference failure is recorded, never raised)
        return inputs, e, time.perf_counter() - t0


def run_case(case: Case, runner_name: str, seed: int = 0, *, first_divergence: bool = True) -> dict:
    import interp
    import jax
    from hardware_runners.base import BackendUnsupported, get_runner

    rec = base_record(case.id, runner_name, seed)
    rec["family"] = case.family
    rec["jax_version"] = jax.__version__
    t_start = time.perf_counter()
    runner = get_runner(runner_name)
    ok, why = runner.available()
    if ok:
        ok, why = runner.supports(case)
    if not ok:
        rec.update(outcome=BACKEND_UNSUPPORTED, detail=why)
        return rec

    inputs, ref, ref_s = _reference(case, seed)
    rec["reference_duration_s"] = round(ref_s, 6)
    if isinstance(ref, interp.UnsupportedPrimitiveError):
        rec.update(outcome=REFERENCE_UNSUPPORTED, detail=str(ref)[:1000])
        return rec
    if isinstance(ref, BaseException):
        rec.update(outcome=CRASH, detail=f"the reference raised {type(ref).__name__}: {str(ref)[:500]}",
                   output=_short_tb(ref), crashed="reference")
        return rec
    if runner_name == "reference":
        rec.update(outcome=PASS, duration_s=round(ref_s, 6), detail="the reference ran")
        # Outputs random by design (an emulated hardware PRNG) must at least look random.
        for i, mode in enumerate(case.modes_for(ref)):
            if mode.kind == C.STATISTICAL:
                res = checks.check_statistical(ref[i])
                if not res.passed:
                    rec.update(outcome=FAIL, detail=f"output {i}: {res.detail}")
        return rec

    t0 = time.perf_counter()
    try:
        with case.context():
            outs = runner.run(case, inputs)
    except BackendUnsupported as e:
        rec.update(outcome=BACKEND_UNSUPPORTED, detail=str(e))
        return rec
    except Exception as e:  # noqa: BLE001  (the backend's failure is the result)
        if _looks_unsupported(e):
            rec.update(outcome=BACKEND_UNSUPPORTED, detail=f"{type(e).__name__}: {str(e)[:500]}")
        else:
            rec.update(outcome=CRASH, detail=f"{type(e).__name__}: {str(e)[:500]}", output=_short_tb(e),
                       crashed="backend")
        return rec
    rec["duration_s"] = round(time.perf_counter() - t0, 6)

    with case.context():
        compare(case, runner_name, inputs, ref, outs, rec, first_divergence=first_divergence)
    rec["total_s"] = round(time.perf_counter() - t_start, 6)
    return rec


def _check_all(case: Case, inputs, refs, outs, modes) -> list[checks.Check]:
    """Check every output; ``refs`` is a list of reference output lists (the reference and its
    recomputations under an allowance): an element complies if it complies with any of them."""
    bounds = None
    if any(m.kind == C.DOT_PRODUCT for m in modes):
        if case.dot_bound is None:
            raise ValueError(f"case {case.id} uses a DOT_PRODUCT mode but gives no dot_bound "
                             "(the sum |a||b| per output; a bug in the case)")
        bounds = case.dot_bound(*inputs)
    magnitude = None
    if any(m.kind == C.ABS_REL for m in modes):
        magnitude = case.magnitude(*inputs) if case.magnitude else max_abs(inputs)
    res = []
    for i, (m, o) in enumerate(zip(modes, outs)):
        res.append(checks.check_any(m, [r[i] for r in refs], o, magnitude=magnitude,
                                    bound=None if bounds is None else bounds[i]))
    return res


def _replay(case: Case, jaxpr, inputs, variant: dict):
    """The reference outputs recomputed under an allowance's variant, or None if not possible."""
    from .replay import Variant, flush_subnormals, reference_replay
    if jaxpr is not None:
        return reference_replay(jaxpr, inputs, Variant(**variant))[0]
    if set(variant) == {"flush"}:
        # A kernel (or anything not replayable equation by equation): flush at the boundary,
        # subnormal inputs read as zero and subnormal results written as zero.
        from hardware_runners.base import ReferenceRunner
        outs = ReferenceRunner().run(case, [flush_subnormals(a) for a in inputs])
        return [flush_subnormals(o) for o in outs]
    return None


def compare(case: Case, runner: str, inputs, ref, outs, rec: dict, *, first_divergence: bool = True) -> None:
    """Fill ``rec`` with the outcome of comparing backend outputs ``outs`` with ``ref``."""
    if len(ref) != len(outs):
        rec.update(outcome=FAIL, detail=f"backend returned {len(outs)} outputs, reference {len(ref)}")
        return
    modes = case.modes_for(ref)
    rec["modes"] = [m.describe() for m in modes]
    results = _check_all(case, inputs, [ref], outs, modes)
    _summarise(rec, results)
    if all(r.passed for r in results):
        rec["outcome"] = PASS
        return
    failing = tuple(i for i, r in enumerate(results) if not r.passed)

    jaxpr = None
    if case.kind == LAX:
        import jax
        try:
            jaxpr = jax.make_jaxpr(case.program())(*inputs)
        except Exception:  # noqa: BLE001  (no replay then; the fail stands)
            jaxpr = None

    def attempt(variant, mode_change) -> bool:
        new_modes = [mode_change(m) for m in modes] if mode_change else modes
        refs = [ref]
        if variant:
            try:
                replayed = _replay(case, jaxpr, inputs, variant)
            except Exception:  # noqa: BLE001  (a replay the reference cannot do explains nothing)
                replayed = None
            if replayed is None:
                return False
            refs.append(replayed)
        return all(r.passed for r in _check_all(case, inputs, refs, outs, new_modes))

    name = A.explain(runner, attempt)
    if name:
        rec.update(outcome=PASS_ALLOWANCE, allowance=name)
        return
    import jax
    failure = DV.Failure(case.id, runner, jax.__version__, tuple(case.primitives), ref, outs, failing,
                         rec.get("max_ulp"))
    div = DV.find(failure)
    if div is not None:
        rec.update(outcome=KNOWN_DIVERGENCE, known_divergence={"id": div.id, "link": div.link,
                                                               "summary": div.summary})
        return
    rec["outcome"] = FAIL
    if first_divergence and jaxpr is not None:
        try:
            rec["first_divergent_eqn"] = first_divergent_eqn(jaxpr, inputs, runner)
        except Exception as e:  # noqa: BLE001  (localisation is best effort; say why it failed)
            rec["first_divergent_eqn"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}


def _summarise(rec: dict, results: list[checks.Check]) -> None:
    ulps = [r.max_ulp for r in results if r.max_ulp is not None]
    errs = [r.max_abs_err for r in results if r.max_abs_err is not None]
    rec["max_ulp"] = max(ulps) if ulps else None
    rec["max_abs_err"] = max(errs) if errs else None
    rec["mismatches"] = sum(r.mismatches for r in results)
    for i, r in enumerate(results):
        if not r.passed:
            rec["first_mismatch"] = dict(r.first_mismatch or {}, output=i)
            rec["detail"] = r.detail
            break
    else:
        rec["detail"] = "; ".join(dict.fromkeys(r.detail for r in results if r.detail))


def first_divergent_eqn(jaxpr, inputs, runner_name: str) -> dict:
    """The first equation whose backend value differs from the reference's (calls inlined)."""
    from hardware_runners.base import get_runner
    from .replay import backend_intermediates, comparable, eqn_text, reference_replay

    _, trace = reference_replay(jaxpr, inputs, record=True)
    trace = [(e, v, val) for e, v, val in trace if comparable(v.aval)]
    device = get_runner(runner_name).device()
    if device is None:
        return {"error": f"{runner_name} cannot evaluate intermediates"}
    got = backend_intermediates(jaxpr, inputs, device)
    if len(got) != len(trace):
        return {"error": f"{len(got)} backend intermediates vs {len(trace)} reference ones"}
    for k, ((eqn, var, r), b) in enumerate(zip(trace, got)):
        r = np.asarray(r)
        mode = _eqn_mode(eqn, r.dtype)
        res = checks.check(mode, r, b, magnitude=max_abs([np.asarray(r)]))
        if not res.passed:
            return {"index": k, "primitive": eqn.primitive.name, "eqn": eqn_text(eqn), "mode": mode.describe(),
                    "max_ulp": res.max_ulp, "first_mismatch": res.first_mismatch}
    return {"index": None, "note": "every intermediate agrees when computed one by one: the difference "
                                   "comes from how the whole program is compiled (fusion)"}


def _eqn_mode(eqn, dtype) -> C.Mode:
    name = eqn.primitive.name
    if name in ("dot_general", "conv_general_dilated", "reduce_sum", "cumsum", "reduce_prod", "cumprod"):
        return C.abs_rel(64, 8, "measured")
    try:
        return C.mode_for_primitive(name, dtype)
    except ValueError:
        return C.abs_rel(64, 8, "measured")
