"""The pallas_call engine: a plan built once per pallas_call equation, run per call.

``CallPlan`` reads the ``GridMapping`` once: per operand its block dimensions (Blocked, Element
with padding, Squeezed, BoundedSlice), its index map (a reusable interpreter plan, or a direct
mapping of grid indices when the index map has no equations), its memory space (ANY/HBM operands
are passed whole), then the scratch buffers and the kernel plan. ``CallPlan.run``:

1. allocates outputs (never-written memory per ``Options.uninitialized``; an aliased output starts
   as a copy of its input and shares one buffer with it from then on, as on hardware),
2. walks the grid in row-major order (``grid_order="shuffled"``: each 'parallel' axis visits its
   indices in a seeded random permutation); with ``Options.tpu_cores`` > 1 a TPU kernel's points
   are split over the cores as JAX splits them, each core with its own block buffers and scratch,
   and under detect_races two cores' block copies of one element race (``DeviceAccesses`` over
   the cores, with nothing to order them),
3. per grid step evaluates the index maps (those reading only grid indices: once per grid point,
   as is each window's slicing geometry) and hands the kernel *views* of in-bounds blocks; a block
   that sticks out of its array (partial edge block, Element padding) is a copy whose out-of-array
   part is never-written memory, and for outputs only its in-array part is written back; an input
   block the kernel writes, or on TPU one aliased to an output, is a copy fetched when its block
   index changes (a VMEM buffer),
4. runs the kernel body through ``KernelBody`` (``interp.pallas.specialize``): from a grid point's
   second visit on, a program specialised to that point (grid-only scalar work folded),
5. revisits: a block index that changes back to one visited earlier (non-consecutive revisit) is
   undefined on TPU (the pipeline does not reload outputs): such an output block is reset to
   never-written memory before the step, so kernels that rely on it show NaN / raise.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..errors import UninitializedReadError, UnsupportedPrimitiveError, OutOfBoundsError
from ..evaluator import Literal, get_plan, split_jaxpr
from ..schedule import context
from .devices import DeviceAccesses, join as join_devices
from .dma import DmaEngine
from .memory import (KernelRef, allocate_scratch, check_outputs_written, fill_uninitialized,
                     logical_value, memory_space, physical_operand, physical_value,
                     poison_value, refuse_direct_hbm_access)
from .specialize import KernelBody

def maybe_current_run() -> "KernelRun | None":
    """The innermost running kernel of this thread (``schedule.context.runs``), or None."""
    runs = context.runs
    return runs[-1] if runs else None


def current_run() -> "KernelRun":
    runs = context.runs   # (maybe_current_run inlined: called per DMA)
    if not runs:
        raise RuntimeError("Pallas kernel primitive evaluated outside a pallas_call")
    return runs[-1]


class KernelRun:
    """The state of one kernel evaluation (a pallas_call, one core of a core-mesh kernel, one
    warpgroup of a Mosaic GPU kernel: dialects subclass it) that kernel primitives consult. Every
    field is declared here (``__slots__``); the engine sets them, rules read them."""
    __slots__ = ("name", "grid", "kernel_grid", "program_ids", "point", "options", "dma",
                 "tracker", "prng", "pending", "barrier", "mesh", "core", "globals",
                 "pipeline_grids", "exit_checks", "devices", "device_rank", "grid_names", "__weakref__")

    def __init__(self, name, grid, options):
        self.name = name                  # the kernel's name (messages: ``label``)
        self.grid = grid                  # full grid (dynamic bounds resolved)
        self.kernel_grid = grid           # grid the kernel sees (vmapped dims removed)
        self.program_ids = ()             # program_id of each kernel grid axis
        self.point = ()                   # the grid point (core-mesh kernels: {axis: index})
        self.grid_names = None            # names of the grid's axes (lax.axis_index), or None
        self.options = options
        self.dma = DmaEngine(self, options.detect_races)   # DMAs and semaphores
        self.tracker = self.dma if options.detect_races else None   # the access hook of its refs
        #                                   (KernelRef._before_access), or None
        self.prng = None                  # TPU hardware PRNG state (interp.pallas.tpu.hardware_prng)
        self.pending = None               # (ref, index, message): see KernelRef.read
        self.barrier = None               # the barrier semaphore (get_barrier_semaphore)
        self.mesh = None                  # the mesh of a mesh kernel (axes and sizes axis_index
        #                                   reads, what its cores share), or None
        self.core = None                  # this core's point in the mesh
        self.globals = {}                 # get_global buffers by equation
        self.pipeline_grids = []          # grids of the running emit_pipelines, innermost last
        self.exit_checks = []             # called when the kernel ends (state it must not leave)
        self.devices = None               # in a shard_map body: the kernel's runs on every
        #                                   device (interp.pallas.devices.DeviceKernels)
        self.device_rank = None           # ... and this run's device among them (logical id)

    @property
    def label(self) -> str:
        """The kernel's name as messages give it: with its device in a shard_map body."""
        if self.devices is None:
            return self.name
        return f"{self.name}' on '{self.devices.devices[self.device_rank].describe()}"

    def check_exit(self):
        for check in self.exit_checks:
            check()

    def signalled(self, ref) -> None:
        """A semaphore signal of this run into ``ref`` (a release: a dialect that orders accesses
        by vector clocks, Mosaic GPU's, makes what this run wrote visible to its waiters)."""

    def waited(self, ref) -> None:
        """A semaphore wait of this run on ``ref`` that returned (an acquire)."""

    def dma_started(self, src, src_index, dst, dst_index, sems) -> None:
        """A DMA this run started: it reads ``src[src_index]`` and writes ``dst[dst_index]``,
        then signals ``sems`` (a dialect that orders accesses across cores, TPU core meshes',
        records them)."""

    def allocate_scoped(self, prototypes, collective_axes) -> list:
        """run_scoped's buffers (fresh copies of the prototypes); in a shard_map body, other
        devices' kernels may address them by position until :meth:`leave_scope`. Collective
        allocations belong to kernels of several threads (Mosaic GPU's WarpgroupRun)."""
        if collective_axes:
            raise UnsupportedPrimitiveError("run_scoped", {"collective_axes": collective_axes},
                                            f"{self.where()}: collective allocations outside a "
                                            "Mosaic GPU kernel")
        if self.devices is not None:
            return self.devices.enter_scope(self, prototypes)
        return [p.fresh(self) for p in prototypes]

    def leave_scope(self, refs) -> None:
        """The end of the run_scoped that allocated ``refs`` (also when its body raised)."""
        if self.devices is not None:
            self.devices.exit_scope(self, refs)

    def check_scope_exit(self, refs) -> None:
        """After a run_scoped's body: its semaphores must be back at zero, its DMAs waited."""
        self.dma.check_exit([r for r in refs if r.kind == "semaphore"], "run_scoped")

    def peer_buffer(self, ref, other):
        """The buffer of ``other`` (this kernel's run on another device) that ``ref`` is, when the
        kernel finds it by what it is rather than by position (Mosaic GPU), else None."""
        return None

    def raise_pending(self):
        _, _, message = self.pending
        self.pending = None
        raise UninitializedReadError(message)

    def where(self) -> str:
        return f"kernel '{self.label}' at grid point {self.point}"

    def __enter__(self):
        context.runs.append(self)
        return self

    def __exit__(self, *exc):
        context.runs.pop()


