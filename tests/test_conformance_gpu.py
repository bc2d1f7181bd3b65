"""The suite on accelerator machines, tested without one: per-process device settings and the
spreading of workers over GPUs (fake nvidia-smi), harness errors and runs with no results, the
environment record's GPU fields (fake devices), which compiler lowers a Pallas kernel, the
reference's platform, the classification of backend failures, and saved outputs with recheck
(narrow dtypes; outputs recorded on an H100)."""
import json
import os
import stat
import subprocess
import sys
import types

import ml_dtypes
import numpy as np
import pytest

from conformance import execute as E
from conformance.classify import classify_failure
from conformance import outputs as saved
from conformance import process_env
from hardware_runners import base as B
from reports.schema import BACKEND_UNSUPPORTED, CRASH
from hardware_runners import environment as ENV
from hardware_runners import pallas_lowering as PL

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
H100_OUTPUTS = os.path.join(HERE, "data", "h100_outputs")
# The toy cases of tests/test_conformance_plugin.py, served through JAX_CONFORMANCE_CASES.
TOY_ENV = {k: v for k, v in os.environ.items() if k not in process_env.MEMORY_VARIABLES + ("CUDA_VISIBLE_DEVICES",)}
TOY_ENV.update(PYTHONPATH=os.pathsep.join([ROOT, HERE]), JAX_PLATFORMS="cpu",
               JAX_CONFORMANCE_CASES="test_conformance_plugin")


class FakeDevice:
    """What the harness reads of a jax Device."""

    def __init__(self, platform="gpu", id=0, kind="NVIDIA H100 80GB HBM3", cc="9.0", cores=132):
        self.platform, self.id, self.device_kind = platform, id, kind
        if cc is not None:
            self.compute_capability = cc
        self.core_count = cores

    def __repr__(self):
        return f"FakeDevice({self.platform}:{self.id})"


# --- the environment of the processes that run cases ---------------------------------------
def test_process_env_sets_memory_sharing_and_one_gpu_per_xdist_worker():
    four = lambda: ["0", "1", "2", "3"]     # noqa: E731  (a machine with four GPUs)
    assert process_env.settings({}, four) == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}   # not a worker
    assert process_env.settings({"PYTEST_XDIST_WORKER": "gw5"}, four) == {
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "CUDA_VISIBLE_DEVICES": "1"}
    workers = [process_env.settings({"PYTEST_XDIST_WORKER": f"gw{k}"}, four)["CUDA_VISIBLE_DEVICES"]
               for k in range(8)]
    assert workers == ["0", "1", "2", "3", "0", "1", "2", "3"]   # every GPU used, evenly
    # the user's choices stand: their memory setting, their list of GPUs, no spreading at all
    for var in process_env.MEMORY_VARIABLES:
        assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in process_env.settings({var: "0.3"}, four)
    assert process_env.settings({"PYTEST_XDIST_WORKER": "gw1", "CUDA_VISIBLE_DEVICES": "5,7"}, four)[
        "CUDA_VISIBLE_DEVICES"] == "7"
    assert "CUDA_VISIBLE_DEVICES" not in process_env.settings(
        {"PYTEST_XDIST_WORKER": "gw1", process_env.SPREAD_SWITCH: "0"}, four)
    assert "CUDA_VISIBLE_DEVICES" not in process_env.settings({"PYTEST_XDIST_WORKER": "gw1"}, lambda: ["0"])
    assert "CUDA_VISIBLE_DEVICES" not in process_env.settings({"PYTEST_XDIST_WORKER": "gw1"}, lambda: [])
    env = {"PYTEST_XDIST_WORKER": "gw2"}
    assert process_env.apply(env, four) == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "CUDA_VISIBLE_DEVICES": "2"}
    assert env["CUDA_VISIBLE_DEVICES"] == "2" and process_env.apply(env, four) == {}   # idempotent


