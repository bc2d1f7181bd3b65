"""The environment of a run: versions, devices, drivers, XLA flags, host."""
from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from importlib import metadata


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total",
                              "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# Device attributes worth recording where a PJRT device has them (CUDA devices: compute_capability,
# core_count = SMs; jaxlib/xla PjRt device attributes).
_DEVICE_ATTRIBUTES = ("device_kind", "compute_capability", "core_count", "shared_memory_per_block_optin")

# jax.config values that change what a program computes on an accelerator.
_JAX_CONFIG = ("jax_enable_x64", "jax_default_matmul_precision", "jax_threefry_partitionable",
               "jax_default_prng_impl", "jax_pallas_use_mosaic_gpu", "jax_platforms")


def accelerators(devices) -> list[dict]:
    """Per non-CPU device: platform, id and the attributes in _DEVICE_ATTRIBUTES it has."""
    out = []
    for d in devices:
        if d.platform == "cpu":
            continue
        row = {"platform": d.platform, "id": d.id}
        for name in _DEVICE_ATTRIBUTES:
            value = getattr(d, name, None)
            if value is not None:
                row[name] = value if isinstance(value, (int, float, str, bool)) else str(value)
        out.append(row)
    return out


def cuda_library_versions(versions_module=None) -> dict:
    """The CUDA runtime, driver, cuDNN, cuBLAS... versions the JAX CUDA plugin reports (its
    ``_versions`` module, found by jax._src.lib.cuda_versions): every ``*_get_version`` /
    ``*_build_version`` function it has, called. Empty without a CUDA plugin."""
    if versions_module is None:
        try:
            from jax._src import lib
            versions_module = getattr(lib, "cuda_versions", None)
        except ImportError:
            versions_module = None
    if versions_module is None:
        return {}
    out = {}
    for name in sorted(dir(versions_module)):
        if name.endswith(("_get_version", "_build_version")):
            try:
                out[name] = getattr(versions_module, name)()
            except Exception as e:  # noqa: BLE001  (a library that is absent says so)
                out[name] = f"unavailable: {type(e).__name__}: {e}"
    return out


def host_cpu(cpuinfo_path: str = "/proc/cpuinfo") -> dict:
    """The host CPU's model and feature flags (results of XLA:CPU depend on them: it compiles for the
    host, e.g. FMA and AVX-512 use), from /proc/cpuinfo where there is one. ``model_name`` names the
    CPU ("AMD EPYC"); ``model`` is cpuinfo's model number within the family ("17"), kept as data."""
    out = {"machine": platform.machine(), "processor": platform.processor() or None}
    try:
        with open(cpuinfo_path) as f:
            text = f.read()
    except OSError:
        return out
    first = text.split("\n\n", 1)[0]
    for line in first.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "vendor_id", "cpu family", "model", "stepping", "microcode"):
            out[key.replace(" ", "_")] = value.strip()
        elif key in ("flags", "Features"):     # x86 / ARM
            out["flags"] = sorted(value.split())
    return out


def environment() -> dict:
    """Everything that can change a conformance result, as plain JSON data."""
    import jax
    devices = {}
    try:
        all_devices = jax.devices()
        for d in all_devices:
            key = f"{d.platform}:{getattr(d, 'device_kind', '?')}"
            devices[key] = devices.get(key, 0) + 1
    except RuntimeError as e:
        all_devices = []
        devices = {"error": str(e)}
    plugins = {dist.metadata["Name"]: dist.version for dist in metadata.distributions()
               if (dist.metadata["Name"] or "").lower().startswith(("jax-cuda", "jax_cuda", "jax-rocm", "libtpu",
                                                                    "jax-tpu", "jax_rocm", "jax-plugin"))}
    return {
        "jax": jax.__version__,
        "jaxlib": _version("jaxlib"),
        "numpy": _version("numpy"),
        "ml_dtypes": _version("ml_dtypes"),
        "jax_conformance": _version("jax-conformance"),
        "plugins": plugins,
        "devices": devices,
        "accelerators": accelerators(all_devices),
        "backend_platform_version": _platform_version(),
        "nvidia_driver": _nvidia_driver(),
        "cuda_libraries": cuda_library_versions(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "jax_config": {name: _jsonable(jax.config.values[name]) for name in _JAX_CONFIG if name in jax.config.values},
        "host_cpu": host_cpu(),
        "jax_env": {k: v for k, v in os.environ.items() if k.startswith(("JAX_", "XLA_", "TPU_", "LIBTPU"))},
        "python": sys.version.split()[0],
        "host": socket.gethostname(),
        "machine": platform.machine(),
        "os": platform.platform(),
        "cpu_count": os.cpu_count(),
    }


def _jsonable(value):
    return value if value is None or isinstance(value, (int, float, str, bool)) else str(value)


def _platform_version() -> str | None:
    try:
        import jax
        return jax.devices()[0].client.platform_version
    except Exception:  # noqa: BLE001  (informational only)
        return None
