"""The ``pallas`` family: random Pallas kernels, race-free and defined by construction.

A program is one ``pallas_call`` (IR operation with the kernel as its block; rendered by
``conformance.fuzz.ops._pallas_call``) over rank-2 blocks:

- a grid of 1-3 axes of 1-4 steps; the output blocks map injectively onto the grid's 'parallel'
  axes (written exactly once per grid point), or the last axis is an 'arbitrary' accumulation axis
  absent from the output index maps (the output, and a scratch accumulator, set to zero at its
  first step with ``pl.when``, then accumulated into: consecutive revisits only);
- input index maps that revisit blocks (``i // d``, ``i % m``, a constant, an unused axis), and,
  for TPU kernels, scalar prefetch (a block index read from a table the kernel is given);
- array sizes not divisible by the block (a partial last block): every load of such a block is a
  masked load (``jnp.where`` on the block's global indices: 0 outside the array), so memory outside
  an array never reaches a value; the output's out-of-array part is discarded by Pallas;
- elementwise operations defined bit for bit (IEEE add/sub/mul/max/min, integer wrap-around,
  bitwise, comparisons and selects), masked stores (a full store, then ``where(pred, v, ref)``),
  ``jnp.dot`` of blocks, sum/max/min reductions, VMEM scratch and a ``fori_loop`` over a ref's rows.

Float sums whose order is not fixed (``jnp.dot``, ``jnp.sum``) are taken only of integer-valued
floats small enough that every partial sum is exact (inputs drawn as small integers, a bound
tracked through each operation), so every kernel's result is defined bit for bit and judged whole
by the oracle's first level. Float max/min reductions are not generated (the sign of a zero result
would depend on the order). Kernels with prefetch or scratch are TPU kernels (``pltpu``); the
others are generic (plain grid and BlockSpecs) and run on any Pallas lowering.
"""
from __future__ import annotations

from ..build import Builder
from ..choices import Choices
from ..ir import DATA, INDEX, Block, Input, Op, Program, Type, params
from ..ops import DMA_SEMAPHORE

F32, I32 = "float32", "int32"
EXACT_F32 = 2 ** 24          # integer-valued float32 sums are exact up to here
BLOCK_DIMS = (1, 2, 3, 4, 5, 8)
MAX_DMAS = 4                 # DMA-fed inputs of a pallas-tpu kernel (one semaphore slot each)


def blocks_reached(expr, grid, n_table_blocks: int) -> int:
    """How many blocks an index expression reaches over the grid (its largest value + 1)."""
    kind = expr[0]
    if kind == "g":
        return grid[expr[1]]
    if kind == "c":
        return expr[1] + 1
    if kind == "div":
        return (grid[expr[1]] - 1) // expr[2] + 1
    if kind == "mod":
        return min(grid[expr[1]], expr[2])
    if kind == "lin":
        return grid[expr[1]] * expr[3]
    if kind == "s":
        return n_table_blocks
    raise ValueError(expr)


