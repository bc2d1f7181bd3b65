"""The judgement of one (case, runner, seed): the backend's outputs against the reference's under
the case's compliance modes, then the backend's allowances, then the known divergences; the
outcome and what explains it go into the record (reports/schema.py).

:func:`compare` judges a backend's outputs, :func:`judge_reference` the reference's own run,
:func:`explain_outcome` a crash or timeout that a known divergence declares.
"""
from __future__ import annotations

import functools

import numpy as np

from reports.schema import CRASH, FAIL, KNOWN_DIVERGENCE, PASS, PASS_ALLOWANCE, TIMEOUT, Record
from spec import compliance as C

from . import allowance_models, checks, divergence_models
from .case import LAX, Case, max_abs
from .first_divergence import first_divergent_eqn


def explain_outcome(rec: Record, primitives: tuple[str, ...] = ()) -> Record:
    """A ``timeout`` or ``crash`` record that a known divergence declares it explains (spec/divergences.py
    ``outcomes``) becomes ``known-divergence`` with the entry's explanation; the backend's own outcome
    stays in ``raw_outcome`` and its output in ``output``. Other records are returned unchanged."""
    if rec.outcome not in (CRASH, TIMEOUT):
        return rec
    if not rec.jax_version:
        import jax
        rec.jax_version = jax.__version__   # an isolated worker runs the same JAX as its parent
    failure = divergence_models.Failure(rec.case, rec.runner, rec.jax_version, tuple(primitives), (), (), (), None,
                                  outcome=rec.outcome)
    div = divergence_models.find(failure)
    if div is not None:
        rec.raw_outcome, rec.outcome = rec.outcome, KNOWN_DIVERGENCE
        rec.known_divergence = {"id": div.id, "link": div.link, "summary": div.summary}
    return rec


def judge_reference(case: Case, inputs, ref, rec: Record) -> None:
    """The reference runner's record: it ran; outputs random by design (an emulated hardware PRNG)
    must at least look random, and a fused program must give the bits of its unfused meaning."""
    rec.outcome, rec.duration_s, rec.detail = PASS, rec.reference_duration_s, "the reference ran"
    for i, mode in enumerate(case.modes_for(ref)):
        if mode.kind == C.STATISTICAL:
            res = checks.check_statistical(ref[i])
            if not res.passed:
                rec.outcome, rec.detail = FAIL, f"output {i}: {res.detail}"
    if case.unfused_fn is not None:
        _compare_unfused(case, inputs, rec)


class _ModeArgs:
    """What the modes need from the inputs: ABS_REL's magnitude (max |input| or the case's own),
    DOT_PRODUCT's sum |a||b| arrays. Each is computed at most once per comparison, when a mode first
    needs it: allowance attempts re-check under other modes, and a case's magnitude can be costly
    (the Hessenberg case's is 2 n**2 SciPy reductions)."""

    def __init__(self, case: Case, inputs):
        self.case, self.inputs = case, inputs

    @functools.cached_property
    def bounds(self):
        return self.case.dot_bound(*self.inputs)

    @functools.cached_property
    def magnitude(self):
        return self.case.magnitude(*self.inputs) if self.case.magnitude else max_abs(self.inputs)

    def __call__(self, modes):
        """(magnitude, per-output dot bounds) for ``modes`` (None where no mode needs them)."""
        bounds = None
        if any(m.needs_dot_bound for m in modes):
            if self.case.dot_bound is None:
                raise ValueError(f"case {self.case.id} uses a mode that needs a dot_bound but gives none "
                                 "(the sum |a||b| per output; a bug in the case)")
            bounds = self.bounds
        magnitude = self.magnitude if any(m.kind == C.ABS_REL for m in modes) else None
        return magnitude, bounds


