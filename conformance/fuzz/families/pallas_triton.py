"""The ``pallas-triton`` family: Pallas kernels in the style of JAX's Triton lowering and within what
it lowers (``jax/_src/pallas/triton/lowering.py``), race-free and defined by construction.

The grid, BlockSpecs, edge blocks, elementwise operations, reductions and the exactness bounds are
the ``pallas`` family's (``conformance/fuzz/families/pallas.py``, whose ``KernelBuilder`` this
extends); what differs is Triton's:

- block dimensions are powers of two (the lowering's loads, stores and most operations need a
  power-of-two size, ``_check_tensor_size``); every grid axis runs in parallel (no accumulation
  over an axis, no scratch, no scalar prefetch: the Triton lowering has none of them);
- loads of a partial edge block use ``plgpu.load(ref, mask=..., other=...)`` (or ``jnp.where``);
- ``jnp.dot`` only of blocks of at least 16 in each dimension (``tt.dot``), at precision
  ``HIGHEST`` (IEEE float32) or ``DEFAULT`` (TF32 on the GPU: operands are integers of at most
  2^11, exact in TF32's 11 significant bits);
- values from ``pl.program_id`` / ``pl.num_programs``, and a ``lax.fori_loop`` over a value;
- stores by ``o_ref[...] = v`` or ``plgpu.store``; a masked ``plgpu.store(o_ref, v, mask=p)`` is
  the block's only store, into an output aliased to an input (``input_output_aliases``) so that
  the elements it leaves keep defined values;
- int32 kernels may also accumulate into a second output (aliased to its initial values) with
  ``plgpu.atomic_add`` / ``atomic_max`` / ``atomic_min``, one operation per kernel, from every
  program into shared blocks: integer atomics of one kind commute, so the result is defined
  whatever the order. (The values the atomics return depend on the order and are not used. Masked
  atomics, ``atomic_xchg``/``cas`` and the bitwise atomics are not generated: JAX's HLO interpret
  mode discharges only unmasked add/max/min, ``_atomic_rmw_discharge_rule``.)
- ``plgpu.CompilerParams(num_warps, num_stages)``, which the interpret modes ignore.
"""
from __future__ import annotations

from ..choices import Choices
from ..ir import DATA, Input, Program, Type
from .pallas import I32, KernelBuilder, blocks_reached, kernel_program

TRITON_BLOCK_DIMS = (1, 2, 4, 8, 16)        # powers of two
DOT_MIN = 16                                # tt.dot's smallest M, N and K
TF32_EXACT = 2 ** 11                        # integers TF32 (1 + 10 fraction bits) holds exactly


class TritonKernelBuilder(KernelBuilder):
    OPERATIONS = (("elementwise", 6), ("dot", 3), ("reduce", 2), ("loop", 1), ("program_ids", 1))

    def draw_grid(self) -> None:
        c = self.c
        self.draw_gpu_grid("triton")
        # (a third of the kernels have blocks a dot can produce)
        self.out_block = (DOT_MIN, DOT_MIN) if c.chance(33) else (c.choice(TRITON_BLOCK_DIMS),
                                                                  c.choice(TRITON_BLOCK_DIMS))
        self.num_warps = c.choice((4, 1, 2, 8))
        self.num_stages = c.choice((3, 1, 2, 4))

    def _load_style(self, mask) -> dict:
        if mask and self.c.chance(60):
            return {"other": self.c.choice((0, 1, -1))}   # plgpu.load(ref, mask=..., other=...)
        return {}

    def dot(self, shape) -> int | None:
        if min(shape) < DOT_MIN:
            return None
        kdim = self.c.choice((DOT_MIN, 2 * DOT_MIN))
        precision = self.c.choice(("HIGHEST", "DEFAULT"))
        limit = TF32_EXACT if precision == "DEFAULT" else None
        return self._dot(shape, kdim, **({"operand_limit": limit} if limit else {}), precision=precision)

    def rows(self, shape) -> int | None:
        return None

    def loop(self, shape) -> int:
        """``lax.fori_loop(0, n, lambda t, c: fn(c, x), init)``."""
        x, init = self.value(shape), self.value(shape)
        fn = self.c.choice(("add", "max", "min"))
        n = self.c.between(1, 4)
        bx, bi = self.bound.get(x), self.bound.get(init)
        nb = None if bx is None or bi is None else (bi + n * bx if fn == "add" else max(bx, bi))
        return self._emit("k_loop", [x, init], shape, nb, fn=fn, n=n)

    def program_ids(self, shape) -> int:
        """``program_id(a) * m + num_programs(b)``, broadcast to ``shape``."""
        c = self.c
        a, b, m = c.below(len(self.grid)), c.below(len(self.grid)), c.between(1, 3)
        return self._emit("k_pid", [], shape, (self.grid[a] - 1) * m + self.grid[b], axis=a, times=m, plus_axis=b,
                          dtype=self.dtype, to=tuple(shape))

    def aliased_input(self, block, index_map, dims) -> int:
        """An input holding an output's initial values (aliased to it): its index among the inputs."""
        self.inputs.append(Input(Type(self.dtype, tuple(dims)), DATA, 0, 0, self.c.choice((10, 0))))
        self.in_refs.append((self.k._new(Type(self.dtype, tuple(block), True)), tuple(block), index_map))
        return len(self.inputs) - 1


def generate(c: Choices) -> Program:
    kb = TritonKernelBuilder(c)
    kb.draw_grid()
    shape = kb.out_block
    out_dims = tuple(kb._array_dim(blocks_reached(e, kb.grid, 1), b) for e, b in zip(kb.out_map, shape))
    out_ref = kb.k._new(Type(kb.dtype, shape, True))
    aliases = []
    v = kb.compute(shape)
    store = c.weighted([("assign", 2), ("store", 2), ("masked", 2)])
    if store == "masked":
        aliases.append((kb.aliased_input(shape, kb.out_map, out_dims), 0))
        x, y = kb.value(shape), kb.value(shape)
        pred = kb.k.emit1("binary", [x, y], Type("bool", shape), fn=c.choice(("lt", "gt", "ne")))
        kb.k.emit("k_tstore", [out_ref, v, pred], [])
    elif store == "store":
        kb.k.emit("k_tstore", [out_ref, v], [])
    else:
        kb.k.emit("k_store", [out_ref, v], [])
    extra = []
    if kb.dtype == I32 and c.chance(40):
        # every program's atomic into blocks shared along the axes the map leaves out
        axis = c.below(len(kb.grid) + 1)
        acc_map = (("g", axis), ("c", 0)) if axis < len(kb.grid) else (("c", 0), ("c", 0))
        acc_dims = tuple(blocks_reached(e, kb.grid, 1) * b for e, b in zip(acc_map, shape))
        acc_ref = kb.k._new(Type(kb.dtype, shape, True))
        aliases.append((kb.aliased_input(shape, acc_map, acc_dims), 1))
        kb.k.emit("k_atomic", [acc_ref, kb.value(shape)], [], fn=c.choice(("add", "max", "min")))
        extra.append((acc_ref, shape, acc_map, acc_dims))
    return kernel_program(kb, "pallas-triton", out_ref, out_dims, extra, aliases=tuple(aliases),
                    num_warps=kb.num_warps, num_stages=kb.num_stages)
