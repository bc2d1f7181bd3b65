"""Semantics of refs and state primitives (interp/rules/state.py, interp/refs.py)."""
from __future__ import annotations

from .base import EXACT, Semantics, shared, table
from .pallas_mosaic_gpu import IN_KERNELS as MOSAIC_GPU_IN_KERNELS

ST = "jax/_src/state/"
_INDEX = {"ref_index/transforms": "the transform tree unflattens to NDIndexers (ints, Slice(start, "
                                  "size, stride) incl. pl.ds with dynamic start and strides, integer "
                                  "arrays already broadcast by JAX's broadcast_to) and "
                                  "reshape/transpose/bitcast/memory-space transforms; a single indexer "
                                  "maps straight onto the Ref's normalized index, a chain of views "
                                  "follows every element's flat position through the transforms",
          "ref_index/array-indexers": "array indexers place their dimensions NumPy-style, which is "
                                      "NDIndexer.get_indexer_shape: in place when adjacent, in front "
                                      "when separated by a slice",
          "ref_index/negative-indices": "negative ints/array entries in [-size, 0) count from the end "
                                        "for jax.new_ref refs (JAX's discharge: dynamic_slice and jnp "
                                        "indexing normalise them); Pallas kernel refs do not wrap "
                                        "(Ref.wraps_negative_indices)",
          "ref_index/out-of-bounds": "anything outside the ref raises OutOfBoundsError with "
                                     "check_bounds=True (the default): JAX's discharge clamps reads, "
                                     "drops scattered writes and clamps dynamic slices, three different "
                                     "answers, so the reference makes it loud",
          "ref_index/bitcast-width": "bitcast views must keep the element width; other transforms raise "
                                     "UnsupportedPrimitiveError"}

HIJAX = "jax/_src/hijax.py (JAX 0.10.2)"

SEMANTICS = table(
    Semantics("get", "Reads ref[transforms] (a copy).", _INDEX,
              (ST + "discharge.py transform_array, _index_array", ST + "indexing.py NDIndexer"), EXACT),
    Semantics("swap", "Returns ref[transforms] and writes the new value there.",
              {**_INDEX,
               "swap/c1": "with duplicate array indices the last write in row-major index order wins "
                          "(XLA leaves the choice open: tests use distinct indices)"},
              (ST + "discharge.py transform_swap_array",), EXACT),
    Semantics("addupdate", "ref[transforms] += value.",
              {**_INDEX,
               "addupdate/c1": "every duplicate array index receives every update (np.add.at), each "
                               "addition rounded to the ref dtype in row-major index order",
               "addupdate/c2": "through a bitcast view: unsupported, as in JAX"},
              (ST + "discharge.py _addupdate_discharge",), EXACT),
    Semantics("new_ref", "A fresh ref holding a copy of the value (weak type dropped).",
              {"new_ref/c1": "memory_space, kind and pin do not change values",
               "new_ref/c2": "a jax.Ref passed as an argument to interpret()/eval_jaxpr() is evaluated "
                             "on a copy and its final value is written back to the caller's ref, as "
                             "jax.jit mutates it"},
              ("jax/_src/core.py ref_p",), EXACT),
    Semantics("empty_ref", "A fresh ref with uninitialized contents.",
              {"empty_ref/c1": "options.uninitialized='nan': the reference's poison value "
                               "(interp/uninitialized.py: NaN, signed ints their minimum, unsigned "
                               "their maximum, bool True); 'zero': zeros; 'raise': the ref tracks which "
                               "elements were written (interp/uninitialized.py TrackedRef); get, "
                               "addupdate and freeze of an element never written raise "
                               "UninitializedReadError",
               "empty_ref/c2": "'raise': swap (`ref[i] = v`) is not a checked read: JAX binds its old "
                               "value even when unused, and that value is the poison for never-written "
                               "elements"},
              ("jax/_src/core.py empty_ref_p", ST + "discharge.py _default_initialization"), EXACT),
    Semantics("freeze", "The ref's current value (a copy).", {}, ("jax/_src/core.py freeze_p",), EXACT),
    Semantics("free_ref", "No value; the ref is not used again.", {}, ("jax/_src/core.py",), EXACT),
    Semantics("run_state", "Runs the body on fresh refs holding the inputs; returns their final values.",
              {"run_state/c1": "is_initialized=False inputs start as empty_ref does",
               "run_state/c2": "which_linear only matters to AD",
               **shared(MOSAIC_GPU_IN_KERNELS, "mosaic_gpu/run-state-accumulator")},
              (ST + "discharge.py _run_state_impl",), EXACT),
    Semantics("broadcast_to", "NumPy broadcast_to (used to broadcast integer indexers).", {},
              (ST + "primitives.py _broadcast_to_impl",), EXACT),
    Semantics("create_linear", "A fresh linear (pinned) buffer with uninitialized contents.",
              {"create_linear/c1": "options.uninitialized='nan' / 'zero': as empty_ref; 'raise' is "
                                   "unsupported (the buffer is a value, not a tracked ref)",
               "create_linear/c2": "XLA lowers it to the CreateBuffer custom call, which XLA:CPU does "
                                   "not implement ('No registered implementation for untyped custom "
                                   "call to CreateBuffer'; JAX 0.10.2's lowering rule fails on its own "
                                   "parameters): no backend defines more",
               "create_linear/c3": "memory_space only places the buffer"},
              (ST + "primitives.py create_linear_p, _lower_create_linear",
               ST + "discharge.py (TODO: switch empty_ref(pin=True) to create_linear)"), EXACT),
    Semantics("new_box", "JAX 0.10's hijax Box: a new mutable cell holding None.",
              {"new_box/c1": "a Box passed into the program (read at entry, written back at exit by "
                             "jax.jit) is refused: only cells the program creates are modelled"},
              (HIJAX + " NewBox.to_lojax",), EXACT),
    Semantics("box_set", "The box now holds the given pytree (its leaves, copied).", {},
              (HIJAX + " BoxSet.to_lojax",), EXACT),
    Semantics("box_get", "The leaves of the value the box holds.", {},
              (HIJAX + " BoxGet.to_lojax",), EXACT),
    Semantics("new_log", "JAX 0.10's hijax Log: a new dict of lists that only grows.",
              {"new_log/c1": "a Log passed into the program (written back by jax.jit) is refused"},
              (HIJAX + " NewLog.to_lojax",), EXACT),
    Semantics("log_extend", "Each key's list grows by the given list.",
              {"log_extend/c1": "log_read cannot be traced (ReadLog.abstract_eval raises), so a program "
                                "never reads its own log: interp/registry.py NO_RULE"},
              (HIJAX + " LogExtend.to_lojax",), EXACT),
    Semantics("pin", "Identity (memory placement).", {}, (ST + "primitives.py",), EXACT),
    Semantics("unpin", "Identity (memory placement).", {}, (ST + "primitives.py",), EXACT),
    Semantics("accum_grad_in_ref", "Identity.", {}, ("jax/_src/core.py",), EXACT),
    Semantics("with_memory_space_constraint", "Identity.", {}, (ST + "primitives.py",), EXACT),
)

# Other JAX spellings of the primitives above: {name: the primitive of its entry}.
ALIASES = {"mutable_array": "new_ref"}     # before JAX 0.10.2 (interp/coverage.py RULE_NAME_RELEASES)