class KernelBuilder:
    def __init__(self, c: Choices, dmas: bool = False):
        self.c = c
        self.dmas = dmas                               # pallas-tpu: inputs copied in by DMAs
        self.scratch: list[int] = []                   # scratch ref handles (VMEM buffers, semaphores)
        self.sem: int | None = None
        self.n_dmas = 0
        self.k = Builder(c, can_add_inputs=False)   # the kernel body (its parameters: refs)
        # kernel value -> the bound on |x| of an integer-valued float (None: any float; int32 values
        # wrap around exactly, so their sums are exact in any order)
        self.bound: dict[int, int | None] = {}
        self.inputs: list[Input] = []
        self.in_refs: list[tuple[int, tuple, tuple]] = []   # (kernel ref handle, block, index map)
        self.tables: list[int] = []                    # prefetch ref handles (at most one)
        self.table_input: Input | None = None
        self.table_axis = 0
        self.table_blocks = 1

    # -- the grid -------------------------------------------------------------------------
    def draw_grid(self) -> None:
        c = self.c
        self.target = "tpu" if self.dmas or c.chance(50) else "generic"
        self.dtype = c.choice((F32, I32))
        self.accumulate = c.chance(50)
        rank = c.between(1, 3)
        self.grid = tuple(c.between(1, 4) for _ in range(rank))
        self.acc_axis = rank - 1 if self.accumulate else -1
        own = [a for a in range(rank) if a != self.acc_axis]
        self.out_map = self._out_map(own)
        self.out_block = (c.choice(BLOCK_DIMS), c.choice(BLOCK_DIMS))
        # (rendered for TPU kernels only, where the 'parallel' axes must be a prefix of the grid:
        # "Dimensions with parallel semantics must form a prefix of the grid", pallas/mosaic; a
        # generic kernel's axes are parallel but for accumulation)
        n_parallel = len(own) if self.target != "tpu" else c.between(0, len(own))
        self.semantics = tuple("parallel" if a < n_parallel else "arbitrary" for a in range(rank))
        if self.target == "tpu" and c.chance(40):
            self.table_axis = c.below(rank)
            self.table_blocks = c.between(1, 3)
            self.table_input = Input(Type(I32, (self.grid[self.table_axis],)), INDEX, 0, self.table_blocks - 1, 0)
            self.tables.append(self.k._new(Type(I32, (self.grid[self.table_axis],), True)))

    def draw_gpu_grid(self, target: str) -> None:
        """A GPU kernel's grid (Triton, Mosaic GPU): its programs run concurrently, so every axis is
        parallel and the output map injective (no accumulation over an axis)."""
        c = self.c
        self.target = target
        self.dtype = c.choice((F32, I32))
        self.accumulate = False
        rank = c.between(1, 3)
        self.grid = tuple(c.between(1, 4) for _ in range(rank))
        self.acc_axis = -1
        self.out_map = self._out_map(list(range(rank)))
        self.semantics = ("parallel",) * rank

    def _out_map(self, own):
        """The output's two block dimensions over the grid axes ``own``, injectively."""
        c = self.c
        if not own:
            return (("c", 0), ("c", 0))
        if len(own) == 1:
            return (("g", own[0]), ("c", 0)) if c.below(2) == 0 else (("c", 0), ("g", own[0]))
        if len(own) == 2:
            return (("g", own[0]), ("g", own[1])) if c.below(2) == 0 else (("g", own[1]), ("g", own[0]))
        return (("lin", own[0], own[1], self.grid[own[1]]), ("g", own[2]))

    def _array_dim(self, nb: int, block: int) -> int:
        """An array size of ``nb`` blocks of ``block``: divisible, or with a partial last block."""
        r = self.c.below(block) if self.c.chance(50) else 0
        return max(nb * block - r, 1)

    def _index_expr(self, kind_weights):
        c = self.c
        g = self.grid
        kind = c.weighted(kind_weights)
        a = c.below(len(g))
        if kind == "div":
            return ("div", a, c.between(2, 3))
        if kind == "mod":
            return ("mod", a, c.between(1, 2))
        if kind == "c":
            return ("c", c.below(2))
        if kind == "s" and self.tables:
            return ("s", self.table_axis)
        return ("g", a)

    # -- kernel values ---------------------------------------------------------------------
    def load(self, shape, small: bool) -> int:
        """A value of ``shape`` loaded from a new input block (masked where it sticks out), or for
        pallas-tpu copied by a DMA from a window of the whole array into a VMEM buffer."""
        c = self.c
        weights = [("g", 4), ("div", 1), ("mod", 1), ("c", 1)] + ([("s", 2)] if self.tables else [])
        index_map = tuple(self._index_expr(weights) for _ in shape)
        nbs = [blocks_reached(e, self.grid, self.table_blocks) for e in index_map]
        dma = self.dmas and self.n_dmas < MAX_DMAS and c.chance(60)
        # (a DMA's window lies inside its array: no partial windows)
        dims = tuple(nb * b if dma else self._array_dim(nb, b) for nb, b in zip(nbs, shape))
        bound = c.choice((1, 3, 8)) if small else None
        if small:
            inp = Input(Type(self.dtype, dims), INDEX, -bound, bound, 0)
        else:
            inp = Input(Type(self.dtype, dims), DATA, 0, 0, c.choice((10, 0, 25)))
        self.inputs.append(inp)
        if dma:
            return self._dma_load(inp, shape, index_map, bound)
        ref = self.k._new(Type(self.dtype, tuple(shape), True))
        self.in_refs.append((ref, tuple(shape), index_map))
        mask = tuple((d, e, b, n) for d, (e, b, n) in enumerate(zip(index_map, shape, dims)) if n % b)
        uses_table = any(e[0] == "s" for _, e, _, _ in mask)
        h = self.k.emit1("k_load", [ref] + (self.tables if uses_table else []), Type(self.dtype, tuple(shape)),
                         mask=mask, **self._load_style(mask))
        self.bound[h] = bound if self.dtype == F32 else None
        return h

    def _load_style(self, mask) -> dict:
        """Extra parameters of a block load (none: ``ref[...]``, masked by ``jnp.where``)."""
        return {}

    def _dma_load(self, inp: Input, shape, index_map, bound) -> int:
        """The DMA of one window into a new VMEM buffer, started and waited for (its own semaphore
        slot), then the buffer loaded: race-free, the buffer read only after the wait."""
        src = self.k._new(Type(self.dtype, inp.type.shape, True))
        self.in_refs.append((src, None, None))
        buf = self.k._new(Type(self.dtype, tuple(shape), True))
        self.scratch.append(buf)
        if self.sem is None:
            self.sem = self.k._new(Type(DMA_SEMAPHORE, (MAX_DMAS,), True))
        table = self.tables if any(e[0] == "s" for e in index_map) else []
        window = tuple(zip(index_map, shape))
        args = [src, buf, self.sem] + table
        self.k.emit("k_dma_start", args, [], window=window, slot=self.n_dmas)
        self.k.emit("k_dma_wait", args, [], window=window, slot=self.n_dmas)
        self.n_dmas += 1
        h = self.k.emit1("k_load", [buf], Type(self.dtype, tuple(shape)), mask=())
        self.bound[h] = bound if self.dtype == F32 else None
        return h

    def small(self, h) -> bool:
        return self.dtype != F32 or self.bound.get(h) is not None

    def value(self, shape, small: bool = False) -> int:
        """A value of ``shape`` (integer-valued and small if ``small``): one computed, or a load."""
        cands = [h for h, t in self.k.types.items() if not t.ref and t.dtype == self.dtype and t.shape == tuple(shape)
                 and (not small or self.small(h))]
        if cands and self.c.below(3) != 0:
            if self.k.last in cands and self.c.below(2) == 0:
                return self.k.last
            return self.c.choice(cands)
        return self.load(shape, small)

    def _emit(self, name, args, shape, bound, **p) -> int:
        h = self.k.emit1(name, args, Type(self.dtype, tuple(shape)), **p)
        self.bound[h] = bound if self.dtype == F32 else None
        return h

    def _fits(self, bound) -> bool:
        return bound is not None and bound <= EXACT_F32

    def elementwise(self, shape) -> int:
        c = self.c
        x = self.value(shape)
        kind = c.weighted([("binary", 5), ("unary", 1), ("scalar", 2), ("select", 2)])
        bx = self.bound.get(x)
        if kind == "unary":
            return self._emit("unary", [x], shape, bx, fn="abs" if self.dtype == I32 or c.below(2) else "neg")
        if kind == "scalar":
            v = c.choice((1, 2, -1, 0))
            fn = c.choice(("add", "mul", "max"))
            nb = None if bx is None else (bx + abs(v) if fn != "mul" else bx * abs(v))
            return self._emit("scalar_binary", [x], shape, nb, fn=fn, value=float(v) if self.dtype == F32 else v,
                              dtype=self.dtype, side=c.below(2))
        y = self.value(shape)
        by = self.bound.get(y)
        if kind == "select":
            pred = self.k.emit1("binary", [x, y], Type("bool", tuple(shape)), fn=c.choice(("lt", "gt", "eq", "ne")))
            z = self.value(shape)
            bz = self.bound.get(z)
            return self._emit("select", [pred, y, z], shape, None if by is None or bz is None else max(by, bz))
        fns = ["add", "sub", "mul", "max", "min"] + (["bitwise_and", "bitwise_or", "bitwise_xor"] if self.dtype == I32 else [])
        fn = c.choice(fns)
        nb = None
        if bx is not None and by is not None:
            nb = bx * by if fn == "mul" else (bx + by if fn in ("add", "sub") else max(bx, by))
        return self._emit("binary", [x, y], shape, nb, fn=fn)

    def dot(self, shape) -> int | None:
        return self._dot(shape, self.c.choice(BLOCK_DIMS))

    def _dot(self, shape, kdim: int, operand_limit: int = EXACT_F32, **p) -> int | None:
        """``jnp.dot`` of a (m, kdim) and a (kdim, n) value where every partial sum is exact (and,
        for float32, every operand an integer of at most ``operand_limit``)."""
        m, n = shape
        a, b = self.value((m, kdim), small=True), self.value((kdim, n), small=True)
        ba, bb = self.bound.get(a), self.bound.get(b)
        nb = None if ba is None or bb is None else kdim * max(ba * bb, 1)
        if self.dtype == F32 and not (self._fits(nb) and max(ba, bb) <= operand_limit):
            return None
        return self._emit("k_dot", [a, b], shape, nb, dtype=self.dtype, **p)

    def reduce(self, shape) -> int | None:
        axis = self.c.below(2)
        fn = "sum" if self.dtype == F32 else self.c.choice(("sum", "max", "min"))
        x = self.value(shape, small=True)
        bx = self.bound.get(x)
        nb = None if bx is None else bx * shape[axis]
        if self.dtype == F32 and not self._fits(nb):
            return None
        return self._emit("k_reduce", [x], shape, nb, fn=fn, axis=axis)

    def rows(self, shape) -> int | None:
        """A fori_loop over the rows of a scratch ref written with a value of ``shape`` this step,
        broadcast back to ``shape``."""
        if self.target != "tpu":
            return None
        ref = self.k._new(Type(self.dtype, tuple(shape), True))
        self.scratch.append(ref)
        v = self.value(shape)
        self.k.emit("k_store", [ref, v], [])
        init = self.value((1, shape[1]))
        fn = self.c.choice(("add", "max", "min"))
        n = self.c.between(1, shape[0])
        bv, bi = self.bound.get(v), self.bound.get(init)
        nb = None if bv is None or bi is None else (bi + n * bv if fn == "add" else max(bv, bi))
        r = self._emit("k_rows", [ref, init], (1, shape[1]), nb, n=n, fn=fn)
        return self._emit("k_broadcast", [r], shape, nb, to=tuple(shape))

    # The kernel operations compute draws from: (method, weight); a method returning None (the
    # operation does not fit here) is replaced by an elementwise one.
    OPERATIONS = (("elementwise", 6), ("dot", 2), ("reduce", 2), ("rows", 1))

    def compute(self, shape) -> int:
        for _ in range(self.c.between(1, 6)):
            if getattr(self, self.c.weighted(self.OPERATIONS))(shape) is None:
                self.elementwise(shape)
        return self.value(shape)


