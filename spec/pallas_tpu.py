"""Semantics of the Pallas TPU primitives in ``interp/rules/pallas_tpu.py``: DMAs, the barrier
semaphore, emit_pipeline as a primitive (emit_pipeline, pipeline_body), roll / bitcast / einshape_lo / pack and unpack_elementwise, the hardware PRNG and
Pallas TPU keys, has_memory_space; explicit MXU programming, pltpu.conv, pltpu.stochastic_round,
remove_memory_space; and why the TPU Pallas primitives the reference leaves unsupported are
unsupported (``UNSUPPORTED``). Primitives every Pallas target shares: spec/pallas.py.

None of the MXU primitives, conv and stochastic_round has an evaluation rule in JAX (no impl, no discharge rule, no case in the
TPU interpret mode's dispatch; JAX 0.11.2 and 0.12.0.1): their meaning is their Mosaic lowering
(jax/_src/pallas/mosaic/lowering.py) and its documentation (the docstrings of
jax/_src/pallas/mosaic/primitives.py, the op definitions of jaxlib/mosaic/dialect/tpu/tpu_ops.td)
and what JAX's own TPU tests require of the hardware (tests/pallas/tpu_pallas_test.py
ExplicitMXUTest, tests/pallas/tpu_ops_test.py).
"""
from __future__ import annotations

from .base import EXACT, Semantics, shared, table
from .pallas import WAITS
from .spmd import REMOTE_DMA

_TPU = "jax/_src/pallas/mosaic/primitives.py"
_TPU_INTERP = "jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py"
_LOWER = "jax/_src/pallas/mosaic/lowering.py"
_OPS_TD = "jaxlib/mosaic/dialect/tpu/tpu_ops.td"
_MXU_TEST = "tests/pallas/tpu_pallas_test.py ExplicitMXUTest"
_XLA_SC = "xla/hlo/transforms/expanders/stochastic_convert_decomposer.cc"

_MXU_STATE = {"mxu/per-core-state": "each core has its own MXUs; an MXU has staging registers (by "
                                    "number), the latched right-hand side (weights), accumulators (by "
                                    "ACC ref: pltpu.ACC(mxu_id); JAX 0.10.2: by acc_addr) and a FIFO of "
                                    "results, all per core (mpmd_map cores do not share them)",
              "mxu/empty-at-kernel-end": "kernel end: data in a staging register, an accumulator not "
                                         "popped since its last matmul_acc_lhs, or results in the FIFO: "
                                         "UndefinedBehaviorError ('The kernel must not leave any data "
                                         "in the staging registers / accumulator / result FIFO upon "
                                         "exit'); latched weights may stay"}

# The TPU hardware PRNG (prng_seed, prng_random_bits, the stateful_* samplers), emulated by
# interp.prng.pallas_tpu_bits; the entries of both primitives list this.
HARDWARE_PRNG = {
    "pallas_tpu/hardware-prng": "the hardware bits are generation-specific and undocumented and "
                                "cannot be reproduced (JAX's TPU interpret mode returns zeros). The "
                                "reference folds the seed values, their count, the draw number since "
                                "the last prng_seed and Options.seed into the Threefry key (0, 0) "
                                "with JAX's fold_in, then draws JAX's partitionable random_bits: "
                                "deterministic, sensitive to every input, never constant (a "
                                "convention: a backend is held to STATISTICAL). Not a function of "
                                "the grid point: the TPU generator is sequential and a seed sets its "
                                "whole state, so the same seed gives the same bits at every grid "
                                "point (docs/pallas/tpu/prng.rst)",
}

