"""Tracing as if on a device the machine does not have (``emulated_device=`` of
``interp.interpret``); the devices and their facts: ``spec/emulated_devices.py``.

What is emulated is what JAX's kernels read while they are traced:
* the SM count, through JAX's abstract device mechanism: an abstract mesh whose
  ``AbstractDevice`` has the device's kind and core count is current while tracing
  (``jax.sharding.use_abstract_mesh``; hopper_matmul_mgpu.get_num_sms reads
  ``get_abstract_mesh().abstract_device.num_cores`` first);
* the CUDA runtime version: ``jax._src.lib.cuda_versions`` (None without a CUDA plugin), and the
  name modules imported from it (attention_mgpu: ``from jax._src.lib import cuda_versions``),
  answer the device's ``cuda_runtime_get_version`` while tracing, and are restored after.
Kernels that call ``jax.devices()[0].core_count`` directly are not helped: the devices of the
machine are not faked.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import types

_patch_lock = threading.Lock()


def device(name: str):
    from spec.emulated_devices import EMULATED_DEVICES
    try:
        return EMULATED_DEVICES[name]
    except KeyError:
        raise ValueError(f"unknown emulated_device {name!r}; known: "
                         f"{sorted(EMULATED_DEVICES)}") from None


def _cuda_versions(dev):
    return types.SimpleNamespace(
        cuda_runtime_get_version=lambda: dev.cuda_runtime_version,
        cuda_runtime_build_version=lambda: dev.cuda_runtime_version,
        cuda_compute_capability=lambda *a: int(dev.compute_capability.replace(".", "")),
        cuda_device_count=lambda: 1,
    )


@contextlib.contextmanager
def tracing(name: str | None):
    """Trace under the emulated device ``name`` (None: the machine as it is)."""
    if name is None:
        yield
        return
    import jax
    from jax._src import lib as jax_lib
    dev = device(name)
    abstract = jax.sharding.AbstractDevice(device_kind=dev.device_kind, num_cores=dev.num_cores,
                                           platform=dev.platform)
    mesh = jax.sharding.AbstractMesh((), (), abstract_device=abstract)
    stub = _cuda_versions(dev)
    with _patch_lock:
        patched = [(jax_lib, getattr(jax_lib, "cuda_versions", None))]
        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("jax.experimental.pallas.ops") and \
                    "cuda_versions" in vars(mod):
                patched.append((mod, mod.cuda_versions))
        try:
            for mod, _ in patched:
                mod.cuda_versions = stub
            with jax.sharding.use_abstract_mesh(mesh):
                yield dev
        finally:
            for mod, old in patched:
                mod.cuda_versions = old