def _check_all(mode_args: _ModeArgs, refs, outs, modes) -> list[checks.Check]:
    """Check every output; ``refs`` is a list of reference output lists (the reference and its
    recomputations under an allowance): an element complies if it complies with any of them."""
    magnitude, bounds = mode_args(modes)
    res = []
    for i, (m, o) in enumerate(zip(modes, outs)):
        res.append(checks.check_any(m, [r[i] for r in refs], o, magnitude=magnitude,
                                    bound=None if bounds is None else bounds[i]))
    return res


def _replay(case: Case, jaxpr, inputs, variant: dict, platform: str = "cpu"):
    """The reference outputs recomputed under an allowance's variant (a list of output lists: an
    element complies if it complies with any of them), or None if not possible."""
    from .replay import Variant, flush_subnormals, minmax_tie_candidates, reference_replay, scatter_candidates
    if jaxpr is not None:
        # Several replays where an allowance accepts one of several values (a list of reference
        # output lists): which duplicate a scatter keeps, which operand a DAZ tie returns.
        if "scatter_winner" in variant:
            def replay(v):
                return scatter_candidates(jaxpr, inputs, v)    # (it sets scatter_winner)
        else:
            def replay(v):
                return [reference_replay(jaxpr, inputs, v)[0]]
        v = Variant(**variant)
        return minmax_tie_candidates(jaxpr, inputs, v, replay=replay) if v.minmax_daz >= 0 else replay(v)
    if set(variant) == {"flush"}:
        # A kernel (or anything not replayable equation by equation): flush at the boundary,
        # subnormal inputs read as zero and subnormal results written as zero.
        from hardware_runners.base import ReferenceRunner
        outs = ReferenceRunner(platform).run(case.as_program(), [flush_subnormals(a) for a in inputs])
        return [[flush_subnormals(o) for o in outs]]
    return None


def compare(case: Case, runner: str, inputs, ref, outs, rec: Record, *, first_divergence: bool = True) -> None:
    """Fill ``rec`` with the outcome of comparing backend outputs ``outs`` with ``ref``: pass, pass
    with an allowance, a known divergence, or a fail (located at its first divergent equation
    unless ``first_divergence`` is False)."""
    if len(ref) != len(outs):
        rec.outcome, rec.detail = FAIL, f"backend returned {len(outs)} outputs, reference {len(ref)}"
        return
    modes = case.modes_for(ref)
    rec.modes = [m.describe() for m in modes]
    mode_args = _ModeArgs(case, inputs)
    results = _check_all(mode_args, [ref], outs, modes)
    _summarise(rec, results)
    if all(r.passed for r in results):
        rec.outcome = PASS
        return
    failing = tuple(i for i, r in enumerate(results) if not r.passed)

    jaxpr = None
    if case.kind == LAX and case.reference_fn is None:
        # (with a reference_fn the reference ran another program: the backend program's equations
        # are no replay of it, so allowances are tried at the boundary only, as for kernels)
        import jax
        try:
            jaxpr = jax.make_jaxpr(case.program())(*inputs)
        except Exception:  # noqa: BLE001  (no replay then; the fail stands)
            jaxpr = None

    replays: dict = {}      # allowance name -> the reference recomputed under it (None: not possible)

    def attempt(variant, mode_change, name) -> bool:
        new_modes = [mode_change(m) for m in modes] if mode_change else modes
        refs = [ref]
        if variant:
            if name not in replays:
                try:
                    replays[name] = _replay(case, jaxpr, inputs, variant, rec.platform or "cpu")
                except Exception:  # noqa: BLE001  (a replay the reference cannot do explains nothing)
                    replays[name] = None
            if replays[name] is None and mode_change is None:
                return False
            if replays[name] is not None:
                refs.extend(replays[name])
        return all(r.passed for r in _check_all(mode_args, refs, outs, new_modes))

    from .replay import program_ops
    name = allowance_models.explain(runner, attempt, program_ops(jaxpr) if jaxpr is not None else None)
    if name:
        rec.outcome, rec.allowance = PASS_ALLOWANCE, name
        return
    # No allowance explains every element. The elements one does explain are handed to the known
    # divergences: one output can mix a flushed subnormal argument (flush-to-zero) with a recorded
    # accuracy difference, and neither explanation alone covers it.
    allowed, used = _allowed_elements(mode_args, ref, outs, modes, failing, replays)
    import jax
    failure = divergence_models.Failure(case.id, runner, jax.__version__, tuple(case.primitives), ref, outs, failing,
                                  rec.max_ulp, inputs=tuple(inputs), allowed=allowed, fn=case.fn,
                                  replayed=tuple(r for rs in replays.values() if rs for r in rs))
    div = divergence_models.find(failure)
    if div is not None:
        rec.outcome = KNOWN_DIVERGENCE
        rec.known_divergence = {"id": div.id, "link": div.link, "summary": div.summary}
        if used:
            rec.allowance = "+".join(used)
        return
    rec.outcome = FAIL
    if first_divergence and jaxpr is not None:
        try:
            rec.first_divergent_eqn = first_divergent_eqn(jaxpr, inputs, runner)
        except Exception as e:  # noqa: BLE001  (localisation is best effort; say why it failed)
            rec.first_divergent_eqn = {"error": f"{type(e).__name__}: {str(e)[:300]}"}


