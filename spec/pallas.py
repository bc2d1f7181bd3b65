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

from .base import EXACT, Semantics, shared, table
from .pallas_mosaic_gpu import IN_KERNELS, UNDEFINED as MOSAIC_GPU_UNDEFINED
from .spmd import REMOTE_DMA

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

# A wait on a semaphore (semaphore_wait, dma_wait of spec/pallas_tpu.py) that nothing can satisfy.
WAITS = {
    "semaphore/unsatisfiable-wait": "a wait no DMA or signal in flight can satisfy raises "
                                    "RaceError (a deadlock on hardware; the reference runs one core "
                                    "at a time, and inside a shard_map the other devices run first: "
                                    "remote-dma/deadlock)",
}

SEMANTICS = table(
    Semantics(
        "pallas_call",
        "Runs the kernel once per grid point on blocks of the operands, whatever target it was "
        "traced for (interpret=True, InterpretParams, TPU/Triton/Mosaic GPU compiler params).",
        edge_cases={"pallas_call/c1": "grid order: row-major over the grid; grid_order='shuffled' "
                                      "visits every axis whose dimension_semantics is 'parallel' (every "
                                      "axis for Triton / Mosaic GPU kernels, whose programs have no "
                                      "order) in a permutation seeded by Options.seed (other axes keep "
                                      "their order, so consecutive revisits along 'arbitrary' axes stay "
                                      "consecutive)",
                    "pallas_call/c2": "dynamic grid bounds come from the leading operands "
                                      "(DynamicGridDim)",
                    "pallas_call/c3": "vmap of a pallas_call adds batch grid axes (vmapped_dims): "
                                      "parallel, and not seen by program_id / num_programs",
                    "pallas_call/c4": "Blocked(b): block index i covers [i*b, i*b+b); a block that "
                                      "starts inside the array but ends past it (partial edge block) "
                                      "reads never-written memory (poison) outside the array and its "
                                      "writes outside the array are dropped; a block starting outside "
                                      "the array raises OutOfBoundsError (interpret=True silently "
                                      "clamps to another block)",
                    "pallas_call/c5": "Element(b, (lo, hi)): the index map returns the element offset "
                                      "in the array padded by lo/hi never-written elements; windows "
                                      "beyond the padding raise OutOfBoundsError",
                    "pallas_call/c6": "Squeezed / None: size-1 dimension dropped in the kernel; index = "
                                      "element offset",
                    "pallas_call/c7": "BoundedSlice(b): the index map returns pl.ds(start, size) with "
                                      "size <= b",
                    "pallas_call/c8": "Indirect(b) (JAX 0.10.2 and 0.12): the index map returns a "
                                      "vector of b indices and the block gathers (input) / scatters "
                                      "(output) those rows: defined by emit_pipeline, whose DMAs use "
                                      "the vector as an indexer (jax/_src/pallas/mosaic/pipeline.py "
                                      "_make_block_slice); pallas_call's own BlockSpecs cannot use it "
                                      "(its index maps must return scalars, core.py "
                                      "BlockSpec.to_block_mapping), so there it is unsupported",
                    "pallas_call/c9": "memory space ANY/HBM: the whole operand, unblocked",
                    "pallas_call/c10": "typed PRNG key operands (any impl; Pallas keys from "
                                       "pltpu.to_pallas_key) are their key data uint32[*shape, "
                                       "*key_shape] in kernel memory, the trailing key dimensions whole "
                                       "blocks at index 0 (Mosaic lowering: "
                                       "_maybe_physicalize_block_shape, 0s appended to the index maps); "
                                       "loading key_ref[...] gives the key, storing a key writes its "
                                       "data; key outputs are returned as key arrays",
                    "pallas_call/c11": "scalar prefetch operands: passed to the kernel and to every "
                                       "index map as SMEM refs",
                    "pallas_call/c12": "outputs start as never-written memory; input_output_aliases: "
                                       "the output starts as the input and the pair shares one buffer "
                                       "for the whole call (one HBM buffer on hardware): writes through "
                                       "either are seen by later reads of both",
                    "pallas_call/c13": "an input block is a buffer fetched when its block index "
                                       "changes: the kernel's writes to it last while the index stays, "
                                       "are never written back, and a later fetch sees the caller's "
                                       "data again (interpret=True carries such writes instead); the "
                                       "caller's arrays are never modified",
                    "pallas_call/c14": "revisits: consecutive grid steps with the same output block "
                                       "index keep the block; on TPU (any target but Triton / Mosaic "
                                       "GPU) a block index that returns after another one "
                                       "(non-consecutive revisit) is undefined (the pipeline does not "
                                       "reload outputs): the block is reset to never-written memory "
                                       "before that step",
                    "pallas_call/c15": "scratch (VMEM/SMEM) persists across grid steps and starts "
                                       "never-written; semaphore scratch starts at 0; scratch of a "
                                       "typed key dtype holds key data like key operands",
                    "pallas_call/c16": "uninitialized='raise': reading never-written memory raises "
                                       "UninitializedReadError at the read (not the old value a swap "
                                       "returns, which is poison); an output element the kernel never "
                                       "wrote raises when the call returns (its caller reads it); DMAs "
                                       "move never-written state along with the data",
                    "pallas_call/c17": "detect_races=True: DMAs in flight and semaphores not at zero "
                                       "when the call ends raise RaceError",
                    "pallas_call/c18": "TensorCores (Options.tpu_cores; the drop-in mode's "
                                       "InterpretParams.num_cores_or_threads; 1 by default): a TPU "
                                       "pallas_call's grid points are split over the cores as JAX's "
                                       "TPU interpret mode splits them, the leading 'parallel' axes "
                                       "(refused unless they lead) in contiguous ranges of ceil(P / "
                                       "cores) points of their subgrid, each with every point of the "
                                       "other axes; each core has its own block buffers (pipeline "
                                       "state: revisits, pallas_call/c14, are per core) and scratch; "
                                       "HBM is shared. Under detect_races an operand element one "
                                       "core's pipeline writes back (an output block) and another "
                                       "core's reads or writes back is a RaceError naming both "
                                       "blocks (Options.on_race='record': recorded). DMAs the kernel "
                                       "starts itself are checked per core only, and a pallas_call "
                                       "split over cores inside a shard_map is refused",
                    "pallas_call/c19": "a Mosaic TPU kernel (TPU compiler params, TPU interpret "
                                       "params or a TPU core mesh; interpret=True alone names no "
                                       "target) that loads or stores an HBM/ANY ref directly (get, "
                                       "swap, masked_load, masked_swap, addupdate: only DMAs reach "
                                       "HBM, mosaic/lowering.py 'Loads and stores are only allowed "
                                       "on VMEM and SMEM references') or allocates HBM/ANY in "
                                       "run_scoped (not supported on a real TPU: "
                                       "interpret/params.py allow_hbm_allocation_in_run_scoped, "
                                       "whose True is honoured: one buffer of the device, shared "
                                       "by a core mesh's cores, as JAX's interpreter shares it) "
                                       "is refused with InvalidKernelError "
                                       "(a ValueError) when the kernel is read, before it runs; in "
                                       "the drop-in mode at lowering, where JAX's TPU interpret "
                                       "mode raises its ValueError"},
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
        edge_cases={"mpmd_map/c1": "cores run one at a time (row-major; shuffled with "
                                   "grid_order='shuffled'); a core waiting on a semaphore yields to the "
                                   "others (deterministic baton passing), so barriers and signals "
                                   "between cores (device_id naming a core of the mesh) work",
                    "mpmd_map/c2": "scratch and the barrier semaphore are per core except shared memory "
                                   "spaces (VMEM_SHARED)",
                    "mpmd_map/c3": "every unfinished core waiting with nothing left to signal: "
                                   "RaceError (deadlock)",
                    "mpmd_map/c4": "axis_index(core axis) is the core's coordinate",
                    "mpmd_map/c5": "typed PRNG key operands, outputs and scratch are their key data, as "
                                   "in pallas_call (Mosaic's mpmd_map lowering physicalizes them the "
                                   "same way, JAX 0.10.2 and 0.12; JAX's interpret modes fail with "
                                   "NotImplementedError 'key<fry>' once a kernel touches one)",
                    "mpmd_map/c6": "each core runs in a thread of its own under the caller's "
                                   "thread-local JAX config (jax.threefry_partitionable, "
                                   "pl.enable_debug_checks, ... as context managers)",
                    "mpmd_map/c7": "detect_races=True, a TPU core mesh of several cores outside a "
                                   "shard_map: the cores share HBM and are ordered only through "
                                   "semaphores (a signal releases the signalling core's accesses "
                                   "so far, a completed semaphore_wait / dma_wait acquires what "
                                   "the signals it consumed released; a DMA's read and write are "
                                   "its starting core's, made when it starts, and its completion "
                                   "signals release them). Two DMA accesses of one element by two "
                                   "cores, at least one a write, neither known to precede the "
                                   "other, are a RaceError naming both (JAX's TPU interpret mode "
                                   "finds them with vector clocks: race_detection_state.py; "
                                   "interp/pallas/devices.py DeviceAccesses). Inside a shard_map "
                                   "the cores' DMAs are checked in flight only (dma_start/c2)",
                    **shared(IN_KERNELS, "mosaic_gpu/kernel-mesh", "mosaic_gpu/clusters",
                             "mosaic_gpu/warp-map"),
                    **MOSAIC_GPU_UNDEFINED},
        sources=(_CORE, "jax/_src/pallas/mpmd.py"),
    ),
    Semantics(
        "core_map",
        "JAX 0.10.2's pl.core_map and plgpu.warp_map (core_map_p; from JAX 0.11 both bind "
        "mpmd_map): the body closes over refs (the equation's operands) and returns nothing. Over "
        "a core mesh or a Mosaic GPU mesh its meaning is JAX's own discharge: an mpmd_map over the "
        "mesh whose outputs are the final values of the refs the body writes, written back to "
        "those refs (so the mpmd_map rule runs the kernel, with its limits).",
        edge_cases={"core_map/c1": "over a WarpMesh (plgpu.warp_map in a Mosaic GPU kernel): the "
                                   "fork/join of mosaic_gpu/warp-map; scratch_shapes are refused "
                                   "(JAX 0.10.2's Mosaic GPU lowering passes the body no arguments)",
                    "core_map/c2": "a mesh type JAX has no discharge rule for (not in "
                                   "pallas/core.py _core_map_mesh_rules) is refused: only its "
                                   "compiler lowers it in place"},
        sources=(_CORE + " core_map, core_map_p, _core_map_discharge_rule (JAX 0.10.2)",
                 "jax/_src/pallas/mosaic_gpu/core.py _gpu_mesh_discharge_rule (JAX 0.10.2)"),
    ),
    Semantics("program_id", "The kernel's grid coordinate along an axis (int32); vmapped grid "
              "dimensions are not counted.", sources=(_PRIMS,)),
    Semantics("num_programs", "The grid size along an axis (int32), dynamic bounds resolved.",
              sources=(_PRIMS,)),
    Semantics(
        "masked_load",
        "pltpu.load / plgpu.load: ref[idx] where mask holds, else other.",
        edge_cases={"masked_load/c1": "masked-out lanes are never accessed: they may lie out of bounds "
                                      "and are neither bounds- nor race-checked",
                    "masked_load/c2": "masked-out lanes without other are never-written memory (poison; "
                                      "'zero' mode: 0); uninitialized='raise' poisons them too (loading "
                                      "them is allowed, using them shows up in the results)"},
        sources=(_PRIMS,),
    ),
    Semantics("masked_swap", "pltpu.store / plgpu.store: writes val where mask holds; returns the "
              "old values where mask holds and val at masked-out lanes.",
              edge_cases={"masked_swap/c1": "masked-out lanes return val: JAX's discharge rule "
                                            "(_swap_discharge_rule: where(mask, old, val)), its TPU "
                                            "interpret mode and Triton's lowering (a load with "
                                            "other=val) define them so; Mosaic TPU's lowering returns "
                                            "the memory's contents there (an unmasked vector.load "
                                            "before the masked store)"},
              sources=(_PRIMS, "jax/_src/pallas/triton/lowering.py _masked_swap_lowering_rule",
                       "jax/_src/pallas/mosaic/lowering.py _masked_swap_lowering_rule")),
    Semantics("run_scoped", "Allocates never-written scratch / zeroed semaphores for the body; at "
              "its end (detect_races) its semaphores must be zero and no DMA into them in flight.",
              edge_cases=shared(IN_KERNELS, "mosaic_gpu/run-scoped"), sources=(_PRIMS,)),
    Semantics("multiple_of", "Compiler hint; the value unchanged, a promise (Mosaic: "
              "tpu.assume_multiple).",
              edge_cases={"multiple_of/c1": "vectors are not checked: Triton reads the values per "
                                            "dimension (tt.divisibility of contiguous runs), no "
                                            "elementwise statement",
                          "multiple_of/c2": "a scalar integer that is not a multiple of every value "
                                            "raises UndefinedBehaviorError ('misusing this function "
                                            "... can result in undefined behavior')"},
              sources=(_PRIMS, "jax/_src/pallas/mosaic/lowering.py _multiple_of_lowering_rule")),
    Semantics("delay", "Busy-waits on hardware; no effect on values.", sources=(_PRIMS,)),
    Semantics("semaphore_signal", "Adds inc to a semaphore; with a device_id naming another core "
              "of a core-mesh kernel, to that core's copy of it; naming another device of the "
              "enclosing shard_map, to that device's kernel's copy (spec/spmd.py remote-dma; a kernel of "
              "several cores names the device and the core: remote-dma/core-target).",
              edge_cases={"semaphore_signal/c1": "cores are named by core_index or by a device_id dict "
                                                 "of core-mesh axes (device_id_type MESH, as "
                                                 "pltpu.core_barrier does); a non-dict device_id "
                                                 "(device-mesh coordinates) or device_id_type LOGICAL "
                                                 "names a device, never a core (primitives.py "
                                                 "device_id_to_logical; lowering.py "
                                                 "_device_id_to_logical)",
                          "semaphore_signal/c2": "a signal to another device's run_scoped semaphore "
                                                 "after that device has left the run_scoped: "
                                                 "RaceError (the semaphore does not exist there); "
                                                 "before it entered it: semaphore_signal/c3",
                          "semaphore_signal/c3": "a signal with core_index into a semaphore that "
                                                 "run_scoped allocates inside a core-mesh kernel, "
                                                 "or to another device's (or its core's) copy of "
                                                 "a run_scoped semaphore, "
                                                 "lands in the target's allocation of the same "
                                                 "run_scoped (the same occurrence), also before "
                                                 "the target entered it: Mosaic TPU allocates a "
                                                 "run_scoped's semaphores in the kernel's frame "
                                                 "(mosaic/lowering.py _run_scoped_lowering_rule: "
                                                 "tpu.sem_alloc in a tpu.region); JAX's "
                                                 "double-barrier pattern relies on it "
                                                 "(docs/pallas/tpu/distributed.md: a second "
                                                 "barrier semaphore from run_scoped, signalled by "
                                                 "neighbours that may be ahead). Other run_scoped "
                                                 "buffers (a DMA's destination) exist only inside "
                                                 "the run_scoped (remote-dma/target)",
                          **shared(REMOTE_DMA, "remote-dma/device-id", "remote-dma/target",
                                   "remote-dma/custom-barrier", "remote-dma/core-target",
                                   "remote-dma/deadlock")},
              sources=(_PRIMS,)),
    Semantics("semaphore_wait", "Waits for value and subtracts it (decrement=False: waits only).",
              edge_cases={**WAITS, **shared(REMOTE_DMA, "remote-dma/deadlock")}, sources=(_PRIMS,)),
    Semantics("semaphore_read", "The semaphore's current value as int32.", sources=(_PRIMS,)),
    Semantics("reciprocal", "1/x correctly rounded (computed wide, rounded once), also for "
              "approx=True, where hardware may return an approximation (Mosaic: a bf16 "
              "reciprocal): the compliance mode says how far.",
              edge_cases={"reciprocal/c1": "full_range=False: where x is +-0, +-inf, NaN or |x| >= "
                                           "1/tiny, or 1/x overflows, the result is undefined ('may "
                                           "produce incorrect results when x or output is +-inf or NaN; "
                                           "or when x is +-1/flt_min or +-0'): NaN there, like "
                                           "never-written memory"},
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
