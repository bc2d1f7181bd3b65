"""The fuzzer's oracle, levels 1 and 2 (conformance/fuzz/oracle.py): one equation judged on the
backend's values, and a whole program explained from the reference, replayed exactly with the
runner's allowances and known divergences, and with the backend's inexact operations substituted
(each judged on its own first), their ulp neighbours where an output depends on one element."""
from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from conformance import allowance_models as AM
from spec import compliance as C
from spec import divergences as DV

from . import suite
from .suite import FAIL, GOOD, KNOWN_DIVERGENCE, PASS, PASS_ALLOWANCE, Case
from .equation import (PER_OPERATION, ULP_NEIGHBOURS, Culprit, _config, _signature, abs_bound, eqn_case,
                       eqn_function, eqn_modes, is_inexact, judged_as, operands, reference_eqn)
from .flow import (MAX_NEIGHBOUR_REPLAYS, SEVERAL_ELEMENTS, elementwise_sources, index_map,
                   shared_elements, terminal_operations)


def judge_eqn(eqn, invals, outs, runner, platform: str = "cpu", reference=None):
    """(explained, one-equation record, reference outputs): one equation's backend outputs ``outs``
    given its operands ``invals``. Control flow is judged as a program (its body equation by
    equation); anything else with the suite's compare: the equation's modes, the runner's
    allowances, the known divergences of its primitive."""
    from conformance.observe import holds_jaxprs
    if holds_jaxprs(eqn):
        v = explain_program(_one_eqn_program(eqn), invals, outs, runner, platform)
        return v.explained, v.record, v.reference
    ref = reference if reference is not None else reference_eqn(eqn, invals, platform)
    case = eqn_case(eqn)
    rec = suite.new_record(case=case.id, runner=runner.name, seed=0)
    with case.context(), np.errstate(all="ignore"):
        suite.compare(case, judged_as(runner), list(invals), ref, list(outs), rec, first_divergence=False)
    return rec["outcome"] in (PASS, PASS_ALLOWANCE, KNOWN_DIVERGENCE), rec, ref


@dataclasses.dataclass(frozen=True)
class _Program:
    """What explain_program judges: a function of the inputs."""
    fn: object


def _one_eqn_program(eqn) -> _Program:
    return _Program(eqn_function(eqn))


