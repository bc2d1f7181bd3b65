"""Run one (case, runner, seed): reference, backend, compliance check, allowance, known divergence,
first divergent equation. Returns one results record (reports/schema.py).

:func:`search` runs one (case, runner) over several seeds: the item's base seed first, then seeds
that hypothesis draws, and shrinks a failure to the smallest failing seed it can find.
"""
from __future__ import annotations

import functools

import hashlib
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
GOOD = (PASS, PASS_ALLOWANCE)
BAD = (FAIL, CRASH, TIMEOUT)

# XLA status codes (absl::StatusCode, which XLA's runtime errors begin with) that say "this backend
# has no implementation" rather than "this went wrong": UNIMPLEMENTED anywhere; NOT_FOUND while
# compiling, where it means a custom call with no implementation on the platform (XLA:CPU:
# "NOT_FOUND: No registered implementation for untyped custom call to Pin for Host", the lowering
# of pin/unpin).
_REFUSING_STATUS = {"UNIMPLEMENTED": ("trace", "lower", "compile", "execute", None),
                    "NOT_FOUND": ("compile",)}

# Lowering rules that refuse a parameter with a ValueError instead of NotImplementedError, named by
# the function that raises (module, function, exception type). jax/_src/lax/lax.py
# _handle_dot_precision: "The CPU backend silently ignores the algorithm spec, so we check here"
# (the presets XLA:CPU does not implement).
_REFUSING_FRAMES = {("jax._src.lax.lax", "_handle_dot_precision", "ValueError")}


def reproducer(case_id: str, runner: str, seed: int) -> str:
    return f"jax-conformance repro {case_id} --runner {runner} --seed {seed}"


def base_record(case_id: str, runner: str, seed: int) -> dict:
    from reports.schema import new_record
    return new_record(case=case_id, runner=runner, seed=seed, reproducer=reproducer(case_id, runner, seed))


