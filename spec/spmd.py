"""Semantics of SPMD programs (interp/rules/spmd.py, interp/spmd.py): shard_map, collectives, axis
queries and the varying-manual-axes casts.

Devices. A shard_map runs its body once per coordinate of its newly manual mesh axes (row-major in
mesh order); jax.pmap traces to jit(shard_map) in every JAX in range (0.10.2 .. 0.12.0.1: no
xla_pmap primitive exists there), so it needs nothing of its own. The reference takes the devices
from the program's mesh (a Mesh or an AbstractMesh): it never needs N real devices.

Participants. A collective over axes A (a name or a tuple, in the order given) spans the devices
whose coordinates differ only along A; a participant's index is the row-major index of its
coordinates along A in that order (jax.lax.axis_index of the same tuple). With axis_index_groups,
the groups partition those indices and a participant's index is its position in its group.

Order and undefined behaviour: COLLECTIVE_ORDER below (the shard_map entry lists it).

Floating-point reductions. XLA's AllReduce and ReduceScatter leave the combination order to the
implementation ("the order of the reduction is implementation-defined": XLA operation semantics,
AllReduce), so the only defined value is the exact sum. The reference returns it correctly rounded
(exact sum of the participants' operands, one rounding: interp/rules/lax_reductions.py
float_sum_last), and a backend is held to the DOT_PRODUCT mode with K = the number of participants
and bound sum_k |x_k|: |backend - reference| <= (K u + u) sum |x_k| (Higham, Accuracy and Stability
of Numerical Algorithms, 2nd ed., section 4.2: any summation order has error <= (K-1) u sum|x_k| +
O(u^2), plus one rounding of the reference), with u the unit roundoff of the operand type.
pmean is psum followed by a div in the jaxpr (jax/_src/lax/parallel.py pmean): its division is
an ordinary correctly rounded div.

Pallas across devices (REMOTE_DMA below; interp/pallas/devices.py). A pallas_call in a shard_map
body runs on every device; its runs meet after allocating and again before returning (JAX's TPU
interpret mode: _barrier / _clean_up_shared_memory in jax/_src/pallas/mosaic/interpret/
interpret_pallas_call.py), so remote DMAs and signals always find their target kernel running.
"""
from __future__ import annotations

from .base import CORRECTLY_ROUNDED, EXACT, Semantics, table

PAR = "jax/_src/lax/parallel.py"
SHMAP = "jax/_src/shard_map.py"
XLA = "https://openxla.org/xla/operation_semantics"
RULES = "interp/rules/spmd.py"
_SUM = {"collective_sum/rounded-once": "exact sum of every participant's operand, rounded once "
                                       "(integers wrap)",
        "collective_sum/zero-is-plus-zero": "an exact zero sum is +0.0 (all -0.0 operands included: "
                                            "XLA:CPU's all-reduce gives +0.0, measured, as reduce_sum's "
                                            "+0.0 init); one participant: its operand unchanged",
        "collective_sum/positional-axes": "positional (integer) axes in `axes` are reduced in the same "
                                          "single rounding",
        "collective_sum/dot-product-compliance": "backends: DOT_PRODUCT(K = participants) with bound "
                                                 "sum|x_k|; XLA leaves the order unspecified"}
_CAST = "Identity on every device's value: the manual-axis type changes what JAX's checker allows."


# Devices of one group meet their collectives in one order (the shard_map entry lists these).
COLLECTIVE_ORDER = {
    "collective/mismatch": "devices of one group must reach the same collectives in the same order: a "
                           "device meeting another collective than its group (different primitive or "
                           "group size) is a CollectiveMismatchError (an UndefinedBehaviorError)",
    "collective/deadlock": "a program in which every unfinished device waits on a collective that can "
                           "no longer complete (a collective under a cond branch or a while trip count "
                           "that differs between devices) would hang: the reference raises "
                           "DeadlockError (an UndefinedBehaviorError) naming every waiting device and "
                           "collective",
}