def test_settings_made_after_an_accelerator_backend_started_are_flagged(monkeypatch):
    environ = {"PYTEST_XDIST_WORKER": "gw0"}
    monkeypatch.setattr(process_env.os, "environ", environ)
    monkeypatch.setattr(process_env, "APPLIED", {})
    monkeypatch.setattr(process_env, "LATE", {})
    monkeypatch.setattr(process_env, "_jax_backend_started", lambda: True)
    with pytest.warns(UserWarning, match="before the conformance suite set"):
        process_env.apply(find=lambda: ["0", "1"])
    assert process_env.LATE == process_env.APPLIED == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                                                        "CUDA_VISIBLE_DEVICES": "0"}


def _fake_nvidia_smi(tmp_path, n: int) -> str:
    """A directory with an ``nvidia-smi`` that reports ``n`` GPUs (indices, one a line)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "nvidia-smi"
    tool.write_text("#!/bin/sh\n" + "".join(f"echo {i}\n" for i in range(n)))
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return str(bindir)


def test_xdist_workers_spread_over_the_gpus_nvidia_smi_reports(tmp_path):
    """Two pytest-xdist workers on a machine whose nvidia-smi reports two GPUs: each worker's
    environment record shows the GPU it was given (gwK -> GPU K) and memory preallocation off."""
    env = dict(TOY_ENV, PATH=_fake_nvidia_smi(tmp_path, 2) + os.pathsep + os.environ["PATH"])
    res = tmp_path / "res"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", os.path.join(ROOT, "conformance"), "-p", "no:cacheprovider", "-q",
         "-o", "addopts=", "--runners", "xla:cpu", "--case-filter", "testing/ok", "--case-isolation", "none",
         "--results-dir", str(res), "-n", "2", "--dist", "loadgroup"],
        capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [json.loads(line) for f in res.glob("*.jsonl") for line in open(f)]
    envs = [line for line in lines if line["type"] == "environment"]
    assert envs and all(e["worker"] in ("gw0", "gw1") for e in envs)
    for e in envs:
        applied = e["environment"]["process_env"]
        assert applied["set"] == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "CUDA_VISIBLE_DEVICES": e["worker"][2:]}
        assert applied["too_late"] == {}
        assert e["environment"]["jax_env"]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    results = [line for line in lines if line["type"] == "result"]
    assert {r["case"] for r in results} == {"testing/ok", "testing/ok_heavy"}
    assert all(r["device"] == {"platform": "cpu", "id": 0, "kind": "cpu"} and r["platform"] == "cpu" for r in results)


def test_a_record_names_the_gpu_it_ran_on(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert B.describe_device(FakeDevice()) == {"platform": "gpu", "id": 0, "kind": "NVIDIA H100 80GB HBM3",
                                               "compute_capability": "9.0", "cuda_visible_devices": "3"}
    assert "cuda_visible_devices" not in B.describe_device(FakeDevice(platform="cpu", kind="cpu", cc=None))


# --- harness errors: never an exit status of 0 -------------------------------------------------
def test_a_run_whose_case_workers_cannot_start_exits_non_zero_and_says_why(tmp_path):
    """The H100 main job: every worker failed at start-up, 0 results, exit status 0. Here a
    sitecustomize makes every isolated case worker exit at start-up."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        "if 'conformance.worker' in getattr(sys, 'orig_argv', []):\n"
        "    print('injected start-up failure of the case worker', flush=True)\n"
        "    sys.exit(3)\n")
    env = dict(TOY_ENV, PYTHONPATH=os.pathsep.join([str(site), TOY_ENV["PYTHONPATH"]]))
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "conformance", "run", "--runners", "xla:cpu", "--cases",
                           "testing/ok_heavy", "--out", str(out), "-n", "0"],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-3000:]
    assert "0 results" in text and "the run recorded no results" in text
    assert "harness errors" in text and "injected start-up failure of the case worker" in text
    errors = json.load(open(out / "results" / "harness-errors.json"))
    assert errors["results"] == 0 and len(errors["errors"]) == 1
    assert "conformance worker failed to start" in errors["errors"][0]["error"]
    # The same harness with its workers healthy: results, exit 0, no harness-errors file left over;
    # --save-outputs brings the outputs back from the isolated worker, and recheck judges them again.
    proc = subprocess.run([sys.executable, "-m", "conformance", "run", "--runners", "xla:cpu", "--cases",
                           "testing/ok_heavy", "--out", str(out), "-n", "0", "--save-outputs"],
                          capture_output=True, text=True, env=TOY_ENV, cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (out / "results" / "harness-errors.json").exists()
    (path,) = saved.find([str(out / "outputs")])
    (case_id, seed, outs), = list(saved.read(path))
    from conformance.case import rng_for
    x = rng_for("testing/ok_heavy", 0).random(4).astype(np.float32)   # the toy case's inputs, by hand
    assert (saved.runner_of(path), case_id, seed) == ("xla:cpu", "testing/ok_heavy", 0)
    np.testing.assert_array_equal(outs[0], x * 2)
    proc = subprocess.run([sys.executable, "-m", "conformance", "recheck", str(out)],
                          capture_output=True, text=True, env=TOY_ENV, cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0 and "xla:cpu: pass 1" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


# --- the environment record ----------------------------------------------------------------------
def test_environment_record_gpu_fields_from_fake_devices_and_plugin(tmp_path):
    devices = [FakeDevice(id=0), FakeDevice(id=1, kind="NVIDIA A100-SXM4-80GB", cc="8.0", cores=108),
               FakeDevice(platform="cpu", kind="cpu", cc=None)]
    assert ENV.accelerators(devices) == [
        {"platform": "gpu", "id": 0, "device_kind": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
         "core_count": 132},
        {"platform": "gpu", "id": 1, "device_kind": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0",
         "core_count": 108}]

    def missing():
        raise RuntimeError("libcupti.so not found")
    plugin = types.SimpleNamespace(cuda_runtime_get_version=lambda: 13000, cudnn_get_version=lambda: 91000,
                                   cupti_get_version=missing, cuda_compute_capability=lambda d: 90)
    assert ENV.cuda_library_versions(plugin) == {
        "cuda_runtime_get_version": 13000, "cudnn_get_version": 91000,
        "cupti_get_version": "unavailable: RuntimeError: libcupti.so not found"}
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                       "flags\t\t: fpu avx512f fma avx2\n\nprocessor\t: 1\nmodel name\t: other\n")
    cpu = ENV.host_cpu(str(cpuinfo))
    assert cpu["model_name"] == "Intel(R) Xeon(R) Platinum 8480+" and cpu["vendor_id"] == "GenuineIntel"
    assert cpu["flags"] == ["avx2", "avx512f", "fma", "fpu"]
    # This machine (a CPU run records the host CPU part; no accelerators, no CUDA plugin here).
    env = ENV.environment()
    assert env["accelerators"] == [] and env["cuda_libraries"] == {}
    assert "jax_enable_x64" in env["jax_config"] and "xla_flags" in env
    if os.path.exists("/proc/cpuinfo"):
        first = open("/proc/cpuinfo").read().split("\n\n")[0]
        names = [line.split(":", 1)[1].strip() for line in first.splitlines() if line.startswith("model name")]
        assert env["host_cpu"].get("model_name") == (names[0] if names else None)
        assert env["host_cpu"]["flags"]


# --- runners that do what their names say ----------------------------------------------------------
def test_mosaic_gpu_needs_a_hopper_or_newer_gpu():
    assert PL.compute_capability_ok(FakeDevice(cc="9.0"))[0]
    assert PL.compute_capability_ok(FakeDevice(cc="10.0"))[0]
    ok, why = PL.compute_capability_ok(FakeDevice(kind="NVIDIA A100-SXM4-80GB", cc="8.0"))
    assert not ok and "8.0" in why and "9.0" in why and "A100" in why
    assert not PL.compute_capability_ok(FakeDevice(kind="AMD MI300X", cc="gfx942"))[0]
    assert not PL.compute_capability_ok(FakeDevice(cc=None))[0]


def test_detection_says_why_a_gpu_pallas_runner_cannot_run(monkeypatch):
    triton, mosaic = B.get_runner("pallas:triton"), B.get_runner("pallas:mosaic-gpu")
    for r in (triton, mosaic):                     # this machine: no GPU
        ok, why = r.available()
        assert not ok and "gpu" in why
    gpus = {"gpu": [FakeDevice(kind="NVIDIA A100-SXM4-80GB", cc="8.0")]}
    monkeypatch.setattr(B, "_devices", lambda platform: gpus.get(platform, []))
    monkeypatch.setattr(PL, "importable", lambda compiler: (True, ""))
    assert triton.available() == (True, "")
    ok, why = mosaic.available()
    assert not ok and "compute capability 8.0" in why
    gpus["gpu"] = [FakeDevice(cc="9.0")]
    assert mosaic.available() == (True, "")
    monkeypatch.setattr(PL, "importable", lambda compiler: (False, f"this JAX cannot load its {compiler} lowering"))
    ok, why = mosaic.available()
    assert not ok and "cannot load its mosaic-gpu lowering" in why


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1


def _traced(fn, x=np.zeros((8, 128), np.float32)):
    import jax
    return jax.make_jaxpr(fn)(x)


def test_a_plain_pallas_call_lowers_through_the_runners_own_compiler():
    """pl.pallas_call without compiler params: JAX 0.10.2 picks Mosaic GPU by default
    (jax_pallas_use_mosaic_gpu=True), 0.11+ only Triton. Under each runner's forced default the
    Triton runner gets Triton on every version; Mosaic GPU gets it only where JAX has the switch."""
    import jax
    from jax.experimental import pallas as pl
    fn = lambda x: pl.pallas_call(_add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)  # noqa: E731
    jaxpr = _traced(fn)
    has_switch = PL.USE_MOSAIC_GPU in jax.config.values
    if has_switch:
        assert jax.config.values[PL.USE_MOSAIC_GPU] is True     # JAX 0.10.2's default is Mosaic GPU
        assert PL.kernel_compilers(jaxpr, True)[0][1] == PL.MOSAIC_GPU
    assert PL.check_program(PL.TRITON, jaxpr) == (True, "")
    ok, why = PL.check_program(PL.MOSAIC_GPU, jaxpr)
    assert ok == has_switch, why
    if not has_switch:
        assert "through Triton" in why
    # per case, before any GPU is needed: a generic kernel on Mosaic GPU only where JAX can switch
    from conformance.case import PALLAS, Case
    generic = Case(id="t/generic", fn=None, build=lambda i: None, inputs=None, kind=PALLAS,
                   pallas_targets=("generic",))
    ok, why = B.get_runner("pallas:mosaic-gpu").supports(generic.as_program())
    assert ok == has_switch and (has_switch or "through Triton only" in why)
    assert B.get_runner("pallas:triton").supports(generic.as_program()) == (True, "")
    with PL.forced_default(PL.TRITON):
        assert not has_switch or jax.config.values[PL.USE_MOSAIC_GPU] is False
    assert not has_switch or jax.config.values[PL.USE_MOSAIC_GPU] is True   # restored
    # Triton's compiler params: Triton for the Triton runner only.
    from jax.experimental.pallas import triton as pltriton
    params = pltriton.CompilerParams()
    jaxpr = _traced(lambda x: pl.pallas_call(_add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                             compiler_params=params)(x))
    assert PL.check_program(PL.TRITON, jaxpr) == (True, "")
    assert not PL.check_program(PL.MOSAIC_GPU, jaxpr)[0]
    assert PL.check_program(PL.TRITON, _traced(lambda x: x + 1)) == (False, "the program has no Pallas kernel")


def _mosaic_gpu():
    try:
        from jax.experimental.pallas import mosaic_gpu as plgpu
        import jax._src.pallas.mosaic_gpu.pallas_call_registration  # noqa: F401
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"Mosaic GPU's Pallas module does not import here ({type(e).__name__}: {e}); "
                    "on JAX 0.10.2 it needs absl-py: the project's mosaic-gpu extra, which make "
                    "test installs")
    return plgpu


