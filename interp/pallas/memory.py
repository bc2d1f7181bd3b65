"""Kernel memory: refs that know their kernel, poison what was never written, and check races.

Every buffer a Pallas kernel sees (blocks of operands, whole HBM operands, scratch, run_scoped
allocations, semaphores) is a :class:`KernelRef`. Reads and writes go through the shared
:class:`interp.refs.Ref` contract (normalized indices), so the state rules (get / swap /
addupdate) serve kernels unchanged; this subclass adds:

* names in error messages: kernel, buffer, grid point, index;
* uninitialized memory per ``Options.uninitialized``: ``"nan"`` fills never-written memory with
  :func:`poison_value`, ``"zero"`` with zeros, ``"raise"`` tracks a written-mask and raises
  :class:`UninitializedReadError` at the first read of an element never written;
* race checks against the DMAs in flight (``Options.detect_races``), see ``interp.pallas.dma``.
"""
from __future__ import annotations

import jax
import numpy as np

from ..errors import InvalidKernelError, UninitializedReadError
from ..refs import Ref
from ..uninitialized import fill_uninitialized, poison_value  # noqa: F401  (re-exported)


def _first_false(mask: np.ndarray) -> tuple:
    return tuple(int(i) for i in np.argwhere(~mask)[0]) if mask.ndim else ()


