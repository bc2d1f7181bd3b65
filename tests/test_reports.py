"""Results schema, shard merging, nightly history (new / fixed / changed) and the report files,
including the HTML page loaded in a real headless browser where Debian's chromium is installed."""
import dataclasses
import gzip
import html
import json
import os
import re
import shutil
import sqlite3
import subprocess
import time
import typing
import xml.etree.ElementTree as ET

import pytest

from reports.history import record_run
from reports.merge import merge
from reports.render import primitive_view, write_report
from reports.schema import (RESULT_FIELDS, SCHEMA_VERSION, JsonlWriter, Record, dumps, environment_line,
                            read_jsonl, validate)


def rec(case, runner, outcome, ts=1.0, **kw):
    # Worker gw0 and no run id, as `pytest -n 1 --pyargs conformance` writes them: every file's
    # worker has the same name, so a record's environment is its own file's.
    return Record(**dict(dict(case=case, runner=runner, outcome=outcome, seed=0, family=case.split("/")[0],
                              worker="gw0", reproducer=f"jax-conformance repro {case} --runner {runner} --seed 0",
                              timestamp=ts), **kw))


def write(path, records, env=None):
    w = JsonlWriter(str(path))
    if env is not None:
        w.write(environment_line(worker="gw0", profile="quick", run_id=None, environment=env))
    for r in records:
        w.write(r)
    w.close()


def test_schema_records_and_validation(tmp_path):
    r = Record(case="a/b", runner="xla:cpu", outcome="pass")
    line = r.to_json()
    for field in ("case", "runner", "outcome", "allowance", "known_divergence", "max_ulp", "max_abs_err",
                  "mismatches", "first_mismatch", "first_divergent_eqn", "duration_s", "reproducer", "seed"):
        assert field in line
    assert line["schema"] == SCHEMA_VERSION and line["type"] == "result"
    with pytest.raises(ValueError):
        validate(dict(line, outcome="sort-of-pass"))
    with pytest.raises(ValueError):
        validate(dict(line, schema=SCHEMA_VERSION + 1))
    # A worker killed mid-write leaves a truncated line: the complete records survive.
    p = tmp_path / "r.jsonl"
    write(p, [r, dataclasses.replace(r, case="a/inf", max_ulp=float("inf"), max_abs_err=float("nan"))])
    with open(p, "a") as f:
        f.write('{"schema": 1, "type": "result", "case": "x')
    # Strict JSON on disk (no Infinity/NaN tokens); the reader turns the strings back into floats.
    text = open(p).read()
    assert "Infinity" not in text and "NaN" not in text and '"max_ulp": "inf"' in text
    back = list(read_jsonl(str(p)))
    assert [x.case for x in back] == ["a/b", "a/inf"]
    assert back[1].max_ulp == float("inf") and back[1].max_abs_err != back[1].max_abs_err


def test_a_record_has_only_its_declared_fields():
    """Writers cannot invent a field (build or assign one Record does not declare); readers refuse a
    field they do not know; the contract fields are written in every record, the others when set."""
    r = Record(case="a/b", runner="xla:cpu", outcome="pass")
    with pytest.raises(TypeError, match="colour"):
        Record(case="a/b", runner="xla:cpu", colour="red")
    with pytest.raises(AttributeError, match="colour"):
        r.colour = "red"
    with pytest.raises(ValueError, match="does not know.*colour"):
        validate(dict(r.to_json(), colour="red"))
    assert list(r.to_json()) == ["schema", "type", *RESULT_FIELDS]
    r.platform, r.base_seed = "cpu", 0
    assert list(r.to_json())[-2:] == ["platform", "base_seed"]
    assert validate(json.loads(dumps(r))) == r


def _has_type(value, hint) -> bool:
    """``value`` is of the declared type ``hint`` (``float | None``, ``str``...); never a bool for a number."""
    types = tuple(t for t in typing.get_args(hint) if t is not type(None)) or (hint,)
    if value is None:
        return type(None) in typing.get_args(hint)
    return isinstance(value, types) and (bool in types or not isinstance(value, bool))