def test_mosaic_gpu_kernels_are_told_apart_and_the_h100_assert_is_refused_up_front():
    """The H100 evidence: pallas_call with Mosaic GPU compiler params crashed in gpu_lowering
    (``assert rule is not None``) on JAX 0.11.2. JAX's own CUDA lowering of that program still
    asserts here (no GPU needed to reach it); the runner refuses it before lowering, saying why;
    a plgpu.kernel program is Mosaic GPU's."""
    import jax
    from jax.experimental import pallas as pl
    plgpu = _mosaic_gpu()
    fn = lambda x: pl.pallas_call(_add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),  # noqa: E731
                                  compiler_params=plgpu.CompilerParams())(x)
    x = np.zeros((8, 128), np.float32)
    from jax._src.pallas import core as pallas_core
    registered = pallas_core.get_lowering_rule(plgpu.CompilerParams, "gpu") is not None
    ok, why = PL.check_program(PL.MOSAIC_GPU, _traced(fn))
    assert ok == registered, why
    if not registered:
        assert "assert rule is not None" in why and "plgpu.kernel" in why
        with pytest.raises(AssertionError):
            jax.jit(fn).trace(x).lower(lowering_platforms=("cuda",))
    kernel = plgpu.kernel(_add_one, out_type=jax.ShapeDtypeStruct((8, 128), np.float32))
    assert PL.check_program(PL.MOSAIC_GPU, _traced(kernel)) == (True, "")
    ok, why = PL.check_program(PL.TRITON, _traced(kernel))
    assert not ok and "would not lower through triton" in why


