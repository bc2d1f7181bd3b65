"""JAX's own Pallas tests as a peer suite: JAX's interpret modes against the reference.

    python -m conformance.peer_suite JAX_CHECKOUT [--files a_test.py ...] [--out DIR]
    python -m conformance.peer_suite JAX_CHECKOUT --report --out DIR     # compare saved runs

JAX_CHECKOUT is a JAX source tree of the installed JAX's release (it needs ``tests/pallas`` and
the test helpers JAX's wheels do not ship, ``jax/_src/hypothesis_test_util.py`` and
``jax/_src/pallas/pallas_test_util.py``; docs/peer-suite.md says how to get one). Nothing is
fetched at run time.

Each test file runs twice in its own pytest process, on CPU: once as JAX ships it (its kernels
in JAX's interpret modes), once with ``--pallas-reference`` (every kernel lowered to a callback
into the reference, interp.pallas_mode). The report prints, per file, the tests, how many had
the same outcome (pass, fail or skip) and the differences by class, every difference with its
class and reason (spec/peer_suite.py: known tests with reasons; others classified from the
failure text, marked unconfirmed), and the wall time of both runs. Per-test outcomes of both
sides are kept under --out (one JSON line per test; a file that crashes or times out keeps the
tests that finished).

Loaded as a pytest plugin (``-p conformance.peer_suite``, which the script does), this module
records each test's outcome and loads the source-tree helpers from the checkout.
"""
from __future__ import annotations

import argparse
import collections
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time

SIDES = ("jax", "reference")
CHECKOUT_ENV = "JAX_CONFORMANCE_PEER_CHECKOUT"
RESULTS_ENV = "JAX_CONFORMANCE_PEER_RESULTS"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- the pytest plugin side (in the test process) -----------------------------------------------

def pytest_configure(config):
    checkout = os.environ.get(CHECKOUT_ENV)
    if checkout:
        load_source_tree_modules(checkout)


def load_source_tree_modules(checkout: str) -> None:
    """The test helpers JAX's tests import and its wheels lack, from the checkout."""
    from spec.peer_suite import SOURCE_TREE_MODULES
    for name in SOURCE_TREE_MODULES:
        try:
            importlib.import_module(name)
            continue
        except ImportError:
            pass
        path = os.path.join(checkout, *name.split(".")) + ".py"
        if not os.path.exists(path):
            continue          # the tests that need it fail to import, as they would anyway
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        parent, _, leaf = name.rpartition(".")
        setattr(importlib.import_module(parent), leaf, module)


def pytest_runtest_logreport(report):
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return
    # A test's outcome: its call, or a setup that failed or skipped, or a teardown that failed.
    if not (report.when == "call" or report.failed or (report.when == "setup" and report.skipped)):
        return
    outcome = "fail" if report.failed else "skip" if report.skipped else "pass"
    text = ""
    if outcome != "pass":
        text = report.longreprtext
        if outcome == "fail":
            outcome = f"fail({failure_kind(text)})"
        text = text[-3000:] if report.failed else text[-300:]
    with open(path, "a") as f:
        f.write(json.dumps({"id": report.nodeid.rpartition("/")[2], "outcome": outcome,
                            "when": report.when, "duration": round(report.duration, 4),
                            "text": text}) + "\n")


def pytest_collectreport(report):
    # a file that does not import (a test newer than the installed JAX): one failed record
    path = os.environ.get(RESULTS_ENV)
    if path and report.failed:
        text = report.longreprtext
        with open(path, "a") as f:
            f.write(json.dumps({"id": report.nodeid.rpartition("/")[2] + "::<collection>",
                                "outcome": f"fail({failure_kind(text)})", "when": "collect",
                                "duration": 0.0, "text": text[-3000:]}) + "\n")


def failure_kind(text: str) -> str:
    """The exception a failure ended with (pytest's last line ``path:line: Type``): two runs that
    fail differently (a race JAX raises, an assertion the reference fails) are a difference."""
    last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
    kind = last.rpartition(": ")[2].strip()
    return kind if kind.replace(".", "").replace("_", "").isalnum() else "error"


# -- running the files ------------------------------------------------------------------------