# ------------------------------------------------------------------------------------------
# Block specs


WHOLE_ARRAY_SPACES = ("any", "hbm")
MAX_CACHED = 1 << 16   # windows / placements remembered per operand


class BlockPlan:
    """How one operand (input or output) is cut into blocks."""

    def __init__(self, bm, name, num_grid, options):
        self.name = name
        # Typed PRNG keys are blocked as their key data: trailing key dims whole, at index 0.
        self.array_shape, self.dtype, self.key_impl = physical_operand(bm.array_aval, name)
        key_dims = self.array_shape[len(bm.array_aval.shape):]
        self.space = memory_space(bm.transformed_block_aval)
        self.whole = self.space in WHOLE_ARRAY_SPACES
        if getattr(bm, "transforms", ()):
            raise UnsupportedPrimitiveError("pallas_call", {}, f"block transforms {bm.transforms} "
                                            f"of operand '{name}' (Mosaic GPU tiling/swizzle)")
        kinds, pads = [], []
        for d in bm.block_shape:
            pads.append(tuple(int(p) for p in getattr(d, "padding", (0, 0))))
            cls = type(d).__name__
            if cls == "Blocked":
                kinds.append(("blocked", int(d.block_size), 0))
            elif cls == "Element":
                kinds.append(("element", int(d.block_size), int(d.padding[0])))
            elif cls == "Squeezed" or d is None:
                kinds.append(("squeezed", 1, 0))
            elif cls == "BoundedSlice":
                kinds.append(("bounded", int(d.block_size), 0))
            elif isinstance(d, (int, np.integer)):
                kinds.append(("blocked", int(d), 0))  # older JAX: plain ints
            else:
                raise UnsupportedPrimitiveError("pallas_call", {}, f"block dimension {d!r} of "
                                                f"operand '{name}'")
        kinds += [("blocked", n, 0) for n in key_dims]
        pads += [(0, 0)] * len(key_dims)
        self.kinds = tuple(kinds)
        self.pads = tuple(pads)
        self.key_zeros = [0] * len(key_dims)
        # Where a window may lie (array coordinates): Element windows may reach into padding.
        self.extent = tuple((-p[0], n + p[1]) for p, n in zip(pads, self.array_shape))
        self.block_shape = tuple(k[1] for k in kinds)
        self.ref_shape = tuple(k[1] for k in kinds if k[0] != "squeezed")
        jaxpr, consts = split_jaxpr(bm.index_map_jaxpr)
        self.index_consts = consts
        # An index map without equations is a selection of its grid-index inputs and literals:
        # skip the interpreter for it (the common case, and the hot loop).
        self.direct = None
        if not jaxpr.eqns and not consts:
            pos = {v: i for i, v in enumerate(jaxpr.invars)}
            direct = []
            for a in jaxpr.outvars:
                if isinstance(a, Literal):
                    direct.append(("lit", int(a.val)))
                elif a in pos and pos[a] < num_grid:
                    direct.append(("idx", pos[a]))
                else:
                    direct = None
                    break
            self.direct = direct if direct is None else direct + [("lit", 0)] * len(key_dims)
        self.index_plan = None if self.direct is not None else get_plan(jaxpr, options)
        # An index map that reads no scalar-prefetch ref (affine maps like (2*i + 1, j // 2))
        # is a function of the grid point alone: its window is computed once per point.
        used = {a for e in jaxpr.eqns for a in e.invars if not isinstance(a, Literal)}
        used.update(a for a in jaxpr.outvars if not isinstance(a, Literal))
        self.grid_only = self.direct is not None or (
            not getattr(jaxpr, "effects", None) and
            not any(v in used for v in jaxpr.invars[num_grid:]))
        self._windows: dict = {}     # grid point -> window (index maps of the grid alone)
        self._placements: dict = {}  # window -> placement

    def placement(self, win, kernel, ids):
        """(in bounds, slices of the array, slices of the block buffer) of window ``win``: the
        geometry of a window depends on nothing else, so it is computed once per window."""
        p = self._placements.get(win)
        if p is None:
            p = self._place(win, kernel, ids)
            if len(self._placements) < MAX_CACHED:
                self._placements[win] = p
        return p

    def _place(self, win, kernel, ids):
        inner_sl, outer_sl = [], []
        inside = True
        for d, ((start, size), kind) in enumerate(zip(win, self.kinds)):
            n = self.array_shape[d]
            lo, hi = max(start, 0), min(start + size, n)
            ok = (0 <= start < n) if kind[0] == "blocked" else \
                (self.extent[d][0] <= start and start + size <= self.extent[d][1])
            if not ok:
                raise OutOfBoundsError(
                    f"kernel '{kernel}' at grid point {ids}: the block of operand "
                    f"'{self.name}' covers [{start}:{start + size}] of dimension {d} (size {n}"
                    f"{', padding %s' % (self.pads[d],) if kind[0] == 'element' else ''}): "
                    "outside the array")
            if kind[0] == "squeezed":
                outer_sl.append(start)
                continue
            # A BoundedSlice window may be shorter than its block: the block buffer keeps the
            # block size and only its first `size` rows hold data.
            if lo != start or hi != start + size or size != kind[1]:
                inside = False
            outer_sl.append(slice(lo, hi))
            inner_sl.append(slice(lo - start, hi - start))
        # The trailing Ellipsis keeps a view even when every dimension is squeezed (0-d block).
        return inside, tuple(outer_sl) + (Ellipsis,), tuple(inner_sl) + (Ellipsis,)

    def block_indices(self, ids, scalar_refs) -> list:
        if self.direct is not None:
            return [v if k == "lit" else ids[v] for k, v in self.direct]
        outs = self.index_plan.run(self.index_consts,
                                   [np.int32(i) for i in ids] + list(scalar_refs))
        return [int(o) for o in outs] + self.key_zeros

    def window(self, ids, scalar_refs, grid=()):
        """Per dimension (start, size) in array coordinates (may stick out of the array).

        The index map returns a block index per dimension, except for BoundedSlice dimensions,
        for which it returns a pl.ds(start, size) (two leaves) with size <= the block size."""
        if self.grid_only:  # a function of the grid point alone: computed once per point
            key = (grid, ids)   # (the grid too: an index map may read num_programs)
            win = self._windows.get(key)
            if win is None:
                win = self._window(ids, scalar_refs)
                if len(self._windows) < MAX_CACHED:
                    self._windows[key] = win
            return win
        return self._window(ids, scalar_refs)

    def _window(self, ids, scalar_refs):
        it = iter(self.block_indices(ids, scalar_refs))
        win = []
        for kind, size, pad_lo in self.kinds:
            i = next(it)
            if kind == "blocked":
                win.append((i * size, size))
            elif kind == "element":
                win.append((i - pad_lo, size))
            elif kind == "squeezed":
                win.append((i, 1))
            else:  # bounded
                n = next(it)
                if n > size:
                    raise OutOfBoundsError(f"operand '{self.name}': BoundedSlice of size {n} "
                                           f"exceeds its block size {size}")
                win.append((i, n))
        return tuple(win)


