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
* the device itself, for kernels that ask ``jax.devices()[0].core_count`` (transposed_ragged_dot,
  blackwell_ragged_dot: ``jax.local_devices()``; hopper_mixed_type_matmul:
  ``jax.extend.backend.get_default_device()``): inside JAX's shipped kernel modules only, the
  names ``jax`` and ``backend`` answer those calls with the emulated device while tracing. The
  machine's devices seen by everything else are not faked.
* how many devices there are, for kernels that check it against their mesh axis
  (collective_matmul_mgpu: ``jax.device_count()``, ``jax.local_device_count()``,
  ``jax.process_count()``): the emulated machine has one such device per device of the mesh the
  kernel is traced under (the enclosing shard_map's; one outside any), in one process.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import types

# Reentrant: a function traced under an emulated device may trace under one again (a shipped
# kernel's builder enters the emulation itself, and interp.interpret(emulated_device=) around it).
_patch_lock = threading.RLock()


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


class _EmulatedJaxDevice:
    """What a kernel reads off a device while tracing (``jax.Device`` attributes)."""

    def __init__(self, dev):
        self.id, self.process_index = 0, 0
        self.platform = "gpu"   # jax.Device.platform of a CUDA device
        self.device_kind, self.core_count = dev.device_kind, dev.num_cores

    def __repr__(self):
        return f"EmulatedDevice({self.device_kind}, core_count={self.core_count})"


def _mesh_size(*args, **kwargs) -> int:
    """The number of devices of the mesh being traced under (a shard_map body's), 1 outside."""
    import math

    import jax
    return math.prod(jax.sharding.get_abstract_mesh().axis_sizes)   # an empty mesh: 1


class _Forwarding(types.ModuleType):
    """A module standing in for ``module`` with some attributes replaced."""

    def __init__(self, module, **replaced):
        super().__init__(module.__name__)
        self.__dict__.update(replaced)
        self._module = module

    def __getattr__(self, name):
        return getattr(self._module, name)


def _device_names(mod, dev) -> list:
    """(module, name, stand-in) for the device queries of one shipped kernel module."""
    out = []
    emulated = [_EmulatedJaxDevice(dev)]
    real_jax = vars(mod).get("jax")
    if isinstance(real_jax, types.ModuleType) and real_jax.__name__ == "jax":
        out.append((mod, "jax", _Forwarding(real_jax, devices=lambda *a, **k: list(emulated),
                                            local_devices=lambda *a, **k: list(emulated),
                                            device_count=_mesh_size,
                                            local_device_count=_mesh_size,
                                            process_count=lambda *a, **k: 1)))
    real_backend = vars(mod).get("backend")
    if isinstance(real_backend, types.ModuleType) and \
            real_backend.__name__ == "jax.extend.backend":
        out.append((mod, "backend", _Forwarding(real_backend,
                                                get_default_device=lambda: emulated[0])))
    return out


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
        replaced = [(jax_lib, "cuda_versions", stub)]
        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("jax.experimental.pallas.ops"):
                if "cuda_versions" in vars(mod):
                    replaced.append((mod, "cuda_versions", stub))
                replaced += _device_names(mod, dev)
        saved = [(mod, attr, getattr(mod, attr, None)) for mod, attr, _ in replaced]
        try:
            for mod, attr, value in replaced:
                setattr(mod, attr, value)
            with jax.sharding.use_abstract_mesh(mesh):
                yield dev
        finally:
            for mod, attr, old in saved:
                setattr(mod, attr, old)