class KernelRef(Ref):
    """A buffer of a running kernel.

    ``init`` is ``None`` when every element is known to be written (inputs, "nan"/"zero" modes),
    otherwise a bool array of ``array``'s shape (a view like ``array`` for blocks).
    ``run`` is the :class:`interp.pallas.grid.KernelRun` the ref belongs to (names, grid point,
    DMA tracker); ``kind`` says what the buffer is in messages (input, output, scratch, semaphore).
    Race checks compare element addresses, so refs viewing the same memory are compared exactly.
    """
    __slots__ = ("run", "init", "kind", "_address", "_checked")

    def __init__(self, array, name, run, *, init=None, kind="vmem", check_bounds=True,
                 checked=None):
        super().__init__(array, name, check_bounds)
        self.run = run
        self.init = init
        self.kind = kind
        self._address = None
        self._checked = {} if checked is None else checked

    # Indices seen in bounds, by identity: the state rules hand the same tuple object for the same
    # index (interp/rules/state.py compile_indexer), and a block keeps its shape across grid steps
    # while its view moves, so a kernel's accesses are bounds-checked once per index and shape.
    # Only tuples of ints, slices and read-only position arrays (the resolved views of tiled SMEM,
    # interp/ref_indexing.py) are remembered (immutable; the entry holds the tuple, so its id
    # cannot be reused by another object while the entry exists). The buffers of one operand
    # in successive calls may share the record (``checked``): the check depends on nothing else.
    MAX_CHECKED = 64

    def check_index(self, index: tuple) -> None:
        hit = self._checked.get(id(index))
        if hit is not None and hit[0] is index and hit[1] == self.array.shape:
            return
        Ref.check_index(self, index)
        if type(index) is tuple and all(type(ix) is slice or type(ix) is int or (
                type(ix) is np.ndarray and not ix.flags.writeable) for ix in index):
            if len(self._checked) >= self.MAX_CHECKED:
                self._checked.clear()
            self._checked[id(index)] = (index, self.array.shape)

    def address(self) -> int:
        """The address of the buffer's first element (race checks compare addresses); kept per
        array object, since blocks re-point ``array`` at a new view every grid step."""
        cached = self._address
        if cached is None or cached[0] is not self.array:
            cached = self._address = (self.array, self.array.__array_interface__["data"][0])
        return cached[1]

    def fresh(self, run) -> "KernelRef":
        """A new buffer of ``run`` holding a copy of this one (its contents and written-mask,
        name, kind): scratch is allocated once per plan and copied per call."""
        return KernelRef(self.array.copy(), self.name, run,
                         init=None if self.init is None else self.init.copy(), kind=self.kind,
                         check_bounds=self.check_bounds, checked=self._checked)

    def describe(self) -> str:
        run = self.run
        where = f"kernel '{run.label}' at grid point {run.point}" if run is not None else "kernel"
        return f"{where}: {self.short()}"

    def short(self) -> str:
        """The buffer alone (kind, name, type), for messages that already name the kernel."""
        return f"{self.kind} buffer '{self.name}' {self.array.dtype}{list(self.array.shape)}"

    # Pallas kernels leave negative indices undefined: they fail the bounds check.
    wraps_negative_indices = False

    def _uninit_message(self, index, init) -> str:
        bad = _first_false(np.asarray(init))
        return (f"{self.describe()}: read of never-written memory at index {_show(index)} "
                f"(element {bad} of the accessed range; uninitialized='raise')")

    def _check_init(self, index) -> None:
        init = self.init[index]
        if not init.all():
            raise UninitializedReadError(self._uninit_message(index, init))

    def _before_access(self, index, kind) -> None:
        self.check_index(index)
        run = self.run
        if run is not None:
            if run.pending is not None:
                run.raise_pending()
            if run.tracker is not None:
                run.tracker.check_access(self, index, kind)

    def swap(self, index: tuple, value) -> np.ndarray:
        """``read`` then ``write`` of the same elements (a swap's old value, then its store),
        with the checks made once: the read's bounds, pending and race checks, then the write's
        race check. Never-written memory takes the two-step path (its read marks a pending
        error that the write clears)."""
        if self.init is not None:
            old = self.read(index)
            self.write(index, value)
            return old
        self._before_access(index, "read")
        old = _gather(self.array, index)
        run = self.run
        if run is not None and run.tracker is not None:
            run.tracker.check_access(self, index, "write")
        _scatter(self.array, index, value)
        return old

    def read(self, index: tuple) -> np.ndarray:
        self._before_access(index, "read")
        if self.init is not None:
            init = self.init[index]
            if not init.all():
                if self.run is None:
                    raise UninitializedReadError(self._uninit_message(index, init))
                # A swap (``ref[...] = x``) reads the old value and writes at once; the old value
                # of never-written memory is only an error if something uses it. The error is
                # kept pending and raised at the next access unless that access is the swap's
                # write of the same elements (the kernel step's end raises it too).
                self.run.pending = (self, index, self._uninit_message(index, init))
        return _gather(self.array, index)

    def write(self, index: tuple, value) -> None:
        run = self.run
        if run is not None and run.pending is not None and run.pending[0] is self \
                and _same_index(run.pending[1], index):
            run.pending = None
        self._before_access(index, "write")
        _scatter(self.array, index, value)
        if self.init is not None:
            self.init[index] = True

    def accumulate(self, index: tuple, value) -> None:
        self._before_access(index, "accumulate")
        if self.init is not None:
            self._check_init(index)
        Ref.accumulate(self, index, value)

    # Masked accesses (pl.load / pl.store with a mask): only the selected elements are accessed,
    # so only they are bounds-, race- and init-checked (masked-out lanes may point anywhere).
    def masked_read(self, index: tuple, mask, other) -> np.ndarray:
        """``where(mask, ref[index], other)``; masked-out lanes without ``other`` are poison."""
        shape = _index_shape(self.array.shape, index)
        mask = np.broadcast_to(np.asarray(mask, bool), shape)
        if mask.all():
            out = self.read(index)
        else:
            coords = _selected_coords(self.array.shape, index, mask)
            self._before_access(coords, "read")
            run = self.run
            if self.init is not None:
                self._check_init(coords)
            if other is None:
                mode = run.options.uninitialized if run is not None else "nan"
                if mode == "raise" and not mask.all():
                    # The value is only garbage if used; Pallas allows loading it, so it is
                    # poisoned like "nan" and a later use shows up in the results.
                    mode = "nan"
                out = fill_uninitialized(shape, self.array.dtype, mode)
            else:
                out = np.array(np.broadcast_to(np.asarray(other, self.array.dtype), shape))
            out[mask] = self.array[coords]
        return out

    def masked_write(self, index: tuple, value, mask) -> np.ndarray:
        """Store ``value`` at the selected lanes; returns the old values (masked_swap)."""
        shape = _index_shape(self.array.shape, index)
        mask = np.broadcast_to(np.asarray(mask, bool), shape)
        value = np.broadcast_to(np.asarray(value, self.array.dtype), shape)
        coords = _selected_coords(self.array.shape, index, mask)
        self._before_access(coords, "write")
        old = fill_uninitialized(shape, self.array.dtype, "nan")
        old[mask] = self.array[coords]
        self.array[coords] = value[mask]
        if self.init is not None:
            self.init[coords] = True
        return old