# --- the reference follows the runner's platform ---------------------------------------------------
def _branchy(x):
    from jax import lax
    return lax.platform_dependent(x, cpu=lambda v: v * 3, tpu=lambda v: v * 5, default=lambda v: v - 1)


def test_platform_dependent_follows_the_platform_the_reference_stands_in_for():
    import jax
    import interp
    x = np.arange(6, dtype=np.int32)
    # by hand: the cpu branch, the tpu branch, the default branch for everything else
    want = {"cpu": x * 3, "tpu": x * 5, "cuda": x - 1, "rocm": x - 1, "some_plugin": x - 1}
    for platform, expected in want.items():
        np.testing.assert_array_equal(interp.interpret(_branchy, platform=platform)(x), expected)
    np.testing.assert_array_equal(interp.interpret(_branchy)(x), x * 3)          # default: cpu
    np.testing.assert_array_equal(np.asarray(jax.jit(_branchy)(x)), x * 3)        # XLA:CPU agrees
    with pytest.raises(ValueError, match="cuda"):
        interp.interpret(_branchy, platform="gpu")    # JAX refuses "gpu" too: cuda or rocm
    from jax import lax
    no_default = lambda v: lax.platform_dependent(v, cpu=lambda u: u * 3)   # noqa: E731
    with pytest.raises(interp.UnsupportedPrimitiveError, match="no branch for platform 'tpu'"):
        interp.interpret(no_default, platform="tpu")(x)