def _chain(e: BaseException):
    """``e`` and the exceptions it was raised from (``__cause__``, else ``__context__``)."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def _raised_at(e: BaseException) -> tuple[str | None, str | None]:
    """(module, function) of the innermost frame that raised ``e`` (where JAX kept its frames)."""
    tb = e.__traceback__
    if tb is None:
        return None, None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_globals.get("__name__"), tb.tb_frame.f_code.co_name


def _raised_in(e: BaseException) -> str | None:
    """The module of the innermost frame that raised ``e``."""
    return _raised_at(e)[0]


def _status_code(e: BaseException) -> str | None:
    """The XLA status code of a JAX runtime error ("UNIMPLEMENTED: ..."), else None."""
    import jax
    runtime = getattr(jax.errors, "JaxRuntimeError", None)
    if runtime is None or not isinstance(e, runtime):
        return None
    head = str(e).split(":", 1)[0].strip()
    return head if head.isupper() and head.replace("_", "").isalpha() else None


def classify_failure(e: BaseException) -> tuple[str, dict]:
    """(outcome, facts) for what a runner raised, judged by what raised it, never by the words of
    its message: ``backend-unsupported`` when the backend refused the program (the runner's
    BackendUnsupported; a NotImplementedError anywhere in the chain, which is how JAX and its Pallas
    lowerings say a primitive or parameter has no rule; a lowering rule of ``_REFUSING_FRAMES``;
    an XLA status in ``_REFUSING_STATUS``),
    ``crash`` otherwise. ``facts``: stage (trace/lower/compile/execute, where the runner says),
    error type, the module that raised it, and the message."""
    from hardware_runners.base import BackendFailure, BackendUnsupported
    stage = e.stage if isinstance(e, BackendFailure) else None
    err = e.error if isinstance(e, BackendFailure) else e
    facts = {"stage": stage, "type": type(err).__name__, "raised_in": _raised_in(err), "message": str(err)[:2000]}
    refusal = next((x for x in _chain(err) if isinstance(x, (BackendUnsupported, NotImplementedError))), None)
    if refusal is not None:
        facts.update(refused_by=type(refusal).__name__, raised_in=_raised_in(refusal) or facts["raised_in"])
        return BACKEND_UNSUPPORTED, facts
    refusing = next((x for x in _chain(err) if (*_raised_at(x), type(x).__name__) in _REFUSING_FRAMES), None)
    if refusing is not None:
        facts["refused_by"] = ".".join(_raised_at(refusing))
        return BACKEND_UNSUPPORTED, facts
    code = _status_code(err)
    if code is not None and stage in _REFUSING_STATUS.get(code, ()):
        facts["refused_by"] = f"XLA status {code}"
        return BACKEND_UNSUPPORTED, facts
    return CRASH, facts


def _short_tb(e: BaseException, limit: int = 4000) -> str:
    s = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return s[-limit:]


_REF_CACHE: dict = {}


def _reference(case: Case, seed: int, platform: str = "cpu"):
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
    from .case import jaxpr_primitives
    try:
        with case.context():
            return "platform_index" in jaxpr_primitives(jax.make_jaxpr(case.reference_program())(
                *case.make_inputs(seed)))
    except Exception:  # noqa: BLE001  (the reference run itself reports what fails to trace)
        return False


def _compute_reference(case: Case, seed: int, platform: str = "cpu"):
    import interp
    inputs = case.make_inputs(seed)
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        from hardware_runners.base import ReferenceRunner
        with case.context():
            outs = ReferenceRunner(platform).run(case, inputs)
    except interp.UnsupportedPrimitiveError as e:
        outs = e
    except Exception as e:  # noqa: BLE001  (a reference failure is recorded, never raised)
        outs = e
    return inputs, outs, time.perf_counter() - t0, time.process_time() - cpu0


def explain_outcome(rec: dict, primitives: tuple[str, ...] = ()) -> dict:
    """A ``timeout`` or ``crash`` record that a known divergence declares it explains (spec/divergences.py
    ``outcomes``) becomes ``known-divergence`` with the entry's explanation; the backend's own outcome
    stays in ``raw_outcome`` and its output in ``output``. Other records are returned unchanged."""
    if rec.get("outcome") not in (CRASH, TIMEOUT):
        return rec
    if not rec.get("jax_version"):
        import jax
        rec["jax_version"] = jax.__version__   # an isolated worker runs the same JAX as its parent
    failure = DV.Failure(rec["case"], rec["runner"], rec["jax_version"], tuple(primitives), (), (), (), None,
                         outcome=rec["outcome"])
    div = DV.find(failure)
    if div is not None:
        rec.update(raw_outcome=rec["outcome"], outcome=KNOWN_DIVERGENCE,
                   known_divergence={"id": div.id, "link": div.link, "summary": div.summary})
    return rec


def _new_record(case: Case, runner_name: str, seed: int) -> dict:
    import jax
    rec = base_record(case.id, runner_name, seed)
    rec["family"] = case.family
    rec["jax_version"] = jax.__version__
    return rec


def _reference_for(case: Case, seed: int, rec: dict):
    """(inputs, reference outputs) for the record's platform, or None after filling ``rec`` with
    the outcome when the reference cannot run the case."""
    import interp
    inputs, ref, ref_s, ref_cpu = _reference(case, seed, rec.get("platform") or "cpu")
    rec["reference_duration_s"] = round(ref_s, 6)
    rec["reference_cpu_s"] = round(ref_cpu, 6)
    if isinstance(ref, interp.UnsupportedPrimitiveError):
        rec.update(outcome=REFERENCE_UNSUPPORTED, detail=str(ref)[:1000])
        return None
    if isinstance(ref, BaseException):
        rec.update(outcome=CRASH, detail=f"the reference raised {type(ref).__name__}: {str(ref)[:500]}",
                   output=_short_tb(ref), crashed="reference")
        return None
    return inputs, ref


def run_case(case: Case, runner_name: str, seed: int = 0, *, first_divergence: bool = True,
             keep_outputs: list | None = None) -> dict:
    """One results record for (case, runner, seed). ``keep_outputs``: a list the backend's
    outputs are appended to (``run --save-outputs``)."""
    from hardware_runners.base import BackendUnsupported, describe_device, get_runner

    rec = _new_record(case, runner_name, seed)
    t_start = time.perf_counter()
    runner = get_runner(runner_name)
    ok, why = runner.available()
    if ok:
        ok, why = runner.supports(case)
    if not ok:
        rec.update(outcome=BACKEND_UNSUPPORTED, detail=why)
        return rec
    if runner_name != "reference":
        rec["device"] = describe_device(runner.device())
    rec["platform"] = runner.platform

    got = _reference_for(case, seed, rec)
    if got is None:
        return rec
    inputs, ref = got
    if runner_name == "reference":
        rec.update(outcome=PASS, duration_s=rec["reference_duration_s"], detail="the reference ran")
        # Outputs random by design (an emulated hardware PRNG) must at least look random.
        for i, mode in enumerate(case.modes_for(ref)):
            if mode.kind == C.STATISTICAL:
                res = checks.check_statistical(ref[i])
                if not res.passed:
                    rec.update(outcome=FAIL, detail=f"output {i}: {res.detail}")
        if case.unfused_fn is not None:
            _compare_unfused(case, inputs, rec)
        return rec

    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        with case.context():
            outs = runner.run(case, inputs)
    except BackendUnsupported as e:
        rec.update(outcome=BACKEND_UNSUPPORTED, detail=str(e))
        return rec
    except Exception as e:  # noqa: BLE001  (the backend's failure is the result)
        outcome, facts = classify_failure(e)
        rec.update(outcome=outcome, failure=facts, detail=f"{facts['type']}: {facts['message'][:500]}")
        if outcome == CRASH:
            rec.update(output=_short_tb(e), crashed="backend")
            explain_outcome(rec, tuple(case.primitives))
        return rec
    rec["duration_s"] = round(time.perf_counter() - t0, 6)
    if keep_outputs is not None:
        keep_outputs.extend(outs)

    with case.context():
        compare(case, runner_name, inputs, ref, outs, rec, first_divergence=first_divergence)
    rec["total_s"] = round(time.perf_counter() - t_start, 6)
    rec["cpu_s"] = round(time.process_time() - cpu0, 6)   # the backend run and the comparison
    return rec


def recheck(case: Case, runner_name: str, seed: int, outs) -> dict:
    """The record of saved backend outputs ``outs`` of (case, runner, seed), judged now with this
    checkout's reference and spec, without the backend (``jax-conformance recheck``)."""
    from hardware_runners.base import get_runner
    rec = _new_record(case, runner_name, seed)
    try:
        rec["platform"] = get_runner(runner_name).platform
    except KeyError:       # a runner this JAX does not know (a PJRT plugin's xla:<platform>)
        rec["platform"] = runner_name.split(":", 1)[1] if runner_name.startswith("xla:") else "cpu"
    rec["rechecked"] = True
    got = _reference_for(case, seed, rec)
    if got is None:
        return rec
    inputs, ref = got
    with case.context():
        compare(case, runner_name, inputs, ref, list(outs), rec, first_divergence=False)
    return rec


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
        outs = ReferenceRunner(platform).run(case, [flush_subnormals(a) for a in inputs])
        return [[flush_subnormals(o) for o in outs]]
    return None


