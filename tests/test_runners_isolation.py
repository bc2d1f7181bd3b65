"""Runners: detection, what each runner accepts, environment capture, and crash/timeout isolation
(a case that aborts, one that segfaults and one that hangs; every other result is kept)."""
import os
import sys
import time

import numpy as np
import pytest

from conformance.case import LAX, PALLAS, Case
from hardware_runners import detect, get_runner
from hardware_runners.environment import environment
from conformance.isolation import Executor, Worker, run_isolated

HERE = os.path.dirname(os.path.abspath(__file__))


# --- cases served to the isolated worker (JAX_CONFORMANCE_CASES names this module) ----------
def _abort(x):
    print("about to abort", flush=True)
    os.abort()


def _segfault(x):
    import ctypes
    print("about to segfault", flush=True)
    ctypes.string_at(0)


def _hang(x):
    print("about to hang", flush=True)
    time.sleep(600)


def _ints(rng):
    return [np.arange(6, dtype=np.int32)]


def _aborts(seed: int) -> bool:
    """Whether the inputs of testing/abort_on_some_seeds abort at this seed (computed independently)."""
    from conformance.case import rng_for
    return bool(rng_for("testing/abort_on_some_seeds", seed).random(4).max() > 0.95)


def _abort_on_some_seeds(rng):
    x = rng.random(4)
    if x.max() > 0.95:
        print("inputs about to abort", flush=True)
        os.abort()
    return [x.astype(np.float32)]


def cases():
    yield Case(id="testing/ok", fn=lambda x: -x, inputs=_ints, primitives=("neg",))
    yield Case(id="testing/abort_on_some_seeds", fn=lambda x: -x, inputs=_abort_on_some_seeds, primitives=("neg",))
    yield Case(id="testing/abort", fn=_abort, inputs=_ints)
    yield Case(id="testing/segfault", fn=_segfault, inputs=_ints)
    yield Case(id="testing/hang", fn=_hang, inputs=_ints)


@pytest.fixture(scope="module")
def worker():
    env = dict(os.environ, JAX_CONFORMANCE_CASES="test_runners_isolation",
               PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE, os.environ.get("PYTHONPATH", "")]))
    w = Worker(env=env)
    yield w
    w.close()


def test_crash_and_timeout_isolation_keeps_other_results(worker):
    plan = ["testing/ok", "testing/abort", "testing/ok", "testing/segfault", "testing/ok", "testing/hang"]
    recs = [run_isolated(worker, cid, "xla:cpu", 0, timeout=5.0 if cid == "testing/hang" else 120.0)
            for cid in plan]
    assert [r.outcome for r in recs] == ["pass", "crash", "pass", "crash", "pass", "timeout"]
    assert "SIGABRT" in recs[1].output and "about to abort" in recs[1].output
    assert "SIGSEGV" in recs[3].output and "about to segfault" in recs[3].output
    assert "about to hang" in recs[5].output and "no result after 5" in recs[5].output
    for r in recs:
        assert r.reproducer == f"jax-conformance repro {r.case} --runner xla:cpu --seed 0"
    assert worker.starts == 3   # the first start and one restart after each crash
    assert worker.proc is None  # the hung worker was killed; the next request starts a fresh one


def test_isolation_overhead_is_small(worker):
    run_isolated(worker, "testing/ok", "xla:cpu", 0, timeout=60)     # warm (compile cached in the worker)
    t0 = time.perf_counter()
    recs = [run_isolated(worker, "testing/ok", "xla:cpu", s, timeout=60) for s in range(5)]
    per_case = (time.perf_counter() - t0) / 5
    inside = sum(r.total_s for r in recs) / 5
    assert all(r.outcome == "pass" for r in recs)
    # The pipe round trip and pickling add well under 50 ms to a case.
    assert per_case - inside < 0.05, (per_case, inside)