def _allowed_elements(mode_args: _ModeArgs, ref, outs, modes, failing, replays: dict):
    """(per output: the elements that comply with the reference or with some allowance's recomputed
    reference, None for outputs that pass; the names of the allowances, in the order tried, that
    explain an element nothing before them did)."""
    magnitude, bounds = mode_args(modes)

    def ok(i, r):
        return checks.complies(modes[i], r[i], outs[i], magnitude=magnitude,
                               bound=None if bounds is None else bounds[i])
    allowed: list = [None] * len(outs)
    for i in failing:
        allowed[i] = ok(i, ref)
    used = []
    for name, replayed in replays.items():
        if replayed is None:
            continue
        new = False
        for i in failing:
            more = np.logical_or.reduce([ok(i, r) for r in replayed]) & ~allowed[i]
            new |= bool(more.any())
            allowed[i] |= more
        if new:
            used.append(name)
    return tuple(allowed), used


def _compare_unfused(case: Case, inputs, rec: Record) -> None:
    """A fused program and its unfused meaning, both in the reference: the same arithmetic must
    give the same bits; a difference is a fail located at its first differing equation."""
    from .fusion_diff import diff, format_report
    with case.context():
        report = diff(case.reference_program(), case.unfused_fn, inputs)
    rec.mismatches = sum(o["mismatches"] for o in report["outputs"])
    if report["agree"]:
        rec.detail = (f"the reference ran; fused == unfused bit for bit ({report['compared']} "
                      f"block comparisons of {report['pairs']} paired equations)")
        return
    first = next((o for o in report["outputs"] if o["mismatches"]), None)
    if first is not None and first.get("index") is not None:
        rec.first_mismatch = {"output": first["output"], "index": first["index"],
                              "reference": first["unfused"], "backend": first["fused"]}
    rec.outcome, rec.first_divergent_eqn = FAIL, report["first_differing_eqn"]
    rec.detail = ("the fused program differs from its unfused meaning in the reference:\n"
                  + format_report(report))


def _summarise(rec: Record, results: list[checks.Check]) -> None:
    ulps = [r.max_ulp for r in results if r.max_ulp is not None]
    errs = [r.max_abs_err for r in results if r.max_abs_err is not None]
    rec.max_ulp = max(ulps) if ulps else None
    rec.max_abs_err = max(errs) if errs else None
    rec.mismatches = sum(r.mismatches for r in results)
    for i, r in enumerate(results):
        if not r.passed:
            rec.first_mismatch = dict(r.first_mismatch or {}, output=i)
            rec.detail = r.detail
            break
    else:
        rec.detail = "; ".join(dict.fromkeys(r.detail for r in results if r.detail))