def test_every_recorded_record_reads_and_writes_back_as_it_was():
    """The records on disk (tests/data/reports: an H100 run of JAX 0.11.2 and a CPU run of 0.10.2,
    the latter from before strict JSON) read into Records whose fields have their declared types,
    and write back the same line, key for key and in the same order."""
    hints = typing.get_type_hints(Record)
    n = 0
    for path in RECORDED:
        for line in _result_lines(path):
            r = validate(dict(line))
            assert dumps(r) == dumps(line)
            wrong = {name: getattr(r, name) for name, hint in hints.items() if not _has_type(getattr(r, name), hint)}
            assert wrong == {}, (path, r.case)
            n += 1
    assert n > 200


def _strict_load(path):
    """json.load that refuses the non-JSON tokens Infinity, -Infinity and NaN."""
    def refuse(token):
        raise ValueError(f"not JSON: {token}")
    with open(path) as f:
        return json.load(f, parse_constant=refuse)


def test_merge_shards_of_one_machine_combine_other_machines_stay_apart(tmp_path):
    cpu = {"jax": "0.12.0.1", "devices": {"cpu:cpu": 1}, "host": "h", "cpu_model": "AMD EPYC 7B13"}
    gpu = {"jax": "0.12.0.1", "devices": {"gpu:NVIDIA H100 80GB HBM3": 1}, "host": "g",
           "cpu_model": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"}
    write(tmp_path / "s1" / "results-gw0.jsonl", [rec("f/a", "xla:cpu", "pass"), rec("f/b", "xla:cpu", "fail")], cpu)
    write(tmp_path / "s1" / "results-gw1.jsonl", [rec("g/c", "reference", "pass")], cpu)
    # A second shard of the same machine re-ran f/b later: its record wins.
    write(tmp_path / "s2.jsonl", [rec("f/b", "xla:cpu", "pass-with-allowance", ts=5.0, allowance="flush-to-zero"),
                                  rec("g/d", "pallas:interpret", "crash")], cpu)
    # Another machine ran the same (case, runner, seed): kept apart, never merged into the first.
    write(tmp_path / "gpu.jsonl", [rec("f/b", "xla:cpu", "fail", ts=9.0), rec("f/b", "xla:cuda", "pass")], gpu)
    res = merge([str(tmp_path / "s1"), str(tmp_path / "s2.jsonl"), str(tmp_path / "gpu.jsonl")])
    assert len(res.sources) == 4 and len(res.environments) == 4 and len(res.machines) == 2
    by = {(r.case, r.column): r for r in res.records}
    assert len(res.records) == len(by) == 6      # 4 of the CPU machine (f/b once), 2 of the GPU machine
    assert by[("f/b", "xla:cpu@EPYC 7B13 jax0.12.0.1")].outcome == "pass-with-allowance"
    assert by[("f/b", "xla:cpu@Xeon 8481C jax0.12.0.1")].outcome == "fail"
    assert by[("f/b", "xla:cuda@H100 jax0.12.0.1")].outcome == "pass"
    assert res.column_ids[0] == "reference@EPYC 7B13 jax0.12.0.1"
    assert res.matrix()[("f", "xla:cpu@EPYC 7B13 jax0.12.0.1")] == {"pass": 1, "pass-with-allowance": 1}
    assert sorted((r.case, r.column) for r in res.bad()) == [
        ("f/b", "xla:cpu@Xeon 8481C jax0.12.0.1"), ("g/d", "pallas:interpret@EPYC 7B13 jax0.12.0.1")]
    # Two machines whose columns would share a name (same device model, same JAX) are told apart by host.
    write(tmp_path / "twin.jsonl", [rec("f/b", "xla:cpu", "pass")], dict(cpu, host="h2"))
    twins = merge([str(tmp_path / "s1"), str(tmp_path / "twin.jsonl")])
    assert sorted(c for c in twins.column_ids if c.startswith("xla:cpu")) == [
        "xla:cpu@EPYC 7B13 jax0.12.0.1 on h", "xla:cpu@EPYC 7B13 jax0.12.0.1 on h2"]


DATA = os.path.join(os.path.dirname(__file__), "data", "reports")
RECORDED = [os.path.join(DATA, "h100-jax0.11.2-quick-subset.jsonl.gz"),
            os.path.join(DATA, "cpu-jax0.10.2-quick-subset.jsonl.gz")]


def _result_lines(path):
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if '"type": "result"' in line]