def compare(case: Case, runner: str, inputs, ref, outs, rec: dict, *, first_divergence: bool = True) -> None:
    """Fill ``rec`` with the outcome of comparing backend outputs ``outs`` with ``ref``."""
    if len(ref) != len(outs):
        rec.update(outcome=FAIL, detail=f"backend returned {len(outs)} outputs, reference {len(ref)}")
        return
    modes = case.modes_for(ref)
    rec["modes"] = [m.describe() for m in modes]
    mode_args = _ModeArgs(case, inputs)
    results = _check_all(mode_args, [ref], outs, modes)
    _summarise(rec, results)
    if all(r.passed for r in results):
        rec["outcome"] = PASS
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
                    replays[name] = _replay(case, jaxpr, inputs, variant, rec.get("platform") or "cpu")
                except Exception:  # noqa: BLE001  (a replay the reference cannot do explains nothing)
                    replays[name] = None
            if replays[name] is None and mode_change is None:
                return False
            if replays[name] is not None:
                refs.extend(replays[name])
        return all(r.passed for r in _check_all(mode_args, refs, outs, new_modes))

    from .replay import program_ops
    name = A.explain(runner, attempt, program_ops(jaxpr) if jaxpr is not None else None)
    if name:
        rec.update(outcome=PASS_ALLOWANCE, allowance=name)
        return
    # No allowance explains every element. The elements one does explain are handed to the known
    # divergences: one output can mix a flushed subnormal argument (flush-to-zero) with a recorded
    # accuracy difference, and neither explanation alone covers it.
    allowed, used = _allowed_elements(mode_args, ref, outs, modes, failing, replays)
    import jax
    failure = DV.Failure(case.id, runner, jax.__version__, tuple(case.primitives), ref, outs, failing,
                         rec.get("max_ulp"), inputs=tuple(inputs), allowed=allowed)
    div = DV.find(failure)
    if div is not None:
        rec.update(outcome=KNOWN_DIVERGENCE, known_divergence={"id": div.id, "link": div.link,
                                                               "summary": div.summary})
        if used:
            rec["allowance"] = "+".join(used)
        return
    rec["outcome"] = FAIL
    if first_divergence and jaxpr is not None:
        try:
            rec["first_divergent_eqn"] = first_divergent_eqn(jaxpr, inputs, runner)
        except Exception as e:  # noqa: BLE001  (localisation is best effort; say why it failed)
            rec["first_divergent_eqn"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}


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


