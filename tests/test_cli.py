"""The front door: the README's Python example, and the `jax-conformance` commands a new user types
next (list piped into head, devices, repro of a printed reproducer, report with history, run's
console output)."""
import gzip
import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

from conformance import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "reports")
CPU_RUN = os.path.join(DATA, "cpu-jax0.10.2-quick-subset.jsonl.gz")
H100_RUN = os.path.join(DATA, "h100-jax0.11.2-quick-subset.jsonl.gz")


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))


def test_readme_python_example_runs_as_written():
    readme = open(os.path.join(ROOT, "README.md")).read()
    section = readme[readme.index("## Using the reference interpreter"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    x, y = scope["x"], scope["y"]
    want = np.tanh(x.astype(np.float64)) @ y.astype(np.float64)      # NumPy in float64, independently
    np.testing.assert_allclose(scope["out"], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(scope["outs"][0]), scope["out"])


def test_list_into_a_closed_pipe_exits_quietly():
    """`jax-conformance list | head -1`: the reader goes away after one line; the listing (far more than
    a pipe buffer) must end without a BrokenPipeError traceback and with exit status 0."""
    p = subprocess.Popen([sys.executable, "-m", "conformance", "list"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=_env(), cwd=ROOT)
    first = p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 0, err
    assert first.count(b"\t") == 2 and "Traceback" not in err and "BrokenPipe" not in err


def test_devices_gives_the_real_reason_for_gpu_interpret(capsys):
    """Every supported JAX has Mosaic GPU's interpret mode (JAX 0.10.2 keeps its parameters in
    jax._src.pallas.mosaic_gpu.interpret.params, 0.11 and later export InterpretGPUParams): the
    runner is available exactly where Mosaic GPU imports, and otherwise names why it does not
    (JAX 0.10.2 without absl-py), never a missing mode."""
    assert cli.main(["devices"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("pallas:gpu-interpret "))
    try:
        import jax.experimental.pallas.mosaic_gpu  # noqa: F401
        why = None
    except ImportError as e:
        why = str(e)
    assert "has no Mosaic GPU interpret mode" not in line
    if why is None:
        assert line.split()[1:] == ["available"], line
    else:
        assert "unavailable" in line and why in line, line


def test_printed_reproducer_runs_and_shows_inputs_at_the_first_mismatch(capsys):
    """The reproducer a record prints runs as printed (`jax-conformance` is the project's console
    script, README: `source .venv/bin/activate`), and `repro` prints each input at the first
    mismatching index beside both outputs: max(arg0, arg1) there is the reference's value."""
    import tomllib
    scripts = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]["scripts"]
    assert scripts["jax-conformance"] == "conformance.cli:main"
    assert ".venv/bin/activate" in open(os.path.join(ROOT, "README.md")).read()
    case = "lax_elementwise/max/float32/3x5"
    argv = shlex.split(f"jax-conformance repro {case} --runner xla:cpu --seed 0")
    cli.main(argv[1:])
    out = capsys.readouterr().out
    start = out.index("\n{\n") + 1
    rec = json.loads(out[start: out.index("\n}\n", start) + 2])
    assert shlex.split(rec["reproducer"]) == argv
    fm = rec["first_mismatch"]
    if fm is None:
        assert "first mismatch:" not in out
        pytest.skip("XLA:CPU here computes max(float32) without flushing subnormals: no mismatch to show")
    assert f"  reference: {fm['reference']}" in out and f"  backend:   {fm['backend']}" in out

    def value(name):
        m = re.search(rf"^  {name}\[[0-9, ]*\] = .* \(bits (0x[0-9a-f]+)\)$", out, re.M)
        return np.array(int(m.group(1), 16), np.uint32).view(np.float32)
    from conformance.cases import get
    inputs = get(case).make_inputs(0)
    index = tuple(fm["index"])
    a, b = value("arg0"), value("arg1")
    assert a.tobytes() == inputs[0][index].tobytes() and b.tobytes() == inputs[1][index].tobytes()
    ref_bits = int(re.search(r"bits (0x[0-9a-f]+)", fm["reference"]).group(1), 16)
    assert np.maximum(a, b).view(np.uint32) == ref_bits


def _result_records(path):
    with gzip.open(path, "rt") as f:
        return [r for r in map(json.loads, f) if r["type"] == "result"]


def test_report_console_summary_shows_explained_timeouts_and_changes(tmp_path, capsys):
    db = str(tmp_path / "h.sqlite")
    assert cli.main(["report", H100_RUN, "--out", str(tmp_path / "r1"), "--history", db]) == 0
    first = capsys.readouterr().out
    assert "First run in this history database." in first
    assert cli.main(["report", CPU_RUN, "--out", str(tmp_path / "r2"), "--history", db]) == 0
    out = capsys.readouterr().out
    # The 60-second threefry4x32 hang of JAX 0.10.2's XLA:CPU is a known divergence, and still shown.
    hangs = [r for r in _result_records(CPU_RUN) if r.get("raw_outcome") == "timeout"]
    assert hangs
    for r in hangs:
        assert (f"{r['case']} on xla:cpu@vm jax0.10.2: timeout ({r['known_divergence']['id']})") in out
    # What changed: every H100 record is gone from this run, every CPU record is new.
    n_h100, n_cpu = len(_result_records(H100_RUN)), len(_result_records(CPU_RUN))
    assert f"new cases {n_cpu}, removed {n_h100}" in out
    assert "max ulp None" not in out


def test_run_says_bringing_up_nodes_once(tmp_path, monkeypatch, capfd):
    """xdist's status line under `run`'s -q printed "bringing up nodes..." twice: run the pytest
    command `run` builds (with all its options) on a one-test directory instead of the suite, and count."""
    pytest.importorskip("xdist")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_one.py").write_text("def test_one():\n    pass\n")
    package = os.path.dirname(cli.__file__)

    class OnTheOneTest(subprocess.Popen):      # every way of starting a process goes through Popen
        def __init__(self, args, *a, **kw):
            if isinstance(args, (list, tuple)):
                args = [str(suite) if str(c) == package else c for c in args]
            super().__init__(args, *a, **kw)
    monkeypatch.setattr(subprocess, "Popen", OnTheOneTest)
    cli.main(["run", "--runners", "reference", "--out", str(tmp_path / "out"), "-n", "2"])
    out = capfd.readouterr()
    text = out.out + out.err
    assert "1 passed" in text, text[-3000:]
    assert text.count("bringing up nodes") <= 1, text[-3000:]


def test_the_repository_stands_alone():
    """A clone has only its own files: nothing in the tree may point to the workspace beside it (cite
    the primary source, or the project's own docs/)."""
    offenders = []
    for root, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "node_modules")]
        for name in files:
            if not name.endswith((".py", ".md", ".txt", ".toml", ".json", ".cfg", ".ini", ".yml", ".yaml")) \
                    and name != "Makefile":
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    if re.search(r"\.\./shared|(?<![\w/])research/\w+\.md", line):
                        offenders.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
    assert offenders == [], "\n".join(offenders)
