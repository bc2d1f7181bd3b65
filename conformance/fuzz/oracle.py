"""The fuzzer's oracle: does a backend compute what a generated program means?

The suite's own machinery judges (compliance modes, allowances, known divergences); what a
random program adds is composition: an error an operation may make (exp within 6 ulp, a sum in any
order) moves everything computed from it, so no per-output mode of the whole program is both sound
and strict. The judgement therefore goes equation by equation, on the backend's own values:

1. **Whole program, exactly.** The backend's outputs against the reference's, EXACT, with the
   runner's allowances replayed over the whole program (flush-to-zero, FMA contraction, XLA's
   algebraic rewrites, the order of duplicate scatter updates...). A program of operations that are
   all defined bit for bit is judged here.
2. **Inexact operations as the backend computes them.** The reference is replayed with every
   operation whose mode is not EXACT (transcendentals: ULP budgets; sums, dots, convolutions:
   DOT_PRODUCT bounds) evaluated by the backend instead, on the replay's own operands (that
   operation alone, through the runner). Each such value is first judged against its operation's
   mode, allowances and known divergences (one equation: the suite's ``compare``); the rest of the
   program must then follow exactly, with the allowances replayed again. An operation that fails its
   own judgement is the finding (its inputs are in hand: a one-equation reproducer). A
   transcendental whose result reaches only outputs (through bit moves) may also be computed
   differently in the compiled program than alone: those outputs may instead be within its
   budget of the reference's value (:func:`terminal_operations`).
3. **Localisation.** A program still unexplained is compiled once more with every intermediate
   value as an output (through the runner), and each equation is judged on the backend's own
   operands (the reference replayed with each equation's value replaced by the backend's once it
   has been judged; the runner's two-equation allowances, FMA contraction, algebraic rewrites and
   excess precision, are checked on the producer's values). The first that fails is the divergent
   equation; if none does and that compile gives the program's outputs, the program is explained;
   otherwise the difference comes from how the whole program was compiled (fusion, rewrites), a
   finding of its own kind.

A backend's result is explained when one of these shows every output reachable from per-equation
compliant steps; whatever stays unexplained is a finding. Findings are bucketed by (primitive,
dtype, runner, symptom) so that one bug is one report.

One module per level, each importing only those above it in this list: ``equation`` (one
equation: modes, bounds, reference value, verdict words), ``flow`` (data flow: terminal
operations, elementwise sources, index maps), ``program`` (levels 1 and 2: :func:`judge_eqn`,
:func:`explain_program`), ``localize`` (level 3), and this module, the whole judgement
(:func:`judge`).
"""
from __future__ import annotations
from __future__ import annotations

import time

import numpy as np

from spec import compliance as C

from . import suite
from .suite import CRASH, FAIL, PASS_ALLOWANCE, Case
from .equation import PER_OPERATION, _config, symptom
from .program import _Program, explain_program
from .localize import localize


# --------------------------------------------------------------------------------------------
# The whole judgement of one program on one runner
# --------------------------------------------------------------------------------------------
def bucket(kind: str, primitive: str, dtype: str, runner: str, symptom_: str) -> str:
    return f"{kind}:{primitive}:{dtype}:{runner}:{symptom_}"


def _output_primitive(closed, i: int) -> tuple[str, str]:
    """(primitive, dtype) of the equation that computes output ``i`` (calls entered)."""
    from conformance.observe import CALLS, call_body
    from interp.evaluator import split_jaxpr
    jaxpr = split_jaxpr(closed)[0]
    var = jaxpr.outvars[i]
    while True:
        prod = next((e for e in jaxpr.eqns if var in e.outvars), None)
        if prod is None:
            return "input", str(getattr(var.aval, "dtype", ""))
        if prod.primitive.name in CALLS and call_body(prod) is not None:
            inner = split_jaxpr(call_body(prod))[0]
            var = inner.outvars[prod.outvars.index(var)]
            jaxpr = inner
            continue
        return prod.primitive.name, str(getattr(var.aval, "dtype", ""))


