"""Devices the reference can stand in for while a program is traced (``interp.interpret(fn,
emulated_device="h100")``): kernels that ask the device while tracing (JAX's shipped Mosaic GPU
kernels read the SM count and the CUDA runtime version) then trace on a machine without one.

Only what tracing reads is emulated; evaluation is the reference's either way. Each fact names
its source.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class EmulatedDevice:
    name: str
    device_kind: str              # jax.Device.device_kind
    platform: str
    num_cores: int                # streaming multiprocessors (jax.Device.core_count)
    compute_capability: str
    cuda_runtime_version: int     # what cuda_versions.cuda_runtime_get_version() returns
    smem_bytes_per_block: int     # the most shared memory one block may use
    sources: tuple[str, ...] = ()


EMULATED_DEVICES = {
    "h100": EmulatedDevice(
        name="h100", device_kind="NVIDIA H100 80GB HBM3", platform="cuda", num_cores=132,
        compute_capability="9.0", cuda_runtime_version=13000, smem_bytes_per_block=227 * 1024,
        sources=(
            "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022): H100 SXM5 has 132 SMs",
            "CUDA C++ Programming Guide, Compute Capabilities table: H100 is compute capability "
            "9.0, at most 227 KB of shared memory per block",
            "jax.Device.device_kind recorded on an H100 SXM with JAX 0.11.2 and the CUDA 13 "
            "plugin (docs/mosaic_gpu.md: CUDA runtime 13.0 is 13000 in cudaRuntimeGetVersion's "
            "1000 * major + 10 * minor encoding)",
        )),
    "b200": EmulatedDevice(
        name="b200", device_kind="NVIDIA B200", platform="cuda", num_cores=148,
        compute_capability="10.0", cuda_runtime_version=13000, smem_bytes_per_block=227 * 1024,
        sources=(
            "NVIDIA Blackwell datasheet / CUDA C++ Programming Guide: B200 has 148 SMs and "
            "compute capability 10.0, at most 227 KB of shared memory per block",
        )),
}