def test_detection_on_this_machine():
    rows = {r["name"]: r for r in detect()}
    for name in ("reference", "xla:cpu", "pallas:interpret", "pallas:tpu-interpret"):
        assert rows[name]["available"], rows[name]
    assert not rows["xla:tpu"]["available"] and "tpu" in rows["xla:tpu"]["reason"]
    assert not rows["pallas:mosaic-tpu"]["available"] and rows["pallas:mosaic-tpu"]["reason"]
    assert not rows["pallas:triton"]["available"] and "gpu" in rows["pallas:triton"]["reason"]


def test_runners_declare_what_they_can_run():
    lax_case = Case(id="t/lax", fn=lambda x: x, inputs=_ints)
    tpu_kernel = Case(id="t/k", fn=None, build=lambda i: None, inputs=_ints, kind=PALLAS, pallas_targets=("tpu",))
    prng_kernel = Case(id="t/p", fn=None, build=lambda i: None, inputs=_ints, kind=PALLAS,
                       pallas_targets=("tpu",), needs=frozenset({"hardware-prng"}))
    lax_case, tpu_kernel, prng_kernel = (c.as_program() for c in (lax_case, tpu_kernel, prng_kernel))
    assert get_runner("xla:cpu").supports(lax_case)[0]
    ok, why = get_runner("xla:cpu").supports(tpu_kernel)
    assert not ok and "pallas" in why
    ok, why = get_runner("pallas:interpret").supports(lax_case)
    assert not ok and "lax" in why
    assert get_runner("pallas:tpu-interpret").supports(tpu_kernel)[0]
    ok, why = get_runner("pallas:gpu-interpret").supports(tpu_kernel)
    assert not ok and "tpu" in why
    assert get_runner("pallas:tpu-interpret").supports(prng_kernel)[0]
    assert get_runner("pallas:interpret").supports(prng_kernel)[0]   # it tries; JAX refuses prng_seed
    assert LAX in get_runner("reference").kinds and PALLAS in get_runner("reference").kinds
    with pytest.raises(KeyError):
        get_runner("xla:nonexistent-platform")


def test_environment_capture():
    env = environment()
    import jax
    assert env["jax"] == jax.__version__ and env["jaxlib"]
    assert env["devices"].get("cpu:cpu", 0) >= 1
    assert env["python"] == sys.version.split()[0] and env["host"]
    assert "xla_flags" in env and "plugins" in env


def test_seed_search_through_isolation_reports_the_crashing_seed_unshrunk(worker):
    from conformance.search import search
    cid = "testing/abort_on_some_seeds"
    executor = Executor(timeout=60.0)
    executor.worker = worker
    rec = search(executor, cid, "xla:cpu", 0, 12)
    assert rec.outcome == "crash" and "SIGABRT" in rec.output and "inputs about to abort" in rec.output
    # The crashing seed is the one recorded and reproduced; the seeds before it passed; a crash
    # is not shrunk (nothing runs after it).
    assert rec.seed == rec.first_failing_seed == rec.seeds_tried[-1] != 0
    assert _aborts(rec.seed) and not any(_aborts(s) for s in rec.seeds_tried[:-1])
    assert rec.reproducer == f"jax-conformance repro {cid} --runner xla:cpu --seed {rec.seed}"


def test_xla_cpu_runs_sub_byte_arguments():
    """Sub-byte operands reach the compiled program: JAX 0.10.2's AOT call rejects committed
    float4/int4 arrays with a layout mismatch, so the runner passes uncommitted ones (every
    float4_e2m1fn case crashed on xla:cpu with JAX 0.10.2 before)."""
    import ml_dtypes
    values = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6] * 2, ml_dtypes.float4_e2m1fn)
    values[8:] = -values[8:]
    case = Case(id="t/abs-float4", fn=lambda x: abs(x), inputs=lambda seed: [values])
    out, = get_runner("xla:cpu").run(case.as_program(), [values])
    assert out.dtype == values.dtype
    np.testing.assert_array_equal(out.astype(np.float32), np.abs(values.astype(np.float32)))