# Operands of extended dtype (typed PRNG keys) live in kernel memory as their physical data: the
# key data ``uint32[*shape, *key_shape]``, the trailing key dimensions blocked whole at block index
# 0 (Mosaic: lowering.py _maybe_physicalize_block_shape; the index maps get 0s appended).

def physical_operand(aval, name: str) -> tuple:
    """(physical shape, physical dtype, key impl or None) of a pallas_call operand."""
    dtype = aval.dtype
    if not jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
        return tuple(aval.shape), np.dtype(dtype), None
    impl = getattr(dtype, "_impl", None)
    if impl is None:
        from ..errors import UnsupportedPrimitiveError
        raise UnsupportedPrimitiveError("pallas_call", {}, f"operand '{name}' of extended dtype "
                                        f"{dtype} (only typed PRNG keys)")
    return tuple(aval.shape) + tuple(impl.key_shape), np.dtype(np.uint32), impl


def physical_value(x) -> np.ndarray:
    """A pallas_call operand as kernel memory: a key array's data, any other value as an array."""
    from ..keys import KeyArray
    return x.data if isinstance(x, KeyArray) else np.asarray(x)


def logical_value(impl, array):
    """A pallas_call result: a key array (``impl``) of its key data, or the array itself."""
    if impl is None:
        return array
    from ..keys import KeyArray
    return KeyArray(impl, array)


# Tiled SMEM views index every dimension of their buffer with a read-only position array
# (interp/ref_indexing.py); NumPy's multi-dimensional fancy indexing costs ~50 ns per element and
# dimension (~0.3 ms for a 128x64 tile of a 5-d buffer). On a C-contiguous buffer the same
# elements are one flat take (or store) at positions raveled once per view: the view's arrays are
# handed out again for the same view, so the raveled positions are kept by the index's identity
# (the entry holds the index, so its id is not reused while the entry exists), as the bounds
# checks and race masks are. Same elements in the same order, so the same values and bits.
_FLAT: dict = {}
_MAX_FLAT = 256


def _flat_positions(array: np.ndarray, index) -> "np.ndarray | None":
    """The positions of ``index`` in ``array`` raveled (C order), or None where the flat form
    does not apply (not every dimension indexed by a read-only integer array, or a buffer that is
    not C-contiguous). ``index`` must have passed the bounds check."""
    if type(index) is not tuple or len(index) != array.ndim or not array.flags.c_contiguous:
        return None
    hit = _FLAT.get(id(index))
    if hit is not None and hit[0] is index and hit[1] == array.shape:
        return hit[2]
    if not all(type(ix) is np.ndarray and not ix.flags.writeable and ix.dtype.kind in "iu"
               for ix in index):
        return None
    flat = np.ravel_multi_index(index, array.shape)
    if type(flat) is np.ndarray and flat.ndim:
        flat.flags.writeable = False
    else:       # one element (0-d positions): NumPy's indexing, whose scalar results callers know
        flat = None
    if len(_FLAT) >= _MAX_FLAT:
        _FLAT.clear()
    _FLAT[id(index)] = (index, array.shape, flat)
    return flat


def indexed_shape(array: np.ndarray, index) -> tuple:
    """``np.shape(array[index])`` without gathering the elements (``index`` in bounds)."""
    flat = _flat_positions(array, index)
    return np.shape(array[index]) if flat is None else flat.shape


def _gather(array: np.ndarray, index) -> np.ndarray:
    """A copy of ``array[index]``."""
    flat = _flat_positions(array, index)
    if flat is None:
        return np.array(array[index], copy=True)
    return array.reshape(-1).take(flat)


def _scatter(array: np.ndarray, index, value) -> None:
    """``array[index] = value``."""
    flat = _flat_positions(array, index)
    if flat is None:
        array[index] = value
    else:
        array.reshape(-1)[flat] = value


def _same_index(a, b) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
                    and x.shape == y.shape and np.array_equal(x, y)):
                return False
        elif x != y:
            return False
    return True


