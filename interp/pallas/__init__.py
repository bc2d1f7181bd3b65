"""The Pallas engine of the reference: the dialect-free core. The dialects' engines sit on it:
``interp.pallas.tpu`` (core meshes, hardware PRNG, emit_pipeline) and ``interp.pallas.mosaic_gpu``
(warpgroups, barriers, TMA, wgmma, tcgen05); Triton kernels need nothing beyond the core. Cores,
devices and warpgroups take turns in ``interp.schedule``.

* ``grid``: ``CallPlan`` (pallas_call: grid loop, block specs, index maps, aliasing, revisits,
  shuffled parallel axes; built once per equation and reused per call and grid step) and
  ``KernelRun``, the state of a running kernel that primitives consult.
* ``mesh``: ``MeshKernel``, the public base of the dialects' kernels over a mesh (``mpmd_map``).
* ``memory``: ``KernelRef``, the kernel buffers (views of operands where possible) with
  poisoning of never-written memory, bounds checks, masked accesses and error messages that name
  the kernel, the buffer, the grid point and the index; scratch allocation.
* ``dma``: the DMA / semaphore model and race detection (``Options.detect_races``); Mosaic GPU
  semaphores are counted by it too.
* ``devices``: a kernel's runs on the interpreted devices of a shard_map (TPU and Mosaic GPU):
  remote DMAs and signals, cross-device semaphores, the devices' meetings.
* ``debug_checks``: ``pl.debug_check`` inside a kernel.
* ``indexing``: the single call point into the state family's indexer normalisation.
* ``specialize``: the kernel body specialised per grid point (grid-only scalar work and
  ``pl.when`` branches on it evaluated once per point; the residual program runs per step).

Semantics and sources: ``spec/pallas.py``; rules: ``interp/rules/pallas.py``.
"""
from .grid import CallPlan, KernelRun, current_run  # noqa: F401
from .memory import KernelRef, poison_value  # noqa: F401
