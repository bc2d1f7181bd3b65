"""Which compiler lowers a Pallas program's kernels on a GPU, decided as JAX decides it, so that
``pallas:triton`` runs Triton and ``pallas:mosaic-gpu`` runs Mosaic GPU whatever JAX's default is.

JAX's choice (jax/_src/pallas/pallas_call.py ``gpu_lowering``, jax/_src/pallas/mpmd.py
``_mpmd_map_lowering``):

- ``pallas_call`` with compiler params: the lowering rule registered for the params' type
  (``pallas_core.register_lowering_rule``): Triton's ``CompilerParams`` -> Triton. Mosaic GPU's
  ``CompilerParams`` -> Mosaic GPU on JAX 0.10.2, whose
  ``jax/_src/pallas/mosaic_gpu/pallas_call_registration.py`` registers a rule; from JAX 0.11 that
  module registers none and ``gpu_lowering`` fails ``assert rule is not None`` (the crash of every
  Mosaic GPU kernel in the H100 evidence of 2026-11-27): such a kernel is written with
  ``plgpu.kernel`` there.
- ``pallas_call`` without compiler params: the ``jax_pallas_use_mosaic_gpu`` switch where JAX has it
  (0.10.2, default True: Mosaic GPU), Triton where it has not (0.11+). The runners set the switch
  to their own compiler while they run (:func:`forced_default`).
- ``mpmd_map`` (``plgpu.kernel`` from JAX 0.11) on cuda: Mosaic GPU. ``core_map`` over a Mosaic
  GPU mesh (``plgpu.kernel`` on 0.10.2): Mosaic GPU.
"""
from __future__ import annotations

import contextlib
import importlib
from typing import Iterator

TRITON, MOSAIC_GPU = "triton", "mosaic-gpu"
USE_MOSAIC_GPU = "jax_pallas_use_mosaic_gpu"   # JAX's switch for pallas_call without params (0.10.2)

# Mosaic GPU generates code for sm_90a (Hopper) and newer: the JAX docs call the backend
# "Experimental GPU backend for Pallas targeting H100" (jax.experimental.pallas.mosaic_gpu), and
# jax/experimental/mosaic/gpu/utils.py infers the architecture from compute_capability, with 9.0
# (Hopper) as its fallback; JAX's own Mosaic GPU tests skip below 9.0.
MOSAIC_GPU_MIN_COMPUTE_CAPABILITY = (9, 0)

_REGISTRATION = {TRITON: "jax._src.pallas.triton.pallas_call_registration",
                 MOSAIC_GPU: "jax._src.pallas.mosaic_gpu.pallas_call_registration"}
_PARAMS = {TRITON: "jax._src.pallas.triton.core", MOSAIC_GPU: "jax._src.pallas.mosaic_gpu.core"}


def importable(compiler: str) -> tuple[bool, str]:
    """Whether this JAX/jaxlib has the compiler's Pallas lowering (it needs the GPU jaxlib)."""
    try:
        importlib.import_module(_REGISTRATION[compiler])
    except Exception as e:  # noqa: BLE001  (ImportError, or a plugin that fails to load)
        return False, f"this JAX cannot load its {compiler} lowering ({_REGISTRATION[compiler]}: " \
                      f"{type(e).__name__}: {e})"
    return True, ""


def compute_capability_ok(device) -> tuple[bool, str]:
    """Whether ``device`` is new enough for Mosaic GPU."""
    cc = getattr(device, "compute_capability", None)
    if cc is None:
        return False, f"{device} reports no compute capability (Mosaic GPU needs an NVIDIA GPU)"
    try:
        have = tuple(int(p) for p in str(cc).split(".")[:2])
    except ValueError:
        return False, f"{device} has compute capability {cc!r}, not an NVIDIA one (Mosaic GPU needs sm_90+)"
    need = MOSAIC_GPU_MIN_COMPUTE_CAPABILITY
    if have < need:
        return False, (f"{getattr(device, 'device_kind', device)} has compute capability {cc}; Mosaic GPU "
                       f"needs {need[0]}.{need[1]} (Hopper) or newer")
    return True, ""


@contextlib.contextmanager
def forced_default(compiler: str) -> Iterator[None]:
    """``pallas_call`` without compiler params lowers through ``compiler`` in this block, where JAX
    has the switch (0.10.2); elsewhere JAX's only choice stands and :func:`kernel_compilers` says it."""
    import jax
    if USE_MOSAIC_GPU not in jax.config.values:
        yield
        return
    old = jax.config.values[USE_MOSAIC_GPU]
    jax.config.update(USE_MOSAIC_GPU, compiler == MOSAIC_GPU)
    try:
        yield
    finally:
        jax.config.update(USE_MOSAIC_GPU, old)


