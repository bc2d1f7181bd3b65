"""Program fuzzing: throughput against XLA:CPU's own compile-and-run rate, and how well injected bugs
are found and reduced.

    python -m bench.fuzz [--quick]      # or python -m bench fuzz
    python -m bench.fuzz --findings CAMPAIGN_DIR    # re-shrink a campaign's findings

Throughput. Generated ``lax`` programs of 4-12 equations whose arrays have at most 1,024 elements
(the first N of seed 0 that qualify), judged as a campaign's worker judges them (generate, inputs,
reference, XLA:CPU, oracle: conformance.fuzz.work.run_program), against the rate at which XLA:CPU
merely compiles and runs the same programs (``jax.jit(program)(*inputs)``, each program compiled
once). Each side runs in a fresh process (no compilation cache shared), one after the other; the
target is a ratio of at least 0.5. Rates are per process (one worker): a campaign runs ``--workers``
of them.

Reduction. Campaigns on the mutant runners (conformance/fuzz/mutants.py: XLA:CPU with one injected
bug each) until the bug is found: programs until the first finding, buckets (nothing but the
injected bug may be reported), and each bucket's reduced reproducer (equations, elements, seconds
of shrinking). Targets: median reproducer at most 3 equations and 16 elements, reduced in under
60 s.

Findings. ``--findings DIR`` shrinks again each finding of a campaign (``DIR/findings/*``: the
program as found, its inputs and bucket) with the shrinker of this tree and the finding's own
predicate (judged again: a bucket the oracle now explains is reported as such), and prints each
reproducer's equations, elements and seconds beside the ones the campaign recorded, and the medians.

Measured (2-core VM shared with other jobs; JAX 0.12.0.1): throughput 5.57 programs/s judged
against 6.70 compiled and run, ratio 0.83 (40 programs; 0.68 under heavier load); every mutant's bug
found (programs 4, 38, 98 of seed 0) and nothing else, reproducers of 1-3 equations and 1-16
elements (median 1 and 1.5) shrunk in 2-4 s. The 42 value buckets of the 2026-11-29 one-hour XLA:CPU
campaigns, with the predicates they were found with: median 2 equations and 3.5 elements (30 without
slicing inputs), in a median 4.6 s. docs/fuzzing.md, "Throughput and reduction".
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _programs(n: int, seed: int = 0) -> list[int]:
    """Indices of the first ``n`` lax programs of ``seed`` with 4-12 equations and arrays of at most
    1,024 elements (inputs and outputs)."""
    import jax
    import numpy as np

    from conformance.fuzz import render, values
    from conformance.fuzz.generate import generate
    out, i = [], 0
    while len(out) < n:
        p, _ = generate("lax", seed, i)
        xs = values.make_inputs(p, f"lax/{seed}/{i}")
        old = jax.config.jax_enable_x64
        jax.config.update("jax_enable_x64", p.x64)
        try:
            closed = jax.make_jaxpr(render.function(p))(*xs)
            sizes = [int(np.prod(v.aval.shape)) for v in closed.jaxpr.invars + closed.jaxpr.outvars
                     if hasattr(v, "aval")]
            if 4 <= len(closed.jaxpr.eqns) <= 12 and max(sizes or [0]) <= 1024:
                out.append(i)
        except Exception:  # noqa: BLE001  (a program this JAX cannot render is not a benchmark input)
            pass
        finally:
            jax.config.update("jax_enable_x64", old)
        i += 1
    return out


_CHILD = r'''
import json, sys, time
import numpy as np, jax
from conformance.fuzz import render, values
from conformance.fuzz.generate import generate
from conformance.fuzz.work import PROGRAM, Unit, run_program
mode, seed, indices = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
jax.jit(lambda x: x + 1)(np.float32(1))            # backend started before the clock
times, outcomes = [], []
t_all = time.perf_counter()
for i in indices:
    t0 = time.perf_counter()
    if mode == "xla":
        p, _ = generate("lax", seed, i)
        xs = values.make_inputs(p, f"lax/{seed}/{i}")
        jax.config.update("jax_enable_x64", p.x64)
        jax.block_until_ready(jax.jit(render.function(p))(*xs))
    else:
        r = run_program(Unit(PROGRAM, "lax", seed, i, ("xla:cpu",)))
        outcomes.append(r["records"][0]["outcome"])
    times.append(time.perf_counter() - t0)
print(json.dumps({"seconds": time.perf_counter() - t_all, "times": times, "outcomes": outcomes}))
'''


def _child(mode: str, indices: list[int], seed: int = 0) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(seed), json.dumps(indices)], capture_output=True,
                         text=True, env=env, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def throughput(n: int) -> dict:
    indices = _programs(n)
    fuzz = _child("fuzz", indices)
    xla = _child("xla", indices)
    rate_f, rate_x = len(indices) / fuzz["seconds"], len(indices) / xla["seconds"]
    return {"programs": len(indices), "fuzz_per_s": rate_f, "xla_per_s": rate_x, "ratio": rate_f / rate_x,
            "fuzz_median_s": statistics.median(fuzz["times"]), "xla_median_s": statistics.median(xla["times"]),
            "outcomes": {o: fuzz["outcomes"].count(o) for o in set(fuzz["outcomes"])}}


def reduction(programs: int, workers: int = 2) -> list[dict]:
    from conformance.fuzz import run_campaign
    from conformance.fuzz.mutants import BUGS
    from hardware_runners import PLUGIN_ENV
    os.environ[PLUGIN_ENV] = "conformance.fuzz.mutants"
    rows = []
    for bug in BUGS:
        with tempfile.TemporaryDirectory() as out:
            t0 = time.time()
            s = run_campaign([f"mutant:{bug}"], ["lax"], programs=programs, out=os.path.join(out, "c"),
                             workers=workers, bisect_budget_s=0, log=lambda *_: None)
            first = None
            with open(os.path.join(out, "c", "findings.jsonl")) as f:
                idx = [json.loads(x)["index"] for x in f]
            first = min(idx) if idx else None
            for bucket in s["buckets"]:
                d = os.path.join(out, "c", "findings", bucket.replace(":", "_"))
                doc = json.load(open(os.path.join(d, "finding.json"))) if os.path.exists(d) else {}
                red = doc.get("reduced") or {}
                rows.append({"bug": bug, "bucket": bucket, "expected": bucket.split(":")[1] == bug.split("-")[0],
                             "first_program": first, "eqns": red.get("eqns"), "elements": red.get("elements"),
                             "shrink_s": red.get("seconds")})
            if not s["buckets"]:
                rows.append({"bug": bug, "bucket": None, "first_program": None, "programs": programs})
            rows[-1]["campaign_s"] = round(time.time() - t0, 1)
    return rows


def findings(campaign: str, budget_s: float = 60.0) -> list[dict]:
    """Each finding of ``campaign`` shrunk again from its program as found (no bisection)."""
    from conformance.fuzz import arrays, ir
    from conformance.fuzz.store import _eqn_count
    from conformance.fuzz.shrink import TestCase
    from conformance.fuzz.work import SHRINK, Unit, pack, run_shrink, unpack
    rows = []
    base = os.path.join(campaign, "findings")
    for name in sorted(os.listdir(base)):
        d = os.path.join(base, name)
        doc = json.load(open(os.path.join(d, "finding.json")))
        if not doc["bucket"].startswith("fail:"):
            continue        # crashes are not shrunk by value
        u = doc["unit"]
        unit = Unit(SHRINK, u["family"], u["seed"], u["index"], tuple(u["runners"]),
                    program=open(os.path.join(d, "program.json")).read(),
                    inputs=pack(arrays.load(os.path.join(d, "inputs.npz"))), bucket=doc["bucket"], budget_s=budget_s,
                    bisect_budget_s=0, platform=u.get("platform", "cpu"))
        res = run_shrink(unit)
        row = {"bucket": doc["bucket"], "recorded": doc.get("reduced")}
        if res["reproduced"]:
            small = TestCase(ir.loads(res["program"]), unpack(res["inputs"]))
            row.update(eqns=_eqn_count(small), elements=res["after"]["elements"], shrink_s=res["shrink_s"],
                       tries=res["tries"], shapes=[list(x.shape) for x in small.inputs])
        else:
            row["now"] = res["record"].get("outcome")
        rows.append(row)
    return rows


def _findings_main(campaign: str) -> None:
    rows = findings(campaign)
    for r in rows:
        rec = r["recorded"] or {}
        now = (f"{r['eqns']} eqns, {r['elements']} elements, {r['shrink_s']:.1f} s ({r['tries']} tries), inputs "
               f"{r['shapes']}" if "eqns" in r else f"no longer fails here: {r['now']}")
        print(f"  {r['bucket']}: recorded {rec.get('eqns')} eqns, {rec.get('elements')} elements, "
              f"{rec.get('seconds')} s; now {now}")
    done = [r for r in rows if "eqns" in r]
    recorded = [r["recorded"] for r in done if r["recorded"]]
    for what, rs, s in (("recorded", recorded, "seconds"), ("now", done, "shrink_s")):
        if rs:
            print(f"  median {what} ({len(rs)}): {statistics.median(r['eqns'] for r in rs)} equations, "
                  f"{statistics.median(r['elements'] for r in rs)} elements, {statistics.median(r[s] for r in rs):.1f} s")


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--findings" in argv:
        _findings_main(argv[argv.index("--findings") + 1])
        return
    quick = "--quick" in argv
    t = throughput(12 if quick else 60)
    print(f"throughput ({t['programs']} lax programs of 4-12 equations, <= 1024 elements; one process each):")
    print(f"  fuzz (generate + reference + XLA:CPU + oracle): {t['fuzz_per_s']:.2f} programs/s "
          f"(median {t['fuzz_median_s'] * 1e3:.0f} ms)")
    print(f"  XLA:CPU compile and run only:                   {t['xla_per_s']:.2f} programs/s "
          f"(median {t['xla_median_s'] * 1e3:.0f} ms)")
    print(f"  ratio {t['ratio']:.2f} (target >= 0.5); outcomes {t['outcomes']}; load average "
          f"{os.getloadavg()[0]:.1f}")
    rows = reduction(40 if quick else 200)
    print("reduction (mutant runners):")
    for r in rows:
        print("  " + ", ".join(f"{k} {v}" for k, v in r.items()))
    found = [r for r in rows if r.get("eqns") is not None]
    if found:
        print(f"  median reproducer: {statistics.median(r['eqns'] for r in found)} equations, "
              f"{statistics.median(r['elements'] for r in found)} elements, "
              f"{statistics.median(r['shrink_s'] for r in found):.1f} s (targets <= 3, <= 16, < 60 s); "
              f"unexpected buckets: {sum(not r['expected'] for r in found)}")


if __name__ == "__main__":
    main()
