"""``jax-conformance``: run the suite, build reports, reproduce one case, list devices and cases.

    jax-conformance run [--runners R,...] [--profile quick|nightly] [--out DIR] [--history DB]
                        [--seed S] [--examples N] [--seeds K]
    jax-conformance report RESULTS... --out DIR [--history DB]
    jax-conformance repro CASE --runner R [--seed S]
    jax-conformance devices
    jax-conformance list [--profile P] [--family F]
    jax-conformance coverage [--profile P]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time
import uuid


def _runners_arg(value: str | None) -> list[str]:
    from hardware_runners import available_runners
    if not value:
        return available_runners()
    return [r.strip() for r in value.split(",") if r.strip()]


def _children_cpu_s() -> float:
    import resource
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _xdist_available() -> bool:
    try:
        import xdist  # noqa: F401
        return True
    except ImportError:
        return False


def cmd_run(args) -> int:
    runners = _runners_arg(args.runners)
    if args.timeout is None:
        args.timeout = 60.0 if args.profile == "quick" else 300.0
    results_dir = os.path.join(args.out, "results")
    os.makedirs(results_dir, exist_ok=True)
    for old in glob.glob(os.path.join(results_dir, "*.jsonl")):
        os.unlink(old)
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    pkg = os.path.dirname(os.path.abspath(__file__))
    from conformance.plugin import PROFILE_EXAMPLES, forward_args
    args.runners = ",".join(runners)
    cmd = [sys.executable, "-m", "pytest", pkg, "-p", "no:cacheprovider", "-q", "--tb=no", "-rN",
           "-o", "addopts=", "--results-dir", results_dir] + forward_args(args)
    if args.workers != "0" and _xdist_available():
        cmd += ["-n", args.workers, "--dist", "loadgroup"]
    cmd += args.pytest_args
    examples = args.examples if args.examples is not None else PROFILE_EXAMPLES[args.profile]
    print(f"jax-conformance run {run_id}: runners {', '.join(runners)}; profile {args.profile} "
          f"({'base seed ' + str(args.seed) if examples == 1 else f'up to {examples} seeds from base seed {args.seed}'} "
          "per case and runner)", flush=True)
    env = dict(os.environ, JAX_CONFORMANCE_RUN_ID=run_id)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(pkg), env.get("PYTHONPATH")) if p)
    t0, cpu0 = time.time(), _children_cpu_s()
    rc = subprocess.call(cmd, env=env)
    wall, cpu = time.time() - t0, _children_cpu_s() - cpu0
    # CPU time of pytest, its xdist workers and their case workers: the machine-independent
    # half of the run's cost (wall time depends on what else the machine is doing).
    print(f"pytest finished in {wall:.0f} s wall, {cpu:.0f} s CPU (exit status {rc})", flush=True)
    with open(os.path.join(args.out, "timing.json"), "w") as f:
        json.dump({"run_id": run_id, "profile": args.profile, "runners": runners, "wall_s": round(wall, 1),
                   "cpu_s": round(cpu, 1), "workers": args.workers, "pytest_exit_status": rc}, f, indent=1)
    if rc not in (0, 1):   # 1: some items failed, which the report shows; anything else: no run
        print("pytest did not complete the run; writing a report of what was recorded", file=sys.stderr)
    results, history = _report(results_dir, args.out, args.history, run_id)
    _print_summary(results, args.out, history)
    bad = results.bad()
    return 1 if (args.fail_on_bad and bad) or rc not in (0, 1) else 0


def _report(paths, out, history_db, run_id=None):
    from reports.history import record_run
    from reports.merge import merge
    from reports.render import write_report
    results = merge([paths] if isinstance(paths, str) else paths)
    history = record_run(history_db, results, run_id=run_id) if history_db else None
    write_report(results, out, history)
    return results, history


def _print_summary(results, out, history=None) -> None:
    from reports.schema import OUTCOMES
    print(f"\n{len(results.records)} results; report in {os.path.join(out, 'index.html')}")
    counts = results.counts()
    width = max([len(r) for r in results.runners] + [6])
    for rn in results.runners:
        c = counts[rn]
        print(f"  {rn:<{width}}  " + ", ".join(f"{o} {c[o]}" for o in OUTCOMES if c.get(o)))
    for rn in results.runners:
        big = [r for r in results.largest_divergences(len(results.records)) if r["runner"] == rn][:3]
        if big:
            print(f"largest divergences on {rn}:")
        for r in big:
            extra = f" ({(r.get('known_divergence') or {}).get('id')})" if r["outcome"] == "known-divergence" else ""
            div = (r.get("first_divergent_eqn") or {}).get("primitive")
            print(f"    {r['case']}: {r['outcome']}{extra}, max ulp {r.get('max_ulp')}, "
                  f"max abs err {r.get('max_abs_err')}" + (f", first divergent eqn: {div}" if div else ""))
    allowed = {}
    for r in results.records:
        if r["outcome"] == "pass-with-allowance":
            allowed[(r["runner"], r.get("allowance"))] = allowed.get((r["runner"], r.get("allowance")), 0) + 1
    if allowed:
        print("allowances: " + "; ".join(f"{rn} {a} x{n}" for (rn, a), n in sorted(allowed.items())))
    if history and history.get("has_previous"):
        print("since the previous run: " + ", ".join(f"{k.replace('_', ' ')} {len(history[k])}"
                                                     for k in ("new_failures", "fixed", "changed", "new_cases")))


def cmd_report(args) -> int:
    results, history = _report(args.results, args.out, args.history)
    _print_summary(results, args.out, history)
    return 0


def cmd_repro(args) -> int:
    import numpy as np
    from conformance.cases import get
    from conformance.execute import run_case
    if args.isolated:
        from hardware_runners.isolation import Worker, run_isolated
        w = Worker()
        try:
            rec = run_isolated(w, args.case, args.runner, args.seed, args.timeout)
        finally:
            w.close()
    else:
        case = get(args.case)
        inputs = case.make_inputs(args.seed)
        print(f"case {case.id} (seed {args.seed}); inputs:")
        with np.printoptions(threshold=50, edgeitems=3):
            for i, a in enumerate(inputs):
                print(f"  arg{i}: {a.dtype}{list(a.shape)} {a}")
        if case.kind == "lax":
            import jax
            with case.context():
                print(jax.make_jaxpr(case.program())(*inputs))
        rec = run_case(case, args.runner, args.seed)
    print(json.dumps(rec, indent=1, default=str))
    return 0 if rec["outcome"] not in ("fail", "crash", "timeout") else 1


def cmd_devices(args) -> int:
    from hardware_runners import detect
    from hardware_runners.environment import environment
    rows = detect()
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name']:<{width}}  {'available' if r['available'] else 'unavailable: ' + r['reason']}")
    if args.json:
        print(json.dumps({"runners": rows, "environment": environment()}, indent=1, default=str))
    return 0


def cmd_list(args) -> int:
    from conformance.cases import all_cases
    for cid, case in all_cases(args.profile).items():
        if args.family and case.family != args.family:
            continue
        print(f"{cid}\t{case.kind}\t{','.join(case.primitives)}" + (f"\t{case.not_applicable}" if case.not_applicable else ""))
    return 0


def jaxpr_primitives(j, seen: set | None = None) -> set:
    """Names of the primitives in a jaxpr, its sub-jaxprs (loop bodies, calls, kernels) included."""
    import jax.extend.core as jcore
    seen = set() if seen is None else seen
    for e in getattr(j, "jaxpr", j).eqns:
        seen.add(e.primitive.name)
        for v in e.params.values():
            for sub in (v if isinstance(v, (tuple, list)) else (v,)):
                if isinstance(sub, (jcore.Jaxpr, jcore.ClosedJaxpr)):
                    jaxpr_primitives(sub, seen)
    return seen


def case_primitives(case) -> set:
    """The primitives of a case as the reference runs it (traced on its seed-0 inputs)."""
    import jax
    inputs = case.make_inputs(0)
    with case.context():
        return jaxpr_primitives(jax.make_jaxpr(case.reference_program())(*inputs))


def exercised_primitives(profile: str) -> tuple[dict, list]:
    """{primitive: number of cases whose jaxpr (sub-jaxprs and kernels included) contains it}, and
    the ids of cases that could not be traced."""
    import collections
    from conformance.cases import all_cases
    counts: collections.Counter = collections.Counter()
    failed = []
    for cid, case in all_cases(profile).items():
        if case.not_applicable:   # listed by `jax-conformance list` with its reason; nothing to trace
            continue
        try:
            seen = case_primitives(case)
        except Exception:  # noqa: BLE001  (listed as untraceable)
            failed.append(cid)
            continue
        counts.update(seen)
    return dict(counts), failed


def cmd_coverage(args) -> int:
    import interp
    counts, failed = exercised_primitives(args.profile)
    cov = interp.coverage()
    supported = sorted(p for p, s in cov.items() if s != "unsupported")
    missing = [p for p in supported if p not in counts]
    print(f"{len(counts)} primitives exercised by the {args.profile} cases; "
          f"{len(supported) - len(missing)} of the {len(supported)} the reference supports")
    for p in sorted(counts, key=lambda p: (-counts[p], p)):
        print(f"  {p}: {counts[p]} cases ({cov.get(p, 'not a registered primitive')})")
    print(f"supported by the reference but in no case ({len(missing)}): {', '.join(missing)}")
    if failed:
        print(f"cases that could not be traced ({len(failed)}): {', '.join(failed)}")
    return 0


def main(argv=None) -> int:
    from conformance.plugin import add_run_options
    p = argparse.ArgumentParser(prog="jax-conformance", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the suite and write the report")
    r.add_argument("--out", default="conformance-report")
    r.add_argument("--history", default=None, help="SQLite nightly history database")
    add_run_options(r)     # the options the pytest plugin takes too (conformance/plugin.py OPTIONS)
    r.add_argument("-n", "--workers", default="auto", help="pytest-xdist workers ('0': no xdist)")
    r.add_argument("--fail-on-bad", action="store_true", help="exit 1 if any fail/crash/timeout")
    r.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    r.set_defaults(func=cmd_run)
    rp = sub.add_parser("report", help="merge result files into a report")
    rp.add_argument("results", nargs="+", help="JSONL files or directories")
    rp.add_argument("--out", required=True)
    rp.add_argument("--history", default=None)
    rp.set_defaults(func=cmd_report)
    x = sub.add_parser("repro", help="reproduce one (case, runner, seed)")
    x.add_argument("case")
    x.add_argument("--runner", required=True)
    x.add_argument("--seed", type=int, default=0)
    x.add_argument("--isolated", action="store_true", help="run in an isolated worker")
    x.add_argument("--timeout", type=float, default=120.0)
    x.set_defaults(func=cmd_repro)
    d = sub.add_parser("devices", help="which runners this machine can run, and why not")
    d.add_argument("--json", action="store_true", help="also print the environment")
    d.set_defaults(func=cmd_devices)
    ls = sub.add_parser("list", help="list cases")
    ls.add_argument("--profile", default="quick", choices=("quick", "nightly"))
    ls.add_argument("--family", default=None)
    ls.set_defaults(func=cmd_list)
    cv = sub.add_parser("coverage", help="which primitives the cases exercise, and which they miss")
    cv.add_argument("--profile", default="quick", choices=("quick", "nightly"))
    cv.set_defaults(func=cmd_coverage)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