def _compare_unfused(case: Case, inputs, rec: dict) -> None:
    """A fused program and its unfused meaning, both in the reference: the same arithmetic must
    give the same bits; a difference is a fail located at its first differing equation."""
    from .fusion_diff import diff, format_report
    with case.context():
        report = diff(case.reference_program(), case.unfused_fn, inputs)
    rec["mismatches"] = sum(o["mismatches"] for o in report["outputs"])
    if report["agree"]:
        rec["detail"] = (f"the reference ran; fused == unfused bit for bit ({report['compared']} "
                         f"block comparisons of {report['pairs']} paired equations)")
        return
    first = next((o for o in report["outputs"] if o["mismatches"]), None)
    if first is not None and first.get("index") is not None:
        rec["first_mismatch"] = {"output": first["output"], "index": first["index"],
                                 "reference": first["unfused"], "backend": first["fused"]}
    rec.update(outcome=FAIL, first_divergent_eqn=report["first_differing_eqn"],
               detail="the fused program differs from its unfused meaning in the reference:\n"
                      + format_report(report))


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


# --------------------------------------------------------------------------------------------
# Seed search: one (case, runner) over several seeds, driven by hypothesis.
# --------------------------------------------------------------------------------------------
SEED_SPACE = 2 ** 32          # hypothesis draws seeds from (base seed, base seed + SEED_SPACE)
MAX_SEEDS_LISTED = 64         # seeds_tried in a record lists at most this many

# The record that stands for a search without a failure: the most informative one seen
# (a known divergence or an unsupported input says more than a pass), the earliest on ties.
_RANK = {KNOWN_DIVERGENCE: 0, REFERENCE_UNSUPPORTED: 1, BACKEND_UNSUPPORTED: 2, PASS_ALLOWANCE: 3, PASS: 4}


class _Bad(Exception):
    """A fail/crash/timeout, raised inside the hypothesis property so that hypothesis shrinks it."""

    def __init__(self, rec: dict):
        super().__init__(f"{rec['outcome']} at seed {rec['seed']}")
        self.rec = rec


def search_seed(case_id: str, base_seed: int) -> int:
    """The hypothesis random seed of a search: depends only on (case id, base seed), so every run,
    every xdist worker and every runner of the case draws the same seeds (the runners then share
    the reference results) -- never on PYTHONHASHSEED, the test function or the worker."""
    h = hashlib.sha256(f"search\0{case_id}\0{base_seed}".encode()).digest()
    return int.from_bytes(h[:8], "little")