def judge(fn, inputs, reference, runner, platform: str = "cpu", *, localise: bool = True,
          case: Case | None = None) -> dict:
    """A results record for the backend ``runner`` on a program ``fn`` (``reference`` its reference
    outputs on ``inputs``, computed by the caller once for every runner): outcome, allowance,
    first divergent equation, and for a finding its ``bucket``."""
    import jax
    t0 = time.perf_counter()
    program = _Program(fn)
    case = case or Case(id="fuzz-program", fn=fn, inputs=lambda rng: [], modes=C.exact("definition"),
                        x64=bool(jax.config.jax_enable_x64), jax_config=_config())
    rec = suite.new_record(case=case.id, runner=runner.name, seed=0)
    try:
        outs = [np.asarray(o) for o in suite.run(runner, case, list(inputs))]
    except Exception as e:  # noqa: BLE001  (the backend's failure is the result)
        outcome, facts = suite.classify_failure(e)
        rec.update(outcome=outcome, failure=facts, detail=f"{facts['type']}: {facts['message'][:500]}")
        if outcome == CRASH:
            rec.update(output=suite.short_traceback(e), crashed="backend",
                       bucket=bucket("crash", facts.get("stage") or "?", facts["type"], runner.name,
                                     _message_head(facts["message"])))
        rec["duration_s"] = round(time.perf_counter() - t0, 6)
        return rec
    rec["backend_s"] = round(time.perf_counter() - t0, 6)
    verdict = explain_program(program, inputs, outs, runner, platform, reference=reference, case=case)
    rec.update({k: v for k, v in verdict.record.items() if k not in ("case", "runner", "timestamp", "seed")})
    if verdict.explained:
        rec["duration_s"] = round(time.perf_counter() - t0, 6)
        return rec
    rec["outcome"] = FAIL
    rec["backend_outputs"] = outs
    if verdict.culprit is not None:
        where = verdict.culprit.describe()
        where["found_by"] = "hybrid replay"
    elif localise and case.kind != suite.PALLAS:     # (a kernel's equations run inside it, not one by one)
        try:
            where = localize(fn, inputs, outs, runner, platform)
        except Exception as e:  # noqa: BLE001  (localisation is best effort: say why it failed)
            where = {"index": None, "symptom": "value", "error": f"{type(e).__name__}: {str(e)[:300]}"}
        if where.get("same_outputs"):
            # Level 3 explains it: the outputs are those of a compile in which every equation
            # complies on its own operands (an inexact operation fused differs from it alone).
            rec.pop("backend_outputs")
            rec.update(outcome=PASS_ALLOWANCE, allowance=PER_OPERATION + "(intermediates)",
                       duration_s=round(time.perf_counter() - t0, 6))
            where["explained"].apply(rec)
            return rec
        where.pop("explained", None)
    else:
        where = {"index": None}
    if where.get("primitive") is None:
        closed = jax.make_jaxpr(fn)(*inputs)
        failing = (rec.get("first_mismatch") or {}).get("output", 0) or 0
        prim, dtype = _output_primitive(closed, failing)
        where.setdefault("symptom", "value")
        where["output_primitive"], where["dtype"] = prim, dtype
        sym = symptom(reference[failing], outs[failing])
        sym = sym if prim == "pallas_call" else "fused-" + sym
        rec["bucket"] = bucket("fail", prim, dtype, runner.name, sym)
    else:
        rec["bucket"] = bucket("fail", where["primitive"], where["dtype"], runner.name, where["symptom"])
    rec["first_divergent_eqn"] = where
    rec["duration_s"] = round(time.perf_counter() - t0, 6)
    return rec


def _message_head(message: str) -> str:
    """The first line of an error message with numbers and names of values blurred: one bucket per
    kind of crash, not per program."""
    import re
    head = (message or "").strip().splitlines()[0] if message else ""
    head = re.sub(r"0x[0-9a-fA-F]+", "#", head)
    head = re.sub(r"\d+", "#", head)
    return head[:120]