def test_merge_of_two_recorded_machines_keeps_every_record():
    """The H100's and this CPU VM's quick runs (tests/data/reports): same case ids, runners and
    seeds, both hosts named "vm". Merging once dropped the records one machine shared with the other."""
    raw = [r for p in RECORDED for r in _result_lines(p)]
    res = merge(RECORDED)
    assert len(res.records) == len(raw)
    assert len(res.machines) == 2
    assert {"xla:cuda@H100 jax0.11.2", "xla:cpu@vm jax0.11.2", "xla:cpu@vm jax0.10.2",
            "reference@vm jax0.10.2", "reference@vm jax0.11.2"} <= set(res.column_ids)
    cuda = res.columns["xla:cuda@H100 jax0.11.2"]
    env = res.machines[cuda.machine].environment
    assert env["nvidia_driver"].endswith("580.159.04") and cuda.device_full == "NVIDIA H100 80GB HBM3"
    # The primitive view: lgamma float32 fails only on the H100 (each raw record's outcome decides).
    view = primitive_view(res)
    fails = {col for col, recs in view["lax_special/lgamma/float32"].items() if any(r.outcome == "fail" for r in recs)}
    assert fails == {c for c in res.column_ids if any(r["outcome"] == "fail" and r["case"].startswith(
        "lax_special/lgamma/float32") and r["runner"] == res.columns[c].runner
        and r["jax_version"] == res.columns[c].jax for r in raw)} == {"xla:cuda@H100 jax0.11.2"}


def _results(tmp_path, name, records):
    p = tmp_path / f"{name}.jsonl"
    write(p, records, {"jax": "x", "host": "h", "devices": {"cpu:cpu": 1}})
    return merge([str(p)])


def test_history_new_fixed_changed_removed_and_trend(tmp_path):
    db = str(tmp_path / "history.sqlite")
    first = record_run(db, _results(tmp_path, "r1", [
        rec("f/a", "xla:cpu", "pass"), rec("f/b", "xla:cpu", "fail", max_ulp=7.0),
        rec("f/c", "xla:cpu", "pass", max_ulp=1.0), rec("f/d", "xla:cpu", "known-divergence"),
        rec("f/gone", "xla:cpu", "pass")]), run_id="night-1", timestamp=100.0)
    assert not first["has_previous"] and first["new_failures"] == []
    second_results = _results(tmp_path, "r2", [
        rec("f/a", "xla:cpu", "crash"), rec("f/b", "xla:cpu", "pass"),
        rec("f/c", "xla:cpu", "pass", max_ulp=2.0), rec("f/d", "xla:cpu", "pass"),
        rec("f/new", "xla:cpu", "fail")])
    second = record_run(db, second_results, run_id="night-2", timestamp=200.0)
    col = "xla:cpu@h jaxx"
    assert second["previous_run"] == "night-1"
    assert sorted(i["case"] for i in second["new_failures"]) == ["f/a", "f/new"]
    assert sorted(i["case"] for i in second["fixed"]) == ["f/b", "f/d"]       # an upstream fix shows up
    assert [(i["case"], i["max_ulp_before"], i["max_ulp"]) for i in second["changed"]] == [("f/c", 1.0, 2.0)]
    assert [i["case"] for i in second["new_cases"]] == ["f/new"]
    assert [(i["case"], i["column"], i["before"]) for i in second["removed"]] == [("f/gone", col, "pass")]
    # The trend: one point per run, counts per series (crash and fail are both "fail").
    assert [(p["run_id"], p["counts"]) for p in second["trend"][col]] == [
        ("night-1", {"pass": 3, "allowance": 0, "known": 1, "fail": 1}),
        ("night-2", {"pass": 3, "allowance": 0, "known": 0, "fail": 2})]
    # The same run recorded again replaces itself: still two runs, and the diff is against night-1.
    again = record_run(db, second_results, run_id="night-2", timestamp=200.0)
    assert again["previous_run"] == "night-1" and len(again["trend"][col]) == 2
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2
    assert con.execute("SELECT COUNT(*) FROM outcomes").fetchone()[0] == 10
    con.close()