class CallPlan:
    """Everything about one pallas_call equation that does not change between calls.
    ``allocate_scratch(aval, name, run, options)`` makes the scratch buffers (a dialect's own
    kinds first: the rule passes it; default: the core's)."""

    def __init__(self, eqn, allocate_scratch=allocate_scratch):
        p = eqn.params
        gm = p["grid_mapping"]
        self.options = eqn.options
        self.jaxpr = p["jaxpr"]
        kernel_jaxpr, self.kernel_consts = split_jaxpr(self.jaxpr)
        refuse_direct_hbm_access(p, p.get("name") or kernel_name(kernel_jaxpr) or "kernel")
        # The body runs specialised per grid point (interp.pallas.specialize): its grid-only
        # scalar work is evaluated once per point, not once per step.
        self.body = KernelBody(kernel_jaxpr, self.kernel_consts, eqn.options)
        self.name = (p.get("name") or kernel_name(kernel_jaxpr) or "kernel")
        self.grid_spec = tuple(gm.grid)
        self.grid_names = getattr(gm, "grid_names", None)   # (vmapped dims included)
        self.num_dynamic = sum(1 for g in self.grid_spec if not isinstance(g, (int, np.integer)))
        self.vmapped = tuple(getattr(gm, "vmapped_dims", ()))
        self.num_scalars = gm.num_index_operands
        self.num_inputs = gm.num_inputs
        self.num_outputs = gm.num_outputs
        if getattr(gm, "local_grid_env", None) is not None or \
                getattr(gm, "get_grid_indices", None) is not None:
            raise eqn.unsupported("custom grid environments (local_grid_env / get_grid_indices)")
        if p.get("mesh") is not None:
            raise eqn.unsupported(f"pallas_call over a mesh {p['mesh']!r}")
        invars = kernel_jaxpr.invars
        nb = len(gm.block_mappings)
        names = operand_names(kernel_jaxpr)
        self.scalar_names = names[:self.num_scalars]
        self.blocks = [BlockPlan(bm, names[self.num_scalars + i], len(self.grid_spec),
                                 eqn.options)
                       for i, bm in enumerate(gm.block_mappings)]
        self.scratch = [(v.aval, names[self.num_scalars + nb + i])
                        for i, v in enumerate(invars[self.num_scalars + nb:])]
        # Scratch buffers start as fresh copies of prototypes allocated here (their memory is
        # never-written, or zero semaphores: the same every call).
        self.scratch_protos = [allocate_scratch(aval, name, None, eqn.options)
                               for aval, name in self.scratch]
        self.ref_kinds = [("input" if k < self.num_inputs else "output") +
                          (f" ({bp.space})" if bp.space != "default" else "")
                          for k, bp in enumerate(self.blocks)]
        self.checked = [{} for _ in self.blocks]   # indices in bounds, per operand (KernelRef)
        # input_output_aliases count the scalar-prefetch operands (not dynamic grid bounds).
        self.aliases = {o: i - self.num_scalars for i, o in p["input_output_aliases"]}
        # Inputs the kernel writes to get a private copy (never the caller's array).
        written = set()
        pos = {v: i for i, v in enumerate(kernel_jaxpr.invars)}
        for eff in getattr(kernel_jaxpr, "effects", ()):
            if type(eff).__name__ in ("WriteEffect", "AccumEffect"):
                # RefEffect.input: an invar position (or the invar itself)
                written.add(eff.input if isinstance(eff.input, int) else pos.get(eff.input))
        aliased_inputs = set(self.aliases.values())
        self.private_inputs = {i for i in range(self.num_inputs)
                               if self.num_scalars + i in written and i not in aliased_inputs
                               and not self.blocks[i].whole}
        # Whole (ANY/HBM) inputs the kernel writes are copied once per call.
        self.written_inputs = {i for i in range(self.num_inputs)
                               if self.num_scalars + i in written and self.blocks[i].whole}
        self.compiler_params = p.get("compiler_params")
        sem = _dimension_semantics(self.compiler_params)
        # dimension_semantics describe the kernel's own axes; vmap adds batch axes (vmapped_dims),
        # which are independent, hence parallel.
        own = [d for d in range(len(self.grid_spec)) if d not in self.vmapped]
        self.parallel_axes = tuple(sorted(
            set(self.vmapped) |
            {own[i] for i, s in enumerate(sem) if "parallel" in str(s).lower() and i < len(own)}))
        self.revisit_undefined = _tpu_pipeline(p)
        if self.revisit_undefined:
            # On TPU an input block is a VMEM copy fetched when its block index changes, an
            # output block a VMEM buffer written back when its index changes: an input aliased to
            # an output does not see the output's writes while its block stays (JAX's TPU
            # interpret mode: interpret_pallas_call.py _store_slice_to_kernel_input).
            self.private_inputs |= {i for i in aliased_inputs if not self.blocks[i].whole}
        if not self.revisit_undefined:
            # GPU programs (Triton / Mosaic GPU) run concurrently in no defined order: every
            # grid axis is parallel.
            self.parallel_axes = tuple(range(len(self.grid_spec)))
        self.out_avals = p["out_avals"]

    # --------------------------------------------------------------------------------------
    def run(self, args):
        opts = self.options
        mode = opts.uninitialized
        dyn, rest = args[:self.num_dynamic], args[self.num_dynamic:]
        scalars, inputs = rest[:self.num_scalars], rest[self.num_scalars:]
        dyn_it = iter(dyn)
        grid = tuple(int(g) if isinstance(g, (int, np.integer)) else int(next(dyn_it))
                     for g in self.grid_spec)
        run = KernelRun(self.name, grid, opts)
        run.kernel_grid = tuple(g for i, g in enumerate(grid) if i not in self.vmapped)
        run.grid_names = self.grid_names

        scalar_refs = [KernelRef(np.array(s, copy=True), n, run, kind="smem (scalar prefetch)",
                                 check_bounds=opts.check_bounds)
                       for s, n in zip(scalars, self.scalar_names)]
        # Whole operand buffers: inputs (views of the caller's arrays unless written), outputs.
        arrays, inits = [], []
        for i, x in enumerate(inputs):
            x = physical_value(x)
            if i in self.written_inputs:
                x = np.array(x, copy=True)
            arrays.append(x)
            inits.append(None)
        for o in range(self.num_outputs):
            bp = self.blocks[self.num_inputs + o]
            if o in self.aliases:
                arrays.append(np.array(arrays[self.aliases[o]], copy=True))
                arrays[self.aliases[o]] = arrays[-1]  # one buffer, as on hardware
                inits.append(None)
            else:
                arrays.append(fill_uninitialized(bp.array_shape, bp.dtype, mode))
                inits.append(np.zeros(bp.array_shape, bool) if mode == "raise" else None)
        refs = [KernelRef(arrays[k], bp.name, run, init=inits[k], kind=self.ref_kinds[k],
                          check_bounds=opts.check_bounds, checked=self.checked[k])
                for k, bp in enumerate(self.blocks)]
        blocked = [(k, bp, k >= self.num_inputs, k in self.private_inputs)
                   for k, bp in enumerate(self.blocks) if not bp.whole]
        body = self.body
        vm = self.vmapped
        cores = self._core_points(grid)
        order = None
        if len(cores) > 1 and opts.detect_races:
            # HBM is shared and nothing orders one core's block copies against another's
            # (no semaphore releases them): any two of one element, one a write, race.
            order = DeviceAccesses(len(cores), lambda c: f"kernel '{self.name}' core {c}",
                                   noun="core")
            whole = [KernelRef(arrays[k], bp.name, run, kind=self.ref_kinds[k])
                     for k, bp in enumerate(self.blocks)]
        scratch_refs = [proto.fresh(run) for proto in self.scratch_protos]
        kernel_args = list(scalar_refs) + refs + scratch_refs   # (refs re-pointed per step)
        # in a shard_map: the other devices' runs of this kernel
        devices = join_devices(run, kernel_args, self.compiler_params)
        if devices is not None and len(cores) > 1:
            raise UnsupportedPrimitiveError(
                "pallas_call", {"tpu_cores": opts.tpu_cores},
                f"kernel '{self.name}': a pallas_call split over {opts.tpu_cores} TensorCores "
                "inside a shard_map (remote DMAs would name a core the reference does not model)")
        sems = []
        with run:
            for core, points in enumerate(cores):
                # Each core has its own pipeline (block buffers) and scratch; HBM is shared.
                if core:
                    scratch_refs = [proto.fresh(run) for proto in self.scratch_protos]
                    kernel_args = list(scalar_refs) + refs + scratch_refs
                sems += [r for r in scratch_refs if r.kind == "semaphore"]
                last_window = [None] * len(self.blocks)
                # Whether a block's ref views its array (in bounds, not a private copy): a view of
                # the same window stays valid from one step to the next.
                viewing = [False] * len(self.blocks)
                visited = [set() for _ in self.blocks]
                for ids in points:
                    run.point = ids
                    run.program_ids = ids if not vm else tuple(i for d, i in enumerate(ids)
                                                               if d not in vm)
                    writeback = []
                    for k, bp, is_out, private in blocked:
                        win = bp.window(ids, scalar_refs, grid)
                        if win == last_window[k] and (private or viewing[k]):
                            # the kernel's own (possibly modified) buffer stays, or the same view
                            continue
                        if is_out and win != last_window[k]:
                            if self.revisit_undefined and win in visited[k]:
                                self._reset_block(arrays[k], inits[k], win, bp, mode)
                            visited[k].add(win)
                        last_window[k] = win
                        viewing[k] = self._bind_block(refs[k], arrays[k], inits[k], win, bp,
                                                      is_out, writeback, ids, copy=private)
                        if order is not None:
                            outer = bp.placement(win, self.name, ids)[1][:-1]   # (no Ellipsis)
                            order.access(core, whole[k], outer, "write" if is_out else "read",
                                         how=f"block copy at grid point {ids}: ")
                    body.run(run, kernel_args)
                    if run.pending is not None:
                        run.raise_pending()
                    for ref, arr, init, sl, inner in writeback:
                        arr[sl] = ref.array[inner]
                        if init is not None:
                            init[sl] = ref.init[inner]
            if devices is not None:
                devices.leave(run)
            run.dma.check_exit(sems, "pallas_call")
            run.check_exit()
        check_outputs_written(run, refs[self.num_inputs:], inits[self.num_inputs:])
        return [logical_value(self.blocks[self.num_inputs + o].key_impl,
                              arrays[self.num_inputs + o]) for o in range(self.num_outputs)]

    def _core_points(self, grid) -> list:
        """The grid points each TensorCore runs, in order (``Options.tpu_cores``, spec
        pallas_call/c18), split as JAX's TPU interpret mode splits them
        (interpret_pallas_call.py _execute_grid_for_core): the points of the parallel subgrid (the
        leading 'parallel' axes) in contiguous ranges of ceil(P / cores), each with every point of
        the other axes."""
        cores = self.options.tpu_cores
        if cores == 1 or not self.revisit_undefined:
            return [self._grid_points(grid)]
        lead = len(self.parallel_axes)
        if self.parallel_axes != tuple(range(lead)):
            raise UnsupportedPrimitiveError(
                "pallas_call", {"tpu_cores": cores},
                f"kernel '{self.name}': tpu_cores={cores} splits the leading 'parallel' grid axes "
                f"over the cores, but the parallel axes {self.parallel_axes} of grid {grid} are not "
                "its leading ones (JAX's TPU interpret mode refuses this too)")
        points = list(self._grid_points(grid))
        if not points:
            return [points]
        parallel = math.prod(grid[:lead])          # the parallel subgrid's points
        per_core = -(-parallel // cores) * (len(points) // parallel)
        return [points[c * per_core:(c + 1) * per_core] for c in range(cores)]

    def _grid_points(self, grid):
        if not grid:
            return [()]
        axes = [range(g) for g in grid]
        if self.options.grid_order == "shuffled" and self.parallel_axes:
            rng = np.random.default_rng(self.options.seed)
            for a in self.parallel_axes:
                if a < len(axes):
                    axes[a] = [int(i) for i in rng.permutation(grid[a])]
        return itertools.product(*axes)

    def _bind_block(self, ref, arr, init, win, bp, is_out, writeback, ids, copy=False) -> bool:
        """Point ``ref`` at the block ``win`` of ``arr``: a view when in bounds, else (or with
        ``copy``) a copy. Returns whether it is a view."""
        inside, outer, inner = bp.placement(win, self.name, ids)
        if inside and not copy:
            ref.array = arr[outer]
            ref.init = init[outer] if init is not None else None
            return True
        # Partial block: a copy whose out-of-array part is never-written memory.
        mode = self.options.uninitialized
        block = fill_uninitialized(bp.ref_shape, bp.dtype, mode)
        block[inner] = arr[outer]
        ref.array = block
        if mode == "raise":
            binit = np.zeros(bp.ref_shape, bool)
            binit[inner] = True if init is None else init[outer]
            ref.init = binit
        else:
            ref.init = None
        if is_out:
            writeback.append((ref, arr, init, outer, inner))
        return False

    def _reset_block(self, arr, init, win, bp, mode):
        sl = tuple(slice(max(s, 0), max(min(s + n, dim), 0)) if kind[0] != "squeezed" else s
                   for (s, n), kind, dim in zip(win, bp.kinds, bp.array_shape))
        arr[sl] = 0 if mode == "zero" else poison_value(bp.dtype)
        if init is not None:
            init[sl] = False


def kernel_name(jaxpr) -> str | None:
    info = getattr(jaxpr, "debug_info", None)
    src = getattr(info, "func_src_info", None) or getattr(info, "func_name", None)
    if not src:
        return None
    return str(src).split(" ")[0]


def operand_names(jaxpr) -> list[str]:
    """Readable names of the kernel operands: the kernel's argument names when JAX kept them."""
    info = getattr(jaxpr, "debug_info", None)
    names = list(getattr(info, "arg_names", None) or ())
    out = []
    for i, v in enumerate(jaxpr.invars):
        n = names[i] if i < len(names) and names[i] else None
        out.append(f"{n} (operand {i})" if n else f"operand {i}")
    return out


def _dimension_semantics(compiler_params):
    if compiler_params is None:
        return ()
    if isinstance(compiler_params, dict):  # older JAX: {"mosaic": {...}} / {"mosaic_tpu": ...}
        for v in compiler_params.values():
            if isinstance(v, dict) and "dimension_semantics" in v:
                return tuple(v["dimension_semantics"] or ())
        return ()
    return tuple(getattr(compiler_params, "dimension_semantics", None) or ())


def _tpu_pipeline(params) -> bool:
    """Whether the kernel targets the TPU pipeline (where non-consecutive output revisits are
    undefined). GPU kernels write global memory directly, so revisits are well defined there."""
    cp = params.get("compiler_params")
    mod = type(cp).__module__ if cp is not None else ""
    if "triton" in mod or "mosaic_gpu" in mod:
        return False
    if isinstance(cp, dict) and any("triton" in k or "gpu" in k for k in cp):
        return False
    return True