def test_runners_report_their_platform_and_the_reference_follows_it():
    assert B.get_runner("xla:cpu").platform == "cpu" and B.get_runner("xla:cuda").platform == "cuda"
    assert B.get_runner("pallas:interpret").platform == "cpu"
    assert B.get_runner("pallas:triton").platform == "cuda"     # no GPU here: the platform it targets
    from conformance.cases import all_cases
    case = all_cases("quick")["control_flow/platform_dependent/int32"]
    inputs, cpu_out, _, _ = E.reference_run(case, 0, "cpu")
    _, cuda_out, _, _ = E.reference_run(case, 0, "cuda")
    np.testing.assert_array_equal(cpu_out[0], inputs[0] * 3)
    np.testing.assert_array_equal(cuda_out[0], inputs[0] - 1)
    rec = E.run_case(case, "xla:cpu", first_divergence=False)
    assert rec.outcome == "pass" and rec.platform == "cpu"
    rec = E.run_case(all_cases("quick")["control_flow/placement/sharding_constraint_device_put/int32"], "xla:cpu",
                     first_divergence=False)
    assert rec.outcome == "pass", rec.detail


# --- backend failures judged by what raised them --------------------------------------------------
def _raised(exc):
    try:
        raise exc
    except Exception as e:  # noqa: BLE001
        return e