def test_history_reads_a_database_of_the_first_layout(tmp_path):
    """Databases written before columns existed (one row per run, case and runner) keep their runs."""
    db = str(tmp_path / "old.sqlite")
    con = sqlite3.connect(db)
    con.executescript("""
CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, timestamp REAL, environment TEXT);
CREATE TABLE results (run INTEGER REFERENCES runs(id), case_id TEXT, runner TEXT, outcome TEXT, max_ulp REAL,
                      allowance TEXT, known_divergence TEXT, PRIMARY KEY (run, case_id, runner));
INSERT INTO runs VALUES (1, 'old-night', 50.0, '{}');
INSERT INTO results VALUES (1, 'f/a', 'xla:cpu', 'fail', NULL, NULL, NULL);
""")
    con.commit()
    con.close()
    out = record_run(db, _results(tmp_path, "r", [rec("f/a", "xla:cpu", "pass")]), run_id="new", timestamp=60.0)
    assert out["previous_run"] == "old-night"
    assert [p["counts"]["fail"] for p in out["trend"]["xla:cpu"]] == [1]
    assert [p["counts"]["pass"] for p in out["trend"]["xla:cpu@h jaxx"]] == [1]


KD_SUMMARY = "XLA:CPU's own approximations exceed the budget " + "and more words " * 40


def _sample_results(tmp_path):
    env = {"jax": "0.12.0.1", "jaxlib": "0.12.0.1", "devices": {"cpu:cpu": 1}, "host": "h"}
    records = [
        rec("lax_special/exp/float32/3x5", "xla:cpu", "pass-with-allowance", allowance="flush-to-zero",
            max_ulp=116041.0, mismatches=1, detail="ULP(1)", modes=["ULP(1)"]),
        rec("lax_special/exp2/float32/3x5", "xla:cpu", "fail", max_ulp=16.0, max_abs_err=5.7e17, mismatches=3,
            first_mismatch={"index": [0, 2], "reference": "5.9041358849616064e+23", "backend": "5.904e+23"},
            first_divergent_eqn={"index": 0, "primitive": "exp2", "eqn": "a:f32[3,5] = exp2 b"}, detail="ULP(8)",
            modes=["ULP(8)"]),
        rec("lax_special/exp2/float32/3x5", "reference", "pass"),
        rec("lax_special/lgamma/float32/specials", "xla:cpu", "known-divergence", max_ulp=float("inf"),
            max_abs_err=float("inf"), mismatches=4, detail="ULP(8)", modes=["ULP(8)"],
            known_divergence={"id": "xla-cpu-special-functions", "link": "spec/divergences.py XLA_CPU_CASE_ULP",
                              "summary": KD_SUMMARY}),
        rec("lax_special/digamma/float32/specials", "xla:cpu", "known-divergence", max_ulp=9.0, mismatches=1,
            known_divergence={"id": "xla-cpu-special-functions", "link": "spec/divergences.py XLA_CPU_CASE_ULP",
                              "summary": KD_SUMMARY}),
        rec("pallas/tpu_prng/random_bits", "pallas:tpu-interpret", "known-divergence",
            known_divergence={"id": "tpu-interpret-prng-zeros", "link": "https://example.org/prng", "summary": "z"}),
        rec("pallas/tpu_prng/random_bits", "pallas:interpret", "backend-unsupported", detail="prng_seed"),
        rec("testing/abort", "xla:cpu", "crash", output="worker killed by SIGABRT <script>alert(1)</script>"),
        rec("testing/hang", "xla:cpu", "timeout", output="no result after 3 s"),
        rec("lax_elementwise/add/int32/3x5", "xla:cpu", "reference-unsupported"),
        rec("lax_elementwise/shift_left/int32/3x5", "xla:cpu", "fail", mismatches=2, max_abs_err=64.0, modes=["EXACT"],
            detail="EXACT", first_mismatch={"index": [1, 1], "reference": "0", "backend": "64"}),
    ]
    p = tmp_path / "in.jsonl"
    write(p, records, env)
    return merge([str(p)])


