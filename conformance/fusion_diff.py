"""Fused vs unfused: both programs evaluated by the reference, equation by equation, and the
first equation at which the fused program departs from the unfused one.

``fuser.fuse`` moves an input fusion and an epilogue into a ``pallas_call``: their equations are
re-traced inside the kernel on blocks (the fuser's eval rules), so the fused program holds, per
grid step, a block of every value the unfused program computes whole. ``diff`` evaluates both
programs in the reference's own evaluator, watching every equation (conformance.observe: the
plans' prepared rules, step hooks, parameter and result checks all apply), records every
intermediate value of the program (calls, the ``Fusible`` call and ``custom_fusion`` entered; a
``pallas_call``'s kernel body equation by equation at each grid step of the Pallas engine), and
pairs the equations of the two programs:

1. the kernel's own equations (the same code traced in both kernels) pair by primitive, dtype,
   shape and user source line (``source_info``), in order; a key whose count differs between the
   two kernels is ambiguous and is not paired this way;
2. every other equation of the fused kernel was pulled in from the program around the fusible
   call (the fuser re-traces it at the line where the kernel calls the fusion, so its source line
   says nothing about where it came from): it pairs with the next equation of the unfused program
   outside the fusible call with the same primitive and dtype, in program order, for which a block
   correspondence exists;
3. equations of the fused program outside the kernel pair by primitive and source line.

Block correspondence: at a grid step, the fused value is compared with the block of the unfused
value that the kernel step computes: the whole value when the shapes are equal; else the window
(at this step) of the operand whose array has the unfused value's shape and whose block has the
fused value's shape, among the fused call's operands and the unfused kernel's own operands (the
blocks the kernel declares). Several different windows (a transpose of a square array; a wrong
block-spec rule that reads a neighbouring block) are told apart by value: a candidate block equal
to the fused value is the one (never a false alarm for a correct fusion); when none is, the
declared window is reported with the other candidates. A value with no candidate is not compared
(listed in ``uncompared``).

The report names the first paired equation (fused program order; kernel equations at the first
grid step where they differ) whose values differ: primitive, both equations and source lines, the
grid step, the window, the first differing index in the block and both values there.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import jax
import jax.extend.core as jcore

from interp.options import Options

from spec import compliance as C

from . import checks
from .observe import CALLS, as_outputs, call_body, observe
from .replay import comparable, eqn_text

# Equations that read or write refs move data; the values they move are compared where they are
# computed (the fused kernel reads a block of the original input where the unfused kernel reads its
# fused-in operand: the reads differ by design).
REF_OPS = ("get", "swap", "addupdate", "program_id", "num_programs")
# Higher-order primitives whose body is recorded equation by equation instead of as one value
# (beyond the calls, conformance.observe.CALLS); the Fusible call of newer JAX is a HiPrim whose
# expansion holds an eval_jaxpr call.
FUSIBLE_CALLS = ("fusible", "call_hi_primitive", "custom_fusion")
ENTERED = FUSIBLE_CALLS + ("eval_jaxpr",)
# Their values are recorded where they are computed (inside the body / kernel).
NOT_RECORDED = ENTERED + ("pallas_call",)


def source_line(eqn) -> str:
    """'file:line:col (function)' of the innermost user frame that traced ``eqn``."""
    from jax._src import source_info_util
    si = getattr(eqn, "source_info", None)
    if si is None:
        return "?"
    try:
        return source_info_util.summarize(si) or "?"
    except Exception:  # noqa: BLE001  (a missing traceback must not hide the comparison)
        return "?"


@dataclasses.dataclass
class Site:
    """One output of one equation and the values it took: one per grid step inside a kernel."""
    eqn: Any
    out: int                         # which output of the equation
    where: str                       # "program", "fusible" (inside the Fusible call) or "kernel"
    order: int                       # position in evaluation order (first grid step for kernels)
    values: list = dataclasses.field(default_factory=list)   # (grid step or None, value)
    # per value: the kernel operands' blocks at its step, [(array shape, block shape, kinds, window)]
    windows: list = dataclasses.field(default_factory=list)

    @property
    def primitive(self) -> str:
        return self.eqn.primitive.name

    @property
    def aval(self):
        return self.eqn.outvars[self.out].aval

    def key(self):
        return (self.primitive, str(np.dtype(self.aval.dtype)), tuple(self.aval.shape), source_line(self.eqn))


class _Recorder:
    """Watches the reference evaluate a program (conformance.observe: every equation goes through
    the evaluator's plans) and records every comparable value of the equations the comparison
    pairs: the program's own, with calls, the Fusible call and custom_fusion entered, and a
    pallas_call's kernel body at every grid step. Any other equation that evaluates something
    inside (a loop, a conditional, a custom rule, the kernel's index maps) is one value: what runs
    inside it goes through the same evaluator, unrecorded."""

    def __init__(self):
        self.sites: list[Site] = []
        self._where = ["program"]
        self._inside = 0    # > 0 while an equation whose inner equations are not recorded runs
        # While a kernel step runs: the position of the next value in the step, the grid step and
        # the operands' windows; the kernel's sites by position (the same at every step).
        self._kernel: dict | None = None
        self._kernel_sites: dict[int, Site] = {}
        self._order = 0

    def step(self, ctx, rule, invals, params):
        if self._inside:
            return rule(ctx, *invals, **params)
        name = ctx.name
        if name in ENTERED or (name in CALLS and call_body(ctx.eqn) is not None):
            return self._enter(ctx, rule, invals, params)
        if name == "pallas_call" and self._kernel is None:
            return self._pallas_call(ctx, rule, invals, params)
        self._inside += 1
        try:
            result = rule(ctx, *invals, **params)
        finally:
            self._inside -= 1
        self._record(ctx.eqn, as_outputs(ctx, result))
        return result

    def _enter(self, ctx, rule, invals, params):
        """A call, the Fusible call or a custom_fusion: its body's equations are recorded as they
        run. Entering the Fusible call from the program marks its body; other bodies inherit."""
        outer = self._where[-1]
        self._where.append("fusible" if outer == "program" and ctx.name in ("fusible", "call_hi_primitive")
                           else outer)
        try:
            return rule(ctx, *invals, **params)
        finally:
            self._where.pop()

    def _pallas_call(self, ctx, rule, invals, params):
        """The pallas_call rule runs the call; at each grid step the kernel body runs its generic
        plan (every equation of the kernel, not the residual program of a specialised grid point:
        the same values, interp/pallas/specialize.py) with the step and the operands' windows
        noted, and its equations are recorded."""
        from interp.rules.pallas import call_plan
        plan = call_plan(ctx)   # the plan the rule runs (one per equation)
        specialised = plan.body
        plan.body = _KernelSteps(self, plan, specialised)
        self._kernel_sites = {}
        self._inside += 1   # the engine's own evaluations (index maps) are not program values
        try:
            return rule(ctx, *invals, **params)
        finally:
            self._inside -= 1
            plan.body = specialised

    def _record(self, eqn, outs) -> None:
        for i, (ov, o) in enumerate(zip(eqn.outvars, outs)):
            if isinstance(ov, jcore.DropVar) or not comparable(ov.aval) or \
                    not isinstance(o, (np.ndarray, np.generic)) or eqn.primitive.name in NOT_RECORDED:
                continue
            value = np.array(o, copy=True)   # kernel values may be views of buffers written later
            k = self._kernel
            if k is None:
                self.sites.append(Site(eqn, i, self._where[-1], self._next_order(), [(None, value)], [None]))
                continue
            pos = k["pos"]
            k["pos"] += 1
            site = self._kernel_sites.get(pos)
            if site is None:
                site = self._kernel_sites[pos] = Site(eqn, i, "kernel", self._next_order())
                self.sites.append(site)
            site.values.append((k["step"], value))
            site.windows.append(k["windows"])

    def _next_order(self) -> int:
        self._order += 1
        return self._order


class _KernelSteps:
    """Stands in for a call plan's kernel body while the recorder watches it: the engine calls
    ``body.run(run, args)`` once per grid step."""

    def __init__(self, recorder: _Recorder, plan, body):
        self.recorder, self.plan, self.body = recorder, plan, body

    def run(self, run, args):
        r, plan = self.recorder, self.plan
        scalars = args[:plan.num_scalars]
        windows = [(bp.array_shape, bp.block_shape, bp.kinds, bp.window(run.point, scalars, run.grid))
                   for bp in plan.blocks if not bp.whole]
        r._kernel = {"pos": 0, "step": tuple(int(i) for i in run.point), "windows": windows}
        r._where.append("kernel")
        inside, r._inside = r._inside, 0
        try:
            return self.body.generic.run(self.body.consts, args)
        finally:
            r._inside = inside
            r._where.pop()
            r._kernel = None


def record(fn, args, options: Options | None = None) -> tuple[list, list[Site]]:
    """(outputs, sites) of ``fn(*args)`` evaluated by the reference."""
    flat = jax.tree.leaves(args)
    closed = jax.make_jaxpr(fn)(*args)
    recorder = _Recorder()
    outs = observe(closed, flat, recorder, key="fusion_diff", options=options)
    return [np.asarray(o) for o in outs], recorder.sites


# ---------------------------------------------------------------------------------- pairing
def _candidates(unfused: np.ndarray, fused: np.ndarray, windows) -> dict:
    """{window: block of ``unfused``} for every kernel operand (in ``windows``) whose array has the
    unfused value's shape and whose block has the fused value's shape, fully inside the array."""
    found = {}
    for array_shape, block_shape, kinds, win in windows or ():
        if tuple(array_shape) != unfused.shape:
            continue
        if tuple(s for s, k in zip(block_shape, kinds) if k[0] != "squeezed") != fused.shape:
            continue
        if any(start < 0 or start + size > n for (start, size), n in zip(win, array_shape)):
            continue   # a partial edge block: its out-of-array part is not the unfused value's
        index = tuple(start if k[0] == "squeezed" else slice(start, start + size)
                      for (start, size), k in zip(win, kinds))
        found.setdefault(tuple(win), unfused[index])
    return found


def _block(unfused: np.ndarray, fused: np.ndarray, windows, declared=None):
    """(block of ``unfused`` the kernel step computes as ``fused``, its window, other candidate
    windows), or (None, why, ()).

    Candidates come from the fused call's operands (``windows``) and the unfused kernel's own
    operands at the same step (``declared``: the blocks the kernel says it computes). One
    candidate window is the answer. Several (a transpose of a square array reads its input at
    (j, i) while the kernel computes (i, j); a wrong block-spec rule reads a wrong block) are told
    apart by value: the candidate block equal to the fused value, if any (no false alarm for a
    correct fusion); else the declared window, and the report lists the other candidates."""
    if unfused.shape == fused.shape:
        return unfused, None, ()
    if windows is None:
        return None, "shapes differ outside a kernel", ()
    found = _candidates(unfused, fused, windows)
    mine = _candidates(unfused, fused, declared)
    found.update(mine)
    if not found:
        return None, "no kernel operand has this value's shape and block", ()
    if len(found) == 1:
        (win, block), = found.items()
        return block, win, ()
    for win, block in found.items():
        if _first_difference(fused, block)[0] == 0:
            return block, win, tuple(w for w in found if w != win)
    win = next(iter(mine)) if mine else next(iter(found))
    return found[win], win, tuple(w for w in found if w != win)


def _declared_windows(unfused: list[Site]) -> dict:
    """{grid step: the unfused kernel's operand windows at that step} (the blocks the kernel
    itself says each step computes, before any fusion)."""
    out: dict = {}
    for s in unfused:
        if s.where == "kernel":
            for (step, _), w in zip(s.values, s.windows):
                out.setdefault(step, w)
    return out


def _pair(fused: list[Site], unfused: list[Site], declared: dict) -> list[tuple[Site, Site]]:
    pairs = []
    u_kernel = [s for s in unfused if s.where == "kernel" and s.primitive not in REF_OPS]
    f_kernel = [s for s in fused if s.where == "kernel" and s.primitive not in REF_OPS]
    # 1. the kernel's own equations: same code, same source line.
    by_key: dict = {}
    for s in u_kernel:
        by_key.setdefault(s.key(), []).append(s)
    f_by_key: dict = {}
    for s in f_kernel:
        f_by_key.setdefault(s.key(), []).append(s)
    own = set()
    for key, fs in f_by_key.items():
        us = by_key.get(key, [])
        if us and len(us) == len(fs):
            for f, u in zip(fs, us):
                pairs.append((f, u))
                own.add(id(f))
    # 2. equations pulled into the kernel from the program around the fusible call.
    candidates = [s for s in unfused if s.where == "program" and s.primitive not in REF_OPS]
    at = 0
    for f in f_kernel:
        if id(f) in own:
            continue
        fv = f.values[0][1]
        for j in range(at, len(candidates)):
            u = candidates[j]
            if u.primitive != f.primitive or np.dtype(u.aval.dtype) != np.dtype(f.aval.dtype):
                continue
            if _block(u.values[0][1], fv, f.windows[0], declared.get(f.values[0][0]))[0] is None:
                continue
            pairs.append((f, u))
            at = j + 1
            break
    # 3. the fused program outside its kernels.
    outside = {}
    for s in unfused:
        if s.where != "kernel":
            outside.setdefault((s.primitive, source_line(s.eqn)), []).append(s)
    for f in fused:
        if f.where != "kernel":
            us = outside.get((f.primitive, source_line(f.eqn)), [])
            if len(us) == 1 and us[0].aval.shape == f.aval.shape:
                pairs.append((f, us[0]))
    pairs.sort(key=lambda p: p[0].order)
    return pairs


def _first_difference(fused, unfused):
    """(number of differing elements, first differing index or None): EXACT (bitwise, NaN
    payloads normalised), with the unfused value as the reference side."""
    res = checks.check(C.exact(), np.asarray(unfused), np.asarray(fused))
    if res.passed:
        return 0, None
    first = res.first_mismatch
    return max(res.mismatches, 1), (tuple(first["index"]) if first else None)


def _scalar(x) -> Any:
    x = np.asarray(x)
    return x.item() if x.dtype.kind in "biuf" else float(x.astype(np.float64))


def _describe(site: Site) -> dict:
    return {"primitive": site.primitive, "eqn": eqn_text(site.eqn), "source": source_line(site.eqn),
            "where": site.where}


def diff(fused_fn, unfused_fn, args, *, options: Options | None = None) -> dict:
    """The report of :func:`run_both` alone."""
    return run_both(fused_fn, unfused_fn, args, options=options)[0]


def run_both(fused_fn, unfused_fn, args, *, options: Options | None = None) -> tuple[dict, list, list]:
    """Evaluate both programs in the reference and compare them: (report, fused outputs, unfused
    outputs).

    Returns ``{"agree", "outputs", "first_differing_eqn", "compared", "uncompared"}``:
    ``agree`` is True when every output is bitwise equal (NaNs equal); ``outputs`` lists each
    output's mismatch count and first differing index with both values; ``first_differing_eqn``
    (None when every paired intermediate agrees) names the first equation whose fused values
    differ from the corresponding block of the unfused values; ``compared`` counts the paired
    equations, ``uncompared`` lists the fused equations nothing was compared with (and why)."""
    f_outs, f_sites = record(fused_fn, args, options)
    u_outs, u_sites = record(unfused_fn, args, options)
    report: dict = {"outputs": [], "first_differing_eqn": None}
    agree = len(f_outs) == len(u_outs)
    for i, (f, u) in enumerate(zip(f_outs, u_outs)):
        n, idx = _first_difference(f, u)
        entry = {"output": i, "mismatches": n}
        if n:
            agree = False
            entry.update(index=None if idx is None else list(idx),
                         fused=None if idx is None else _scalar(f[idx]),
                         unfused=None if idx is None else _scalar(u[idx]))
        report["outputs"].append(entry)
    report["agree"] = agree

    declared = _declared_windows(u_sites)
    pairs = _pair(f_sites, u_sites, declared)
    paired = {id(f) for f, _ in pairs}
    uncompared = [{"eqn": eqn_text(s.eqn), "why": "no corresponding unfused equation"}
                  for s in f_sites if id(s) not in paired and s.primitive not in REF_OPS]
    compared = 0
    for f, u in pairs:
        u_steps = {step: v for step, v in u.values}
        for (step, fv), windows in zip(f.values, f.windows):
            if f.where == "kernel" and u.where == "kernel":
                if step not in u_steps:
                    continue
                uv, win, others = u_steps[step], None, ()
            else:
                uv, win, others = _block(u.values[0][1], fv, windows, declared.get(step))
                if uv is None:
                    uncompared.append({"eqn": eqn_text(f.eqn), "step": step, "why": win})
                    continue
            compared += 1
            n, idx = _first_difference(fv, uv)
            if n and report["first_differing_eqn"] is None:
                report["first_differing_eqn"] = {
                    "fused": _describe(f), "unfused": _describe(u), "primitive": f.primitive,
                    "block": list(step) if step is not None else None,
                    "window": [list(w) for w in win] if win is not None else None,
                    "other_windows": [[list(w) for w in o] for o in others],
                    "mismatches": n, "block_size": int(np.size(fv)),
                    "index": None if idx is None else list(idx),
                    "fused_value": None if idx is None else _scalar(np.asarray(fv)[idx]),
                    "unfused_value": None if idx is None else _scalar(np.asarray(uv)[idx])}
    report["compared"] = compared
    report["pairs"] = len(pairs)
    report["uncompared"] = uncompared
    return report, f_outs, u_outs


def format_report(report: dict) -> str:
    """A few lines for a failure message."""
    lines = ["fused and unfused agree" if report["agree"] else "fused and unfused DIFFER"]
    for o in report["outputs"]:
        if o["mismatches"]:
            lines.append(f"  output {o['output']}: {o['mismatches']} elements differ, first at "
                         f"{o['index']}: fused {o['fused']!r}, unfused {o['unfused']!r}")
    d = report["first_differing_eqn"]
    if d is not None:
        lines.append(f"  first differing equation: {d['primitive']} at grid step {d['block']} "
                     f"(window {d['window']}), {d['mismatches']}/{d['block_size']} elements, first at "
                     f"{d['index']}: fused {d['fused_value']!r}, unfused {d['unfused_value']!r}")
        if d["other_windows"]:
            lines.append(f"    (no block of the unfused value matches; other candidate windows "
                         f"{d['other_windows']})")
        lines.append(f"    fused:   {d['fused']['eqn']}  [{d['fused']['source']}]")
        lines.append(f"    unfused: {d['unfused']['eqn']}  [{d['unfused']['source']}]")
    lines.append(f"  {report['pairs']} equations paired, {report['compared']} block comparisons, "
                 f"{len(report['uncompared'])} fused values not compared")
    return "\n".join(lines)


def diff_case(case_id: str, seed: int = 0) -> dict:
    """The report for a fuser conformance case (``fusion/fuser/<name>`` or
    ``fusion/fuser_unfused/<name>``): its fused and unfused programs on the case's inputs."""
    from .case import rng_for
    from .cases import fusion as F
    name = case_id.rstrip("/").rsplit("/", 1)[-1]
    if name not in F.FUSER_PROGRAMS:
        raise KeyError(f"{case_id!r} is not a fuser case (known: {', '.join(F.FUSER_PROGRAMS)})")
    args = F.FUSER_PROGRAMS[name][1](rng_for(f"fusion/fuser/{name}", seed))
    return diff(F.fuser_program(name), F.fuser_program(name, fused=False), args)


def main(argv=None) -> int:
    """``python -m conformance.fusion_diff CASE_ID [--seed S]``: print the report; exit status 1
    when fused and unfused differ."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m conformance.fusion_diff", description=main.__doc__)
    p.add_argument("case_id")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    report = diff_case(a.case_id, a.seed)
    print(format_report(report))
    return 0 if report["agree"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