def run_file(checkout: str, name: str, side: str, out: str, timeout: float, devices: int,
             extra: list[str]) -> dict:
    """One test file on one side, in its own pytest process: {wall_s, rc, timed_out}."""
    results = os.path.join(out, side, name + ".jsonl")
    os.makedirs(os.path.dirname(results), exist_ok=True)
    if os.path.exists(results):
        os.remove(results)
    env = dict(os.environ, JAX_PLATFORMS="cpu", **{CHECKOUT_ENV: checkout, RESULTS_ENV: results})
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        f" --xla_force_host_platform_device_count={devices}").strip()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "pytest", os.path.join("tests", "pallas", name), "-q",
           "-p", "no:cacheprovider", "-p", "conformance.peer_suite", "-o", "addopts=",
           *(_plugin_args()), *extra]
    if side == "reference":
        cmd.append("--pallas-reference")
    start, cpu = time.perf_counter(), _children_cpu()
    timed_out = False
    with open(os.path.join(out, side, name + ".log"), "w") as log:
        try:
            proc = subprocess.run(cmd, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc, timed_out = None, True
    # CPU seconds too: on a shared machine the wall time of the two sides depends on the load
    return {"wall_s": round(time.perf_counter() - start, 2),
            "cpu_s": round(_children_cpu() - cpu, 2), "rc": rc, "timed_out": timed_out}


def _children_cpu() -> float:
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _plugin_args() -> list[str]:
    """``-p conformance.plugin`` where the installed entry point does not load it already."""
    from importlib.metadata import entry_points
    installed = any(e.value == "conformance.plugin" for e in entry_points(group="pytest11"))
    return [] if installed else ["-p", "conformance.plugin"]


# -- comparing --------------------------------------------------------------------------------

def read_side(out: str, side: str, name: str) -> dict:
    """{test id: record} of one side of one file (the last record of a test wins: a failing
    teardown after a passing call makes the test a fail)."""
    path = os.path.join(out, side, name + ".jsonl")
    tests: dict = {}
    if not os.path.exists(path):
        return tests
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec["outcome"] == "fail":      # (recorded without its kind)
                rec["outcome"] = f"fail({failure_kind(rec['text'])})"
            prev = tests.get(rec["id"])
            if prev is None or rec["outcome"].startswith("fail") or prev["outcome"] == "skip":
                tests[rec["id"]] = rec
    return tests


def compare(out: str, files: list[str], jax_version: str) -> dict:
    from spec.peer_suite import classify
    per_file = {}
    for name in files:
        sides = {s: read_side(out, s, name) for s in SIDES}
        ids = sorted(set(sides["jax"]) | set(sides["reference"]))
        rows = []
        for tid in ids:
            j = sides["jax"].get(tid, {"outcome": "not-run", "text": ""})
            r = sides["reference"].get(tid, {"outcome": "not-run", "text": ""})
            row = {"id": tid, "jax": j["outcome"], "reference": r["outcome"]}
            if j["outcome"] != r["outcome"]:
                klass, reason, confirmed = classify(tid, jax_version, j["outcome"], r["outcome"],
                                                    r.get("text", "") or j.get("text", ""))
                row.update({"class": klass, "reason": reason, "confirmed": confirmed})
            rows.append(row)
        per_file[name] = rows
    return per_file


def report(per_file: dict, timing: dict, jax_version: str, show_all: bool = False) -> str:
    lines = [f"JAX {jax_version}: JAX's interpret modes vs the reference (routed)"]
    totals = collections.Counter()
    classes_total = collections.Counter()
    for name, rows in per_file.items():
        for row in rows:
            if show_all or "class" in row:
                mark = "same" if "class" not in row else (
                    f"{row['class']}{'' if row['confirmed'] else ' (unconfirmed)'}")
                lines.append(f"  {name}::{row['id'].split('::', 1)[-1]}  jax={row['jax']} "
                             f"reference={row['reference']}  {mark}"
                             + (f": {row['reason']}" if row.get("reason") else ""))
    lines.append("")
    head = (f"{'file':52s} {'tests':>6s} {'same':>6s} {'run':>6s} {'diff':>5s}  "
            f"{'jax s':>8s} {'ref s':>8s} {'jax cpu':>8s} {'ref cpu':>8s}  differences by class")
    lines.append(head)
    for name, rows in per_file.items():
        same = sum(1 for r in rows if "class" not in r)
        ran = sum(1 for r in rows if "skip" not in (r["jax"], r["reference"]))
        by_class = collections.Counter(r["class"] for r in rows if "class" in r)
        classes_total.update(by_class)
        t = timing.get(name, {})
        totals.update(tests=len(rows), same=same, ran=ran, diff=len(rows) - same)
        for side, key in (("jax", "jax"), ("reference", "ref")):
            totals[f"{key}_s"] += t.get(side, {}).get("wall_s", 0.0)
            totals[f"{key}_cpu"] += t.get(side, {}).get("cpu_s", 0.0)
        lines.append(f"{name:52s} {len(rows):6d} {same:6d} {ran:6d} {len(rows) - same:5d}  "
                     f"{_secs(t, 'jax'):>8s} {_secs(t, 'reference'):>8s} "
                     f"{_secs(t, 'jax', 'cpu_s'):>8s} {_secs(t, 'reference', 'cpu_s'):>8s}  "
                     + ", ".join(f"{k} {v}" for k, v in by_class.most_common()))
    lines.append(f"{'total':52s} {totals['tests']:6d} {totals['same']:6d} {totals['ran']:6d} "
                 f"{totals['diff']:5d}  {totals['jax_s']:8.1f} {totals['ref_s']:8.1f} "
                 f"{totals['jax_cpu']:8.1f} {totals['ref_cpu']:8.1f}  "
                 + ", ".join(f"{k} {v}" for k, v in classes_total.most_common()))
    if totals["jax_s"]:
        lines.append(f"reference / JAX's interpret modes: wall time "
                     f"{totals['ref_s'] / totals['jax_s']:.2f}"
                     + (f", CPU time {totals['ref_cpu'] / totals['jax_cpu']:.2f}"
                        if totals["jax_cpu"] else ""))
    return "\n".join(lines)


def _record_timing(path: str, name: str, side: str, t: dict) -> dict:
    """Add one run's timing to the saved ones (read again: the two sides may run at once)."""
    timing = json.load(open(path)) if os.path.exists(path) else {}
    timing.setdefault(name, {})[side] = t
    with open(path + ".tmp", "w") as f:
        json.dump(timing, f, indent=1)
    os.replace(path + ".tmp", path)
    return timing


def _secs(t: dict, side: str, key: str = "wall_s") -> str:
    s = t.get(side)
    if not s or key not in s:
        return "-"
    return f"{s[key]:.1f}" + ("T" if s.get("timed_out") else "")


def main(argv=None) -> int:
    from spec.peer_suite import FILES
    ap = argparse.ArgumentParser(prog="python -m conformance.peer_suite", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", help="a JAX source tree of the installed JAX's release")
    ap.add_argument("--files", nargs="+", help=f"test files (default: the {len(FILES)} of "
                                                "spec/peer_suite.py that run on CPU)")
    ap.add_argument("--out", default=None, help="results directory (default: "
                                                "./peer-suite-<jax version>)")
    ap.add_argument("--side", choices=("both",) + SIDES, default="both")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per file and side")
    ap.add_argument("--report", action="store_true", help="only compare the runs saved in --out")
    ap.add_argument("--resume", action="store_true", help="skip the files and sides --out holds "
                                                         "a finished run of")
    ap.add_argument("--all", action="store_true", help="print every test, not only differences")
    ap.add_argument("--pytest-args", default="", help="more arguments for each pytest run "
                                                       "(e.g. '-k interpret -x')")
    args = ap.parse_args(argv)
    import jax
    checkout = os.path.abspath(args.checkout)
    if not os.path.isdir(os.path.join(checkout, "tests", "pallas")):
        ap.error(f"{checkout} has no tests/pallas: give a JAX source tree (docs/peer-suite.md)")
    out = os.path.abspath(args.out or f"peer-suite-{jax.__version__}")
    if args.files:
        files = [os.path.basename(f) for f in args.files]
    elif args.report:      # the files with saved results
        files = sorted({n[:-len(".jsonl")] for s in SIDES if os.path.isdir(os.path.join(out, s))
                        for n in os.listdir(os.path.join(out, s)) if n.endswith(".jsonl")})
    else:
        files = list(FILES)
    os.makedirs(out, exist_ok=True)
    timing_path = os.path.join(out, "timing.json")
    timing = json.load(open(timing_path)) if os.path.exists(timing_path) else {}
    if not args.report:
        sides = SIDES if args.side == "both" else (args.side,)
        for name in files:
            if not os.path.exists(os.path.join(checkout, "tests", "pallas", name)):
                print(f"{name}: not in this checkout", flush=True)
                continue
            for side in sides:
                done = timing.get(name, {}).get(side, {})
                if args.resume and "cpu_s" in done and not done.get("timed_out"):
                    continue
                t = run_file(checkout, name, side, out, args.timeout, FILES.get(name, 1),
                             args.pytest_args.split())
                timing = _record_timing(timing_path, name, side, t)
                print(f"{name} [{side}]: {t['wall_s']:.1f} s"
                      + (" (timed out)" if t["timed_out"] else ""), flush=True)
    per_file = compare(out, files, jax.__version__)
    with open(os.path.join(out, "comparison.json"), "w") as f:
        json.dump({"jax": jax.__version__, "files": per_file, "timing": timing}, f, indent=1)
    print(report(per_file, timing, jax.__version__, show_all=args.all))
    return 0


if __name__ == "__main__":
    sys.exit(main())