def test_report_files(tmp_path):
    res = _sample_results(tmp_path)
    out = tmp_path / "report"
    cpu = "xla:cpu@h jax0.12.0.1"
    paths = write_report(res, str(out), history={
        "has_previous": True, "previous_run": "r0", "run": "r1",
        "new_failures": [{"case": "testing/abort", "column": cpu, "outcome": "crash", "before": "pass"}],
        "fixed": [], "changed": [], "new_cases": [], "removed": [
            {"case": "f/gone", "column": cpu, "before": "pass", "outcome": None}]})
    assert sorted(os.path.basename(p) for p in paths.values()) == ["index.html", "junit.xml", "results.json",
                                                                  "summary.md"]
    doc = _strict_load(out / "results.json")                  # valid JSON: no Infinity
    assert doc["schema"] == SCHEMA_VERSION and len(doc["results"]) == 11
    lgamma = next(r for r in doc["results"] if r["case"] == "lax_special/lgamma/float32/specials")
    assert lgamma["max_ulp"] == "inf" and lgamma["column"] == cpu
    assert doc["summary"][cpu] == {"pass-with-allowance": 1, "fail": 2, "crash": 1, "timeout": 1,
                                   "reference-unsupported": 1, "known-divergence": 2}
    suites = {s.get("name"): s for s in ET.parse(out / "junit.xml").getroot()}
    suite = suites[cpu]
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("8", "2", "2", "3")
    failure = suite.find("testcase[@name='lax_special/exp2/float32/3x5']/failure")
    assert "jax-conformance repro lax_special/exp2/float32/3x5 --runner xla:cpu --seed 0" in failure.text
    md = open(out / "summary.md").read()
    assert f"| {cpu} | 8 |" in md and "flush-to-zero" in md and "tpu-interpret-prng-zeros" in md
    assert "new failures 1" in md and "removed 1" in md and "f/gone" in md
    assert md.count(KD_SUMMARY.strip()) == 1                   # a divergence's summary once, not per record
    page = open(out / "index.html").read()
    assert "<script>alert" not in page and "&lt;script&gt;" in page     # values are escaped
    assert page.count("<svg") >= 1 and 'id="matrix"' in page and 'id="primitive-view"' in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")   # self-contained
    assert page.count(html.escape(KD_SUMMARY.strip())) == 1
    assert "{&#x27;id&#x27;" not in page and "{'id'" not in page          # no Python dicts
    assert '<a href="https://example.org/prng">https://example.org/prng</a>' in page   # a link is a link
    assert "run" in page and "started" in page and "1970-01-01 00:00:01 UTC" in page   # run id, date, duration
    # What happened, beyond the mode: the allowance record names its allowance; integers have no ulp.
    allowance = re.search(r'id="r-[^"]*"[^>]*><summary><b>pass-with-allowance.*?</details>', page).group(0)
    assert "agrees with the reference recomputed under allowance flush-to-zero" in allowance
    shift = re.search(r'<summary><b>fail</b> <code>lax_elementwise/shift_left.*?</details>', page).group(0)
    assert "2 elements differ (max abs err 64)" in shift and "ulp" not in shift


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


# Run in the page by the headless browser: every in-page link's target exists, every section has
# a size, and nothing is loaded from elsewhere. The result lands in an attribute --dump-dom shows.
_CHECK_SCRIPT = """<script>
(() => {
  const links = [...document.querySelectorAll('a[href^="#"]')].map(a => decodeURIComponent(a.getAttribute('href').slice(1)));
  const broken = links.filter(id => !document.getElementById(id));
  const sections = [...document.querySelectorAll('section')];
  const empty = sections.filter(s => { const r = s.getBoundingClientRect(); return !(r.width > 0 && r.height > 0); })
                        .map(s => s.id);
  const svgs = [...document.querySelectorAll('svg')].filter(s => s.getBoundingClientRect().height > 0).length;
  const loads = [...document.querySelectorAll('[src], link[href]')].map(e => e.getAttribute('src') || e.getAttribute('href'));
  document.documentElement.setAttribute('data-check', JSON.stringify(
    {links: links.length, broken, sections: sections.map(s => s.id), empty, svgs, loads}));
})();
</script></body>"""


def _browser_check(browser, page, tmp_path):
    checked = tmp_path / "checked.html"
    checked.write_text(open(page).read().replace("</body>", _CHECK_SCRIPT))
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", checked.as_uri()]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=180).stdout
    m = re.search(r'data-check="([^"]*)"', dom)
    assert m, dom[:2000]
    return dom, json.loads(html.unescape(m.group(1)))