def test_backend_failures_are_classified_by_what_raised_them():
    from jax.errors import JaxRuntimeError
    unsupported, crash = BACKEND_UNSUPPORTED, CRASH
    # A message that says "unsupported" no longer makes a crash look like a refusal, nor the reverse.
    assert classify_failure(B.BackendFailure("execute", _raised(RuntimeError("unsupported value 7"))))[0] == crash
    outcome, facts = classify_failure(B.BackendFailure("lower", _raised(NotImplementedError("no rule for foo"))))
    assert outcome == unsupported and facts["stage"] == "lower" and facts["message"] == "no rule for foo"
    assert facts["raised_in"] == __name__ and facts["refused_by"] == "NotImplementedError"

    class LoweringError(Exception):       # what Pallas' Triton lowering wraps a rule's error in
        pass
    try:
        try:
            raise NotImplementedError("Unimplemented primitive in Pallas Triton lowering: gather")
        except NotImplementedError as inner:
            raise LoweringError("Exception while lowering eqn: gather") from inner
    except LoweringError as e:
        wrapped = e
    assert classify_failure(B.BackendFailure("lower", wrapped))[0] == unsupported
    assert classify_failure(B.BackendFailure("lower", _raised(AssertionError())))[0] == crash   # the H100 assert
    assert classify_failure(B.BackendFailure("compile", JaxRuntimeError("UNIMPLEMENTED: x")))[0] == unsupported
    assert classify_failure(B.BackendFailure("execute", JaxRuntimeError("NOT_FOUND: buffer")))[0] == crash
    assert classify_failure(B.BackendUnsupported("no such mode"))[0] == unsupported
    # A lowering rule that refuses with a ValueError, named by the function that raised it: JAX's
    # dot_general lowering refuses the algorithm presets XLA:CPU does not implement.
    import jax
    import jax.numpy as jnp
    x = np.ones((2, 2), np.float32)
    dot = jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.DotAlgorithmPreset.BF16_BF16_F32_X9))
    with pytest.raises(B.BackendFailure) as info:
        B.run_staged(dot, [x, x])
    outcome, facts = classify_failure(info.value)
    assert outcome == unsupported and facts["refused_by"].endswith("_handle_dot_precision"), facts
    assert classify_failure(B.BackendFailure("lower", _raised(ValueError("not supported"))))[0] == crash


def test_runners_report_the_failing_stage():
    import jax
    with pytest.raises(B.BackendFailure) as info:
        B.run_staged(jax.jit(lambda x: x.reshape(7)), [np.zeros(6, np.float32)])
    assert info.value.stage == "trace" and isinstance(info.value.error, TypeError)
    np.testing.assert_array_equal(B.run_staged(jax.jit(lambda x: x * 2), [np.arange(3)])[0], [0, 2, 4])
    from conformance.cases import all_cases
    rec = E.run_case(all_cases("quick")["state/pin_unpin/int32"], "xla:cpu", first_divergence=False)
    assert rec.outcome == "backend-unsupported" and rec.failure["stage"] == "compile"
    assert rec.failure["refused_by"] == "XLA status NOT_FOUND"


# --- saved outputs and recheck -------------------------------------------------------------------
NARROW = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz", "int4", "uint4", "float4_e2m1fn")