def generate(c: Choices) -> Program:
    return generate_with(KernelBuilder(c), "pallas")


def generate_tpu(c: Choices) -> Program:
    """``pallas-tpu``: TPU kernels whose inputs are also copied in by DMAs (``pl.ANY`` operands,
    ``pltpu.make_async_copy`` into VMEM scratch, DMA semaphores), each waited for before its
    buffer is read."""
    return generate_with(KernelBuilder(c, dmas=True), "pallas-tpu")


def generate_with(kb: KernelBuilder, family: str) -> Program:
    """A kernel drawn by ``kb``: its grid, the computation of its output block, the store (or the
    accumulation), sometimes a masked store over it."""
    c = kb.c
    kb.draw_grid()
    shape = kb.out_block
    out_nbs = [blocks_reached(e, kb.grid, kb.table_blocks) for e in kb.out_map]
    out_dims = tuple(kb._array_dim(nb, b) for nb, b in zip(out_nbs, shape))
    out_ref = kb.k._new(Type(kb.dtype, shape, True))
    acc = None
    if kb.accumulate and kb.target == "tpu" and c.chance(50):
        acc = kb.k._new(Type(kb.dtype, shape, True))
        kb.scratch.append(acc)
    if kb.accumulate:
        kb.k.emit("k_init", [out_ref] + ([acc] if acc is not None else []), [], axis=kb.acc_axis)
    v = kb.compute(shape)
    if kb.accumulate:
        kb.k.emit("k_accum", [acc if acc is not None else out_ref, v], [])
        if acc is not None:
            total = kb.k.emit1("k_load", [acc], Type(kb.dtype, shape), mask=())
            kb.k.emit("k_store", [out_ref, total], [])
    else:
        kb.k.emit("k_store", [out_ref, v], [])
        if c.chance(30):      # a masked store over the block just written
            x, y = kb.value(shape), kb.value(shape)
            pred = kb.k.emit1("binary", [x, y], Type("bool", shape), fn=c.choice(("lt", "gt", "ne")))
            kb.k.emit("k_masked_store", [out_ref, pred, kb.value(shape)], [])
    return kernel_program(kb, family, out_ref, out_dims)


