"""``jax-conformance``: run the suite, build reports, reproduce one case, list devices and cases.

    jax-conformance run [--runners R,...] [--profile quick|nightly] [--out DIR] [--history DB]
                        [--seed S] [--examples N] [--seeds K] [--save-outputs] [--cluster ADDRESS]
    jax-conformance recheck DIR|FILE... [--runner R] [--cases S,...] [--results FILE]
    jax-conformance report RESULTS... --out DIR [--history DB]
    jax-conformance repro CASE --runner R [--seed S]
    jax-conformance fuzz [--runners R,...] [--families F,...] (--time 10m | --programs N) [--seed S]
                         [--out DIR] [--history DB] [--resume DIR] [--workers N | --cluster ADDRESS]
    jax-conformance devices
    jax-conformance list [--profile P] [--family F] [--runner R]
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

from .case import jaxpr_primitives  # noqa: F401  (moved to case.py; `coverage` and callers use it here)


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
    if args.cluster:
        from conformance.cluster import ray_missing
        why = ray_missing() or ("--save-outputs keeps outputs on the machine that ran them: not with --cluster"
                                if args.save_outputs else None)
        if why:
            print(f"jax-conformance run: {why}", file=sys.stderr)
            return 2
    runners = _runners_arg(args.runners)
    if args.timeout is None:
        args.timeout = 60.0 if args.profile == "quick" else 300.0
    results_dir = os.path.join(args.out, "results")
    os.makedirs(results_dir, exist_ok=True)
    from conformance.plugin import HARNESS_ERRORS_FILE
    stale = glob.glob(os.path.join(results_dir, "*.jsonl")) + glob.glob(os.path.join(results_dir, HARNESS_ERRORS_FILE))
    for old in stale:
        os.unlink(old)
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    pkg = os.path.dirname(os.path.abspath(__file__))
    from conformance.plugin import PROFILE_EXAMPLES, forward_args
    args.runners = ",".join(runners)
    cmd = [sys.executable, "-m", "pytest", pkg, "-p", "no:cacheprovider", "-q", "--tb=no", "-rN",
           "-o", "addopts=", "--results-dir", results_dir] + forward_args(args)
    if args.save_outputs:
        cmd += ["--case-save-outputs", os.path.join(args.out, "outputs")]
    if args.workers != "0" and _xdist_available():
        # xdist's setup-status reporter prints "bringing up nodes..." twice under -q: it says nothing more.
        cmd += ["-n", args.workers, "--dist", "loadgroup", "-p", "no:terminaldistreporter"]
    cmd += args.pytest_args
    examples = args.examples if args.examples is not None else PROFILE_EXAMPLES[args.profile]
    print(f"jax-conformance run {run_id}: runners {', '.join(runners)}; profile {args.profile} "
          f"({'base seed ' + str(args.seed) if examples == 1 else f'up to {examples} seeds from base seed {args.seed}'} "
          "per case and runner)", flush=True)
    env = dict(os.environ, JAX_CONFORMANCE_RUN_ID=run_id)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(pkg), env.get("PYTHONPATH")) if p)
    t0, cpu0 = time.time(), _children_cpu_s()
    rc = _run_on_cluster(args, results_dir, run_id) if args.cluster else subprocess.call(cmd, env=env)
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
    harness_ok = _check_harness(results_dir, len(results.records))
    bad = results.bad()
    if not harness_ok:     # whatever --fail-on-bad says (that switch is about the backends)
        return 2
    return 1 if (args.fail_on_bad and bad) or rc not in (0, 1) else 0


def _run_on_cluster(args, results_dir: str, run_id: str) -> int:
    """The suite's items as Ray tasks (conformance/cluster.py) instead of pytest's; the results files
    and the report are the same. Returns pytest's exit status for what happened (0, or 1 when the
    cluster gave up on some items: harness errors, written where _check_harness reads them)."""
    from conformance import cluster
    from conformance.plugin import HARNESS_ERRORS_FILE, suite_items
    items = [item for _, item in suite_items(args.profile, args.cases, args.runners.split(","), args.seed,
                                             args.seeds, args.examples)]
    options = {"timeout": args.timeout, "first_divergence": True,
               "shrinks": args.shrinks,
               "budget_s": args.search_budget if args.search_budget and args.search_budget > 0 else None}
    print(f"{len(items)} items on the Ray cluster at {args.cluster}", flush=True)
    errors = cluster.run_suite(args.cluster, items, options, results_dir, run_id, args.profile)
    if errors:
        with open(os.path.join(results_dir, HARNESS_ERRORS_FILE), "w") as f:
            json.dump({"errors": errors, "results": len(items) - len(errors)}, f, indent=1)
    return 1 if errors else 0


def _check_harness(results_dir: str, n_results: int) -> bool:
    """Print the harness errors the plugin wrote (pytest ran with --tb=no) and say whether the
    run is sound: no harness error, at least one result."""
    from conformance.plugin import HARNESS_ERRORS_FILE
    path = os.path.join(results_dir, HARNESS_ERRORS_FILE)
    errors = json.load(open(path))["errors"] if os.path.exists(path) else []
    for e in errors[:20]:    # pytest's summary above has them in full
        lines = e["error"].splitlines()
        first = next((line for line in lines if line.startswith("E ")), lines[-1] if lines else "")
        print(f"harness error: {e['where']}: {first.lstrip('E').strip()}", file=sys.stderr)
    if len(errors) > 20:
        print(f"... and {len(errors) - 20} more", file=sys.stderr)
    if errors:
        print(f"jax-conformance: {len(errors)} harness errors (not results of a backend): see {path}",
              file=sys.stderr)
    if n_results == 0:
        print("jax-conformance: the run recorded no results", file=sys.stderr)
    return not errors and n_results > 0


def _report(paths, out, history_db, run_id=None):
    from reports.history import record_run
    from reports.merge import merge
    from reports.render import write_report
    results = merge([paths] if isinstance(paths, str) else paths)
    history = record_run(history_db, results, run_id=run_id) if history_db else None
    write_report(results, out, history)
    return results, history


def _print_summary(results, out, history=None) -> None:
    """The console summary: runs, counts per column, what known divergences turned from timeouts or
    crashes, the largest divergences, allowances and the changes since the previous run."""
    from reports.render import error_measure, fmt_duration, fmt_time, history_lines
    from reports.schema import KNOWN_DIVERGENCE, OUTCOMES, PASS_ALLOWANCE
    print(f"\n{len(results.records)} results from {len(results.machines)} machine(s); "
          f"report in {os.path.join(out, 'index.html')}")
    for run in results.runs():
        env = results.machines[run["machine"]].environment
        print(f"run {', '.join(run['run_ids']) or '?'}: machine {run['machine']} ({env.get('host')}, JAX "
              f"{env.get('jax')}), started {fmt_time(run['start'])}, {fmt_duration(run['duration_s'])}")
    counts = results.counts()
    columns = results.column_ids
    width = max([len(c) for c in columns] + [6])
    for col in columns:
        c = counts[col]
        print(f"  {col:<{width}}  " + ", ".join(f"{o} {c[o]}" for o in OUTCOMES if c.get(o)))
    explained = [r for r in results.records if r.outcome == KNOWN_DIVERGENCE and r.raw_outcome]
    if explained:
        print("timeouts and crashes explained by known divergences:")
        for r in explained:
            print(f"    {r.case} on {r.column}: {r.raw_outcome} ({(r.known_divergence or {}).get('id')})")
    for col in columns:
        big = [r for r in results.largest_divergences(len(results.records)) if r.column == col][:3]
        if big:
            print(f"largest divergences on {col}:")
        for r in big:
            extra = f" ({(r.known_divergence or {}).get('id')})" if r.outcome == KNOWN_DIVERGENCE else ""
            div = (r.first_divergent_eqn or {}).get("primitive")
            print(f"    {r.case}: {r.outcome}{extra}, {error_measure(r)}"
                  + (f", first divergent eqn: {div}" if div else ""))
    allowed: dict = {}
    for r in results.records:
        if r.outcome == PASS_ALLOWANCE:
            allowed[(r.column, r.allowance)] = allowed.get((r.column, r.allowance), 0) + 1
    if allowed:
        print("allowances: " + "; ".join(f"{col} {a} x{n}" for (col, a), n in sorted(allowed.items())))
    if history is not None:
        for line in history_lines(history, limit=10):
            print(line)


PROGRAM_CHANGED = "program-changed"


def cmd_recheck(args) -> int:
    """Judge saved backend outputs again with this checkout's reference and spec (no backend).
    Outputs saved at another revision of their case than the checkout's are counted as
    ``program-changed`` and not judged (conformance/outputs.py)."""
    import collections
    from conformance import outputs as saved
    from conformance.cases import all_cases
    from conformance.execute import recheck
    from reports.schema import BAD, PASS
    files = saved.find(args.paths)
    if not files:
        print(f"no outputs-*.npz under {', '.join(args.paths)}", file=sys.stderr)
        return 2
    keys = [k.strip() for k in (args.cases or "").split(",") if k.strip()]
    cases = all_cases("nightly")
    counts: dict = collections.defaultdict(collections.Counter)
    writer = None
    if args.results:
        from reports.schema import JsonlWriter
        writer = JsonlWriter(args.results)
    changed = 0
    for path in files:
        runner = saved.runner_of(path)
        if args.runner and runner != args.runner:
            continue
        revisions = saved.revisions(path)
        for case_id, seed, outs in saved.read(path):
            if keys and not any(k in case_id for k in keys):
                continue
            case = cases.get(case_id)
            if case is None:
                counts[runner]["not-in-this-checkout"] += 1
                print(f"{'not-in-this-checkout':22s} {runner} {case_id} seed={seed}")
                continue
            if revisions.get(case_id, 0) != case.revision:
                # Computed by another program than the checkout's: judging them would be a lie.
                changed += 1
                counts[runner][PROGRAM_CHANGED] += 1
                print(f"{PROGRAM_CHANGED:22s} {runner} {case_id} seed={seed} saved at revision "
                      f"{revisions.get(case_id, 0)}, the case is at revision {case.revision}: not judged")
                continue
            rec = recheck(case, runner, seed, outs)
            counts[runner][rec.outcome] += 1
            if writer:
                writer.write(rec)
            if rec.outcome != PASS:
                why = rec.allowance or (rec.known_divergence or {}).get("id") or ""
                print(f"{rec.outcome:22s} {runner} {case_id} seed={seed} {why} "
                      f"{str(rec.detail).splitlines()[0][:160] if rec.detail else ''}")
    if writer:
        writer.close()
    unexplained = 0
    for runner, c in sorted(counts.items()):
        print(f"{runner}: " + ", ".join(f"{o} {n}" for o, n in sorted(c.items(), key=lambda kv: -kv[1])))
        unexplained += sum(c[o] for o in BAD)
    print(f"unexplained (fail/crash/timeout): {unexplained} of {sum(sum(c.values()) for c in counts.values())}")
    if changed:
        print(f"NOT JUDGED: {changed} saved (case, seed) outputs come from an older program than the "
              "checkout's (the case's revision changed since they were saved): run those cases on the "
              "backend again to judge them")
    return 1 if unexplained else 0


def cmd_report(args) -> int:
    results, history = _report(args.results, args.out, args.history)
    _print_summary(results, args.out, history)
    return 0


def _inputs_at(inputs, out_shape, index) -> list[str]:
    """Each input's value at an output index, where the input broadcasts to the output's shape
    (elementwise programs); otherwise why there is no such value."""
    import numpy as np
    from conformance.checks import _show
    lines = []
    for i, a in enumerate(inputs):
        a = np.asarray(a)
        try:
            at = np.broadcast_to(a, out_shape)[tuple(index)]
        except (ValueError, IndexError):
            lines.append(f"  arg{i}: {a.dtype}{list(a.shape)} does not broadcast to the output's shape "
                         f"{list(out_shape)}: no element corresponds")
            continue
        lines.append(f"  arg{i}{list(index)} = {_show(at)}")
    return lines


def _print_first_mismatch(case, seed: int, rec) -> None:
    """The first mismatching element: both outputs and the inputs at the same index."""
    import jax
    fm = rec.first_mismatch
    if not fm or fm.get("index") is None:
        return
    inputs = case.make_inputs(seed)
    with case.context():
        shapes = [s.shape for s in jax.tree_util.tree_leaves(jax.eval_shape(case.reference_program(), *inputs))]
    out = fm.get("output", 0)
    print(f"first mismatch: output {out} at index {fm['index']}")
    print(f"  reference: {fm.get('reference')}")
    print(f"  backend:   {fm.get('backend')}")
    if out < len(shapes):
        print("inputs at that index:")
        for line in _inputs_at(inputs, shapes[out], fm["index"]):
            print(line)


def cmd_repro(args) -> int:
    import numpy as np
    from conformance.cases import get
    from conformance.execute import run_case
    case = get(args.case)
    if args.isolated:
        from conformance.isolation import Executor
        executor = Executor(timeout=args.timeout)
        try:
            rec = executor.run(args.case, args.runner, args.seed)
        finally:
            executor.close()
    else:
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
    from reports.schema import BAD, dumps
    print(dumps(rec, indent=1))
    _print_first_mismatch(case, args.seed, rec)
    return 0 if rec.outcome not in BAD else 1


def _duration(text: str) -> float:
    """Seconds from '90', '90s', '10m', '1.5h'."""
    units = {"s": 1, "m": 60, "h": 3600}
    t = text.strip().lower()
    try:
        return float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (seconds, or a number with s, m or h)") from None


CLUSTER_HELP = ("run the work units on a Ray cluster: 'auto' (the cluster this machine belongs to) or "
                "ray://HOST:PORT; needs the [cluster] extra (docs/fuzzing.md)")


def _names(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def cmd_fuzz(args) -> int:
    from conformance.fuzz import CampaignError, run_campaign
    try:
        s = run_campaign(runners=_names(args.runners), families=_names(args.families), seed=args.seed,
                         programs=args.programs, time_s=args.time, out=args.out, history=args.history,
                         resume=args.resume, workers=args.workers, shrink=not args.no_shrink,
                         shrink_budget_s=args.shrink_time, bisect_budget_s=args.bisect_time, timeout_s=args.timeout,
                         cluster=args.cluster)
    except CampaignError as e:
        print(f"jax-conformance fuzz: {e}", file=sys.stderr)
        return 2
    print(f"campaign {s['campaign_id']} {s['status']}: {s['programs']} programs in {s['seconds']:.0f} s "
          f"({s['programs_per_s'] or 0:.2f}/s); {len(s['buckets'])} buckets; summary in {s['files']['summary.md']}")
    for runner, c in s["counts"].items():
        print(f"  {runner}: {c['programs']} programs, {c['passes']} explained, {c['findings']} findings, "
              f"{c.get('buckets', 0)} buckets")
    new = (s.get("history") or {}).get("new_buckets")
    if new is not None:
        print(f"new buckets since the history's earlier campaigns: {len(new)}")
        for b in new[:20]:
            print(f"    {b}")
    return 130 if s["status"] == "interrupted" else 0


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
    runner = None
    if getattr(args, "runner", None):
        from hardware_runners.base import get_runner
        runner = get_runner(args.runner)
    for cid, case in all_cases(args.profile).items():
        if args.family and case.family != args.family:
            continue
        if runner is not None and not runner.supports(case.as_program())[0]:   # (whether or not available here)
            continue
        print(f"{cid}\t{case.kind}\t{','.join(case.primitives)}" + (f"\t{case.not_applicable}" if case.not_applicable else ""))
    return 0


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
    supported = sorted(p for p, s in cov.items() if not s.startswith("unsupported"))
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
    r.add_argument("--cluster", default=None, metavar="ADDRESS", help=CLUSTER_HELP)
    r.add_argument("--fail-on-bad", action="store_true", help="exit 1 if any backend fail/crash/timeout "
                   "(a run with harness errors or no results exits 2 regardless)")
    r.add_argument("--save-outputs", action="store_true",
                   help="keep every backend output in OUT/outputs (re-judge them later with `recheck`)")
    r.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    r.set_defaults(func=cmd_run)
    rc = sub.add_parser("recheck", help="judge saved backend outputs again with this checkout's reference "
                        "and spec, without the backend (outputs saved before their case's program changed "
                        "are listed as program-changed, not judged)")
    rc.add_argument("paths", nargs="+", help="outputs-*.npz files or directories holding them (a run's --out)")
    rc.add_argument("--runner", default=None, help="only this runner's outputs")
    rc.add_argument("--cases", default=None, help="only case ids containing one of these comma-separated strings")
    rc.add_argument("--results", default=None, help="also write the records to this JSONL file "
                    "(`jax-conformance report` renders it)")
    rc.set_defaults(func=cmd_recheck)
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
    fz = sub.add_parser("fuzz", help="generate random programs, judge them on runners, shrink what differs "
                        "(docs/fuzzing.md)")
    fz.add_argument("--runners", default="xla:cpu", help="comma-separated runners (default xla:cpu)")
    fz.add_argument("--families", default="lax", help="comma-separated program families (default lax)")
    limit = fz.add_mutually_exclusive_group()
    limit.add_argument("--time", type=_duration, default=None, help="how long: seconds, or 10m, 1h")
    limit.add_argument("--programs", type=int, default=None, help="how many programs")
    fz.add_argument("--seed", type=int, default=0, help="program i of seed s is the same program everywhere")
    fz.add_argument("--out", default=None, help="campaign directory (findings are written as they happen)")
    fz.add_argument("--history", default=None, help="SQLite file keeping counts and buckets over campaigns")
    fz.add_argument("--resume", default=None, metavar="DIR", help="continue the campaign in DIR")
    fz.add_argument("--workers", type=int, default=1, help="local worker processes (default 1)")
    fz.add_argument("--cluster", default=None, metavar="ADDRESS", help=CLUSTER_HELP)
    fz.add_argument("--no-shrink", action="store_true", help="record findings without shrinking them")
    fz.add_argument("--shrink-time", type=_duration, default=60.0, help="per new bucket (default 60 s)")
    fz.add_argument("--bisect-time", type=_duration, default=90.0,
                    help="per new XLA bucket, looking for the responsible HLO pass (default 90 s; 0: off)")
    fz.add_argument("--timeout", type=_duration, default=300.0, help="per program before it counts as a hang")
    fz.set_defaults(func=cmd_fuzz)
    d = sub.add_parser("devices", help="which runners this machine can run, and why not")
    d.add_argument("--json", action="store_true", help="also print the environment")
    d.set_defaults(func=cmd_devices)
    ls = sub.add_parser("list", help="list cases")
    ls.add_argument("--profile", default="quick", choices=("quick", "nightly"))
    ls.add_argument("--family", default=None)
    ls.add_argument("--runner", default=None, help="only the cases this runner declares it can run")
    ls.set_defaults(func=cmd_list)
    cv = sub.add_parser("coverage", help="which primitives the cases exercise, and which they miss")
    cv.add_argument("--profile", default="quick", choices=("quick", "nightly"))
    cv.set_defaults(func=cmd_coverage)
    args = p.parse_args(argv)
    from conformance import process_env
    process_env.apply()   # before any command starts JAX here or in a child (run's pytest, repro's worker)
    try:
        rc = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader closed the pipe (`jax-conformance list | head`): what it read is all it wanted.
        # Point stdout at /dev/null so that the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return rc


if __name__ == "__main__":
    sys.exit(main())
