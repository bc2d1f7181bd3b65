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

from .versions import version_in

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
    outcome: str | None = None    # the routed run's outcome it explains ("fail(AssertionError)"),
    #                               None: any (another outcome is another difference)

    def __post_init__(self):
        if self.klass not in CLASSES:
            raise ValueError(f"unknown class {self.klass!r} for {self.tests}")

    def matches(self, test_id: str, jax_version: str, ref_outcome: str | None = None) -> bool:
        if self.outcome is not None and ref_outcome != self.outcome:
            return False
        return version_in(jax_version, self.jax) and any(
            fnmatch.fnmatchcase(test_id, p) for p in self.tests)


_TPU_INTERPRET = "tpu_pallas_interpret_test.py::InterpretTest::"
_GPU_INTERPRET = "gpu_pallas_interpret_test.py::InterpretTest::"
_TCGEN05 = "gpu_pallas_interpret_tcgen05_race_detection_test.py::TCGen05RaceDetectionTest::"

KNOWN: tuple[Known, ...] = (
    # -- tests of JAX's TPU interpreter itself (tpu_pallas_interpret_test.py) --------------------
    Known((_TPU_INTERPRET + "test_out_of_bounds_*", _TPU_INTERPRET + "test_masked_store*",
           _TPU_INTERPRET + "test_smem_scratch_is_never_padded*"), "reference-reports-ub",
          "out-of-bounds block indices, reads and writes made on purpose to test JAX's "
          "interpreter: its messages ('Out-of-bounds block index .* for input', 'Out-of-bounds "
          "masked swap') and its out_of_bounds_reads='uninitialized' / buffer_bounds='padded' "
          "modes (values for out-of-bounds reads); the reference raises OutOfBoundsError at each"),
    Known((_TPU_INTERPRET + "test_revisiting_is_an_error*",), "reference-reports-ub",
          "a non-consecutive revisit of an output block, undefined on TPU: JAX's interpreter "
          "raises 'Revisited block'; the reference resets the block to never-written memory "
          "(NaN in the result, UninitializedReadError under uninitialized='raise')"),
    Known((_TPU_INTERPRET + "test_uninitialized_memory0",), "interpreter-artifact",
          "JAX's poison pattern: int16 scratch filled with 32767; the reference's never-written "
          "integers are its own poison value"),
    Known((_TPU_INTERPRET + "test_correct_number_of_stores",), "interpreter-artifact",
          "counts the store callbacks of JAX's interpreter (CountStoreCallbacksContext)"),
    Known((_TPU_INTERPRET + "test_dynamic_parallel_dimension_raises",), "interpreter-artifact",
          "JAX's interpreter needs a static size to shuffle a 'parallel' grid axis "
          "(ConcretizationTypeError); the reference runs a dynamic parallel axis"),
    Known((_TPU_INTERPRET + "test_parallel_dimension_and_multiple_cores",
           _TPU_INTERPRET + "test_randomization_of_parallel_dimensions"), "interpreter-artifact",
          "InterpretParams(grid_point_recorder=...): a callback into JAX's simulated grid "
          "traversal and core assignment; the drop-in mode refuses it"),
    Known((_TPU_INTERPRET + "test_skip_floating_point_ops",), "interpreter-artifact",
          "InterpretParams(skip_floating_point_ops=True): JAX's interpreter replaces float "
          "results with inf; the drop-in mode refuses it"),
    Known((_TPU_INTERPRET + "test_two_cores_along_parallel_dimension_with_race",
           _TPU_INTERPRET + "test_allocate_shared_buffer_in_core_map_with_race*"),
          "reference-reports-ub",
          "two TensorCores race on HBM (num_cores_or_threads=2 splitting a 'parallel' grid axis, "
          "both writing back the one output block, pallas_call/c18; a core mesh's cores copying "
          "through one run_scoped HBM buffer, mpmd_map/c7): both sides find the race and, under "
          "JAX 0.12's default on_race='raise', raise it where these tests (written for JAX 0.11's "
          "recording detector) expect it recorded: JAX's RuntimeError ('RACE DETECTED'), the "
          "reference's RaceError naming both cores' DMAs (on JAX 0.10 and 0.11 both pass)",
          jax=("0.12", None)),
    Known(("tpu_sparsecore_pallas_test.py::PallasTpuSparseCoreLoweringErrorTest::*",), "mosaic-refuses",
          "the test expects JAX's refusal to lower a compiled (interpret=False) kernel on CPU "
          "('Only interpret mode is supported on CPU'); the drop-in mode runs every kernel in the "
          "reference"),
    # -- JAX's Mosaic GPU interpret-mode tests (gpu_pallas_interpret*_test.py) -----------------
    Known((_GPU_INTERPRET + "test_barrier_for_buffering*",
           _GPU_INTERPRET + "test_skip_floating_point_ops"),
          "interpreter-artifact",
          "InterpretGPUParams(skip_floating_point_ops=True): JAX's interpreter replaces float "
          "results with placeholders; the drop-in mode refuses it (docs/pallas-mode.md)"),
    Known((_GPU_INTERPRET + "test_async_copy_tmem_with_mma",
           _TCGEN05 + "test_can_commit_mma_to_multiple_barriers*",
           _TCGEN05 + "test_can_deallocate_tmem_while_mma_active_on_different_tmem",
           _TCGEN05 + "test_can_pipeline_with_multiple_children",
           _TCGEN05 + "test_can_pipeline_with_multiple_parents*"), "interpreter-artifact",
          "the expected value is jnp.dot on XLA:CPU (float32 accumulation), compared at rtol 1e-7 "
          "or exactly; JAX's interpreter computes tcgen05_mma with the same dot, the reference "
          "rounds the exact sum once (spec/pallas_mosaic_gpu.py tcgen05_mma): last-bit "
          "differences (relative 5e-7)", outcome="fail(AssertionError)"),
    Known((_GPU_INTERPRET + "test_copy_gmem_to_smem_multiple_tma_threads0",), "interpreter-artifact",
          "two TMA copies into one SMEM buffer before either barrier wait: a race on hardware "
          "(the TMA unit orders no copies), which the reference records; JAX 0.10's simulation "
          "with num_tma_threads_per_device=1 runs the copies one after the other and the test "
          "asserts no race (from JAX 0.11 its detector reports it and the test asserts it)",
          jax=("0", "0.11")),
    Known((_GPU_INTERPRET + "test_completing_barrier_twice_in_*_raises",
           _GPU_INTERPRET + "test_more_barrier_completions_than_waits_raises"), "interpreter-artifact",
          "a barrier phase completing with no thread having waited for the previous one: legal "
          "on the hardware (an mbarrier needs no waiter, PTX ISA 9.7.13.15), an error of JAX's "
          "interpreter, whose phase tracking needs every phase observed ('Barrier completed "
          "phase 1, but no threads observed phase 0')"),
    Known((_GPU_INTERPRET + "test_all_warps_must_wait_on_barrier",
           _GPU_INTERPRET + "test_warps_must_wait_on_barrier_evenly",
           _GPU_INTERPRET + "test_warps_of_warpgroup_must_wait_on_barrier_evenly",
           _GPU_INTERPRET + "test_mpmd_all_warps_must_wait_on_barrier",
           _GPU_INTERPRET + "test_mpmd_warps_must_wait_on_barrier_evenly",
           _GPU_INTERPRET + "test_mpmd_warps_of_warpgroup_must_wait_on_barrier_evenly",
           _GPU_INTERPRET + "test_not_waiting_for_all_barrier_completions_in_thread_raise*"),
          "reference-reports-ub",
          "warps or threads waiting on barrier phases unevenly (a wait for a phase after which "
          "another completed, or a warpgroup wait after its warps observed different phases): "
          "the reference raises BarrierError (barrier_wait/c1, mosaic_gpu/barrier-skipped-phase), "
          "the test expects JAX's messages ('only 3 of its constituent warps', 'is waiting at "
          "barrier ... for the first time, but barrier is already at phase 2')"),
    Known((_GPU_INTERPRET + "test_cant_mpmd_map_twice",
           _GPU_INTERPRET + "test_not_indexing_multiple_barriers_raises"), "reference-reports-ub",
          "a program both refuse, in other words: a warp_map nested in a warp_map "
          "(UndefinedBehaviorError: Mosaic GPU refuses to lower it), a barrier operand selecting "
          "two barriers (UnsupportedPrimitiveError); the test expects JAX's messages"),
    Known((_GPU_INTERPRET + "test_run_scoped_barrier_with_incorrect_collective_axes*",
           _GPU_INTERPRET + "test_run_scoped_with_cluster[2-7]",
           _GPU_INTERPRET + "test_run_scoped_with_unknown_collective_axis"), "reference-reports-ub",
          "run_scoped collective over cluster axes or unknown ones: the reference refuses "
          "(UndefinedBehaviorError: only the thread axis is supported) or, for variant 2, reports "
          "the kernel's race first (every thread and block writes o_ref with no ordering: "
          "WarpgroupRaceError); the test expects the messages of JAX's interpreter "
          "(interpret/jaxpr_interpret.py)"),
    Known((_GPU_INTERPRET + "test_run_scoped_with_cluster0",), "interpreter-artifact",
          "a scoped GMEM buffer not collective over the thread axis (one per thread): JAX's "
          "interpreter refuses it ('Scoped allocation must have the thread axis in its "
          "collective axes', interpret/jaxpr_interpret.py); Mosaic GPU's lowering "
          "(lowering.py _run_scoped_lowering_rule) has no such check, and the reference "
          "allocates one buffer per thread"),
    Known(("gpu_pallas_interpret_distributed_test.py::InterpretDistributedTest::*",),
          "reference-reports-ub",
          "a shard_map with out_specs P() (replicated) whose devices compute different values "
          "(check_vma=False), the test then reading each device's copy through "
          "addressable_shards: the reference raises UndefinedBehaviorError (shard_map/c2: which "
          "copy XLA returns is unspecified)"),
    # -- JAX's Mosaic GPU race-detection tests --------------------------------------------------
    Known(("gpu_pallas_interpret_race_detection_test.py::InterpretTest::"
           "test_finds_exception_in_unawaited_smem_to_gmem",), "reference-reports-ub",
          "a kernel that ends with a TMA store still reading SMEM (no wait_smem_to_gmem): the "
          "test expects JAX's message ('Not all copy_smem_to_gmem read-side operations "
          "completed before'); the reference raises AsyncAccessError 'the warpgroup ends with "
          "TMA stores still reading SMEM' (mosaic_gpu/async-store-at-exit)"),
    # -- expected values of XLA:CPU's arithmetic (ops_test.py) ----------------------------------
    Known(("ops_test.py::OpsInterpretTest::test_dot_general_multiple_non_contracting_dims*",
           "ops_test.py::OpsInterpretTest::test_dot_dims_batched_simple_dot_general*",
           "ops_test.py::OpsInterpretTest::test_jnp_einsum_grad_y_pallas"), "interpreter-artifact",
          "the expected value is lax.dot_general / jnp.einsum on XLA:CPU (float32 accumulation), "
          "compared at rtol 1e-7 or exactly; JAX's interpret mode runs the kernel's dot on the "
          "same XLA dot, the reference rounds the exact sum once: last-bit differences (relative "
          "up to 5e-3 where a sum cancels)", outcome="fail(AssertionError)"),
    Known(("ops_test.py::OpsInterpretTest::test_erf_inv*",), "interpreter-artifact",
          "the expected value is lax.erf_inv on XLA:CPU (a polynomial approximation: "
          "-2.4678206 for erf_inv(-0.999517)), compared exactly; the reference's erf_inv is "
          "correctly rounded (mpmath: -2.4678199)", outcome="fail(AssertionError)"),
    Known(("ops_test.py::OpsInterpretTest::test_cumsum0",), "interpreter-artifact",
          "a float16 cumsum of 32 values against jnp.cumsum on XLA:CPU, which adds float16 in "
          "float16 (spec/compliance.py sum-in-operand-type): its rounding errors put 2 of the "
          "256 sums beyond the test's 1e-2 tolerance of the reference's (0.2930 against 0.2798), "
          "which rounds each exact prefix sum once",
          outcome="fail(AssertionError)"),
    Known(("ops_test.py::OpsInterpretTest::test_cast_from_32bit*",), "interpreter-artifact",
          "a float32 cast to bool of inputs hypothesis draws as subnormals (1.408e-42): the "
          "expected value is x.astype(bool) on XLA:CPU, which runs with the MXCSR flush bits set "
          "(spec/allowances.py flush-to-zero) and reads a subnormal as zero (False); the reference "
          "casts the value itself, nonzero, True (as JAX's interpret mode would on a host that "
          "did not flush)", outcome="fail(AssertionError)"),
    Known(("tpu_pallas_interpret_distributed_test.py::InterpretDistributedTest::"
           "test_reduce_scatter_sum_with_emit_pipeline_example*",), "not-run",
          "JAX 0.10.2's TPU interpret mode hangs in the first of these (8 host devices: no "
          "progress in 17 minutes, 26 s of CPU); the peer run deselects them on JAX's side "
          "(--pytest-args --deselect=...); the reference passes them", jax=("0", "0.11")),
    # -- kernels indexing refs outside their bounds (indexing_test.py) ---------------------------
    Known(("indexing_test.py::AdvancedIndexerOpsInterpretTest::test_advanced_indexer5",
           "indexing_test.py::AdvancedIndexerOpsInterpretTest::test_advanced_indexer10",
           "indexing_test.py::AdvancedIndexerOpsInterpretTest::test_advanced_indexer11",
           "indexing_test.py::AdvancedIndexerOpsInterpretTest::test_advanced_indexer16"),
          "reference-reports-ub",
          "index arrays with -1 (c = [1, 0, 2, 2, -1, 1]) or 2 on a dimension of size 2 "
          "(b = [1, 2, 2, 2, 2], case arr[::4, a, 1::2, b]) into a kernel ref: the expected "
          "value is jnp's (negative indices wrap, out-of-range ones clamp), which JAX's discharge "
          "rule also applies; Triton's lowering adds index * stride to the pointer with no "
          "bounds mask (triton/lowering.py _compute_offsets_from_indices); the reference raises "
          "OutOfBoundsError"),
    Known(("indexing_test.py::IndexerOpsInterpretTest::test_multi_indexing_interpreter_only",),
          "reference-reports-ub",
          "right[:, -1] on a kernel ref (the test says 'Interpret only test! YMMV actually "
          "compiling this'): JAX's discharge wraps the static -1, a compiled kernel addresses "
          "before the block; the reference raises OutOfBoundsError"),
)

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
        if k.matches(test_id, jax_version, ref_outcome):
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
