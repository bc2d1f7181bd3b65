"""The second test pass under another NumPy dispatch (issue 22; Makefile ``test``).

NumPy runs the loops of its transcendental ufuncs built for the best CPU feature the host has
(AVX2+FMA3, AVX-512, ...); ``NPY_DISABLE_CPU_FEATURES`` turns features off at import time, and
naming a baseline feature is an error. ``python -m tests.numpy_dispatch`` prints the host's
optional features (dispatchable, present, not baseline), comma-separated: the value that makes
NumPy run its baseline loops. Empty on a host without any.
``python -m tests.numpy_dispatch --tests`` prints the tests of the pass (DISPATCH_TESTS);
tests/conftest.py stops a run in which a feature NPY_DISABLE_CPU_FEATURES names reads as on.

The pass reruns the tests whose results could depend on those loops (DISPATCH_TESTS, about two
minutes on 2 cores): the recorded GPU evidence (generated inputs, the reference, the divergence
models that decide which explanation a record gets), the allowance and divergence models, the
host-independence checks, and the reference's certified fast paths that run NumPy's transcendental
ufuncs (correctly rounded real and complex functions, the cumulative log-sum-exp) against mpmath.
Everything else the suite checks is exact integer/IEEE arithmetic or compares the reference with
XLA:CPU within budgets that do not rest on NumPy's transcendental loops.
"""
from __future__ import annotations

import os
import sys

DISPATCH_TESTS = (
    "tests/test_conformance_gpu_evidence.py",    # recorded H100 outputs: inputs, reference, models
    "tests/test_conformance_triage.py",          # divergence models on recorded and built values
    "tests/test_conformance_allowances.py",      # allowance replays and their models
    "tests/test_host_independence.py",           # generated inputs, the allowlist
    "tests/test_lax_special.py::test_reference_is_correctly_rounded",     # certified fast paths
    "tests/test_lax_special.py::test_complex_correctly_rounded",
    "tests/test_lax_special.py::test_exp_near_float32_midpoints_correctly_rounded",
    "tests/test_lax_reductions.py::test_cumlogsumexp_accuracy",
    "tests/test_lax_reductions.py::test_cumlogsumexp_correctly_rounded",
)


def optional_features() -> list[str]:
    from numpy._core._multiarray_umath import __cpu_baseline__, __cpu_dispatch__, __cpu_features__
    return [f for f in __cpu_dispatch__ if __cpu_features__.get(f) and f not in __cpu_baseline__]


def disabled() -> list[str]:
    return [f for f in os.environ.get("NPY_DISABLE_CPU_FEATURES", "").replace(",", " ").split() if f]


def check_disabled() -> None:
    """Raise unless every feature NPY_DISABLE_CPU_FEATURES names reads as off in this process."""
    from numpy._core._multiarray_umath import __cpu_features__
    on = [f for f in disabled() if __cpu_features__.get(f)]
    if on:
        raise RuntimeError(f"NPY_DISABLE_CPU_FEATURES names {on}, but NumPy reads them as on")


if __name__ == "__main__":
    if sys.argv[1:] == ["--tests"]:
        print(" ".join(DISPATCH_TESTS))
    else:
        print(",".join(optional_features()))