def test_saved_outputs_round_trip_every_dtype_bit_for_bit(tmp_path):
    rng = np.random.default_rng(0)
    outs = [rng.integers(0, 256, 40, dtype=np.uint8).view(getattr(ml_dtypes, n)) for n in NARROW
            if hasattr(ml_dtypes, n) and np.dtype(getattr(ml_dtypes, n)).itemsize == 1]
    outs += [rng.integers(0, 2 ** 16, 40, dtype=np.uint16).view(ml_dtypes.bfloat16).reshape(5, 8),
             np.array([True, False]), np.array(np.float32(-0.0)),
             (rng.standard_normal(3) + 1j * rng.standard_normal(3)).astype(np.complex64),
             np.array([np.nan, -np.inf], np.float64)]
    w = saved.Writer(str(tmp_path), "gw0-1")
    w.add("fam/case/x", "xla:cuda", 7, outs)
    w.add("fam/other", "pallas:tpu-interpret", 0, outs[:1])
    paths = w.close()
    assert sorted(os.path.basename(p) for p in paths) == ["outputs-pallas_tpu-interpret.gw0-1.npz",
                                                          "outputs-xla_cuda.gw0-1.npz"]
    assert [saved.runner_of(p) for p in sorted(paths)] == ["pallas:tpu-interpret", "xla:cuda"]
    (case_id, seed, back), = list(saved.read(os.path.join(str(tmp_path), "outputs-xla_cuda.gw0-1.npz")))
    assert (case_id, seed, len(back)) == ("fam/case/x", 7, len(outs))
    for a, b in zip(outs, back):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    bf16 = next(i for i, o in enumerate(outs) if o.dtype == ml_dtypes.bfloat16)
    with np.load(os.path.join(str(tmp_path), "outputs-xla_cuda.gw0-1.npz")) as raw:
        # the stored form: ml_dtypes types as unsigned bits, named in the key
        assert raw["fam/case/x::7::0::bfloat16" if bf16 == 0 else f"fam/case/x::7::0::{outs[0].dtype.name}"].dtype \
            == np.uint8
        assert raw[f"fam/case/x::7::{bf16}::bfloat16"].dtype == np.uint16
        assert raw[f"fam/case/x::7::{len(outs) - 1}::float64"].dtype == np.float64


def test_run_save_outputs_then_recheck_judges_them_again(tmp_path, capsys):
    """Outputs kept by a run (narrow dtypes among them) recheck to the run's own outcomes; an output
    changed by one bit after the run is caught by the recheck."""
    from conformance.cases import all_cases
    from conformance.cli import main
    cases = all_cases("quick")
    ids = ["lax_conversions/convert_element_type/float32-bfloat16/specials",
           "lax_conversions/convert_element_type/float32-float8_e4m3fn/specials",
           "control_flow/platform_dependent/int32"]
    w = saved.Writer(str(tmp_path / "outputs"), "main-1")
    outcomes = {}
    for cid in ids:
        kept = []
        rec = E.run_case(cases[cid], "xla:cpu", first_divergence=False, keep_outputs=kept)
        outcomes[cid] = rec.outcome
        assert kept and rec.outcome in ("pass", "pass-with-allowance")
        w.add(cid, "xla:cpu", 0, kept)
    w.close()
    capsys.readouterr()
    assert main(["recheck", str(tmp_path), "--results", str(tmp_path / "rc.jsonl")]) == 0
    assert "unexplained (fail/crash/timeout): 0 of 3" in capsys.readouterr().out
    recs = {r["case"]: r for r in map(json.loads, open(tmp_path / "rc.jsonl"))}
    assert {c: r["outcome"] for c, r in recs.items()} == outcomes and all(r["rechecked"] for r in recs.values())
    # One bit of the float8 output flipped: the recheck says fail.
    path = str(tmp_path / "outputs" / "outputs-xla_cpu.main-1.npz")
    with np.load(path) as data:
        arrays = dict(data)
    k = "lax_conversions/convert_element_type/float32-float8_e4m3fn/specials::0::0::float8_e4m3fn"
    arrays[k] = arrays[k].copy()
    arrays[k][3] ^= 1
    np.savez_compressed(path, **arrays)
    assert main(["recheck", path]) == 1
    out = capsys.readouterr().out
    assert "fail" in out and "float32-float8_e4m3fn" in out and "unexplained (fail/crash/timeout): 1 of 3" in out


def test_recheck_reads_outputs_recorded_on_an_h100(capsys):
    """Four xla:cuda outputs from the H100 evidence (tests/data/h100_outputs/README.md), in its
    format as recorded. platform_dependent there took the default branch; the reference, told the
    runner's platform, agrees (on the H100 it was judged with the 'cpu' branch and failed)."""
    from conformance.cli import main
    (case_id, seed, outs), = [g for g in saved.read(os.path.join(H100_OUTPUTS, "outputs-xla_cuda.npz"))
                              if g[0] == "control_flow/platform_dependent/int32"]
    from conformance.cases import all_cases
    x = all_cases("quick")[case_id].make_inputs(seed)[0]
    np.testing.assert_array_equal(outs[0], x - 1)       # the recorded GPU output: the default branch
    assert main(["recheck", H100_OUTPUTS]) == 0
    out = capsys.readouterr().out
    assert "xla:cuda: pass 4" in out and "unexplained (fail/crash/timeout): 0 of 4" in out


