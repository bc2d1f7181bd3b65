"""The Pallas TPU engine (Mosaic TPU kernels), on the dialect-free core (``interp.pallas``).

* ``mesh``: ``MeshPlan``, kernels over a TPU core mesh (``pl.kernel`` / ``core_map``): the body
  once per core, cores taking turns, a barrier semaphore per core, shared and core-local scratch.
* ``hardware_prng``: the core's hardware PRNG state (``prng_seed`` / ``prng_random_bits``).
* ``pipeline``: ``emit_pipeline`` as a primitive: its expansion traced and evaluated, the
  pipeline body run at each step with the pipeline grid's program ids.

DMAs and semaphores (``interp.pallas.dma``) and kernels across the devices of a shard_map
(``interp.pallas.devices``) are the core's: Mosaic GPU kernels signal semaphores and address
other devices through the same models. Semantics: ``spec/pallas_tpu.py``; rules:
``interp/rules/pallas_tpu.py``.
"""
