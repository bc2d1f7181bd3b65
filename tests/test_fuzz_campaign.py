"""Fuzz campaigns end to end (conformance/fuzz/campaign.py, the `jax-conformance fuzz` command):
bad input refused with the choices named (exit 2), an injected bug found, shrunk and nothing else
reported, crashes and hangs isolated, an interrupted campaign resumed without losing or repeating
a program, and the history's new buckets."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conformance.fuzz import CampaignError, run_campaign
from tests.support import InProcess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MUTANTS = "conformance.fuzz.mutants"


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    env.update(extra)
    return env


def _cli(*args, **env):
    return subprocess.run([sys.executable, "-m", "conformance", "fuzz", *args], capture_output=True, text=True,
                          env=_env(**env), cwd=ROOT, timeout=600)


@pytest.mark.parametrize("args, words", [
    (("--runners", "xla:nope", "--programs", "1"), ["unknown runner 'xla:nope'", "xla:cpu"]),
    (("--families", "lax,nope", "--programs", "1"), ["unknown family 'nope'", "lax, control_flow, random, state"]),
    (("--families", "pallas-triton", "--programs", "1"), ["no generator yet", "implemented: lax"]),
    (("--runners", "pallas:interpret", "--programs", "1"), ["runs pallas programs", "family lax makes lax"]),
    (("--programs", "1", "--workers", "0"), ["--workers must be at least 1"]),
    ((), ["--programs N or --time"]),
    (("--time", "ten minutes"), ["not a duration"]),
    (("--frobnicate",), ["unrecognized arguments: --frobnicate"]),
])
def test_bad_input_exits_2_naming_the_choices(args, words):
    out = _cli(*args)
    assert out.returncode == 2, out
    for w in words:
        assert w in out.stderr, out.stderr


def test_interrupted_campaign_resumes_without_losing_or_repeating_programs(tmp_path):
    out = str(tmp_path / "c")
    s = run_campaign(["xla:cpu"], ["lax", "random"], programs=8, out=out, executor=InProcess(stop_after=3),
                     log=lambda *_: None)
    assert s["status"] == "interrupted" and s["programs"] == 3
    with pytest.raises(CampaignError, match="--resume"):
        run_campaign(["xla:cpu"], ["lax"], programs=8, out=out, executor=InProcess(), log=lambda *_: None)
    s = run_campaign(resume=out, executor=InProcess(), log=lambda *_: None)
    lines = [json.loads(x) for x in open(os.path.join(out, "programs.jsonl"))]
    assert s["status"] == "finished"
    assert sorted(x["index"] for x in lines) == list(range(8))
    assert {x["family"] for x in lines} == {"lax", "random"}
    assert os.path.exists(os.path.join(out, "summary.md"))


def test_injected_bug_is_found_shrunk_and_nothing_else_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_CONFORMANCE_RUNNERS", MUTANTS)
    out = str(tmp_path / "c")
    s = run_campaign(["mutant:add-ulp"], ["lax"], programs=12, out=out, executor=InProcess(), shrink_budget_s=60,
                     bisect_budget_s=0, history=str(tmp_path / "h.db"), log=lambda *_: None)
    assert s["buckets"], "the injected bug was not found in 12 programs"
    for bucket, b in s["buckets"].items():
        assert bucket.startswith("fail:add:float32:mutant:add-ulp:"), bucket
        assert b["shrunk"]
    findings = [json.load(open(os.path.join(r, "finding.json")))
                for r in (tmp_path / "c" / "findings").iterdir()]
    for f in findings:
        assert f["reduced"]["eqns"] <= 3 and f["reduced"]["elements"] <= 16, f["reduced"]
    # the reduced reproducer is plain JAX: it runs without jax-conformance and shows the reference's
    # value (on XLA:CPU itself, without the injected bug, it agrees: exit status 0)
    repro = os.path.join(findings[0]["dir"] if "dir" in findings[0] else
                         next(str(r) for r in (tmp_path / "c" / "findings").iterdir()), "reproducer_reduced.py")
    run = subprocess.run([sys.executable, repro], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=""), cwd=str(tmp_path))
    assert run.returncode == 0 and "agrees with the reference" in run.stdout, run.stdout + run.stderr
    assert set(s["history"]["new_buckets"]) == set(s["buckets"])
    again = run_campaign(["mutant:add-ulp"], ["lax"], programs=12, out=str(tmp_path / "d"), executor=InProcess(),
                         shrink=False, history=str(tmp_path / "h.db"), log=lambda *_: None)
    assert again["history"]["new_buckets"] == []


def test_crashes_and_hangs_are_isolated_and_the_campaign_goes_on(tmp_path):
    # programs with a transpose kill (or hang) the worker; the others are judged as usual
    for how in ("abort", "hang"):
        out = tmp_path / how
        res = _cli("--runners", f"mutant:{how}-on-transpose", "--programs", "10", "--out", str(out), "--no-shrink",
                   "--timeout", "12", JAX_CONFORMANCE_RUNNERS=MUTANTS)
        assert res.returncode == 0, res.stderr[-3000:]
        lines = [json.loads(x) for x in open(out / "programs.jsonl")]
        outcomes = [next(iter(x["outcomes"].values())) for x in lines]
        assert len(lines) == 10
        assert ("crash" if how == "abort" else "timeout") in outcomes, outcomes
        assert "pass" in outcomes
        assert all(b.startswith(("crash:worker", "timeout:worker")) for x in lines for b in x["buckets"].values())
