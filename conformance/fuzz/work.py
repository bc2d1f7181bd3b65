"""Work units: what a campaign hands to an executor, as pure data (strings, numbers, bytes), so that
any executor (local processes today, a cluster's workers later) can carry them and run them with
:func:`run_unit` in a process that has the runners.

- ``program``: generate program ``index`` of ``family`` for ``seed`` and judge it on ``runners``;
- ``shrink``: shrink a finding (its program and inputs given) within ``budget_s`` and, for an XLA
  runner, look for the pass responsible within ``bisect_budget_s``.

A unit's result is a dict of the same kind (records as in reports/schema.py, arrays as
``conformance.fuzz.arrays`` bytes).
"""
from __future__ import annotations

import dataclasses
import io
import os
import tempfile
import time

import numpy as np

PROGRAM, SHRINK = "program", "shrink"


@dataclasses.dataclass(frozen=True)
class Unit:
    kind: str
    family: str
    seed: int
    index: int
    runners: tuple[str, ...]
    program: str = ""             # SHRINK: the program (IR JSON)
    inputs: bytes = b""           # SHRINK: its inputs (arrays bytes)
    bucket: str = ""              # SHRINK: the finding's bucket
    budget_s: float = 60.0        # SHRINK: time for shrinking (and as much again for bisection)
    bisect_budget_s: float = 90.0  # SHRINK: time for looking for the responsible XLA pass (0: none)
    platform: str = "cpu"         # the platform the reference stands in for

    @property
    def key(self) -> str:
        return f"{self.family}/{self.seed}/{self.index}"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def pack(arrays) -> bytes:
    from . import arrays as A
    buf = io.BytesIO()
    with tempfile.NamedTemporaryFile(suffix=".npz", delete=False) as f:
        path = f.name
    try:
        A.save(path, arrays)
        with open(path, "rb") as f:
            buf.write(f.read())
    finally:
        os.unlink(path)
    return buf.getvalue()


def unpack(data: bytes) -> list[np.ndarray]:
    from . import arrays as A
    with tempfile.NamedTemporaryFile(suffix=".npz", delete=False) as f:
        f.write(data)
        path = f.name
    try:
        return A.load(path)
    finally:
        os.unlink(path)


def _runners(names):
    from hardware_runners import get_runner
    return [get_runner(n) for n in names]


def _compact(rec: dict) -> dict:
    """A record without its arrays (those travel separately, packed)."""
    return {k: v for k, v in rec.items() if k not in ("backend_outputs", "reference_outputs")}


def run_program(unit: Unit) -> dict:
    from . import ir, values
    from .evaluate import evaluate
    from .generate import generate
    from .shrink import TestCase
    t0 = time.perf_counter()
    program, choices = generate(unit.family, unit.seed, unit.index)
    tc = TestCase(program, values.make_inputs(program, unit.key))
    gen_s = time.perf_counter() - t0
    records = evaluate(tc, _runners(unit.runners), f"fuzz/{unit.key}", unit.platform)
    out = {"unit": unit.as_dict(), "records": [], "generate_s": round(gen_s, 6), "n_ops": program.n_ops,
           "elements": program.elements}
    finding = False
    for rec in records:
        if rec.get("bucket"):
            finding = True
            rec = dict(rec)
            arrays = {"reference": rec.get("reference_outputs") or [], "backend": rec.get("backend_outputs") or []}
            rec = _compact(rec)
            rec["outputs"] = {k: pack(v) for k, v in arrays.items()}
        out["records"].append(rec)
    if finding:
        out["program"] = ir.dumps(program)
        out["inputs"] = pack(tc.inputs)
        out["choices"] = choices
    out["seconds"] = round(time.perf_counter() - t0, 6)
    return out


class _Check:
    """The shrinking predicate of one finding: judged again, still in the same bucket? (records
    cached per test case, so a pass asking twice runs it once)."""

    def __init__(self, unit: Unit, runner):
        self.unit, self.runner = unit, runner
        self.cache: dict = {}

    def record(self, tc) -> dict:
        from . import ir
        from .evaluate import evaluate
        key = (ir.dumps(tc.program), pack(tc.inputs))
        if key not in self.cache:
            if len(self.cache) > 64:
                self.cache.clear()
            self.cache[key] = evaluate(tc, [self.runner], f"fuzz/{self.unit.key}/shrinking", self.unit.platform)[0]
        return self.cache[key]

    def still_fails(self, tc) -> bool:
        return self.record(tc).get("bucket") == self.unit.bucket

    def failing_output(self, tc):
        fm = self.record(tc).get("first_mismatch") or {}
        if "output" not in fm:
            return None
        return fm["output"], tuple(fm.get("index") or ())


def run_shrink(unit: Unit) -> dict:
    from . import bisect as B
    from . import ir
    from .evaluate import all_values
    from .shrink import Shrinker, TestCase
    t0 = time.perf_counter()
    runner, = _runners(unit.runners[:1])
    check = _Check(unit, runner)
    tc = TestCase(ir.loads(unit.program), unpack(unit.inputs))
    before = tc.size
    if not check.still_fails(tc):
        return {"unit": unit.as_dict(), "reproduced": False, "seconds": round(time.perf_counter() - t0, 6),
                "record": _compact(check.record(tc))}
    shrinker = Shrinker(check.still_fails, lambda t: all_values(t, unit.platform), check.failing_output,
                        budget_s=unit.budget_s)
    small = shrinker.shrink(tc)
    shrink_s = time.perf_counter() - t0
    rec = dict(check.record(small))
    out = {"unit": unit.as_dict(), "reproduced": True, "program": ir.dumps(small.program), "inputs": pack(small.inputs),
           "before": {"ops": before[0], "elements": before[1]}, "after": {"ops": small.size[0], "elements": small.size[1]},
           "tries": shrinker.tries, "shrink_s": round(shrink_s, 3),
           "outputs": {"reference": pack(rec.get("reference_outputs") or []),
                       "backend": pack(rec.get("backend_outputs") or [])}}
    if unit.bisect_budget_s and runner.name.startswith("xla:") and rec.get("outcome") == "fail":
        out["passes"] = B.responsible_passes(small, runner.name, unit.bucket, unit.bisect_budget_s)
    out["record"] = _compact(rec)
    out["seconds"] = round(time.perf_counter() - t0, 6)
    return out


def run_unit(unit: Unit) -> dict:
    if unit.kind == PROGRAM:
        return run_program(unit)
    if unit.kind == SHRINK:
        return run_shrink(unit)
    raise ValueError(f"unknown unit kind {unit.kind!r}")
