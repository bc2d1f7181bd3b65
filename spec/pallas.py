"""Semantics of the Pallas primitives as the reference implements them (``interp/rules/pallas.py``,
engine in ``interp/pallas/``); the TPU-only (Mosaic) primitives are in ``spec/pallas_tpu.py``.

Anchors: JAX's own interpret modes (``jax/_src/pallas/hlo_interpreter.py``: ``interpret=True``;
``jax/_src/pallas/mosaic/interpret/``: TPU interpret mode), the discharge rules of the primitives
(``jax/_src/pallas/primitives.py``, ``jax/_src/pallas/mosaic/primitives.py``) and the Pallas
documentation on grids, block specs and revisiting
(https://docs.jax.dev/en/latest/pallas/grid_blockspec.html, .../pallas/tpu/pipelining.html).
Where these leave a result undefined the reference makes it loud (UndefinedBehaviorError and
subclasses, or poisoned memory) instead of picking a benign value.
"""
from __future__ import annotations

from .base import EXACT, Semantics, table

_CORE = "jax/_src/pallas/core.py"
_PRIMS = "jax/_src/pallas/primitives.py"
_TPU = "jax/_src/pallas/mosaic/primitives.py"
_HLO = "jax/_src/pallas/hlo_interpreter.py"
_TPU_INTERP = "jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py"
_GRID_DOC = "https://docs.jax.dev/en/latest/pallas/grid_blockspec.html"
_PIPE_DOC = "https://docs.jax.dev/en/latest/pallas/tpu/pipelining.html"

# What never-written memory holds under uninitialized="nan" (interp.pallas.memory.poison_value).
POISON = {
    "float / complex": "NaN",
    "signed int": "iinfo(dtype).min (as JAX's interpret mode)",
    "unsigned int": "iinfo(dtype).max (JAX's interpret mode uses 0, indistinguishable from data)",
    "bool": "True (JAX's interpret mode uses False, indistinguishable from data)",
    "semaphore": "0 (semaphores start at zero on hardware)",
}

