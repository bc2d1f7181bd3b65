"""The fuzzer's oracle, level 3 (conformance/fuzz/oracle.py): localisation on the backend's own
intermediate values, each equation judged on the backend's operands; the first that fails is the
divergent equation."""
from __future__ import annotations

import numpy as np

from interp import dtypes as D
from conformance import allowance_models as AM

from . import suite
from .suite import Case
from .equation import _brief, _config, judged_as, operands, reference_eqn, symptom
from .program import Explanations, judge_eqn


# --------------------------------------------------------------------------------------------
# Level 3: localisation on the backend's own intermediate values
# --------------------------------------------------------------------------------------------
def _intermediates_fn(closed):
    """(f, layout): f(*inputs) -> every comparable value of every top-level equation (calls
    entered), and layout: id(equation) -> per evaluation of it (a function called twice has its
    equations evaluated twice), in order, the positions of its outputs among them (None where an
    output is not comparable: refs, keys)."""
    from conformance.observe import CALLS, call_body
    from conformance.replay import comparable, walk_inlining_calls
    from interp.evaluator import split_jaxpr
    jaxpr, consts = split_jaxpr(closed)
    layout: dict = {}
    count = [0]

    def plan(j):
        for eqn in j.eqns:
            sub = call_body(eqn) if eqn.primitive.name in CALLS else None
            if sub is not None:
                plan(split_jaxpr(sub)[0])
                continue
            pos = []
            for ov in eqn.outvars:
                pos.append(count[0] if comparable(ov.aval) else None)
                count[0] += comparable(ov.aval)
            layout.setdefault(id(eqn), []).append(pos)
    plan(jaxpr)

    def f(*args):
        rec: list = []

        def eval_eqn(eqn, invals):
            outs = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(eqn.params))
            outs = list(outs) if eqn.primitive.multiple_results else [outs]
            rec.extend(o for ov, o in zip(eqn.outvars, outs) if comparable(ov.aval))
            return outs
        walk_inlining_calls(jaxpr, consts, args, eval_eqn, lambda lit: lit.val)
        return tuple(rec)
    return f, layout


def _arrays_only(vals) -> bool:
    return all(isinstance(v, (np.ndarray, np.generic)) for v in vals)


def _localizer(got: list, layout: dict, runner, platform: str, found: dict, explained: Explanations):
    """A replay watcher (conformance/observe.py) that hands every top-level equation (calls entered)
    the backend's recorded values in place of the reference's, after judging them on the operands
    the backend itself had: the first that fails is stored in ``found``."""
    from conformance.observe import as_outputs
    from conformance.replay import _Replay, eqn_text

    class Localizer(_Replay):
        count = 0

        def step(self, ctx, rule, invals, params):
            eqn = ctx.eqn
            top = self.record_eqns is not None and id(eqn) in self.record_eqns
            result = super().step(ctx, rule, invals, params)
            if not top:
                return result
            ref = as_outputs(ctx, result)
            pending = layout.get(id(eqn))
            pos = pending.pop(0) if pending else [None] * len(ref)
            outs = [r if q is None else np.asarray(got[q]) for q, r in zip(pos, ref)]
            k, Localizer.count = Localizer.count, Localizer.count + 1
            if not found and any(q is not None for q in pos):
                ref_arrays = [np.asarray(r) for r in ref]
                ops = operands(eqn, invals)
                if _arrays_only(ops):
                    ok, rec, _ = judge_eqn(eqn, ops, outs, runner, platform,
                                           reference=None if _has_jaxprs(eqn) else ref_arrays)
                else:       # state: an access to a ref moves bits, judged exactly
                    ok = all(_same_bits(r, o) for r, o in zip(ref_arrays, outs))
                    rec = {"modes": ["EXACT"], "detail": "a ref access (exact)"}
                if ok:
                    explained.note(eqn, rec)
                else:
                    ok = self._wider_allowance(eqn, invals, outs)
                if not ok:
                    failing = next((i for i, (r, o) in enumerate(zip(ref_arrays, outs)) if not _same_bits(r, o)), 0)
                    found.update(index=k, primitive=eqn.primitive.name, eqn=eqn_text(eqn),
                                 dtype=str(getattr(eqn.outvars[failing].aval, "dtype", "")),
                                 mode=(rec.get("modes") or [None])[0], max_ulp=rec.get("max_ulp"),
                                 first_mismatch=rec.get("first_mismatch"),
                                 symptom=symptom(ref_arrays[failing], outs[failing]),
                                 operands=[_brief(v) for v in invals if isinstance(v, (np.ndarray, np.generic))],
                                 detail=rec.get("detail"))
            if eqn.primitive.name in ("mul", "square", "integer_pow"):
                self._note_product(eqn, list(invals), np.asarray(outs[0]))
            self._operands[id(eqn)] = list(invals)
            return outs if eqn.primitive.multiple_results else outs[0]

        def _wider_allowance(self, eqn, invals, outs) -> bool:
            """The runner's allowances that span two equations, on the backend's own operands:
            every element of the equation is its own value, or (fma-contraction) the FMA of a
            float32/float64 product feeding an add/sub with the other operand, or (algebraic-rewrite)
            log(exp(x)) = x, sqrt(x * x) = |x|."""
            name = eqn.primitive.name
            allowed = {a.name for a in AM.for_runner(judged_as(runner))}
            if len(outs) != 1 or name not in ("add", "sub", "mul", "div", "log", "sqrt"):
                return False
            out = np.asarray(outs[0])
            plain = np.asarray(reference_eqn(eqn, operands(eqn, invals), platform)[0])
            ok = _same_elements(plain, out)
            if "excess-precision" in allowed and name in ("add", "sub", "mul", "div"):
                ok = ok | _within_excess_interval(name, operands(eqn, invals), out)
                if ok.all():
                    return True
            if name in ("mul", "div"):
                return False
            if name in ("log", "sqrt"):
                rewritten = self._rewrite(eqn, list(invals)) if "algebraic-rewrite" in allowed else None
                return rewritten is not None and bool((ok | _same_elements(rewritten[0], out)).all())
            if np.dtype(eqn.outvars[0].aval.dtype) not in (np.float32, np.float64) or "fma-contraction" not in allowed:
                return False
            for i in (0, 1):
                fused = self.fma_candidate(eqn, list(invals), i)
                if fused is not None:
                    ok = ok | _same_elements(np.broadcast_to(fused, out.shape), out)
            return bool(ok.all())
    return Localizer