# --------------------------------------------------------------------------------------------
# Level 2: the reference with the backend's inexact operations
# --------------------------------------------------------------------------------------------
class Explanations:
    """How the equations judged on their own were explained: counts per (primitive, allowance or
    known divergence or "budget"), and the known divergences themselves."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.divergences: dict[str, dict] = {}

    def note(self, eqn, rec: dict) -> None:
        div = rec.get("known_divergence")
        if div:
            self.divergences.setdefault(div["id"], div)
        why = rec.get("allowance") or (div or {}).get("id") or "budget"
        key = f"{eqn.primitive.name}:{why}"
        self.counts[key] = self.counts.get(key, 0) + 1

    def apply(self, rec: dict) -> None:
        """A record explained with these: a known divergence where one was needed."""
        rec["explained_operations"] = self.counts
        if self.divergences:
            first = next(iter(self.divergences.values()))
            rec.update(outcome=KNOWN_DIVERGENCE, known_divergence=first,
                       known_divergences=sorted(self.divergences))


class _OpJudge:
    """Evaluates and judges the inexact operations of a hybrid replay (see the module docstring)."""

    def __init__(self, runner, platform: str):
        self.runner, self.platform = runner, platform
        self.explained = Explanations()           # how substituted operations were explained
        self._cache: dict = {}

    def backend(self, eqn, invals) -> list[np.ndarray]:
        h = hashlib.sha256()
        for v in invals:
            v = np.ascontiguousarray(v)
            h.update(str((v.dtype, v.shape)).encode())
            h.update(v.tobytes())
        key = (_signature(eqn), h.hexdigest())
        if key not in self._cache:
            case = eqn_case(eqn)
            self._cache[key] = [np.asarray(o) for o in suite.run(self.runner, case, [np.asarray(v) for v in invals])]
        return self._cache[key]

    def __call__(self, eqn, invals, reference) -> list:
        outs = self.backend(eqn, invals)
        ok, rec, _ = judge_eqn(eqn, invals, outs, self.runner, self.platform, reference=reference)
        if not ok:
            raise Culprit(eqn, list(invals), list(reference), outs, rec)
        self.explained.note(eqn, rec)
        return outs


def _widened(eqn):
    """The equation on float32 operands (None where it has literal operands or is not elementwise
    over one narrow float type): how a backend computes it in excess precision."""
    import jax
    import jax.extend.core as jcore
    from conformance.replay import SHADOWED
    if any(isinstance(a, jcore.Literal) for a in eqn.invars) or len(eqn.outvars) != 1:
        return None
    avals = [a.aval for a in eqn.invars]
    if any(np.dtype(a.dtype) not in SHADOWED for a in avals):
        return None
    fn = eqn_function(eqn)
    try:
        closed = jax.make_jaxpr(fn)(*[jax.ShapeDtypeStruct(a.shape, np.float32) for a in avals])
    except Exception:  # noqa: BLE001  (a primitive whose parameters fix the dtype: not widened)
        return None
    eqns = closed.jaxpr.eqns
    return eqns[0] if len(eqns) == 1 and eqns[0].primitive is eqn.primitive else None


def _hybrid_watcher(judge: _OpJudge, keep_reference: frozenset = frozenset(), bounds: dict | None = None,
                    moved: tuple | None = None, track: dict | None = None):
    """The hybrid replay's watcher: inexact operations from the backend (judged first), except
    those in ``keep_reference`` (ids of terminal operations), which keep the reference's value
    (and, for a sum, leave its DOT_PRODUCT bound on its operands in ``bounds``), and the one
    ``moved`` = (id, k) names, whose reference value is moved k ulp (elementwise_sources); with
    ``track``, every value computed from that one gets its :func:`index_map` there (by var)."""
    import jax.extend.core as jcore

    from conformance.checks import ulp_neighbour
    from conformance.observe import CALLS, call_body
    from conformance.replay import _Replay
    from interp.evaluator import split_jaxpr

    class Hybrid(_Replay):
        def step(self, ctx, rule, invals, params):
            body = call_body(ctx.eqn) if track is not None and ctx.name in CALLS else None
            if body is None:
                return super().step(ctx, rule, invals, params)
            inner = split_jaxpr(body)[0]        # a call passes index maps on, in and out
            for iv, a in zip(inner.invars, ctx.eqn.invars):
                if not isinstance(a, jcore.Literal) and a in track:
                    track[iv] = track[a]
                else:
                    track.pop(iv, None)
            result = super().step(ctx, rule, invals, params)
            for ov, iv in zip(ctx.eqn.outvars, inner.outvars):
                if not isinstance(iv, jcore.Literal) and iv in track:
                    track[ov] = track[iv]
            return result

        def eval_eqn(self, ctx, rule, invals, params):
            outs = self._value(ctx, rule, invals, params)
            if track is not None:
                eqn = ctx.eqn
                maps = [None if isinstance(a, jcore.Literal) else track.get(a) for a in eqn.invars]
                if id(eqn) == moved[0]:
                    track[eqn.outvars[0]] = np.arange(np.size(outs[0]), dtype=np.int32).reshape(np.shape(outs[0]))
                elif any(m is not None for m in maps):
                    track[eqn.outvars[0]] = index_map(eqn, maps, invals, judge.platform)
                else:
                    for ov in eqn.outvars:
                        track.pop(ov, None)
            return outs

        def _value(self, ctx, rule, invals, params):
            eqn = ctx.eqn
            if not is_inexact(eqn):
                return super().eval_eqn(ctx, rule, invals, params)
            if moved is not None and id(eqn) == moved[0]:
                return [ulp_neighbour(np.asarray(r), moved[1]) for r in super().eval_eqn(ctx, rule, invals, params)]
            if id(eqn) in keep_reference:
                ref = super().eval_eqn(ctx, rule, invals, params)
                ops = operands(eqn, invals)
                judge(eqn, ops, [np.asarray(r) for r in ref])    # judged all the same
                if bounds is not None and eqn_modes(eqn)[0].kind == C.DOT_PRODUCT:
                    bounds[id(eqn)] = abs_bound(eqn, ops)[0]
                return ref
            if self.v.excess:
                wide_eqn = _widened(eqn)
                if wide_eqn is not None:
                    # excess precision: the backend computes the operation in float32 on the
                    # float32 values its narrow operands were not rounded from
                    wide = [np.asarray(self.shadow.get(a, x), np.float32) for a, x in zip(eqn.invars, invals)]
                    out = judge(wide_eqn, wide, reference_eqn(wide_eqn, wide, judge.platform))[0]
                    self.shadow[eqn.outvars[0]] = out
                    return [np.asarray(out).astype(eqn.outvars[0].aval.dtype)]
            ref = super().eval_eqn(ctx, rule, invals, params)
            return judge(eqn, operands(eqn, invals), [np.asarray(r) for r in ref])
    return Hybrid


@dataclasses.dataclass
class ProgramVerdict:
    explained: bool
    record: dict
    reference: list
    culprit: Culprit | None = None


def explain_program(program, inputs, outs, runner, platform: str = "cpu", reference=None,
                    case: Case | None = None) -> ProgramVerdict:
    """Levels 1 and 2 of the module docstring for ``program`` (anything with ``fn``) on ``inputs``
    with the backend's outputs ``outs``."""
    import jax
    import jax.extend.core as jcore

    from conformance import checks
    from conformance.replay import Variant, program_ops, reference_replay, scatter_candidates
    from interp.evaluator import split_jaxpr
    fn = program.fn
    case = case or Case(id="fuzz-program", fn=fn, inputs=lambda rng: [], modes=C.exact("definition"),
                        x64=bool(jax.config.jax_enable_x64), jax_config=_config())
    rec = suite.new_record(case=case.id, runner=runner.name, seed=0)
    with np.errstate(all="ignore"):
        closed = jax.make_jaxpr(fn)(*inputs)
        if reference is None:
            import interp
            reference = [np.asarray(r) for r in interp.eval_jaxpr(closed, *inputs, platform=platform)]
        # Level 1: the whole program exactly, with the runner's allowances (no known divergence is
        # looked up for a whole program: the entries describe one primitive's results).
        # (a kernel program is compared as the function it is under interpret=True, so that the
        # runner's allowances are replayed through the kernel's equations too)
        whole = dataclasses.replace(case, kind=suite.LAX, build=None) if case.kind == suite.PALLAS else case
        suite.compare(whole, judged_as(runner), list(inputs), reference, list(outs), rec, first_divergence=False)
        if rec["outcome"] in GOOD:
            return ProgramVerdict(True, rec, reference)
        if case.kind == suite.PALLAS:
            # A generated kernel is defined bit for bit (conformance/fuzz/families/pallas.py) and
            # judged whole: a known divergence of kernels (primitive pallas_call) explains it.
            return ProgramVerdict(rec["outcome"] == KNOWN_DIVERGENCE, rec, reference)
        ops = program_ops(closed)
        exact_only = not _has_inexact(closed)      # level 2 can only replay the divergences' folds
        if exact_only and not _divergence_replays(judged_as(runner), ops):
            return ProgramVerdict(False, rec, reference)
        # Level 2: the backend's inexact operations, judged one by one, and the rest exactly.
        judge = _OpJudge(runner, platform)
        terminal = terminal_operations(closed)
        watchers = [_hybrid_watcher(judge)]
        sum_bounds: dict = {}
        if terminal["eqns"]:
            watchers.append(_hybrid_watcher(judge, frozenset(terminal["eqns"]), sum_bounds))

        sources = elementwise_sources(closed)

        def hybrid(variant: dict | None, moved: tuple | None = None, track: dict | None = None) -> list[tuple]:
            """[(replay with every inexact operation from the backend, the same with the terminal
            operations' reference values, or None)] per scatter candidate; with ``moved`` = (id, k),
            [(the replay with that operation's reference value moved k ulp, None)] (and the index
            maps of the values computed from it in ``track``)."""
            fields = {k: v for k, v in (variant or {}).items() if k != "scatter_winner"}
            runs = []
            for w in ([_hybrid_watcher(judge, moved=moved, track=track)] if moved else watchers):
                if variant and "scatter_winner" in variant:
                    runs.append(scatter_candidates(closed, list(inputs), Variant(**fields), watcher=w))
                else:
                    runs.append([reference_replay(closed, list(inputs), Variant(**fields), watcher=w)[0]])
            return list(zip(runs[0], runs[1] if len(runs) > 1 else [None] * len(runs[0])))

        try:
            base = hybrid(None)
        except Culprit as c:
            rec.update(outcome=FAIL, detail=f"{c.eqn.primitive.name}: its backend value fails its own "
                                           f"judgement ({c.record.get('detail')})")
            return ProgramVerdict(False, rec, reference, c)
        replays: dict = {}
        neighbours: dict = {}           # name -> (the replays with one elementwise source moved, labels)
        by_neighbours: set = set()      # the names explained only with them
        program_outvars = split_jaxpr(closed)[0].outvars

        def neighbour_replays(variant) -> tuple[list, dict]:
            """(the replays with one elementwise source moved k ulp, for every |k| up to its budget
            and at most MAX_NEIGHBOUR_REPLAYS in all; {output index: flat labels of its elements,
            equal where they share an element of a source}). Where an output element depends on
            several elements of one source (which, the map does not say), that whole output is one
            group."""
            runs, maps, count = [], {}, 0
            for eqn_id, budget in sources.items():
                track: dict = {}
                mine = []
                for k in range(-budget, budget + 1):   # (k = 0: the reference's value, not the backend's alone)
                    if count == MAX_NEIGHBOUR_REPLAYS:
                        break
                    count += 1
                    try:
                        mine += hybrid(variant, (eqn_id, k), track)
                    except Exception:  # noqa: BLE001  (Culprit included: that value explains nothing)
                        pass
                reached = [(i, track[v].reshape(-1)) for i, v in enumerate(program_outvars)
                           if not isinstance(v, jcore.Literal) and v in track]
                if mine and reached:
                    runs += mine
                    for i, m in reached:
                        maps.setdefault(i, []).append(np.zeros_like(m) if (m == SEVERAL_ELEMENTS).any() else m)
            return runs, {i: shared_elements(ms) for i, ms in maps.items()}

        def complies(pairs, mode_change, labels: dict | None = None) -> bool:
            """Whether every output element is what one of the replays ``pairs`` gives; the elements
            ``labels`` groups (sharing an element of a moved source) all by the same replay."""
            for i, out in enumerate(outs):
                exact = C.exact("definition")
                exact = mode_change(exact) if mode_change else exact
                ok = np.zeros(np.shape(out), bool)
                label = (labels or {}).get(i)
                for sub, kept in pairs:
                    this = checks.complies(exact, sub[i], out)
                    if kept is not None and i in terminal["outputs"]:
                        this = this | checks.complies(C.ulp(terminal["outputs"][i], "spec-semantics"), kept[i], out)
                    if kept is not None and i in terminal["sums"]:
                        eqn_id, mode = terminal["sums"][i]
                        if eqn_id in sum_bounds:
                            this = this | checks.complies(mode, kept[i], out, bound=sum_bounds[eqn_id])
                    if label is not None:
                        failed = np.bincount(label, weights=~np.reshape(this, -1), minlength=label.size)
                        this = np.reshape(failed[label] == 0, np.shape(out))
                    ok |= this
                if not ok.all():
                    return False
            return True

        def attempt(variant, mode_change, name) -> bool:
            pairs = list(base)
            if variant:
                if name not in replays:
                    try:
                        replays[name] = hybrid(variant)
                    except Exception:  # noqa: BLE001  (Culprit included: that replay explains nothing)
                        replays[name] = None
                if replays[name] is None and mode_change is None:
                    return False
                pairs += replays[name] or []
            if complies(pairs, mode_change):
                return True
            if not sources:
                return False
            if name not in neighbours:
                neighbours[name] = neighbour_replays(variant)
            runs, labels = neighbours[name]
            if runs and complies(pairs + runs, mode_change, labels):
                by_neighbours.add(name)
                return True
            return False

        found = None
        name = PER_OPERATION if attempt(None, None, "") else None
        if name is None and not exact_only:
            found = AM.explain(judged_as(runner), attempt, ops)
            name = f"{PER_OPERATION}+{found}" if found else None
        divergences = _explained_by_divergences(judged_as(runner), attempt, ops) if name is None else []
        if divergences:
            div = DV.BY_ID[divergences[0]]
            rec.update(outcome=KNOWN_DIVERGENCE, allowance=None,
                       known_divergence={"id": div.id, "link": div.link, "summary": div.summary},
                       known_divergences=divergences,
                       detail="the program replayed with " + " and ".join(divergences) + " applied to every "
                              "equation it can (loop bodies included) gives the backend's outputs")
            return ProgramVerdict(True, rec, reference)
    if name is None:
        rec["detail"] = ("the backend's inexact operations each comply on their own, but the program's "
                         "outputs do not follow from them: " + str(rec.get("detail")))
        return ProgramVerdict(False, rec, reference)
    if name == PER_OPERATION and "" in by_neighbours or found and found in by_neighbours:
        # an elementwise source computed within its budget otherwise than alone (never observed)
        name = name.replace(PER_OPERATION, PER_OPERATION + ULP_NEIGHBOURS, 1)
    rec.update(outcome=PASS_ALLOWANCE, allowance=name)
    judge.explained.apply(rec)
    return ProgramVerdict(True, rec, reference)


