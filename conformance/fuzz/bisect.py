"""Which XLA pass makes a finding: the passes that changed the (shrunk) program, each disabled in turn.

XLA dumps the module after every pass that changed it (``--xla_dump_hlo_pass_re=.*``: files named
``...after_<pass>.before_<next>.txt``); each such pass is then disabled alone
(``--xla_disable_hlo_passes=<pass>``) in a fresh process, which judges the test case again
(``python -m conformance.fuzz.bisect probe DIR``). A pass whose disabling makes the finding go away
(and the program still compile) is reported as responsible. XLA reads its flags once per process,
hence the subprocesses.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time

from . import arrays, ir
from .shrink import TestCase

_AFTER = re.compile(r"\.after_([A-Za-z0-9_\-]+)\.before_")
SKIP = ("pipeline-start",)


def _write(tc: TestCase, runner: str, bucket: str, where: str) -> None:
    with open(os.path.join(where, "case.json"), "w") as f:
        json.dump({"program": ir.to_json(tc.program), "runner": runner, "bucket": bucket}, f)
    arrays.save(os.path.join(where, "inputs.npz"), tc.inputs)


def _probe(where: str, flags: str, timeout: float) -> str:
    """The bucket the test case falls in under XLA_FLAGS ``flags`` ("" if it passes), or "error"."""
    env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + flags).strip())
    try:
        out = subprocess.run([sys.executable, "-m", "conformance.fuzz.bisect", "probe", where], env=env,
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "error"
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return "error"
    return json.loads(lines[-1])["bucket"]


def changed_passes(where: str, timeout: float) -> list[str]:
    dump = os.path.join(where, "dump")
    _probe(where, f"--xla_dump_to={dump} --xla_dump_hlo_pass_re=.*", timeout)
    names: list[str] = []
    for f in sorted(os.listdir(dump)) if os.path.isdir(dump) else []:
        m = _AFTER.search(f)
        if m and m.group(1) not in SKIP and m.group(1) not in names:
            names.append(m.group(1))
    return names


def responsible_passes(tc: TestCase, runner: str, bucket: str, budget_s: float = 120.0) -> dict:
    """{"passes": [...changed passes], "responsible": [...], "note"} for an XLA runner's finding."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jax-conformance-bisect-") as where:
        _write(tc, runner, bucket, where)
        per = max(30.0, budget_s / 4)
        if _probe(where, "", per) != bucket:
            return {"passes": [], "responsible": [], "note": "the finding does not reproduce in a fresh process"}
        passes = changed_passes(where, per)
        responsible, tried = [], []
        for name in passes:
            if time.monotonic() - t0 > budget_s:
                break
            got = _probe(where, f"--xla_disable_hlo_passes={name}", per)
            tried.append(name)
            if got == "":
                responsible.append(name)
        if len(tried) < len(passes):
            note = f"time ran out after {len(tried)} of {len(passes)} passes"
        elif not responsible:
            note = ("disabling any one of the passes that changed the module leaves the finding: it comes from "
                    "code generation (the emitter, LLVM) or from several passes together")
        else:
            note = ""
        return {"passes": passes, "responsible": responsible, "note": note}


def _probe_main(where: str) -> None:
    from .evaluate import evaluate
    from hardware_runners import get_runner
    with open(os.path.join(where, "case.json")) as f:
        d = json.load(f)
    tc = TestCase(ir.from_json(d["program"]), arrays.load(os.path.join(where, "inputs.npz")))
    rec, = evaluate(tc, [get_runner(d["runner"])], "bisect", localise=True)
    print(json.dumps({"bucket": rec.get("bucket") or ""}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["probe"]:
        _probe_main(sys.argv[2])
    else:
        raise SystemExit("usage: python -m conformance.fuzz.bisect probe DIR")
