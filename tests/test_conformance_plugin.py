"""The pytest plugin and the jax-conformance CLI, end to end on a few cases."""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conformance.cases import all_cases
from conformance.case import rng_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
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
    # report merges result files into a fresh report; the history now has a previous run.
    assert main(["report", str(out / "results"), "--out", str(tmp_path / "r2"), "--history", str(db)]) == 0
    assert "since the previous run: new failures 0, fixed 0, changed 0, new cases 0" in capsys.readouterr().out
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
    assert rec["outcome"] == "crash" and "no such thing" in rec["output"]