# Pallas kernels across the devices of a shard_map (interp/pallas/devices.py): the entries of the
# operations that address another device (dma_start, dma_wait, semaphore_signal, semaphore_wait)
# list these.
REMOTE_DMA = {
    "remote-dma/device-id": "device_id_type MESH names coordinates along the manual mesh axes (a tuple "
                            "in mesh order, or a dict whose unnamed axes keep this device's coordinate, "
                            "a tuple key being the row-major index over its axes); LOGICAL names the "
                            "row-major index over all of them (interpret/utils.py "
                            "device_coords_to_logical_id; primitives.py device_id_to_logical). An id "
                            "outside the mesh is OutOfBoundsError (Mosaic does not define it).",
    "remote-dma/target": "the DMA's destination, its receive semaphore and a remote signal's semaphore "
                         "are the target kernel's buffers in the same position (operand, scratch, "
                         "barrier semaphore, a run_scoped allocation while the target is inside that "
                         "run_scoped: else RaceError), as interpret mode addresses the same buffer id "
                         "on the other device.",
    "remote-dma/completion": "without detect_races a DMA lands at its start. With detect_races it is in "
                             "flight in two halves: a wait on its send semaphore (wait_send) completes "
                             'its send (the source is read: "wait_send ... waits until reading from '
                             'src_ref has completed", mosaic/primitives.py), a wait on its receive '
                             "semaphore, on the target device, completes its receive (the destination "
                             "is written, the send first if not yet done). Reading its destination, or "
                             "writing its destination or a source not yet sent, meanwhile, on either "
                             "device, is a RaceError.",
    "remote-dma/completion-order": "which DMAs a wait saw complete is undefined when several in-flight "
                                   "DMAs signal its semaphore with more bytes than it needs. Source: "
                                   'docs/pallas/tpu/distributed.md ("DMA Semaphores": on DMA start the '
                                   'devices "begin to increment the value of send_sem and the '
                                   'receiver\'s recv_sem asynchronously"; a wait blocks until the value '
                                   "reaches the byte count and subtracts it; its all-gather gives each "
                                   'step its own receive semaphore "to avoid situations where we have '
                                   "multiple DMAs in flight ... the same semaphore being used for "
                                   "multiple DMAs occurring simultaneously ... potentially cause a "
                                   'silent failure"). Neither JAX nor Mosaic TPU documents an order '
                                   "among DMAs (not even between one pair of devices), and the "
                                   "semaphore counts bytes, not DMAs: the wait may return with parts of "
                                   "each landed. With detect_races such a wait is remembered until "
                                   "every one of its DMAs has completed (by later waits); touching any "
                                   "of their destinations (or writing the source of a DMA whose send it "
                                   "counted) before then is a DmaCompletionOrderError (a RaceError) "
                                   "naming the kernel, device, semaphore and DMAs "
                                   "(interp/pallas/dma.py). The same holds for local DMAs. It is found "
                                   "when the reference's schedule has the DMAs in flight together (a "
                                   "device runs until it waits on something not yet signalled): a check "
                                   "of what happened, not a proof over every interleaving. The "
                                   "reference's values (without detect_races, or until the error) are "
                                   "the start-order completion; JAX's interpret mode completes them "
                                   "newest first and their halves separately "
                                   '(interpret/shared_memory.py Semaphore.wait: "as late as possible, '
                                   'as well as out-of-order"). JAX\'s shipped pallas.ops.tpu.all_gather '
                                   "waits like this on rings of 3 or more devices (docs/findings.md; "
                                   "spec/divergences.py pallas-tpu-interpret-all-gather-dma-order).",
    "remote-dma/custom-barrier": "a kernel with collective_id gets no device barrier at its start "
                                 "(Mosaic CompilerParams collective_id / skip_device_barrier; interpret "
                                 "mode's global _barrier runs only without it): with detect_races, a "
                                 "remote DMA or non-barrier signal into a device whose signal this "
                                 "device has not yet waited for is a RaceError.",
    "remote-dma/core-mesh": "a pl.kernel / core_map over a TPU core mesh in a shard_map body joins the "
                            "devices as a pallas_call does, every core of every device a member: the "
                            "devices meet once before a device's cores start (after all of them "
                            "allocated: JAX's interpret mode runs _barrier before its cores' threads, "
                            "interpret_pallas_call.py) and once after all of a device's cores ended. "
                            "Buffers are per (device, core): scratch and semaphores (the barrier "
                            "semaphore included) are core-local, operands and shared memory spaces per "
                            "device (interpret mode: semaphores count per global core, "
                            "Semaphore.count_by_core in interpret/shared_memory.py).",
    "remote-dma/core-target": "device_id names the device by the shard_map's mesh axes and the core by "
                              "a core axis of the kernel's mesh in a MESH dict (Mosaic lowering.py "
                              "_device_id_to_logical: the dict's non-mesh axes must be core axes, at "
                              "most one core index; JAX 0.12's interpret mode alike, interpret/utils.py "
                              "_device_id_to_logical(core_axis_names); older interpret modes ignore it) "
                              'or, for semaphore_signal, core_index (both is an error, Mosaic: "Cannot '
                              'specify both"; a core outside the mesh is OutOfBoundsError). A remote '
                              "DMA naming no core targets the sender's own core on the target device "
                              '(interpret_pallas_call.py dma_start: "Same core on destination device as '
                              'on source", every JAX in range). A remote signal naming no core from a '
                              "kernel of several cores is refused (UnsupportedPrimitiveError with the "
                              "reason): Mosaic passes no core id to tpu.sem_signal, JAX's interpret "
                              "mode then signals core 0 (interpret_pallas_call.py semaphore_signal: "
                              "target_local_core_id None -> 0) while it sends a DMA to the sender's "
                              "core, and no documentation says which core the hardware signals. With "
                              "collective_id, the detect_races check of remote-dma/custom-barrier is "
                              "per core: a core must have heard from the very core it addresses on "
                              "another device (the cores of its own device started with it: the device "
                              "allocated their buffers before any of them ran, as interpret mode does "
                              "before its cores' threads).",
    "remote-dma/deadlock": "a wait only other devices can satisfy lets them run; when every device "
                           "waits, DeadlockError names each device, its kernel, the semaphore and the "
                           "amount it waits for. A DMA or signal into a kernel that has ended is a "
                           "RaceError; with detect_races, a DMA never waited for or a barrier semaphore "
                           "not back at zero at the kernel's end is a RaceError.",
}

