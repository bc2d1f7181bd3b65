"""The pytest plugin and the jax-conformance CLI, end to end on a few cases."""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np

from conformance.cases import all_cases
from conformance.case import Case, rng_for
from reports.schema import Record, read_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
ENV = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
# The toy cases below, served to the plugin through JAX_CONFORMANCE_CASES.
TOY_ENV = dict(ENV, PYTHONPATH=os.pathsep.join([ROOT, HERE]), JAX_CONFORMANCE_CASES="test_conformance_plugin")
CASES = "lax_elementwise/add/int32/3x5,lax_special/exp/float32/3x5,lax_conversions/bitcast_convert_type/float32-int32"


def test_case_ids_are_unique_readable_and_inputs_deterministic():
    quick, nightly = all_cases("quick"), all_cases("nightly")
    assert set(quick) <= set(nightly) and len(quick) >= 300
    families = {c.family for c in nightly.values()}
    assert {"lax_elementwise", "lax_special", "lax_conversions", "lax_structure", "lax_reductions",
            "lax_contractions", "control_flow", "random", "pallas", "programs"} <= families
    case = quick["lax_special/exp/float32/3x5"]
    a, b = case.make_inputs(0), case.make_inputs(0)
    assert all((x.view("u4") == y.view("u4")).all() for x, y in zip(a, b))
    assert not all((x.view("u4") == y.view("u4")).all() for x, y in zip(a, case.make_inputs(1)))
    assert rng_for("x", 0).integers(1 << 30) == rng_for("x", 0).integers(1 << 30)
    # Every stated mode cites a known source.
    from spec import compliance as C
    for cid, c in nightly.items():
        for m in (c.modes if isinstance(c.modes, (list, tuple)) else [c.modes]):
            if isinstance(m, C.Mode):
                assert m.source in C.SOURCES, (cid, m)


def test_pytest_plugin_items_outcomes_and_results(tmp_path):
    res = tmp_path / "results"
    junit = tmp_path / "junit.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", os.path.join(ROOT, "conformance"), "-p", "no:cacheprovider", "-q",
         "-o", "addopts=", "--runners", "reference,xla:cpu,pallas:interpret", "--case-filter", CASES,
         "--case-isolation", "none", "--results-dir", str(res), f"--junitxml={junit}", "-rA"],
        capture_output=True, text=True, env=ENV, cwd=str(tmp_path), timeout=300)
    out = proc.stdout + proc.stderr
    assert "test_conformance[lax_special/exp/float32/3x5@xla:cpu]" in out, out[-3000:]
    # Pallas runners get no items for plain lax cases; 3 cases x 2 runners.
    assert out.count("test_conformance[") >= 6 and "@pallas:interpret" not in out
    files = list(res.glob("*.jsonl"))
    lines = [json.loads(l) for f in files for l in open(f)]
    assert lines[0]["type"] == "environment"
    results = [l for l in lines if l["type"] == "result"]
    assert len(results) == 6
    for r in results:
        assert r["outcome"] in ("pass", "pass-with-allowance", "reference-unsupported", "fail")
        assert r["reproducer"].startswith(f"jax-conformance repro {r['case']} --runner {r['runner']}")
    exp = next(r for r in results if r["case"] == "lax_special/exp/float32/3x5" and r["runner"] == "xla:cpu")
    assert exp["outcome"] == "pass-with-allowance" and exp["allowance"] == "flush-to-zero"
    assert proc.returncode == (1 if any(r["outcome"] == "fail" for r in results) else 0)
    names = [tc.get("name") for tc in ET.parse(junit).getroot().iter("testcase")]
    assert len(names) == 6