def _within_excess_interval(name: str, args, out) -> np.ndarray:
    """Per element: a float16/bfloat16 add, sub, mul or div whose result is what some values of
    its operands within half an ulp of them give (an operand kept in float32, never rounded to its
    type: the excess-precision allowance). The extremes of these bilinear (for div: monotone,
    divisor away from zero) functions lie at the corners of the operands' intervals."""
    from conformance.replay import SHADOWED
    out = np.asarray(out)
    if out.dtype not in SHADOWED or len(args) != 2:
        return np.zeros(out.shape, bool)
    corners = []
    intervals = []
    for a in args:
        a = np.broadcast_to(np.asarray(a), out.shape)
        wide = a.astype(np.float64)
        with np.errstate(all="ignore"):
            half = np.abs(np.spacing(a).astype(np.float64)) / 2 if a.dtype != D.bfloat16 else \
                np.abs(wide) * 2.0 ** -8 + 2.0 ** -134
        intervals.append((wide - half, wide + half))
    with np.errstate(all="ignore"):
        for x in intervals[0]:
            for y in intervals[1]:
                corners.append({"add": x + y, "sub": x - y, "mul": x * y, "div": x / y}[name])
        lo, hi = np.minimum.reduce(corners), np.maximum.reduce(corners)
        if name == "div":
            lo_y, hi_y = intervals[1]
            straddles = (lo_y <= 0) & (hi_y >= 0)
            lo, hi = np.where(straddles, -np.inf, lo), np.where(straddles, np.inf, hi)
        o = out.astype(np.float64)
        inside = (o >= lo.astype(out.dtype).astype(np.float64)) & (o <= hi.astype(out.dtype).astype(np.float64))
    finite = np.all([np.isfinite(np.asarray(a, np.float64)) for a in np.broadcast_arrays(*args)], axis=0)
    return inside & finite & np.isfinite(o)


def _same_elements(a, b) -> np.ndarray:
    from conformance.values import bits, normalize_nans
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    return bits(normalize_nans(a)) == bits(normalize_nans(b))


def _has_jaxprs(eqn) -> bool:
    from conformance.observe import holds_jaxprs
    return holds_jaxprs(eqn)


def localize(fn, inputs, outs, runner, platform: str = "cpu") -> dict:
    """The first equation whose backend value (in a compile of the program that keeps every
    intermediate value) fails its judgement on the backend's own operands; or, where none does, a
    note saying whether that compile's outputs are the program's (then every equation complies:
    the program is explained) or not (the difference comes from how the whole program is compiled).

    The reference evaluates the program (refs and all) with each top-level equation's value
    replaced by the backend's recorded one once it has been judged."""
    import jax

    from conformance.replay import reference_replay
    closed = jax.make_jaxpr(fn)(*inputs)
    fn_all, layout = _intermediates_fn(closed)
    case = Case(id="fuzz-intermediates", fn=fn_all, inputs=lambda rng: [],
                x64=bool(jax.config.jax_enable_x64), jax_config=_config())
    got = list(suite.run(runner, case, list(inputs)))
    found: dict = {}
    explained = Explanations()
    with np.errstate(all="ignore"):
        finals = reference_replay(closed, list(inputs), record=True,
                                  watcher=_localizer(got, layout, runner, platform, found, explained))[0]
    if found:
        return found
    same = all(_same_bits(a, b) for a, b in zip(finals, outs))
    return {"index": None, "symptom": "fused", "same_outputs": same, "explained": explained,
            "note": "every equation complies on the backend's own operands when the program keeps its "
                    "intermediate values" + (", and that compile gives the program's outputs" if same else
                                             ", but that compile's outputs differ from the program's: the "
                                             "difference comes from how the whole program is compiled "
                                             "(fusion, rewrites)")}


def _same_bits(a, b) -> bool:
    from conformance.values import bits, normalize_nans
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.all(bits(normalize_nans(a)) == bits(normalize_nans(b))))
