"""The peer suite (conformance/peer_suite.py) on a miniature JAX checkout: both sides run, each
test's outcome is recorded, differences are classified, timings kept."""
from __future__ import annotations

import json
import re
import textwrap

from conformance import peer_suite
from spec.peer_suite import KNOWN, classify

TESTS = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from jax.experimental import pallas as pl

    def _call(kernel, x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8,), x.dtype), grid=(1,),
                              interpret=True)(x)

    def test_same():
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] + 1
        np.testing.assert_array_equal(_call(kernel, jnp.arange(8)), np.arange(8) + 1)

    def test_out_of_bounds_read():
        # JAX's HLO interpret mode clamps the dynamic slice; the reference raises
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[pl.ds(pl.program_id(0) + 4, 8)]
        _call(kernel, jnp.arange(8))

    def test_skipped():
        import pytest
        pytest.skip("not on this machine")
""")


def test_both_sides_run_and_differences_are_classified(tmp_path):
    checkout = tmp_path / "jax"
    (checkout / "tests" / "pallas").mkdir(parents=True)
    (checkout / "tests" / "pallas" / "mini_test.py").write_text(TESTS)
    out = tmp_path / "out"
    assert peer_suite.main([str(checkout), "--files", "mini_test.py", "--out", str(out)]) == 0
    saved = json.load(open(out / "comparison.json"))
    rows = {r["id"].rpartition("::")[2]: r for r in saved["files"]["mini_test.py"]}
    assert rows["test_same"] == {"id": "mini_test.py::test_same", "jax": "pass",
                                 "reference": "pass"}
    assert rows["test_skipped"]["jax"] == rows["test_skipped"]["reference"] == "skip"
    oob = rows["test_out_of_bounds_read"]
    assert (oob["jax"], oob["reference"]) == ("pass", "fail(JaxRuntimeError)")
    assert oob["class"] == "reference-reports-ub" and not oob["confirmed"]
    assert "OutOfBoundsError" in oob["reason"]
    for side in ("jax", "reference"):
        t = saved["timing"]["mini_test.py"][side]
        assert t["rc"] is not None and t["wall_s"] > 0 and t["cpu_s"] > 0


def test_failure_kind_and_known_entries():
    text = "E   AssertionError: False is not true\n\ntests/pallas/x_test.py:12: AssertionError"
    assert peer_suite.failure_kind(text) == "AssertionError"
    assert peer_suite.failure_kind("") == "error"
    # a known entry wins over the failure text, on the JAX versions it names
    for k in KNOWN:     # (an id the entry's first pattern matches: [0-9] -> 0, * -> 0)
        test_id = re.sub(r"\[(.)[^]]*\]", r"\1", k.tests[0]).replace("*", "0")
        assert classify(test_id, "99.0" if k.jax[1] is None else k.jax[0], "pass",
                        k.outcome or "fail(X)", "")[:2] == (k.klass, k.reason)
    # an entry naming the routed run's outcome explains only that one: the tcgen05 dot
    # artifact is an assertion on values, never a race the reference raised
    dot = "gpu_pallas_interpret_tcgen05_race_detection_test.py::TCGen05RaceDetectionTest::" \
          "test_can_pipeline_with_multiple_parents0"
    assert classify(dot, "0.12.0.1", "pass", "fail(AssertionError)", "")[0] == \
        "interpreter-artifact"
    assert classify(dot, "0.12.0.1", "pass", "fail(JaxRuntimeError)",
                    "AsyncAccessError: ...")[0] != "interpreter-artifact"