def test_cli_run_report_list_devices_repro(tmp_path, capsys):
    from conformance.cli import main
    out = tmp_path / "report"
    db = tmp_path / "h.sqlite"
    # The main job (pytest in a subprocess, cases in an isolated worker), on three cases.
    cmd = [sys.executable, "-m", "conformance", "run", "--runners", "reference,xla:cpu", "--cases", CASES,
           "--out", str(out), "--history", str(db), "-n", "0", "--", "--case-isolation", "none"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "xla:cpu" in proc.stdout and "pass-with-allowance 1" in proc.stdout
    for name in ("index.html", "junit.xml", "summary.md", "results.json"):
        assert (out / name).exists()
    timing = json.load(open(out / "timing.json"))     # the run's cost: wall and CPU of pytest + workers
    assert timing["profile"] == "quick" and timing["cpu_s"] > 1.0 and timing["wall_s"] > 0
    assert "s CPU" in proc.stdout
    # report merges result files into a fresh report; the same run reported again replaces itself in
    # the history (no run counted twice), so there is still no previous run.
    assert main(["report", str(out / "results"), "--out", str(tmp_path / "r2"), "--history", str(db)]) == 0
    assert "First run in this history database." in capsys.readouterr().out
    assert json.load(open(tmp_path / "r2" / "results.json"))["results"]
    assert main(["list", "--family", "pallas"]) == 0
    assert "pallas/tpu_prng/random_bits\tpallas" in capsys.readouterr().out
    assert main(["devices"]) == 0
    text = capsys.readouterr().out
    assert "xla:cpu" in text and "unavailable" in text
    assert main(["repro", "lax_special/exp/float32/3x5", "--runner", "xla:cpu", "--seed", "0"]) == 0
    text = capsys.readouterr().out
    assert '"outcome": "pass-with-allowance"' in text and "exp" in text


def test_a_broken_family_module_is_a_loud_case_not_a_dead_suite(monkeypatch, tmp_path):
    import conformance.cases as cases_pkg
    from conformance.execute import run_case
    (tmp_path / "broken_family_for_test.py").write_text("raise ImportError('no such thing')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("JAX_CONFORMANCE_CASES", "broken_family_for_test")
    monkeypatch.setattr(cases_pkg, "_cache", {})
    cases = cases_pkg.all_cases("quick")
    assert "lax_elementwise/add/int32/3x5" in cases
    rec = run_case(cases["broken_family_for_test/module-error"], "xla:cpu")
    assert rec.outcome == "crash" and "no such thing" in rec.output


# --- hypothesis seed search -------------------------------------------------------------------
# A deliberately failing toy case: the "backend" program adds 1 where an input exceeds THRESHOLD,
# the reference program does not; inputs are 4 uniform values, so a seed fails with probability
# 1 - 0.75**4 (about 0.68), and by construction (checked below) the base seeds 0 and 1 pass.
THRESHOLD = np.float32(0.75)


def _uniform4(rng):
    return [rng.random(4).astype(np.float32)]


def _fails(seed: int) -> bool:
    """Independently of the suite: does this seed's input exceed the threshold?"""
    return bool((rng_for("testing/threshold", seed).random(4).astype(np.float32) > THRESHOLD).any())


def cases():
    import jax.numpy as jnp
    from spec import compliance as C
    yield Case(id="testing/threshold", fn=lambda x: jnp.where(x > THRESHOLD, x + 1, x), reference_fn=lambda x: x + 0,
               inputs=_uniform4, modes=C.exact())
    yield Case(id="testing/ok", fn=lambda x: x * 2, inputs=_uniform4, modes=C.exact())
    yield Case(id="testing/ok_heavy", fn=lambda x: x * 2, inputs=_uniform4, modes=C.exact(), examples=2)


def _fake_search(outcome_of, examples, shrinks=8, base=0, budget_s=None, cpu_s=0.0):
    from conformance.search import search
    calls = []

    class Executor:
        def run(self, case_id, runner, seed):
            calls.append(seed)
            return Record(case=case_id, runner=runner, seed=seed, outcome=outcome_of(seed),
                          reproducer=f"repro t/x --seed {seed}", reference_cpu_s=cpu_s / 2, cpu_s=cpu_s / 2)
    return search(Executor(), "t/x", "r", base, examples, shrinks, budget_s=budget_s), calls


def test_search_base_seed_only_in_quick_and_deterministic_draws_in_nightly():
    rec, calls = _fake_search(lambda s: "pass", 1, base=5)
    assert calls == [5] and rec.seed == 5 and rec.examples == 1 and rec.seeds_tried == [5]
    rec, calls = _fake_search(lambda s: "pass", 6, base=5)
    assert calls[0] == 5 and len(calls) == len(set(calls)) == 6 == rec.examples
    assert all(5 < s < 5 + 2 ** 32 for s in calls[1:])     # drawn seeds: never the base again
    assert rec.seed == 5 and rec.first_failing_seed is None
    draws = calls
    assert _fake_search(lambda s: "pass", 6, base=5)[1] == draws           # same draws every time
    assert _fake_search(lambda s: "pass", 6, base=6)[1][1:] != calls[1:]   # per base seed
    # A later seed's known divergence says more than the base's pass; unsupported stops the search.
    rec, _ = _fake_search(lambda s: "pass" if s == 0 else "known-divergence", 4)
    assert rec.outcome == "known-divergence" and rec.seed != 0
    rec, calls = _fake_search(lambda s: "backend-unsupported", 4)
    assert calls == [0] and rec.outcome == "backend-unsupported"
    # The search budget: a base seed costing 0.8 CPU s leaves room for 2 more seeds in 2 s (a
    # prefix of the same draws); a cheap one runs them all; 5 s of base cost runs only the base.
    assert _fake_search(lambda s: "pass", 6, base=5, budget_s=2.0, cpu_s=0.8)[1] == draws[:3]
    assert _fake_search(lambda s: "pass", 6, base=5, budget_s=2.0, cpu_s=0.01)[1] == draws
    assert _fake_search(lambda s: "pass", 6, base=5, budget_s=2.0, cpu_s=5.0)[1] == [5]


def test_search_finds_and_shrinks_a_failure_within_the_budget():
    # Fails on even seeds >= 1000: the base seed and hypothesis' first draw (base + 1) pass.
    def outcome(s):
        return "fail" if s >= 1000 and s % 2 == 0 else "pass"
    rec, calls = _fake_search(outcome, 20, shrinks=8)
    assert rec.outcome == "fail" and outcome(rec.seed) == "fail"
    first = rec.first_failing_seed
    assert first == next(s for s in calls if outcome(s) == "fail")
    assert rec.seed < first                          # hypothesis shrank it
    assert rec.reproducer.endswith(f"--seed {rec.seed}")
    # The search stopped at the first failure, then ran at most `shrinks` more seeds.
    assert len(calls) <= calls.index(first) + 1 + 8 and rec.examples == len(calls)
    assert rec.seeds_tried == calls
    # No shrinking budget: the first failing seed is the one reported.
    rec0, calls0 = _fake_search(outcome, 20, shrinks=0)
    assert rec0.seed == rec0.first_failing_seed == calls0[-1]
    # A crash or a timeout is never shrunk (each try costs a worker restart or the timeout).
    rec, calls = _fake_search(lambda s: "crash" if outcome(s) == "fail" else "pass", 20)
    assert rec.outcome == "crash" and calls[-1] == rec.seed == rec.first_failing_seed
    # A failing base seed is reported as is: nothing more is run.
    rec, calls = _fake_search(lambda s: "fail", 20, base=3)
    assert calls == [3] and rec.seed == 3 and rec.first_failing_seed is None


def _plugin_run(tmp_path, name, *extra, env=None):
    res = tmp_path / name
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", os.path.join(ROOT, "conformance"), "-p", "no:cacheprovider", "-q",
         "-o", "addopts=", "--runners", "xla:cpu", "--case-filter", "testing/", "--case-isolation", "none",
         "--results-dir", str(res), *extra],
        capture_output=True, text=True, env=env or TOY_ENV, cwd=str(tmp_path), timeout=300)
    recs = [r for f in res.glob("*.jsonl") for r in read_jsonl(str(f))]
    return proc, {r.case: r for r in recs if isinstance(r, Record)}


