"""JAX's own Pallas tests as a peer suite (conformance/peer_suite.py): which files run on CPU,
what each needs, and the classification of every known difference between JAX's interpret
modes and the reference routed in (docs/peer-suite.md).

A test id is ``file::Class::test`` (pytest's node id without the directory). ``Known`` entries
match test ids by fnmatch pattern, on the JAX versions they name; the first match classifies a
difference. A difference no entry names is classified from the routed run's failure message
(``AUTO``), and the report marks it unconfirmed.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import re

# What a difference can be. The first four are the issue's; the others split "the reference
# reports undefined behaviour" by who is right.
CLASSES = {
    "reference-wrong": "the reference computes another value than the program means (a bug to fix)",
    "reference-refuses": "the reference raises UnsupportedPrimitiveError (a gap to close)",
    "reference-reports-ub": "the test's kernel has undefined behaviour on purpose; the reference "
                            "reports it in its own form, not the one the test expects",
    "interpreter-artifact": "the test checks something only JAX's interpreter has (its messages, "
                            "poison patterns, instrumentation, XLA:CPU's float32-accumulated dot)",
    "reference-misses-ub": "JAX's interpret mode reports undefined behaviour (a race) the reference "
                           "does not: the reference is meant to be the strict one",
    "reference-false-alarm": "the reference reports undefined behaviour the program does not have",
    "mosaic-refuses": "the test expects the error a compiler gives for a program the reference runs",
    "reference-passes": "the reference passes a test JAX's interpret mode fails on this JAX",
    "not-run": "the test did not run on one side (a crash or timeout of its file)",
}

# The test files that run kernels in an interpret mode on CPU (the files of JAX's tests/pallas that
# mention it; the others are TPU / GPU only or have no kernels), and the CPU devices each needs
# (XLA's --xla_force_host_platform_device_count; the Mosaic GPU interpret files skip unless
# there is exactly one device, the distributed ones unless there are several).
FILES = {
    "pallas_test.py": 1,
    "pallas_vmap_test.py": 1,
    "pallas_shape_poly_test.py": 1,
    "indexing_test.py": 1,
    "ops_test.py": 1,
    "triton_pallas_test.py": 1,
    "gpu_ops_test.py": 1,
    "gpu_attention_test.py": 1,
    "gpu_paged_attention_test.py": 1,
    "tpu_pallas_test.py": 1,
    "tpu_ops_test.py": 1,
    "tpu_gmm_test.py": 1,
    "tpu_splash_attention_kernel_test.py": 1,
    "tpu_fusible_matmul_test.py": 1,
    "tpu_fusible_matmul_with_stateful_fusions_test.py": 1,
    "tpu_sparsecore_pallas_test.py": 1,
    "tpu_pallas_interpret_test.py": 1,
    "tpu_pallas_interpret_thread_map_test.py": 1,
    "tpu_pallas_interpret_distributed_test.py": 8,
    "tpu_pallas_distributed_test.py": 8,
    "gpu_pallas_interpret_test.py": 1,
    "gpu_pallas_interpret_race_detection_test.py": 1,
    "gpu_pallas_interpret_tcgen05_race_detection_test.py": 1,
    "gpu_pallas_interpret_cluster_barrier_test.py": 1,
    "gpu_pallas_interpret_distributed_test.py": 8,
}

# Modules JAX's tests import that JAX's wheels do not ship (they live in its source tree): the
# peer suite loads them from the checkout when the installed JAX lacks them.
SOURCE_TREE_MODULES = ("jax._src.hypothesis_test_util", "jax._src.pallas.pallas_test_util")


@dataclasses.dataclass(frozen=True)
class Known:
    tests: tuple[str, ...]        # fnmatch patterns of test ids (file::Class::test)
    klass: str                    # a key of CLASSES
    reason: str                   # which mechanism, specifically
    jax: tuple[str, str | None] = ("0", None)   # [first JAX version, first version it no longer applies)

    def __post_init__(self):
        if self.klass not in CLASSES:
            raise ValueError(f"unknown class {self.klass!r} for {self.tests}")

    def matches(self, test_id: str, jax_version: str) -> bool:
        from .divergences import _version_in
        return _version_in(jax_version, self.jax) and any(
            fnmatch.fnmatchcase(test_id, p) for p in self.tests)


KNOWN: tuple[Known, ...] = ()

# A difference no entry names: (pattern of the routed run's failure text, class), first match.
AUTO = (
    (r"UnsupportedPrimitiveError|is not supported by the reference", "reference-refuses"),
    (r"RaceError|DmaCompletionOrderError", "reference-reports-ub"),
    (r"OutOfBoundsError|UninitializedReadError|UndefinedBehaviorError", "reference-reports-ub"),
    (r"races_found|False is not true|True is not false", "reference-misses-ub"),
    (r"Not equal to tolerance|Mismatched elements|Arrays are not|AssertionError", "reference-wrong"),
)


def classify(test_id: str, jax_version: str, jax_outcome: str, ref_outcome: str,
             ref_text: str) -> tuple[str, str, bool]:
    """(class, reason, confirmed) of one difference."""
    for k in KNOWN:
        if k.matches(test_id, jax_version):
            return k.klass, k.reason, True
    if "not-run" in (jax_outcome, ref_outcome):
        return "not-run", "", False
    if ref_outcome == "pass":
        return "reference-passes", "", False
    if ref_outcome == "skip":
        return "reference-refuses", _line_of(ref_text or "", 0), False
    for pattern, klass in AUTO:
        m = re.search(pattern, ref_text or "")
        if m:
            return klass, _line_of(ref_text, m.start()), False
    return "reference-wrong", _line_of(ref_text or "", 0), False


def _line_of(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start:end if end >= 0 else None].strip()[:240]