SEMANTICS = table(
    Semantics("shard_map", "Runs the body once per coordinate of the newly manual mesh axes on that "
              "device's block of each operand; assembles each output from the devices' blocks.",
              {"shard_map/c1": "a dimension split over names (n1, n2, ...) is cut into prod(sizes) "
                               "blocks; a device's block is the row-major index of its coordinates "
                               "along n1, n2, ... in that order",
               "shard_map/c2": "axes an out_spec leaves out: every device holding a block must hold the "
                               "same bits, else UndefinedBehaviorError (check_vma=False)",
               "shard_map/c3": "mesh axes not in newly_manual_axes (auto axes) do not multiply the "
                               "devices",
               "shard_map/c4": "out_specs with unreduced axes U (PartitionSpec.unreduced, JAX "
                               "0.10.2..0.12.0.1): each device holds a partial; the global value is "
                               "their reduction over U by unreduced_kind (sum, the only kind before "
                               "0.11; max, min), computed as psum/pmax/pmin (the sum correctly rounded; "
                               "XLA reduces when the array is resharded, in an unspecified order). "
                               "max/min (JAX >= 0.11) arrays come from out_specs of a shard_map with "
                               "check_vma=False (with check_vma=True the body's type must carry the "
                               "kind, and no cast gives one: vary_unreduced_cast leaves it unset, "
                               "jax/_src/lax/parallel.py) and from lax.reduce_max/reduce_min with an "
                               "unreduced out_sharding of that kind (each device's local extremum: "
                               "jax/_src/lax/lax.py _reduce_op_unreduced_rule); reshard refuses to make "
                               "an array more unreduced by max/min (jax/_src/pjit.py "
                               "_check_unreduced_reshard) and a jit returning one fails JAX's output "
                               "sharding check ('Unexpected XLA sharding override', XLA:CPU, measured), "
                               "so the cases reshard it or hand it to another shard_map "
                               "(unreduced_pmax/unreduced_pmin)",
               "shard_map/c5": "reduced axes (PartitionSpec.reduced) are replicated: in_specs give "
                               "every device the block, out_specs hold the same bits on every device "
                               "(else UndefinedBehaviorError)",
               "shard_map/c6": "in_specs with unreduced axes U (JAX requires the operand's type to be "
                               "unreduced over U with the same kind): each device gets its partial as "
                               "the producer left it, blocked by the in_spec's partitions (a reshard "
                               "that changes only the partitions moves the partials of each coordinate "
                               "along U, e.g. all-gathers them: XLA:CPU, 8 host devices, JAX 0.10.2, "
                               "0.11.2, 0.12.0.1, measured). Supported where the operand comes from a "
                               "shard_map's unreduced out_specs (through jit, reshards keeping U and "
                               "its kind), or is an unreduced jax.Array argument converted by "
                               "interp.rules.spmd.unreduced_array_value (its devices' shards; "
                               "interp.interpret itself converts arguments with NumPy, which JAX "
                               "refuses for unreduced arrays); auto axes in U are reduced first. "
                               "Refused otherwise (UnsupportedPrimitiveError with the reason): see "
                               "UNREDUCED_OPERANDS",
               "shard_map/c7": "out_specs whose replicated axes hold different partials "
                               "(check_vma=False) but equal reductions: the global value is defined; a "
                               "shard_map taking those partials raises UndefinedBehaviorError (which "
                               "replica's partials XLA keeps is unspecified)",
               "shard_map/c8": "jax.pmap is jit(shard_map) in JAX 0.10.2..0.12.0.1: the same rule runs "
                               "it",
               **COLLECTIVE_ORDER},
              (SHMAP + " _shard_shaped_array/_unshard_shaped_array/_shard_map_impl",
               "jax/_src/pjit.py _check_unreduced_reshard", "jax/_src/partition_spec.py UnreducedKind"),
              EXACT),
    Semantics("psum", "Sum over the participants (one operand per binding in JAX >= 0.7).", _SUM,
              (XLA + "#allreduce", PAR + " psum_p"), CORRECTLY_ROUNDED),
    Semantics("psum_invariant", "psum whose result JAX types as invariant over the axes.", _SUM,
              (PAR + " psum_invariant_p",), CORRECTLY_ROUNDED),
    Semantics("unreduced_psum", "psum of an unreduced operand (its partial sums).", _SUM,
              (PAR + " unreduced_psum_p",), CORRECTLY_ROUNDED),
    Semantics("psum_start", "psum as an async start (JAX 0.10).", _SUM, (PAR + " psum_start_p",),
              CORRECTLY_ROUNDED),
    Semantics("psum_invariant_start", "psum_invariant as an async start (the value is the future's).",
              _SUM, (PAR + " psum_invariant_start_p",), CORRECTLY_ROUNDED),
    Semantics("unreduced_psum_start", "unreduced_psum as an async start (JAX 0.10).", _SUM,
              (PAR + " unreduced_psum_start_p",), CORRECTLY_ROUNDED),
    Semantics("pmax", "Elementwise maximum over the participants, as lax.max.",
              {"pmax/c1": "NaN propagates; -0.0 < +0.0 (XLA max semantics, as reduce_max)",
               "pmax/c2": "XLA:CPU's float all-reduce max/min (JAX 0.10.2 and 0.12.0.1, 8 host devices, "
                          "measured) drops NaN operands and, between -0.0 and +0.0, returns the "
                          "lowest-numbered device's zero: a backend divergence from the maximum its "
                          "all_reduce body names (stablehlo.maximum propagates NaN), not a reference "
                          "choice; the spmd cases take pmax/pmin of integers"},
              (XLA + "#allreduce", PAR + " pmax_p"), EXACT),
    Semantics("unreduced_pmax", "pmax of an unreduced operand.", {"unreduced_pmax/c1": "as pmax"},
              (PAR,), EXACT),
    Semantics("pmin", "Elementwise minimum over the participants, as lax.min.",
              {"pmin/c1": "NaN propagates; -0.0 < +0.0",
               "pmin/c2": "XLA:CPU: as pmax (NaN dropped, first device's zero)"},
              (XLA + "#allreduce", PAR + " pmin_p"), EXACT),
    Semantics("unreduced_pmin", "pmin of an unreduced operand.", {"unreduced_pmin/c1": "as pmin"},
              (PAR,), EXACT),
    Semantics("ppermute", "Participant dst receives the operand of src for each (src, dst) in perm.",
              {"ppermute/c1": "a participant no pair sends to gets zeros"},
              (XLA + "#collectivepermute", PAR + " ppermute docstring"), EXACT),
    Semantics("ppermute_start", "ppermute as an async start.", {"ppermute_start/c1": "as ppermute"},
              (PAR,), EXACT),
    Semantics("pbroadcast", "Every participant gets the operand of participant `source`.", {},
              (XLA + "#collectivebroadcast", PAR + " pbroadcast_p"), EXACT),
    Semantics("pbroadcast_start", "pbroadcast as an async start (JAX 0.10).", {}, (PAR,), EXACT),
    Semantics("pbroadcast_dynamic", "pbroadcast with the source a traced int32 operand (JAX 0.12).",
              {"pbroadcast_dynamic/c1": "devices naming different sources, or a source outside the "
                                        "participants: UndefinedBehaviorError"},
              (PAR + " pbroadcast_dynamic_p",), EXACT),
    Semantics("all_gather", "Participants' operands concatenated (tiled) or stacked (untiled) "
              "along all_gather_dimension in participant order.", {},
              (XLA + "#allgather", PAR + " all_gather_p"), EXACT),
    Semantics("all_gather_invariant", "all_gather typed invariant.", {}, (PAR,), EXACT),
    Semantics("all_gather_reduced", "all_gather of a reduced operand.", {}, (PAR,), EXACT),
    Semantics("all_gather_start", "all_gather as an async start.", {}, (PAR,), EXACT),
    Semantics("all_gather_reduced_start", "all_gather_reduced as an async start.", {}, (PAR,), EXACT),
    Semantics("reduce_scatter", "psum, then participant r keeps block r of scatter_dimension "
              "(tiled: dim/n rows; untiled: the dimension, of size n, is removed).", _SUM,
              (XLA + "#reducescatter", PAR + " reduce_scatter_p"), CORRECTLY_ROUNDED),
    Semantics("unreduced_reduce_scatter", "reduce_scatter of an unreduced operand.", _SUM, (PAR,),
              CORRECTLY_ROUNDED),
    Semantics("reduce_scatter_start", "reduce_scatter as an async start.", _SUM, (PAR,), CORRECTLY_ROUNDED),
    Semantics("unreduced_reduce_scatter_start", "unreduced_reduce_scatter as an async start (JAX 0.10).",
              _SUM, (PAR,), CORRECTLY_ROUNDED),
    Semantics("all_to_all", "Each participant splits its operand into n blocks along split_axis; "
              "participant r concatenates block r of every participant (in participant order) "
              "along concat_axis.", {"all_to_all/c1": "`tiled` is applied by the jax.lax.all_to_all "
                                                      "wrapper; the primitive is XLA AllToAll whatever "
                                                      "it says"},
              (XLA + "#alltoall", PAR + " _all_to_all_lowering"), EXACT),
    Semantics("all_to_all_start", "all_to_all as an async start.", {}, (PAR,), EXACT),
    Semantics("ragged_all_to_all", "Sender s sends rows [input_offsets[i], +send_sizes[i]) for i in "
              "receiver r's slice of its offsets to rows [output_offsets[i], +send_sizes[i]) of r's "
              "copy of `output`.",
              {"ragged_all_to_all/c1": "a send outside the operand or output rows: "
                                       "UndefinedBehaviorError",
               "ragged_all_to_all/c2": "two sends writing the same output row: UndefinedBehaviorError "
                                       "(order unspecified)"},
              (PAR + " ragged_all_to_all docstring",), EXACT),
    Semantics("axis_index", "Row-major index of this device's coordinates along the named axes "
              "(a Pallas core axis inside a core-mesh kernel: the core's coordinate).", {},
              (PAR + " axis_index_p",), EXACT),
    Semantics("all_gather_done", "Completes an async start: its value.", {}, (PAR,), EXACT),
    Semantics("psum_done", "Completes an async start: its value.", {}, (PAR,), EXACT),
    Semantics("reduce_scatter_done", "Completes an async start: its value.", {}, (PAR,), EXACT),
    Semantics("all_to_all_done", "Completes an async start: its value.", {}, (PAR,), EXACT),
    Semantics("ppermute_done", "Completes an async start: its value.", {}, (PAR,), EXACT),
    Semantics("pbroadcast_done", "Completes an async start: its value (JAX 0.10).", {}, (PAR,), EXACT),
    Semantics("pvary", _CAST, {}, ("jax/_src/core.py pvary_p",), EXACT),
    Semantics("preduced", _CAST, {}, (PAR + " preduced_p",), EXACT),
    Semantics("reduced_vary_cast", _CAST + " (named reduced_vary_cast_p before JAX 0.12)", {},
              ("jax/_src/core.py reduced_vary_cast_p",), EXACT),
    Semantics("vary_unreduced_cast", _CAST + " (named vary_unreduced_cast_p before JAX 0.12)", {},
              (PAR + " vary_unreduced_cast_p",), EXACT),
    Semantics("psend", "Refused: JAX's docstring calls its semantics platform-specific (NCCL send "
              "on GPU, the only lowering); deprecated in JAX 0.12.", {}, (PAR + " psend",), EXACT),
    Semantics("precv", "Refused: as psend (NCCL recv on GPU).", {}, (PAR + " precv",), EXACT),
    Semantics("inspect_sharding", "Refused: jax.debug.inspect_array_sharding's callback gets the "
              "sharding XLA chose on real devices (a jax.sharding.Sharding naming them).", {},
              ("jax/_src/debugging.py _inspect_sharding_lowering_rule",), EXACT),
)