def default_switchable(compiler: str) -> tuple[bool, str]:
    """Whether a ``pallas_call`` without compiler params (a generic kernel) can lower through
    ``compiler`` on this JAX, and why not."""
    import jax
    if compiler == TRITON or USE_MOSAIC_GPU in jax.config.values:
        return True, ""
    return False, (f"this JAX (no {USE_MOSAIC_GPU} switch) lowers pl.pallas_call without compiler params "
                   "through Triton only (jax/_src/pallas/pallas_call.py gpu_lowering); Mosaic GPU runs "
                   "kernels written for it (plgpu.kernel)")


def _params_compiler(params) -> str | None:
    module = type(params).__module__
    for compiler, name in _PARAMS.items():
        if module == name:
            return compiler
    return None


def _pallas_call_compiler(compiler_params, default_mosaic_gpu: bool | None) -> tuple[str | None, str]:
    if compiler_params is None:
        if default_mosaic_gpu is None:
            return TRITON, "pallas_call without compiler params: JAX lowers it through Triton"
        return ((MOSAIC_GPU if default_mosaic_gpu else TRITON),
                f"pallas_call without compiler params ({USE_MOSAIC_GPU}={default_mosaic_gpu})")
    compiler = _params_compiler(compiler_params)
    if compiler is None:
        kind = type(compiler_params)
        return None, f"pallas_call with {kind.__name__} from {kind.__module__} (not a GPU compiler's)"
    ok, why = importable(compiler)
    if not ok:
        return None, why
    from jax._src.pallas import core as pallas_core
    if pallas_core.get_lowering_rule(type(compiler_params), "gpu") is None:
        return None, (f"pallas_call with {compiler} compiler params: this JAX registers no GPU lowering rule for "
                      f"them (jax/_src/pallas/pallas_call.py gpu_lowering would fail 'assert rule is not None'; "
                      "a Mosaic GPU kernel is written with plgpu.kernel on this JAX)")
    return compiler, f"pallas_call with {compiler} compiler params"


def kernel_compilers(jaxpr, default_mosaic_gpu: bool | None = None) -> list[tuple[str, str | None, str]]:
    """(primitive, compiler or None, why) for every kernel in ``jaxpr`` (sub-jaxprs included), as a
    CUDA lowering would pick it; ``default_mosaic_gpu``: the ``jax_pallas_use_mosaic_gpu`` value in
    force (None where this JAX has no such switch)."""
    out: list = []
    _walk(getattr(jaxpr, "jaxpr", jaxpr), default_mosaic_gpu, out)
    return out


def _walk(jaxpr, default_mosaic_gpu, out) -> None:
    import jax.extend.core as jcore
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "pallas_call":
            out.append((name,) + _pallas_call_compiler(eqn.params.get("compiler_params"), default_mosaic_gpu))
            continue   # a kernel body is lowered by the kernel's compiler: no kernels inside
        if name == "mpmd_map":
            out.append((name, MOSAIC_GPU, "mpmd_map (plgpu.kernel) lowers through Mosaic GPU on cuda"))
            continue
        if name == "core_map":
            mesh = eqn.params.get("mesh")
            is_gpu = type(mesh).__module__ == _PARAMS[MOSAIC_GPU]
            out.append((name, MOSAIC_GPU if is_gpu else None,
                        f"core_map over a {type(mesh).__module__}.{type(mesh).__name__}"))
            continue
        for v in eqn.params.values():
            for sub in (v if isinstance(v, (tuple, list)) else (v,)):
                if isinstance(sub, jcore.ClosedJaxpr):
                    _walk(sub.jaxpr, default_mosaic_gpu, out)
                elif isinstance(sub, jcore.Jaxpr):
                    _walk(sub, default_mosaic_gpu, out)


def check_program(compiler: str, jaxpr) -> tuple[bool, str]:
    """Whether every kernel of ``jaxpr`` lowers through ``compiler`` (with :func:`forced_default` in
    force), and why not."""
    import jax
    default = (compiler == MOSAIC_GPU) if USE_MOSAIC_GPU in jax.config.values else None
    kernels = kernel_compilers(jaxpr, default)
    if not kernels:
        return False, "the program has no Pallas kernel"
    for prim, got, why in kernels:
        if got != compiler:
            return False, f"a {prim} kernel would not lower through {compiler}: {why}"
    return True, ""


def lower_for_h100(fn, args) -> None:
    """Lower ``jax.jit(fn)`` on ``args`` for an abstract H100 (CUDA): JAX's GPU Pallas lowerings
    run on any host, so this says on CPU whether a kernel compiles to a Triton / Mosaic GPU module
    (or raises as JAX's lowering does)."""
    import jax
    from jax._src.mesh import AbstractDevice
    mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=AbstractDevice(
        device_kind="NVIDIA H100 80GB HBM3", num_cores=None, platform="cuda"))
    with jax.sharding.use_abstract_mesh(mesh):
        jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",))