# What a race found under Options(on_race="record") does (the drop-in mode where JAX's detector
# warns or records, docs/pallas-mode.md): the DMA and semaphore entries list this.
RECORDED_RACE = {
    "pallas_tpu/recorded-race": "under Options(on_race='record') a race of the DMA engine or of a "
                                "kernel across devices (a kernel access touching an in-flight DMA's "
                                "destination, or writing its unsent source; a DMA overlapping one "
                                "in flight; a DMA never waited for or a semaphore not at zero at "
                                "the end of the pallas_call or run_scoped; an access after an "
                                "ambiguous wait, DmaCompletionOrderError; a remote DMA or signal "
                                "before the collective_id handshake; device buffers touched from "
                                "several devices unordered) is recorded, naming both accesses, and "
                                "the kernel goes on in the reference's order: an access takes "
                                "effect when the kernel makes it, a DMA reads its source when its "
                                "send completes and writes its destination when it completes (its "
                                "wait, as JAX's TPU interpret mode with its default "
                                "dma_execution_mode='on_wait'; a DMA never waited for at the end of "
                                "the pallas_call or run_scoped that ends), a wait several DMAs "
                                "could satisfy completes them in start order (each such wait "
                                "recorded once). The result is one that order gives, not a defined "
                                "value. Still raised, having no order to go on in: a wait nothing "
                                "can satisfy (a deadlock, semaphore/unsatisfiable-wait, "
                                "remote-dma/deadlock), a DMA or signal into a run_scoped buffer "
                                "the target is not inside or into a kernel that has ended (the "
                                "buffer does not exist there), an indirect DMA writing one element "
                                "twice with different values or a float accumulating DMA adding "
                                "to one twice (dma_start/c4: the engine's own element order is "
                                "undefined), and DMA operands of different shapes. JAX's detector "
                                "(on_race='warn'; JAX 0.10 and 0.11 always) records the race and "
                                "goes on (jax/_src/pallas/mosaic/interpret/race_detection_state.py "
                                "check_read / check_write: races_found)",
}