def test_html_report_in_headless_chromium(tmp_path):
    """The merged report of the two recorded machines after two history runs, as a real browser
    builds it: every in-page link resolves, every section renders, the trend and histograms draw."""
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium on this machine (Debian: apt-get install -y chromium); HTML not browser-checked")
    db = str(tmp_path / "h.sqlite")
    record_run(db, merge(RECORDED[:1]), run_id="night-1")      # the H100 alone
    res = merge(RECORDED)                                     # then both machines
    history = record_run(db, res, run_id="night-2")
    out = tmp_path / "report"
    write_report(res, str(out), history)
    dom, check = _browser_check(browser, out / "index.html", tmp_path)
    assert check["broken"] == [] and check["links"] > 100, check
    assert check["empty"] == [] and check["loads"] == [], check
    assert set(check["sections"]) >= {"runs", "changes", "trend", "columns", "families", "primitives", "known",
                                      "allowances", "errors", "machines", "details"}
    # Trend pictures: one per column; histograms: one per column with float cases.
    assert dom.count('class="trend"') == len(res.column_ids) and check["svgs"] >= len(res.column_ids)
    root_start = dom.index('<table id="matrix"')
    matrix = dom[root_start: dom.index("</table>", root_start)]
    assert matrix.count("<tr>") == 1 + len(res.families)          # header + one row per family
    assert "xla:cuda@H100" in matrix and "xla:cpu@vm" in matrix
    assert dom.count('class="rec"') == sum(r.outcome != "pass" for r in res.records)
    assert "new cases: " + str(sum(1 for p in RECORDED[1:] for _ in _result_lines(p))) in dom
    # Each machine's run: its id, start and duration (from the records' own timestamps).
    for p in RECORDED:
        lines = _result_lines(p)
        run_id = lines[0]["run_id"]
        start = min(r["timestamp"] - (r.get("total_s") or r.get("duration_s") or 0) for r in lines)
        assert run_id in dom and time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(start)) in dom
    assert dom.count(">cases (log)</text>") == dom.count('class="hist"')      # every histogram has a y axis
    # A screenshot proves it renders (non-empty PNG).
    png = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    f"--user-data-dir={tmp_path / 'profile2'}", f"--screenshot={png}", "--window-size=1200,900",
                    (out / "index.html").as_uri()], capture_output=True, timeout=180)
    assert png.exists() and png.stat().st_size > 5000


def test_report_shows_the_seed_search(tmp_path):
    import re
    shrunk = rec("lax_special/erfc/float64/scalar", "xla:cpu", "fail", max_ulp=14.0, mismatches=1, detail="ULP(5)",
                 seed=67, base_seed=0, examples=12, first_failing_seed=187203,
                 reproducer="jax-conformance repro lax_special/erfc/float64/scalar --runner xla:cpu --seed 67")
    searched = rec("lax_special/exp/float32/3x5", "xla:cpu", "pass-with-allowance", allowance="flush-to-zero",
                   base_seed=0, examples=4)
    quick = rec("lax_special/exp2/float32/3x5", "xla:cpu", "known-divergence", examples=1, base_seed=0,
                known_divergence={"id": "x", "link": "https://example/x"})
    timeout = rec("random/split_fold_in/threefry4x32-partitionable", "xla:cpu", "known-divergence",
                  raw_outcome="timeout", known_divergence={"id": "hang", "link": "https://example/hang"})
    p = tmp_path / "in.jsonl"
    write(p, [shrunk, searched, quick, timeout])
    out = tmp_path / "report"
    write_report(merge([str(p)]), str(out))
    page = open(out / "index.html").read()
    recs = {re.search(r"<code>([^<]*)</code> on", d).group(1): d for d in page.split('<details class="rec"')[1:]}

    def row(case, name):
        m = re.search(rf'<tr class="{name}"><th class="l">[^<]*</th><td class="l"><code>([^<]*)</code>', recs[case])
        return m and m.group(1)
    assert row(shrunk.case, "examples") == "12" and row(shrunk.case, "first-failing-seed") == "187203"
    assert row(shrunk.case, "seed") == "67" and row(shrunk.case, "base-seed") == "0"
    assert row(shrunk.case, "search") == ("hypothesis searched 12 seeds from base seed 0; first failing seed "
                                             "187203, shrunk to 67")
    assert row(searched.case, "examples") == "4" and row(searched.case, "first-failing-seed") is None
    assert row(searched.case, "search") == "hypothesis searched 4 seeds from base seed 0"
    assert row(quick.case, "seed") == "0" and row(quick.case, "search") is None   # one seed: no search
    assert row(timeout.case, "backend-outcome") == "timeout"
    md = open(out / "summary.md").read()
    assert "(hypothesis searched 12 seeds from base seed 0; first failing seed 187203, shrunk to 67)" in md
    failure = ET.parse(out / "junit.xml").getroot().find(".//testcase[@name='lax_special/erfc/float64/scalar']/failure")
    assert "first failing seed 187203, shrunk to 67" in failure.text and "--seed 67" in failure.text
