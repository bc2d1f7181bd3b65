"""The environment of every process that runs cases, set before JAX starts in it.

This is the one place where the suite changes a process's environment (docs/conformance.md,
"GPUs and other accelerators"). :func:`apply` runs in ``jax-conformance run`` before it looks for
devices, and in every pytest process of the suite (the main one and each pytest-xdist worker) at
``pytest_configure``, before collection imports JAX; the isolated case workers
(``conformance/isolation.py``) inherit the environment of the pytest process that starts them.

What it sets, each only where the user has not said otherwise:

- ``XLA_PYTHON_CLIENT_PREALLOCATE=false``: every JAX process would otherwise take 75% of each GPU's
  memory when its backend starts (JAX docs, "GPU memory allocation"), so the second worker on a GPU
  fails to start. Left alone when the user sets ``XLA_PYTHON_CLIENT_PREALLOCATE``,
  ``XLA_PYTHON_CLIENT_MEM_FRACTION`` or ``XLA_PYTHON_CLIENT_ALLOCATOR``.
- ``CUDA_VISIBLE_DEVICES``: one GPU per pytest-xdist worker, worker ``gwK`` on the K-th GPU modulo
  their number, so that a run uses every GPU of the machine. The GPUs are those the user's
  ``CUDA_VISIBLE_DEVICES`` lists, else those ``nvidia-smi`` (or ``/proc/driver/nvidia/gpus``)
  reports. ``JAX_CONFORMANCE_SPREAD_DEVICES=0`` turns the spreading off.

A setting another part of the suite needs before JAX starts (an XLA flag, say) is one more line
in :func:`settings`.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from typing import Callable, Mapping

# Any of these means the user chose how JAX allocates GPU memory: the suite leaves it alone.
MEMORY_VARIABLES = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                    "XLA_PYTHON_CLIENT_ALLOCATOR")
SPREAD_SWITCH = "JAX_CONFORMANCE_SPREAD_DEVICES"


def nvidia_gpus() -> list[str]:
    """The indices of the NVIDIA GPUs this machine has, found without starting CUDA (JAX is not
    imported): ``nvidia-smi``, else the driver's ``/proc/driver/nvidia/gpus`` entries."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0:
            ids = [line.strip() for line in out.stdout.splitlines() if line.strip().isdigit()]
            if ids:
                return ids
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return [str(i) for i in range(len(os.listdir("/proc/driver/nvidia/gpus")))]
    except OSError:
        return []


def visible_gpus(env: Mapping[str, str], find: Callable[[], list[str]] = nvidia_gpus) -> list[str]:
    """The GPUs the suite may use: the user's ``CUDA_VISIBLE_DEVICES`` entries, else every GPU found."""
    user = env.get("CUDA_VISIBLE_DEVICES")
    if user is not None:
        return [d.strip() for d in user.split(",") if d.strip()]
    return find()


def worker_index(env: Mapping[str, str]) -> int | None:
    """K for pytest-xdist worker ``gwK``; None outside xdist workers."""
    m = re.fullmatch(r"gw(\d+)", env.get("PYTEST_XDIST_WORKER", ""))
    return int(m.group(1)) if m else None


def settings(env: Mapping[str, str], find: Callable[[], list[str]] = nvidia_gpus) -> dict[str, str]:
    """The variables :func:`apply` sets in a process whose environment is ``env`` (unchanged)."""
    out: dict[str, str] = {}
    if not any(v in env for v in MEMORY_VARIABLES):
        out["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    k = worker_index(env)
    if k is not None and env.get(SPREAD_SWITCH, "1") != "0":
        gpus = visible_gpus(env, find)
        if len(gpus) > 1:
            out["CUDA_VISIBLE_DEVICES"] = gpus[k % len(gpus)]
    return out


APPLIED: dict[str, str] = {}   # what apply() set in this process (the environment record shows it)
LATE: dict[str, str] = {}      # ... of which too late: JAX had started a backend already


def apply(environ=None, find: Callable[[], list[str]] = nvidia_gpus) -> dict[str, str]:
    """Set :func:`settings` in ``environ`` (this process's ``os.environ`` by default) and return them.
    Idempotent. If JAX has already started an accelerator backend in this process the settings
    cannot take effect there: a warning says so, and the environment record lists them under
    ``too_late``."""
    environ = os.environ if environ is None else environ
    new = {k: v for k, v in settings(environ, find).items() if environ.get(k) != v}
    environ.update(new)
    if environ is os.environ and new:
        APPLIED.update(new)
        if _jax_backend_started():
            LATE.update(new)
            warnings.warn(f"JAX started in this process before the conformance suite set {new}; "
                          "they take effect only in processes started from now on", stacklevel=2)
    return new


def _jax_backend_started() -> bool:
    """Whether JAX has started an accelerator backend in this process (a CPU one needs none of the
    settings)."""
    xb = sys.modules.get("jax._src.xla_bridge")
    return any(name != "cpu" for name in (getattr(xb, "_backends", None) or {}))