def test_recheck_does_not_judge_outputs_of_an_older_program(tmp_path, capsys):
    """A case whose program changed (a higher Case.revision) is not judged on outputs saved from its
    old program: recheck counts them as program-changed and says so loudly. The H100 evidence's
    lax_linalg/eig/f32 (revision 0, a DEFAULT-precision residual) against the checkout's revision 1
    (the residual at HIGHEST); outputs saved at the checkout's revision are judged as usual."""
    from conformance.cases import all_cases
    from conformance.cli import main
    case = all_cases("quick")["lax_linalg/eig/f32"]
    assert case.revision == 1
    kept = []
    rec = E.run_case(case, "xla:cpu", first_divergence=False, keep_outputs=kept)
    assert rec.outcome == "pass"
    old = saved.Writer(str(tmp_path / "old"), "h100")
    old.add(case.id, "xla:cuda", 0, kept)                    # no revision written: revision 0
    new = saved.Writer(str(tmp_path / "new"), "cpu")
    new.add(case.id, "xla:cpu", 0, kept, revision=case.revision)
    (old_path,), (new_path,) = old.close(), new.close()
    assert saved.revisions(old_path) == {} and saved.revisions(new_path) == {case.id: 1}
    assert [g[0] for g in saved.read(new_path)] == [case.id]          # the revision is no output
    capsys.readouterr()
    assert main(["recheck", old_path, "--results", str(tmp_path / "rc.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "program-changed" in out and "saved at revision 0, the case is at revision 1" in out
    assert "NOT JUDGED: 1" in out and "xla:cuda: program-changed 1" in out
    assert not [r for r in map(json.loads, open(tmp_path / "rc.jsonl")) if "outcome" in r]   # no record made up
    assert main(["recheck", new_path]) == 0
    out = capsys.readouterr().out
    assert "xla:cpu: pass 1" in out and "NOT JUDGED" not in out


# --- the GPU session script (.ci/gpu-checks) -----------------------------------------------------
def test_gpu_checks_script_dry_run_keeps_outputs_and_fails_a_step_that_records_nothing(tmp_path):
    """.ci/gpu-checks on the CPU stand-ins (GPU_CHECKS_DRY_RUN=1) with the toy cases: the quick step
    records results and saves outputs that recheck reads, the summary counts them, and a step whose
    case filter matches nothing makes the script exit 2 and say NO RESULTS."""
    out = tmp_path / "out"
    env = dict(TOY_ENV, GPU_CHECKS_DRY_RUN="1", GPU_CHECKS_WORKERS="0", GPU_CHECKS_QUICK_CASES="testing/ok_heavy",
               GPU_CHECKS_MOSAIC_CASES="testing/ok_heavy", GPU_CHECKS_SPMD_CASES="no/such/case",
               PYTHON=sys.executable)
    proc = subprocess.run([os.path.join(ROOT, ".ci", "gpu-checks"), str(out)], capture_output=True, text=True,
                          env=env, cwd=str(tmp_path), timeout=400)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-3000:]
    summary = (out / "SUMMARY.md").read_text()
    assert "dry run on the CPU stand-ins" in summary
    assert "## quick: exit 0" in summary and "- xla:cpu: pass 1" in summary
    assert "## spmd: exit 2" in summary and "NO RESULTS" in summary
    steps = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()[1:]]
    assert [(s[0], s[1]) for s in steps] == [("quick", "0"), ("mosaic-gpu", "0"), ("spmd", "2")]
    (path,) = saved.find([str(out / "quick" / "outputs")])
    assert saved.runner_of(path) == "xla:cpu" and [g[0] for g in saved.read(path)] == ["testing/ok_heavy"]
    assert "the run recorded no results" in (out / "spmd.log").read_text()