SEMANTICS = table(
    Semantics(
        "emit_pipeline",
        "pltpu.emit_pipeline traced with jax_use_emit_pipeline_primitive=True: "
        "its meaning is its expansion, pallas/mosaic/pipeline.py emit_pipeline_to_jaxpr (JAX 0.11 "
        "on; JAX 0.10.2: see the last edge case) (what "
        "the Mosaic lowering and the TPU interpret mode run): the same DMA pipeline the default "
        "path inlines, evaluated by the reference's DMA / semaphore model (race detection, "
        "never-written tracking), the body called through pipeline_body per step.",
        edge_cases={"emit_pipeline/c1": "the expansion is traced for the caller's abstract TPU mesh, "
                                        "else a TPU v5e core: the generation only chooses buffer "
                                        "tiling, no value",
                    "emit_pipeline/c2": "core_axis (a grid axis of the enclosing kernel) and "
                                        "core_axis_name: the expansion partitions the pipeline grid "
                                        "over the cores (pipeline.py _partition_grid: the first "
                                        "dimension divisible by the core count, else the first parallel "
                                        "one with the remainder spread over the first cores), the core "
                                        "index an operand traced in the enclosing kernel (program_id / "
                                        "axis_index of the core axis); agrees with JAX's TPU interpret "
                                        "mode (tests/test_pallas_tpu.py)",
                    "emit_pipeline/c3": "JAX 0.10.2 (no emit_pipeline_to_jaxpr): its only definition is "
                                        "the Mosaic lowering rule, which traces the pipeline function "
                                        "(wrapped_pipeline_fun) in the kernel's grid environment and "
                                        "lowers it; the reference traces the same function and "
                                        "evaluates it (both of 0.10.2's interpret modes fail on the "
                                        "primitive)"},
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
        edge_cases={"pipeline_body/c1": "body operands whose transforms are not basic indexing "
                                        "(bitcasts, integer arrays): unsupported"},
        sources=("jax/_src/pallas/mosaic/pipeline.py _pipeline_body_lowering_rule, "
                 "pipeline_body_discharge_rule",),
    ),
    Semantics(
        "dma_start",
        "Copies src[idx] to dst[idx]; on completion adds the byte count to the destination "
        "semaphore (and the source semaphore for a send).",
        edge_cases={"dma_start/c1": "without detect_races the copy completes at start (as "
                                    "interpret=True)",
                    "dma_start/c2": "detect_races=True: in flight until a wait on its semaphore; "
                                    "reading its destination or writing its source or destination "
                                    "meanwhile, or starting a DMA into a range in flight, raises "
                                    "RaceError (exact element overlap by address)",
                    "dma_start/c3": "add=True accumulates into the destination",
                    "dma_start/c4": "indirect (scatter) destination naming an element twice: the DMA "
                                    "engine writes in no defined order, so RaceError unless every write "
                                    "to the element carries the same bits; an accumulating DMA applies "
                                    "every duplicate for integers (exact in any order) and raises "
                                    "RaceError for floats (rounding depends on the order)",
                    "dma_start/c5": "remote DMAs (device_id, in a pallas_call inside shard_map/pmap): "
                                    "the destination and its semaphore are the target device's buffers "
                                    "in the same position (operand, scratch, run_scoped allocation "
                                    "while the target is inside that run_scoped, else RaceError); a "
                                    "device id outside the mesh raises OutOfBoundsError (spec/spmd.py "
                                    "remote-dma)",
                    **REMOTE_DMA, **RECORDED_RACE},
        sources=(_TPU, _TPU_INTERP),
        notes="Speed: the DMA's operand pytree is resolved once per equation (where its refs "
              "are) and its indices, bounds / shape checks and byte count once per tuple of "
              "scalar index values (interp/rules/pallas.py _Operands); semaphore primitives "
              "the same. Same checks, same results; race detection unchanged.",
    ),
    Semantics("dma_wait", "Waits until the semaphore holds the byte count of the waited ref and "
              "subtracts it; completes in-flight DMAs on that semaphore in start order. A wait_send waits "
              "on the send semaphore (is_wait_send; insert_dummy_device on JAX 0.10.2, which "
              "swaps the operands the same way).",
              edge_cases={**WAITS, **shared(REMOTE_DMA, "remote-dma/completion",
                                            "remote-dma/completion-order", "remote-dma/deadlock"),
                          **RECORDED_RACE},
              sources=(_TPU,)),
    Semantics("get_barrier_semaphore", "The kernel's barrier semaphore, one per kernel and "
              "device: kernels on other devices of the shard_map signal it with a device_id "
              "(spec/spmd.py remote-dma). tag (JAX >= 0.11) names the collective id kernels "
              "share on hardware: no further effect within one kernel.", sources=(_TPU,)),
    Semantics("roll", "pltpu.roll: jnp.roll(x, shift, axis); with stride, slice i along "
              "stride_axis rolls by shift + i*stride.", sources=(_TPU + " _roll_lowering_rule",)),
    Semantics("bitcast", "pltpu.bitcast: packs/unpacks consecutive elements along dim (second "
              "minor by default; the only choice before JAX 0.12), element 0 in the low bits.",
              sources=(_TPU + " _bitcast_lowering_rule",)),
    Semantics("einshape_lo", "pltpu.einshape: the split / merge / transpose steps of "
              "jax._src.pallas.einshape.get_einshape_transforms. assert_is_tile_preserving only "
              "makes the Mosaic lowering refuse a relayout (per TPU generation): same values.",
              sources=("jax/_src/pallas/einshape.py",)),
    Semantics("prng_seed", "Seeds the TPU core's hardware PRNG (emulated: interp.prng."
              "pallas_tpu_bits; the hardware generator is undocumented). TPUs have a sequential "
              "generator per core: the seed sets its whole state, which lasts across grid steps "
              "until the next seed.",
              edge_cases={"prng_seed/c1": "seeds other than one key or scalar int32 / uint32 values "
                                          "(floats, vectors, 8/16-bit, int64 as under jax_enable_x64): "
                                          "unsupported, as Mosaic refuses them "
                                          "(_prng_seed_lowering_rule 'All seed data must be scalar "
                                          "integers'; tpu.prng_set_seed_32 verifies 32-bit operands)",
                          **HARDWARE_PRNG},
              sources=(_TPU, "docs/pallas/tpu/prng.rst")),
    Semantics("prng_random_bits", "int32 bits of the emulated hardware PRNG: a function of the "
              "seeds of the last prng_seed, the number of draws since it and Options.seed, not "
              "of the grid point (the same seed gives the same bits at any grid point, as "
              "pltpu.sample_block's invariance over block shapes needs).",
              edge_cases={"prng_random_bits/c1": "before any prng_seed: UndefinedBehaviorError (JAX's "
                                                 "TPU interpret mode returns zeros)",
                          "prng_random_bits/c2": "results of rank < 2 (also through stateful_* "
                                                 "samplers and jax.random on Pallas keys): "
                                                 "unsupported, as Mosaic lowers only rank >= 2 draws "
                                                 "(_prng_random_bits_lowering_rule)",
                          **HARDWARE_PRNG},
              sources=(_TPU, "interp/prng.py pallas_tpu_bits")),
    Semantics("prng_split", "The uint32 scalars of a Pallas TPU key (key shape (1, N)), in order.",
              sources=(_TPU, "jax/_src/pallas/mosaic/lowering.py _split_key_lowering_rule")),
    Semantics("prng_join", "A Pallas TPU key from its N uint32 scalars, in order; prng_seed(key) "
              "seeds with them.",
              edge_cases={"prng_join/c1": "other impls (JAX's abstract eval takes any key shape (1, "
                                          "N)): unsupported, as Mosaic joins only Pallas keys"},
              sources=(_TPU, "jax/_src/pallas/mosaic/lowering.py _join_key_lowering_rule",
                       "jax/_src/pallas/mosaic/lowering.py _prng_seed_lowering_rule")),
    Semantics("pack_elementwise", "Sources (factor = bits(source) / bits(packed) of them) packed "
              "into an unsigned word of the source width, source i in bits [i*w, (i+1)*w): "
              "integer sources truncated to the packed width; float32 sources rounded to "
              "bfloat16 as convert_element_type rounds (nearest even; the reference applies "
              "that to every input: ties to even, overflow to inf, subnormals kept, NaN stays "
              "NaN).",
              edge_cases={"pack_elementwise/c1": "f32 -> bf16 rounding: JAX's own TPU test of the "
                                                 "primitive requires the packed bits of "
                                                 "x.astype(bfloat16) (tests/pallas/tpu_ops_test.py "
                                                 "test_pack_elementwise) and Mosaic's op packs "
                                                 "'downcast' values (tpu_ops.td TPU_PackSubelementsOp: "
                                                 "'Interleaved packing downcasts each value'); JAX's "
                                                 "test draws finite normal values, so ties, subnormals, "
                                                 "overflow and NaN are the reference's extension of the "
                                                 "same rule; no interpret mode of JAX evaluates the "
                                                 "primitive",
                          "pack_elementwise/c2": "other source / packed pairs: unsupported, as JAX "
                                                 "refuses them ('Only f32 -> bf16 and int -> int are "
                                                 "supported')"},
              sources=(_TPU + " pack_elementwise docstring",
                       "jaxlib/mosaic/dialect/tpu/tpu_ops.td TPU_PackElementwiseOp")),
    Semantics("unpack_elementwise", "Field `index` (bits [index*w, (index+1)*w)) of each element: "
              "integer fields sign-extended, then wrapped into the unpacked integer type or "
              "converted (exactly) to the unpacked float type; float fields exactly widened "
              "(bf16/f16 -> f32).",
              edge_cases={"unpack_elementwise/c1": "unsigned fields (and unsigned results) are "
                                                   "sign-extended too: the lowering passes signless "
                                                   "integer types ('This conversion makes mosaic "
                                                   "interpret all unsigned types as signed types', "
                                                   "lowering.py _dtype_to_ir_type), so uint4 -> uint8 "
                                                   "is the same Mosaic op as int4 -> int8, whose "
                                                   "description sign-extends ('s_y'y''; tpu_ops.td "
                                                   "TPU_UnpackElementwiseOp); a uint4 field 0xF unpacks "
                                                   "to 0xFF. tests/test_pallas_tpu.py lowers both for "
                                                   "TPU and finds the same op text "
                                                   "(tpu.unpack_elementwise {source_type = i4} on i8 "
                                                   "vectors)"},
              sources=(_TPU + " unpack_elementwise docstring",
                       "jaxlib/mosaic/dialect/tpu/tpu_ops.td TPU_UnpackElementwiseOp",
                       "jax/_src/pallas/mosaic/lowering.py _dtype_to_ir_type")),
    Semantics("has_memory_space", "Whether a pl.ANY operand lives in a memory space: the "
              "compiler's placement; the reference keeps ANY operands in HBM (True only for HBM).",
              sources=(_TPU,)),
    Semantics(
        "matmul_push_rhs",
        "Stages a right-hand side (transposed first if transpose=True) in staging register "
        "`staging_register` of MXU `mxu_index` of the running core.",
        edge_cases={**_MXU_STATE,
                    "matmul_push_rhs/c1": "a push to a staging register that still holds a right-hand "
                                          "side no matmul has loaded: UndefinedBehaviorError ('It is "
                                          "not allowed to push to the same staging register twice')",
                    "matmul_push_rhs/c2": "the shape limits of the hardware (K x K with K = "
                                          "mxu_column_size, 2K x K for sub-byte types) are not checked: "
                                          "any 2-D right-hand side whose rows match the left-hand "
                                          "side's columns is multiplied"},
        sources=(_TPU + " matmul_push_rhs", _LOWER + " _matmul_push_rhs_lowering_rule",
                 _OPS_TD + " TPU_MatmulPushRhsOp"),
    ),
    Semantics(
        "matmul_acc_lhs",
        "acc += lhs @ W on the MXU of the ACC ref (JAX 0.10.2: `mxu_index`, accumulator at "
        "`acc_addr`), W the latched right-hand side; load_staged_rhs=r first latches staging "
        "register r (emptying it). The product is the MXU's result type (float32 for float "
        "operands, int32 for integers): the correctly rounded float32 of the exact dot product "
        "(products of the operands' own type exact, one rounding) or the int32 dot product "
        "wrapped; it is added to the accumulator with one float32 rounding (int32: wrapping). "
        "The hardware sums in float32 in an order it does not document: backends are judged "
        "under DOT_PRODUCT bounds.",
        edge_cases={**_MXU_STATE,
                    "matmul_acc_lhs/c1": "an accumulator starts at zero and matmul_pop leaves it "
                                         "zero: JAX's own hardware test pushes, accumulates once "
                                         "and pops with no initialisation and requires the plain "
                                         "product (" + _MXU_TEST + ".test_basic)",
                    "matmul_acc_lhs/c2": "load_staged_rhs naming an empty staging register (never "
                                         "pushed, already loaded, or pushed on another MXU: registers "
                                         "are per MXU), or load_staged_rhs=None before any right-hand "
                                         "side was latched: UndefinedBehaviorError",
                    "matmul_acc_lhs/c3": "a right-hand side of another dtype than the left-hand side: "
                                         "UndefinedBehaviorError (the matmul type is the left-hand "
                                         "side's; how the staged operand is reinterpreted is not "
                                         "documented)",
                    "matmul_acc_lhs/c4": "a result whose shape or kind (float / int) differs from the "
                                         "accumulator's: UndefinedBehaviorError; ref transforms on the "
                                         "accumulator: unsupported, as Mosaic refuses them ('Transforms "
                                         "not supported for matmul_acc_lhs.')"},
        sources=(_TPU + " matmul_acc_lhs", _LOWER + " _matmul_acc_lhs_lowering_rule, AccRef",
                 "jax/_src/pallas/mosaic/core.py AccMemorySpace, check_accumulator_ref",
                 _MXU_TEST),
        exactness="correctly-rounded",
        notes="correctly rounded per matmul, then one rounding per accumulation",
    ),
    Semantics(
        "matmul_pop",
        "The accumulator's value (shape and dtype of the ACC ref; JAX 0.10.2: `shape`, "
        "`dtype`), after which the accumulator is zero. Waiting for a busy MXU is the "
        "hardware's; every result is complete when popped.",
        edge_cases={"matmul_pop/c1": "popping a zero (never accumulated or already popped) accumulator "
                                     "gives zeros",
                    "matmul_pop/c2": "JAX 0.10.2: a pop whose shape / dtype differs from what was "
                                     "accumulated at that address: UndefinedBehaviorError",
                    "matmul_pop/c3": "reading an ACC ref any other way (ref[...]): Mosaic refuses the "
                                     "program ('Loading from an accumulator is not supported. Use "
                                     "matmul_pop'); the reference's ACC buffer is never-written memory "
                                     "in every uninitialized mode, so the read raises "
                                     "UninitializedReadError (an UndefinedBehaviorError) naming the "
                                     "accumulator"},
        sources=(_TPU + " matmul_pop", _LOWER + " _matmul_pop_lowering_rule, "
                 "_load_lowering_rule"),
    ),
    Semantics(
        "matmul_lhs_fifo",
        "Enqueues lhs @ W (the MXU result type, rounded as for matmul_acc_lhs) on the result "
        "FIFO of MXU `mxu_index`; load_staged_rhs latches a staging register first.",
        edge_cases={"matmul_lhs_fifo/c1": "staging-register and weight misuse as for matmul_acc_lhs: "
                                          "UndefinedBehaviorError",
                    "matmul_lhs_fifo/c2": "FIFO capacity: 'a hardware error if the result FIFO is full' "
                                          "(the TPU reports 'Cannot schedule FIFO push instruction when "
                                          "the FIFO is full'); the depth is generation-specific and "
                                          "documented nowhere (TpuInfo has no field for it), so the "
                                          "reference cannot tell the push that overflows: pushes are "
                                          "unbounded and every result left behind raises at the "
                                          "kernel's end"},
        sources=(_TPU + " matmul_lhs_fifo", _LOWER + " _matmul_lhs_fifo_lowering_rule",
                 _MXU_TEST + ".test_fifo_overflow"),
    ),
    Semantics(
        "matmul_pop_fifo",
        "Dequeues the oldest result of MXU `mxu_index`'s FIFO (FIFO order per MXU).",
        edge_cases={"matmul_pop_fifo/c1": "an empty FIFO: UndefinedBehaviorError (the hardware's "
                                          "'Cannot schedule FIFO pop instruction when the FIFO is "
                                          "empty', " + _MXU_TEST + ".test_fifo_underflow)",
                    "matmul_pop_fifo/c2": "a `shape` / `dtype` other than the oldest result's (dtype "
                                          "float32 for float operands, int32 for integers): "
                                          "UndefinedBehaviorError"},
        sources=(_TPU + " matmul_pop_fifo", _LOWER + " _matmul_pop_fifo_lowering_rule"),
    ),
    Semantics(
        "conv",
        "pltpu.conv: conv_general_dilated's meaning (the reference's rule, interp/rules/"
        "lax_contractions.py: correctly rounded per output element in the result type "
        "preferred_element_type or lhs's) with the kernel window reversed along spatial "
        "dimension d where window_reversal[d] (XLA's Window.window_reversal: a convolution, "
        "not a correlation, along d), plus the accumulator: with acc the result is acc + conv "
        "in acc's dtype (one more rounding; integers wrap); without, Mosaic's zero accumulator.",
        edge_cases={"conv/c1": "unsigned integer operands: unsupported (Mosaic refuses them)",
                    "conv/c2": "precision other than DEFAULT / HIGHEST, or different per operand: "
                               "unsupported (_parse_precision_attr); DEFAULT and HIGHEST have the same "
                               "meaning here"},
        sources=(_TPU + " conv", _LOWER + " _conv_lowering_rule",
                 "https://openxla.org/xla/operation_semantics#convwithgeneralpadding_convolution"),
        exactness="correctly-rounded",
    ),
    Semantics(
        "stochastic_round",
        "pltpu.stochastic_round(x, bits, target_dtype): float32 x to the neighbour below or above "
        "|x| in target_dtype, chosen by the uint32 word of the same element. The reference's "
        "rule is XLA's stochastic-convert rule (" + _XLA_SC + "): with lo <= |x| < hi the two "
        "neighbours, f = floor((|x| - lo) / (hi - lo) * 2**32) (the discarded fraction with "
        "2**-1 in the most significant bit of a uint32), the magnitude is hi iff bits < f, else "
        "lo; the sign is x's. Exact x (f = 0) never moves. Mosaic lowers the primitive to "
        "tpu.stochastic_convert, whose bit selection happens in the closed TPU backend: JAX "
        "documents and tests only that the result is one of the two neighbours "
        "(tests/pallas/tpu_ops_test.py test_stochastic_round), so hardware is checked for "
        "that, not for the reference's choice.",
        edge_cases={"stochastic_round/c1": "targets: bfloat16, float8_e5m2, float8_e4m3fn, "
                                           "float8_e4m3b11fnuz, float4_e2m1fn, int4 from float32 "
                                           "(_stochastic_round_lowering_rule; tpu_ops.cc "
                                           "StochasticConvertElementwiseOp::verify); other dtypes: "
                                           "unsupported",
                    "stochastic_round/c2": "NaN -> NaN; +-inf -> +-inf for targets with infinities "
                                           "(bfloat16, float8_e5m2); |x| above the largest finite "
                                           "value: neighbours max and inf (the gap past max is the gap "
                                           "below it)",
                    "stochastic_round/c3": "targets without infinities (float8_e4m3fn, "
                                           "float8_e4m3b11fnuz, float4_e2m1fn): |x| above the largest "
                                           "finite value (inf included) has no upper neighbour: "
                                           "UndefinedBehaviorError",
                    "stochastic_round/c4": "float8_e4m3b11fnuz has no -0: a negative x rounding to zero "
                                           "gives +0",
                    "stochastic_round/c5": "int4: XLA's rule exactly: floor(|x|) plus the stochastic "
                                           "carry, sign applied, saturated to [-8, 7]; NaN: "
                                           "UndefinedBehaviorError"},
        sources=(_TPU + " stochastic_round", _LOWER + " _stochastic_round_lowering_rule",
                 _OPS_TD + " TPU_StochasticConvertOp", _XLA_SC,
                 "tests/pallas/tpu_ops_test.py test_stochastic_round"),
    ),
    Semantics(
        "remove_memory_space",
        "The TPU interpret mode's marker that strips an HBM / ANY memory space from an operand's "
        "aval: the value unchanged.",
        sources=("jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py "
                 "_remove_memory_space_impl",),
        exactness=EXACT,
    ),
)

# Pallas TPU primitives the reference leaves unsupported (interp.coverage() says "unsupported"),
# by primitive name, and why. tests/test_pallas_tpu.py checks that every TPU Pallas primitive
# the installed JAX defines is supported, partial, or named here.
UNSUPPORTED = {
    "tpu_custom_call": "the compiled Mosaic kernel (serialized MLIR for the TPU backend): what "
                       "pallas_call lowers to, never in a traced program; the reference runs "
                       "the pallas_call itself",
}
