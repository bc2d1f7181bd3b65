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
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment() -> dict:
    """Everything that can change a conformance result, as plain JSON data."""
    import jax
    devices = {}
    try:
        for d in jax.devices():
            key = f"{d.platform}:{getattr(d, 'device_kind', '?')}"
            devices[key] = devices.get(key, 0) + 1
    except RuntimeError as e:
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
        "backend_platform_version": _platform_version(),
        "nvidia_driver": _nvidia_driver(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "jax_env": {k: v for k, v in os.environ.items() if k.startswith(("JAX_", "XLA_", "TPU_", "LIBTPU"))},
        "python": sys.version.split()[0],
        "host": socket.gethostname(),
        "machine": platform.machine(),
        "os": platform.platform(),
        "cpu_count": os.cpu_count(),
    }


def _platform_version() -> str | None:
    try:
        import jax
        return jax.devices()[0].client.platform_version
    except Exception:  # noqa: BLE001  (informational only)
        return None