def _show(index) -> str:
    parts = []
    for ix in index:
        if isinstance(ix, slice):
            step = "" if ix.step in (None, 1) else f":{ix.step}"
            parts.append(f"{ix.start}:{ix.stop}{step}")
        elif isinstance(ix, np.ndarray) and ix.ndim:
            parts.append(f"<int array {list(ix.shape)}>")
        else:
            parts.append(str(int(ix)))
    return "[" + ", ".join(parts) + "]"


def _index_shape(shape, index) -> tuple:
    """The shape ``array[index]`` has for a normalized index (NumPy advanced-indexing rules),
    also for indices out of bounds (masked accesses)."""
    if not shape:
        return ()
    if not any(isinstance(ix, np.ndarray) and ix.ndim for ix in index):
        # Basic indexing (the common case): ints drop their dimension, slices keep a length.
        out = []
        for ix in index:
            if isinstance(ix, slice):
                out.append(max(0, -(-(ix.stop - ix.start) // (ix.step or 1))))
        return tuple(out) + tuple(shape[len(index):])
    ext, (shifted, _) = _extended(shape, index)
    return np.broadcast_to(np.empty((), np.bool_), ext)[shifted].shape


def _extended(shape, index):
    """(extent, index shifted into it): an extent that holds every position ``index`` names, also
    out-of-bounds ones (negative ones included, by shifting them), so indexing a virtual array of
    that extent gives NumPy's result shape and element order without touching memory."""
    ext, shifted = [], []
    for ix, size in zip(index, shape):
        if isinstance(ix, slice):
            step = ix.step or 1
            n = max(0, -(-(ix.stop - ix.start) // step))
            lo = min(0, ix.start)
            hi = ix.start + (n - 1) * step + 1 if n else 0
            shifted.append(slice(ix.start - lo, ix.start - lo + n * step, step) if n
                           else slice(0, 0, 1))
        else:
            arr = np.asarray(ix)
            lo = min(0, int(arr.min())) if arr.size else 0
            hi = int(arr.max()) + 1 if arr.size else 0
            shifted.append(arr - lo if lo else ix)
        ext.append(max(size, hi) - lo)
        shifted[-1] = (shifted[-1], lo)
    index_out = tuple(ix for ix, _ in shifted)
    return tuple(ext) + tuple(shape[len(index):]), (index_out, tuple(lo for _, lo in shifted))


def _selected_coords(shape, index, mask) -> tuple:
    """Integer coordinates (one array per dimension) of the elements ``index`` selects where
    ``mask`` holds, computed without touching memory, so masked-out lanes may lie out of bounds.

    Indexing a zero-copy "coordinate array" (broadcast arange) over an extent large enough for
    every index gives exactly NumPy's placement of basic and advanced indices.
    """
    ext, (shifted, lows) = _extended(shape, index)
    coords = []
    for d in range(len(index)):
        grid = np.arange(lows[d], lows[d] + ext[d]).reshape(
            tuple(-1 if a == d else 1 for a in range(len(ext))))
        coords.append(np.broadcast_to(grid, ext)[shifted][mask])
    return tuple(coords)


# -- scratch and outputs of a kernel ------------------------------------------------------------

def memory_space(aval) -> str:
    """The memory space of a buffer's aval in lower case ('default' when it names none)."""
    ms = getattr(aval, "memory_space", None)
    if ms is None:
        return "default"
    return str(getattr(ms, "value", ms)).lower()


# Accesses that load or store a ref's elements in the kernel (not through a DMA), by JAX's name.
DIRECT_ACCESSES = {"get": "get_p", "swap": "swap_p", "addupdate": "addupdate_p",
                   "masked_load": "load_p", "masked_swap": "swap_p", "load": "load_p"}


def is_mosaic_tpu_kernel(params) -> bool:
    """Whether a kernel equation (pallas_call, mpmd_map) targets Mosaic TPU: TPU compiler params,
    TPU interpret params or a TPU core mesh. (A kernel with none, interpret=True alone, is no
    target's: JAX's generic interpret mode runs any memory space.)"""
    things = [params.get("compiler_params"), params.get("interpret"), params.get("mesh"),
              *(params.get("meshes") or ())]
    for v in things:
        if isinstance(v, dict):     # older JAX: compiler_params {"mosaic": ...} / {"mosaic_tpu": ...}
            if any(str(k).startswith("mosaic") and "gpu" not in str(k) for k in v):
                return True
        elif v is not None and ".pallas.mosaic." in type(v).__module__ + ".":
            return True
    return False


def refuse_direct_hbm_access(params, kernel: str) -> None:
    """What Mosaic TPU refuses of a TPU kernel, refused when the kernel is read (spec
    pallas_call/c19), in the words of JAX's TPU interpret mode (interpret_pallas_call.py
    _get_memory_space_and_raise_if_hbm): a load or store (get / swap / load / addupdate) of an
    HBM/ANY ref, which only DMAs reach (mosaic/lowering.py: "Loads and stores are only allowed on
    VMEM and SMEM references"), and an HBM/ANY buffer allocated by run_scoped ("not supported
    when executing Pallas kernels on a real TPU": InterpretParams.allow_hbm_allocation_in_run_scoped,
    whose True the reference honours as JAX's interpreter extension)."""
    if not is_mosaic_tpu_kernel(params):
        return
    from jax._src import core as jax_core
    allow_hbm_scoped = getattr(params.get("interpret"), "allow_hbm_allocation_in_run_scoped", False)
    where = (f"(kernel '{kernel}': Mosaic TPU loads and stores VMEM and SMEM refs only, "
             f"jax/_src/pallas/mosaic/lowering.py; spec pallas_call/c19)")

    def walk(jaxpr):
        jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
        for eqn in jaxpr.eqns:
            name = DIRECT_ACCESSES.get(eqn.primitive.name)
            if name is not None and memory_space(eqn.invars[0].aval) in ("hbm", "any"):
                raise InvalidKernelError(
                    f"{name}: Buffers with a memory space of HBM or ANY cannot be referenced "
                    f"directly. Instead, use `pltpu.sync_copy` or `pltpu.async_copy`. {where}")
            if eqn.primitive.name == "run_scoped" and not allow_hbm_scoped and any(
                    memory_space(v.aval) in ("hbm", "any") for v in eqn.params["jaxpr"].invars):
                raise InvalidKernelError(
                    f"Cannot allocate HBM in `run_scoped`. (kernel '{kernel}': not supported on a "
                    f"real TPU, jax/_src/pallas/mosaic/interpret/params.py; spec pallas_call/c19)")
            for sub in jax_core.jaxprs_in_params(eqn.params):
                walk(sub)
    for jaxpr in jax_core.jaxprs_in_params(params):
        walk(jaxpr)


def check_outputs_written(run, refs, inits) -> None:
    """uninitialized='raise': the call's results are read by its caller, so an output element the
    kernel never wrote is a read of never-written memory."""
    for ref, init in zip(refs, inits):
        if init is not None and not init.all():
            bad = tuple(int(i) for i in np.argwhere(~init)[0])
            raise UninitializedReadError(
                f"kernel '{run.label}': output '{ref.name}' {ref.dtype}{list(init.shape)} element "
                f"{bad} ({int((~init).sum())} elements in all) was never written by the kernel "
                "(uninitialized='raise')")


def allocate_scratch(aval, name, run, opts) -> KernelRef:
    """A kernel's scratch buffer (or semaphore, TPU MXU accumulator) for ``aval``, belonging to
    ``run`` (None: a prototype that ``fresh`` copies per run). A dialect with scratch kinds of
    its own allocates those first (Mosaic GPU: interp.pallas.mosaic_gpu.launch.allocate_scratch)."""
    space = memory_space(aval)
    if jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended) and (
            "sem" in str(aval.dtype) or "sem" in space):
        return KernelRef(np.zeros(aval.shape, np.int64), name, run, kind="semaphore",
                         check_bounds=opts.check_bounds)
    shape, dtype, _ = physical_operand(aval, name)   # typed keys: their key data
    mode = opts.uninitialized
    arr = fill_uninitialized(shape, dtype, mode)
    if space.startswith("acc("):
        # An MXU accumulator (pltpu.ACC) holds its sums in the MXU (interp/rules/pallas_tpu.py);
        # only matmul_pop reads them, so any other read is of never-written memory, in any mode.
        return KernelRef(arr, name, run, init=np.zeros(shape, bool), check_bounds=opts.check_bounds,
                         kind=f"MXU accumulator {space} (only matmul_pop reads it)")
    init = np.zeros(shape, bool) if mode == "raise" else None
    return KernelRef(arr, name, run, init=init, kind=f"scratch ({space})",
                     check_bounds=opts.check_bounds)