def search(run_one, case_id: str, base_seed: int = 0, examples: int = 1, shrinks: int = 8,
           budget_s: float | None = None) -> dict:
    """The record of one (case, runner) over up to ``examples`` seeds; ``run_one(seed)`` -> record.

    The base seed runs first (the quick profile runs only it). If it passes, hypothesis draws
    ``examples - 1`` further seeds (``derandomize``d through :func:`search_seed`, no example
    database) and, when one fails, shrinks it to the smallest failing seed it finds, running at most
    ``shrinks`` more seeds (a crash or a timeout is not shrunk: each try would cost a worker restart
    or the whole timeout). Every seed's inputs are ``case.make_inputs(seed)``, so the record's
    ``seed`` and ``reproducer`` re-create exactly the inputs its values come from.

    ``budget_s`` caps the further seeds at ``budget_s / cost`` where cost is the base seed's CPU
    seconds (reference + backend + comparison): a heavy case searches fewer seeds. The seeds run
    are then a shorter prefix of the same deterministic sequence.

    Returns that record with ``base_seed``, ``examples`` (seeds run), ``seeds_tried`` (in order),
    ``search_s`` and, for a failure the search found, ``first_failing_seed`` (before shrinking).
    """
    t0 = time.perf_counter()
    tried: dict[int, dict] = {}

    def run(seed: int) -> dict:
        if seed not in tried:
            tried[seed] = run_one(seed)
        return tried[seed]

    base = run(base_seed)
    found = None
    more = examples - 1
    if budget_s is not None and more > 0:
        cost = (base.get("reference_cpu_s") or 0.0) + (base.get("cpu_s") or 0.0)
        more = min(more, int(budget_s / cost)) if cost > 0 else more
    if more > 0 and base["outcome"] in GOOD:
        found = _hypothesis_search(run, tried, case_id, base_seed, more, shrinks)
    if base["outcome"] in BAD or found is None:
        # the earliest bad record, else the most informative one (dicts keep insertion order)
        rec = base if base["outcome"] in BAD else min(tried.values(), key=lambda r: _RANK.get(r["outcome"], 9))
    else:
        rec = found
    rec = dict(rec, base_seed=base_seed, examples=len(tried), seeds_tried=list(tried)[:MAX_SEEDS_LISTED],
               search_s=round(time.perf_counter() - t0, 6))
    if found is not None:
        rec["first_failing_seed"] = next(s for s, r in tried.items() if r["outcome"] in BAD)
    return rec


def _hypothesis_search(run, tried: dict, case_id: str, base_seed: int, max_examples: int, shrinks: int):
    """The record hypothesis reports (its shrunk failing seed), or None if every seed was good."""
    from hypothesis import HealthCheck, Phase, Verbosity, assume, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    budget = {"left": None}   # seeds still to run while shrinking; None until a failure is found

    @hypothesis_seed(search_seed(case_id, base_seed))
    @settings(database=None, derandomize=False, max_examples=max_examples, deadline=None,
              phases=(Phase.generate, Phase.shrink), report_multiple_bugs=False, print_blob=False,
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet)
    # Seeds base+1 .. base+SEED_SPACE-1: never the base seed again; shrinking moves toward base+1.
    @given(st.integers(1, SEED_SPACE - 1).map(lambda k: base_seed + k))
    def prop(seed):
        if seed not in tried and budget["left"] is not None:
            # A shrink candidate is a full run of the case: past the budget it is not run, and
            # hypothesis is told it is invalid (not that it passed).
            assume(budget["left"] > 0)
            budget["left"] -= 1
        rec = run(seed)
        if rec["outcome"] in BAD:
            if budget["left"] is None:
                budget["left"] = shrinks
            if rec["outcome"] != FAIL:
                budget["left"] = 0
            raise _Bad(rec)

    try:
        prop()
    except _Bad as e:
        return e.rec
    return None