# Known divergences of XLA:CPU that a whole-program replay applies (replay.Variant fields): an
# equation folded or rewritten where per-equation judgement cannot see it (a loop body, judged at
# the loop boundary; a fused producer never observed alone, moved within its budget by the
# neighbour replay). The primitives each needs in the program.
DIVERGENCE_REPLAYS = {
    "xla-cpu-add-zero-keeps-negative-zero": ("zero_added_kept", ("add", "sub")),
    "xla-cpu-divide-by-constant-as-reciprocal": ("reciprocal_division", ("div",)),
}


def _divergence_replays(runner: str, ops) -> list[str]:
    """The DIVERGENCE_REPLAYS entries for ``runner`` on the installed JAX that ``ops`` can meet."""
    import fnmatch

    import jax

    from spec.versions import version_in
    names = {op[0] for op in ops}
    return [i for i, (_, prims) in DIVERGENCE_REPLAYS.items()
            if any(fnmatch.fnmatchcase(runner, p) for p in DV.BY_ID[i].runners)
            and version_in(jax.__version__, DV.BY_ID[i].jax_versions) and names & set(prims)]


def _explained_by_divergences(runner: str, attempt, ops) -> list[str]:
    """The known divergences (ids) with which the whole program replayed (each one's Variant flag,
    loop bodies included), alone or with the runner's replay allowances, explains the outputs:
    each divergence alone, then all together; [] where none does."""
    ids = _divergence_replays(runner, ops)
    if not ids:
        return []
    replays = [a.variant for a in AM.for_runner(runner) if a.variant and AM.applies_to_program(a, ops)]
    merged: dict = {}
    for v in replays:
        merged.update(v)
    for chosen in [[i] for i in ids] + ([ids] if len(ids) > 1 else []):
        flags = {DIVERGENCE_REPLAYS[i][0]: True for i in chosen}
        for v in [{}] + replays + ([merged] if len(replays) > 1 else []):
            if attempt({**v, **flags}, None, f"{'+'.join(chosen)}+{sorted(v.items())}"):
                return chosen
    return []


def _has_inexact(closed) -> bool:
    def walk(j) -> bool:
        for eqn in j.eqns:
            if is_inexact(eqn):
                return True
            for v in eqn.params.values():
                for x in (v if isinstance(v, (tuple, list)) else (v,)):
                    inner = getattr(x, "jaxpr", x)
                    if hasattr(inner, "eqns") and walk(inner):
                        return True
        return False
    return walk(closed.jaxpr)