def test_nightly_search_through_the_plugin_reproducer_and_determinism(tmp_path, monkeypatch, capsys):
    assert not _fails(0) and not _fails(1)   # the quick profile (base seed 0) cannot see the bug
    proc, recs = _plugin_run(tmp_path, "n0", "--profile", "nightly", "--case-examples", "12", "-p", "no:xdist")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    rec = recs["testing/threshold"]
    seed = rec.seed
    assert rec.outcome == "fail" and rec.base_seed == 0 and seed != 0
    # The JSONL seed is the failing seed: its inputs exceed the threshold, those before the first
    # failure do not, and the reported seed is no larger than the first failing one (shrinking).
    assert _fails(seed) and seed <= rec.first_failing_seed
    tried = rec.seeds_tried
    assert not any(_fails(s) for s in tried[:tried.index(rec.first_failing_seed)])
    assert rec.reproducer == f"jax-conformance repro testing/threshold --runner xla:cpu --seed {seed}"
    assert f"reproduce: {rec.reproducer}" in out and "hypothesis searched" in out
    assert recs["testing/ok"].outcome == "pass" and recs["testing/ok"].examples == 12
    # The printed reproducer re-creates exactly the failing inputs: the same mismatch, same values.
    import conformance.cases as cases_pkg
    from conformance.cli import main
    monkeypatch.syspath_prepend(HERE)
    monkeypatch.setenv("JAX_CONFORMANCE_CASES", "test_conformance_plugin")
    monkeypatch.setattr(cases_pkg, "_cache", {})
    capsys.readouterr()
    assert main(rec.reproducer.split()[1:]) == 1
    text = capsys.readouterr().out
    start = text.index('\n{\n "schema"') + 1
    again = json.loads(text[start: text.index("\n}\n", start) + 2])   # the record; then the first mismatch
    assert again["outcome"] == "fail" and again["seed"] == seed
    assert again["first_mismatch"] == rec.first_mismatch and again["mismatches"] == rec.mismatches
    # Same records from two xdist workers and another hash seed; then the nightly profile's defaults.
    proc2, recs2 = _plugin_run(tmp_path, "n2", "--profile", "nightly", "--case-examples", "12", "-n", "2",
                               env=dict(TOY_ENV, PYTHONHASHSEED="12345"))
    for cid in recs:
        for key in ("outcome", "seed", "seeds_tried", "first_mismatch"):
            assert getattr(recs2[cid], key) == getattr(recs[cid], key), (cid, key)
    proc3, recs3 = _plugin_run(tmp_path, "q", "--profile", "nightly", "-p", "no:xdist")
    from conformance.plugin import PROFILE_EXAMPLES
    assert recs3["testing/ok"].examples == PROFILE_EXAMPLES["nightly"] > 1
    assert recs3["testing/ok_heavy"].examples == 2          # the case caps the profile default
