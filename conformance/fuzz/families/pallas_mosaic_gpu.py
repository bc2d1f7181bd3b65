"""The ``pallas-mosaic-gpu`` family: kernels for JAX's Mosaic GPU lowering (``plgpu.kernel``),
race-free and defined by construction.

The grid, the block index maps (revisits included), the kernel's operations and stores are the
``pallas`` family's (``conformance/fuzz/families/pallas.py``); the rendering
(``conformance.fuzz.ops._mosaic_gpu_kernel``) moves the blocks the way a Mosaic GPU kernel does:
every operand stays in global memory, each program (``grid``/``grid_names``, ``lax.axis_index``)
copies its input blocks into SMEM by TMA (``plgpu.copy_gmem_to_smem`` onto one barrier, waited for
with ``plgpu.barrier_wait`` before the kernel body reads them), the body computes on warpgroup
arrays loaded from SMEM and stores its block into SMEM, then ``plgpu.commit_smem``,
``plgpu.copy_smem_to_gmem`` and ``plgpu.wait_smem_to_gmem(0)`` write it out. Mosaic GPU's limits:

- a block holds a multiple of 128 elements (one warpgroup's lanes; the strided layout of an SMEM
  load) and its last dimension is a multiple of 16 bytes (TMA), at most 1,024 elements;
- arrays are whole blocks (no partial edge block: a TMA box outside the array is not generated);
- elementwise operations, selects and masked stores only (``jnp.dot`` would be ``wgmma`` with
  swizzled SMEM, reductions need other layouts: not generated yet).
"""
from __future__ import annotations

from ..choices import Choices
from ..ir import Program
from .pallas import KernelBuilder, generate_with

# (rows, columns) of a block: 128-element multiples, columns a multiple of 4 float32/int32 (16 bytes)
MOSAIC_GPU_BLOCKS = ((1, 128), (8, 16), (2, 64), (16, 16), (4, 64), (16, 32), (8, 128))


class MosaicGpuKernelBuilder(KernelBuilder):
    OPERATIONS = (("elementwise", 1),)

    def draw_grid(self) -> None:
        self.draw_gpu_grid("mosaic-gpu")
        self.out_block = self.c.choice(MOSAIC_GPU_BLOCKS)

    def _array_dim(self, nb: int, block: int) -> int:
        return nb * block            # whole blocks: every TMA box lies inside its array


def generate(c: Choices) -> Program:
    return generate_with(MosaicGpuKernelBuilder(c), "pallas-mosaic-gpu")
