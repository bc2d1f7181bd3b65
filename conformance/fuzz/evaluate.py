"""One test case (a program and its inputs) through the reference and each runner: the records.

The reference runs once per test case; its failures are the reference's findings (a program the
generator made that the reference rejects: an unsupported primitive, undefined behaviour it
detects, or its own crash), never a backend's. Each runner's outputs are then judged by the oracle.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from spec import compliance as C

from . import ir, oracle, render
from .shrink import TestCase
from .suite import BACKEND_UNSUPPORTED, CRASH, PALLAS, REFERENCE_UNSUPPORTED, Case, new_record, short_traceback


def case_for(program: ir.Program, case_id: str) -> Case:
    if render.is_kernel(program):
        from .families.pallas import targets
        build = render.builder(program)
        return Case(id=case_id, fn=render.function(program), inputs=lambda rng: [], modes=C.exact("definition"),
                    kind=PALLAS, build=build, pallas_targets=targets(program), x64=program.x64,
                    jax_config=tuple(program.config), primitives=kernel_primitives(program))
    return Case(id=case_id, fn=render.function(program), inputs=lambda rng: [], modes=C.exact("definition"),
                x64=program.x64, jax_config=tuple(program.config), needs=_device_needs(program))


def _device_needs(program: ir.Program) -> frozenset:
    """"devices:N" for a program over a mesh of N devices (runners with fewer say so)."""
    return frozenset({f"devices:{program.devices}"}) if program.devices > 1 else frozenset()


def why_not_here(program: ir.Program) -> str:
    """Why this process cannot run the program at all (empty if it can): an API the installed JAX
    lacks, or fewer devices than its mesh (the rendered program builds a Mesh of real devices)."""
    why = render.why_not_renderable(program)
    if why or program.devices <= 1:
        return why
    import jax
    have = len(jax.devices())
    if have < program.devices:
        return (f"needs {program.devices} devices; jax.devices() has {have} (xla:cpu: set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={program.devices} before JAX starts)")
    return ""


def kernel_primitives(program: ir.Program) -> tuple[str, ...]:
    """What known divergences of a kernel program are matched by: ``pallas_call``, and ``add``
    where the kernel adds floats (a zero-initialised accumulation, an addition)."""
    kernel = program.body.ops[0].blocks[0]
    adds = any(op.name in ("k_accum", "k_dot", "k_reduce", "k_rows") or op.p.get("fn") == "add"
               for op in kernel.ops) and any(t.dtype.startswith("float") for t in kernel.types())
    return ("pallas_call",) + (("add",) if adds else ())


def reference_options(case: Case) -> dict:
    """The reference's options for a case: Pallas kernels run with race detection on, so that a
    generated kernel with a race is a reference finding (a generator bug), never a backend's."""
    return {"detect_races": True} if case.kind == PALLAS else {}


def reference(case: Case, inputs, platform: str = "cpu"):
    """(reference outputs, None) or (None, a reference finding: {outcome, detail, bucket, ...}), or
    (None, a not-applicable record) where JAX itself does not implement the program."""
    import jax

    import interp
    try:
        with case.context(), np.errstate(all="ignore"):
            closed = jax.make_jaxpr(case.fn)(*inputs)
    except NotImplementedError as e:
        # JAX refuses the program while tracing it (e.g. the VJP of a max pool with window
        # dilation): no runner can run it and the reference never saw it
        return None, {"outcome": BACKEND_UNSUPPORTED, "not_applicable": True,
                      "detail": f"JAX does not implement this program: {type(e).__name__}: {str(e)[:500]}"}
    except Exception as e:  # noqa: BLE001  (a program JAX cannot trace: a generator finding)
        return None, _reference_crash(e)
    try:
        with case.context(), np.errstate(all="ignore"):
            return [np.asarray(o) for o in interp.eval_jaxpr(closed, *inputs, platform=platform,
                                                                    **reference_options(case))], None
    except interp.UnsupportedPrimitiveError as e:
        return None, {"outcome": REFERENCE_UNSUPPORTED, "detail": str(e)[:1000],
                      "bucket": oracle.bucket("reference", e.primitive, "", "reference", "unsupported")}
    except Exception as e:  # noqa: BLE001  (the reference's own failure: a reference finding)
        return None, _reference_crash(e)


def _reference_crash(e: BaseException) -> dict:
    import interp
    kind = "undefined-behaviour" if isinstance(e, interp.UndefinedBehaviorError) else "crash"
    return {"outcome": CRASH, "crashed": "reference", "output": short_traceback(e),
            "detail": f"the reference raised {type(e).__name__}: {str(e)[:500]}",
            "bucket": oracle.bucket("reference", _raising_rule(e), type(e).__name__, "reference", kind)}


def _raising_rule(e: BaseException) -> str:
    """The interp rule module/function that raised (the primitive is usually in its name)."""
    tb = e.__traceback__
    name = "?"
    while tb is not None:
        mod = tb.tb_frame.f_globals.get("__name__", "")
        if mod.startswith("interp.rules."):
            name = f"{mod.rsplit('.', 1)[-1]}.{tb.tb_frame.f_code.co_name}"
        tb = tb.tb_next
    return name


def evaluate(tc: TestCase, runners, case_id: str, platform: str = "cpu", localise: bool = True) -> list[dict]:
    """One record per runner (the reference's finding, where it has one, for every runner)."""
    why = why_not_here(tc.program)
    if why:
        return [dict(new_record(case=case_id, runner=r.name, seed=0), outcome=BACKEND_UNSUPPORTED, detail=why,
                     not_applicable=True) for r in runners]
    case = case_for(tc.program, case_id)
    t0 = time.perf_counter()
    ref, problem = reference(case, tc.inputs, platform)
    ref_s = round(time.perf_counter() - t0, 6)
    records = []
    for runner in runners:
        if problem is not None:
            rec = dict(new_record(case=case_id, runner=runner.name, seed=0), **problem)
        else:
            with case.context(), np.errstate(all="ignore"):
                rec = oracle.judge(case.fn, tc.inputs, ref, runner, platform, localise=localise, case=case)
            rec["case"] = case_id
            if rec.get("bucket"):
                rec["reference_outputs"] = ref
        rec["reference_duration_s"] = ref_s
        records.append(rec)
    return records


def all_values(tc: TestCase, platform: str = "cpu") -> dict:
    """{(op index, result index): the reference's value} for every top-level array value."""
    p = tc.program
    body = p.body
    ids, keys = [], []
    for k, op in enumerate(body.ops):
        for j, (vid, t) in enumerate(zip(body.ids_of(k), op.outs)):
            if not t.ref and not t.is_key:
                ids.append(vid)
                keys.append((k, j))
    if not ids:
        return {}
    probe = dataclasses.replace(p, body=ir.Block(body.params, body.ops, tuple(ids)),
                                transform=p.transform if p.transform != ir.GRAD else ir.PLAIN)
    ref, problem = reference(case_for(probe, "values"), tc.inputs, platform)
    if problem is not None:
        return {}
    return dict(zip(keys, ref))