# Other JAX spellings of the primitives above: {name: the primitive of its entry}.
ALIASES = {"reduced_vary_cast_p": "reduced_vary_cast",          # up to JAX 0.11
           "vary_unreduced_cast_p": "vary_unreduced_cast"}      # up to JAX 0.11

# Unreduced operands of a shard_map the reference refuses (interp/rules/spmd.py _partials_in), with
# why: JAX types them unreduced and runs them (tests/test_spmd_unreduced.py REFUSED), but the
# partials each device holds are not carried by the reference.
UNREDUCED_OPERANDS = {
    "made unreduced by reshard, broadcast_in_dim, convert_element_type or jit out_shardings":
        "the partials are the partitioner's choice: JAX promises only their reduction "
        "(jax/_src/pjit.py reshard: a sum-kind reshard may add unreduced axes; jax/_src/lax/lax.py "
        "_broadcast_in_dim_unreduced_rule, _convert_element_type_ur_rule). XLA:CPU, 8 host devices, "
        "measured on JAX 0.10.2..0.12.0.1: from P('x', 'y') each device keeps its own block and "
        "zeros elsewhere; from P('x', None) (or after a reduction) the device at y = 0 holds the "
        "value and the others zeros; from P(None, None) JAX 0.12 raises NotImplementedError "
        "(device_indices_map)",
    "left unreduced by dot_general (out_sharding with unreduced contracting axes), by "
    "reduce_sum/reduce_max/reduce_min (out_sharding unreduced over a reduced axis's mesh axes), or "
    "computed from unreduced operands by add, sub, mul or div by a reduced operand, concatenate, ...":
        "defined (each device's local result: XLA:CPU gives the local dot or extremum of each "
        "device's blocks, measured) but the reference holds values outside shard_map by their global value only; "
        "carrying partials through those rules would need every lax rule to carry them "
        "(jax/_src/lax/lax.py *_unreduced_rule / _ur_rule list which ops keep an array unreduced)",
    "a reshard to other unreduced axes or kind, or to a reduced array and back":
        "as the first: the new partials are the partitioner's (the reference hands on a copy without "
        "partials, interp/rules/spmd.py _keep_partials_honest)",
}

# Mosaic GPU kernels across devices (remote refs, multicast signals, multimem loads and stores):
# the same rendezvous as the Pallas TPU kernels above; their semantics, the symmetric GMEM, the
# release/acquire ordering between devices and what is undefined: spec/pallas_mosaic_gpu.py
# MULTI_DEVICE and MULTI_DEVICE_UNDEFINED. Cases: conformance/cases/spmd.py
# spmd/pallas_mosaic_gpu/* (JAX's shipped all_gather_mgpu and reduce_scatter_mgpu, on 2, 4 and
# 8 devices, against the reference and against lax.all_gather / lax.psum_scatter).