SEMANTICS = table(
    Semantics(
        "pallas_call",
        "Runs the kernel once per grid point on blocks of the operands, whatever target it was "
        "traced for (interpret=True, InterpretParams, TPU/Triton/Mosaic GPU compiler params).",
        edge_cases=(
            "grid order: row-major over the grid; grid_order='shuffled' visits every axis whose "
            "dimension_semantics is 'parallel' (every axis for Triton / Mosaic GPU kernels, whose "
            "programs have no order) in a permutation seeded by Options.seed (other axes keep "
            "their order, so consecutive revisits along 'arbitrary' axes stay consecutive)",
            "dynamic grid bounds come from the leading operands (DynamicGridDim)",
            "vmap of a pallas_call adds batch grid axes (vmapped_dims): parallel, and not seen by "
            "program_id / num_programs",
            "Blocked(b): block index i covers [i*b, i*b+b); a block that starts inside the array "
            "but ends past it (partial edge block) reads never-written memory (poison) outside "
            "the array and its writes outside the array are dropped; a block starting outside "
            "the array raises OutOfBoundsError (interpret=True silently clamps to another block)",
            "Element(b, (lo, hi)): the index map returns the element offset in the array padded "
            "by lo/hi never-written elements; windows beyond the padding raise OutOfBoundsError",
            "Squeezed / None: size-1 dimension dropped in the kernel; index = element offset",
            "BoundedSlice(b): the index map returns pl.ds(start, size) with size <= b",
            "Indirect(b) (JAX 0.10.2 and 0.12): the index map returns a vector of b indices and "
            "the block gathers (input) / scatters (output) those rows: defined by emit_pipeline, "
            "whose DMAs use the vector as an indexer (jax/_src/pallas/mosaic/pipeline.py "
            "_make_block_slice); pallas_call's own BlockSpecs cannot use it (its index maps must "
            "return scalars, core.py BlockSpec.to_block_mapping), so there it is unsupported",
            "memory space ANY/HBM: the whole operand, unblocked",
            "typed PRNG key operands (any impl; Pallas keys from pltpu.to_pallas_key) are their "
            "key data uint32[*shape, *key_shape] in kernel memory, the trailing key dimensions "
            "whole blocks at index 0 (Mosaic lowering: _maybe_physicalize_block_shape, 0s "
            "appended to the index maps); loading key_ref[...] gives the key, storing a key "
            "writes its data; key outputs are returned as key arrays",
            "scalar prefetch operands: passed to the kernel and to every index map as SMEM refs",
            "outputs start as never-written memory; input_output_aliases: the output starts as "
            "the input and the pair shares one buffer for the whole call (one HBM buffer on "
            "hardware): writes through either are seen by later reads of both",
            "an input block is a buffer fetched when its block index changes: the kernel's writes "
            "to it last while the index stays, are never written back, and a later fetch sees the "
            "caller's data again (interpret=True carries such writes instead); the caller's "
            "arrays are never modified",
            "revisits: consecutive grid steps with the same output block index keep the block; "
            "on TPU (any target but Triton / Mosaic GPU) a block index that returns after another "
            "one (non-consecutive revisit) is undefined (the pipeline does not reload outputs): "
            "the block is reset to never-written memory before that step",
            "scratch (VMEM/SMEM) persists across grid steps and starts never-written; semaphore "
            "scratch starts at 0; scratch of a typed key dtype holds key data like key operands",
            "uninitialized='raise': reading never-written memory raises UninitializedReadError at "
            "the read (not the old value a swap returns, which is poison); an output element "
            "the kernel never wrote raises when the call returns (its caller reads it); DMAs "
            "move never-written state along with the data",
            "detect_races=True: DMAs in flight and semaphores not at zero when the call ends raise "
            "RaceError",
        ),
        sources=(_CORE, _HLO, _TPU_INTERP, _GRID_DOC, _PIPE_DOC),
        exactness=EXACT,
        notes="Speed: blocks in bounds are NumPy views (no copy), padded edge blocks are copies; "
              "the kernel and index-map plans are built once per equation; windows of index "
              "maps that read only grid indices are computed once per grid point; the kernel "
              "body is specialised per grid point (interp/pallas/specialize.py: pure equations whose "
              "inputs the grid point decides are folded, up to 2**16 elements within a 64 MiB "
              "budget per body (a causal mask from iota and the grid point), pl.when / switch on "
              "them resolved, jit bodies and one-iteration loops without xs/ys inlined, and grid "
              "points that agree on the program_id axes the body reads share one specialisation; "
              "same rules, same values). Not supported: Indirect dims in pallas_call's BlockSpecs "
              "(index maps return scalars there, no lowering defines them), block transforms (Mosaic "
              "GPU tiling/swizzle), pallas_call with a mesh, local_grid_env hooks.",
    ),
    Semantics(
        "mpmd_map",
        "pl.kernel / core_map over a core mesh: the body runs once per core on whole operands.",
        edge_cases=(
            "cores run one at a time (row-major; shuffled with grid_order='shuffled'); a core "
            "waiting on a semaphore yields to the others (deterministic baton passing), so "
            "barriers and signals between cores (device_id naming a core of the mesh) work",
            "scratch and the barrier semaphore are per core except shared memory spaces "
            "(VMEM_SHARED)",
            "every unfinished core waiting with nothing left to signal: RaceError (deadlock)",
            "axis_index(core axis) is the core's coordinate",
            "typed PRNG key operands, outputs and scratch are their key data, as in pallas_call "
            "(Mosaic's mpmd_map lowering physicalizes them the same way, JAX 0.10.2 and 0.12; "
            "JAX's interpret modes fail with NotImplementedError 'key<fry>' once a kernel "
            "touches one)",
            "each core runs in a thread of its own under the caller's thread-local JAX config "
            "(jax.threefry_partitionable, pl.enable_debug_checks, ... as context managers)",
        ),
        sources=(_CORE, "jax/_src/pallas/mpmd.py"),
    ),
    Semantics(
        "check (pl.debug_check in a kernel)",
        "pl.debug_check binds checkify's check[debug=True]. Inside a kernel, with "
        "pl.enable_debug_checks on (read when the kernel runs, as Mosaic reads it when it "
        "lowers), a false condition raises jax.errors.JaxRuntimeError naming the kernel, the "
        "grid point and the message (Mosaic TPU / GPU: a runtime assertion with the message); "
        "with debug checks off it does nothing, as Mosaic compiles it out. Outside kernels a "
        "debug check stays a no-op (checkify.py check_impl).",
        edge_cases=("JAX's interpret modes (interpret=True, TPU interpret mode) never evaluate "
                    "the check, even with debug checks on or under checkify (measured on JAX "
                    "0.10.2 and 0.12.0.1)",),
        sources=("jax/_src/pallas/core.py debug_check", "jax/_src/pallas/mosaic/lowering.py "
                 "_check_lowering_rule", "jax/_src/pallas/mosaic_gpu/lowering.py "
                 "_check_lowering_rule"),
    ),
    Semantics(
        "emit_pipeline",
        "pltpu.emit_pipeline traced with jax_use_emit_pipeline_primitive=True: "
        "its meaning is its expansion, pallas/mosaic/pipeline.py emit_pipeline_to_jaxpr (JAX 0.11 "
        "on; JAX 0.10.2: see the last edge case) (what "
        "the Mosaic lowering and the TPU interpret mode run): the same DMA pipeline the default "
        "path inlines, evaluated by the reference's DMA / semaphore model (race detection, "
        "never-written tracking), the body called through pipeline_body per step.",
        edge_cases=(
            "the expansion is traced for the caller's abstract TPU mesh, else a TPU v5e core: "
            "the generation only chooses buffer tiling, no value",
            "core_axis (a grid axis of the enclosing kernel) and core_axis_name: the expansion "
            "partitions the pipeline grid over the cores (pipeline.py _partition_grid: the "
            "first dimension divisible by the core count, else the first parallel one with "
            "the remainder spread over the first cores), the core index an operand traced in "
            "the enclosing kernel (program_id / axis_index of the core axis); agrees with JAX's "
            "TPU interpret mode (tests/test_pallas_tpu.py)",
            "JAX 0.10.2 (no emit_pipeline_to_jaxpr): its only definition is the Mosaic lowering "
            "rule, which traces the pipeline function (wrapped_pipeline_fun) in the kernel's grid "
            "environment and lowers it; the reference traces the same function and evaluates it "
            "(both of 0.10.2's interpret modes fail on the primitive)",
        ),
        sources=("jax/_src/pallas/mosaic/pipeline.py emit_pipeline_to_jaxpr, "
                 "_emit_pipeline_lowering_rule",),
    ),
    Semantics(
        "pipeline_body",
        "One step of an emit_pipeline body: the body jaxpr on the step's buffer views (refs or "
        "TransformedRefs such as buffer.at[slot], resolved to views of the buffer), with "
        "program_id / num_programs of axes 0..P-1 the pipeline step and grid (the enclosing "
        "kernel's axes after them, as the lowering concatenates user_grid_indices / grid_sizes; "
        "JAX refuses at trace time a body that names them).",
        edge_cases=("body operands whose transforms are not basic indexing (bitcasts, integer "
                    "arrays): unsupported",),
        sources=("jax/_src/pallas/mosaic/pipeline.py _pipeline_body_lowering_rule, "
                 "pipeline_body_discharge_rule",),
    ),
    Semantics("program_id", "The kernel's grid coordinate along an axis (int32); vmapped grid "
              "dimensions are not counted.", sources=(_PRIMS,)),
    Semantics("num_programs", "The grid size along an axis (int32), dynamic bounds resolved.",
              sources=(_PRIMS,)),
    Semantics(
        "masked_load",
        "pltpu.load / plgpu.load: ref[idx] where mask holds, else other.",
        edge_cases=(
            "masked-out lanes are never accessed: they may lie out of bounds and are neither "
            "bounds- nor race-checked",
            "masked-out lanes without other are never-written memory (poison; 'zero' mode: 0); "
            "uninitialized='raise' poisons them too (loading them is allowed, using them shows "
            "up in the results)",
        ),
        sources=(_PRIMS,),
    ),
    Semantics("masked_swap", "pltpu.store / plgpu.store: writes val where mask holds; returns the "
              "old values where mask holds and val at masked-out lanes.",
              edge_cases=("masked-out lanes return val: JAX's discharge rule "
                          "(_swap_discharge_rule: where(mask, old, val)), its TPU interpret mode "
                          "and Triton's lowering (a load with other=val) define them so; Mosaic "
                          "TPU's lowering returns the memory's contents there (an unmasked "
                          "vector.load before the masked store)",),
              sources=(_PRIMS, "jax/_src/pallas/triton/lowering.py _masked_swap_lowering_rule",
                       "jax/_src/pallas/mosaic/lowering.py _masked_swap_lowering_rule")),
    Semantics("run_scoped", "Allocates never-written scratch / zeroed semaphores for the body; at "
              "its end (detect_races) its semaphores must be zero and no DMA into them in flight.",
              sources=(_PRIMS,)),
    Semantics("multiple_of", "Compiler hint; the value unchanged. A promise: a scalar integer "
              "that is not a multiple of every value raises UndefinedBehaviorError ('misusing "
              "this function ... can result in undefined behavior'; Mosaic: tpu.assume_multiple).",
              edge_cases=("vectors are not checked: Triton reads the values per dimension "
                          "(tt.divisibility of contiguous runs), no elementwise statement",),
              sources=(_PRIMS, "jax/_src/pallas/mosaic/lowering.py _multiple_of_lowering_rule")),
    Semantics("delay", "Busy-waits on hardware; no effect on values.", sources=(_PRIMS,)),
    Semantics("semaphore_signal", "Adds inc to a semaphore; with a device_id naming another core "
              "of a core-mesh kernel, to that core's copy of it; naming another device of the "
              "enclosing shard_map, to that device's kernel's copy (spec/spmd.py remote-dma; a kernel of "
              "several cores names the device and the core: remote-dma/core-target).",
              edge_cases=("cores are named by core_index or by a device_id dict of core-mesh "
                          "axes (device_id_type MESH, as pltpu.core_barrier does); a non-dict "
                          "device_id (device-mesh coordinates) or device_id_type LOGICAL names a "
                          "device, never a core (primitives.py device_id_to_logical; lowering.py "
                          "_device_id_to_logical)",
                          "a signal to another device's run_scoped semaphore while that device "
                          "is outside the run_scoped: RaceError (the semaphore does not exist "
                          "there)",),
              sources=(_PRIMS,)),
    Semantics("semaphore_wait", "Waits for value and subtracts it (decrement=False: waits only); "
              "a wait that cannot be satisfied raises RaceError.", sources=(_PRIMS,)),
    Semantics("semaphore_read", "The semaphore's current value as int32.", sources=(_PRIMS,)),
    Semantics("reciprocal", "1/x correctly rounded (computed wide, rounded once), also for "
              "approx=True, where hardware may return an approximation (Mosaic: a bf16 "
              "reciprocal): the compliance mode says how far.",
              edge_cases=("full_range=False: where x is +-0, +-inf, NaN or |x| >= 1/tiny, or "
                          "1/x overflows, the result is undefined ('may produce incorrect "
                          "results when x or output is +-inf or NaN; or when x is +-1/flt_min "
                          "or +-0'): NaN there, like never-written memory",),
              sources=(_PRIMS,), exactness="correctly-rounded"),
    Semantics("add_dependency", "pltpu.touch: a scheduling dependency; no effect on values.",
              sources=(_TPU,)),
    Semantics("trace_value", "pltpu.trace_value: a profiler annotation; no effect on values.",
              sources=(_TPU,)),
    Semantics("get_global", "A buffer per get_global equation that persists for the whole call: "
              "every grid step and every core of a core mesh see the same one (never-written / "
              "zeroed semaphore at the start).", sources=(_PRIMS,)),
)

# Pallas TPU primitives the reference leaves unsupported on purpose (interp.coverage() says
# "unsupported"): what would be needed to define them.
UNSUPPORTED = {
    "remote DMAs / signals (device_id of another device)": "the reference runs one device; cores "
                        "of one core mesh are supported",
}