def kernel_program(kb: KernelBuilder, family: str, out_ref: int, out_dims, extra_outs=(), **call_params) -> Program:
    """The program calling the kernel: its output ``out_ref`` (the block ``kb.out_block`` at
    ``kb.out_map`` of an array of ``out_dims``), then ``extra_outs`` ((ref, block, index map, array
    dims), ...); ``call_params`` are further parameters of the call (aliases, compiler params)."""
    # The kernel's parameters in Pallas's order: prefetch tables, input blocks, outputs, scratch.
    scratch = kb.scratch + ([kb.sem] if kb.sem is not None else [])
    outs = [(out_ref, kb.out_block, kb.out_map, out_dims)] + list(extra_outs)
    kb.k.params = kb.tables + [r for r, _, _ in kb.in_refs] + [r for r, _, _, _ in outs] + scratch
    kernel = kb.k.block([])
    inputs = ([kb.table_input] if kb.table_input is not None else []) + kb.inputs
    out_ts = tuple(Type(kb.dtype, dims) for _, _, _, dims in outs)
    p = params(grid=kb.grid, semantics=kb.semantics, target=kb.target, n_prefetch=len(kb.tables),
               in_specs=tuple((b, m) for _, b, m in kb.in_refs), out_specs=tuple((b, m) for _, b, m, _ in outs),
               scratch=tuple((kb.k.types[s].shape, kb.k.types[s].dtype) for s in scratch), **call_params)
    n = len(inputs)
    body = Block(tuple(i.type for i in inputs), (Op("pallas_call", tuple(range(n)), p, out_ts, (kernel,)),),
                 tuple(range(n, n + len(outs))))
    return Program(family, tuple(inputs), body)


def targets(program: Program) -> tuple[str, ...]:
    """The Pallas lowerings a generated kernel is written for."""
    op = program.body.ops[0]
    if op.p["target"] in ("triton", "mosaic-gpu"):
        return (op.p["target"],)
    if op.p["target"] == "tpu" or "arbitrary" in op.p["semantics"]:
        # (GPU lowerings run every grid axis in parallel: an accumulation axis would race there)
        return ("tpu",)
    return ("generic", "tpu", "triton", "mosaic-gpu")


