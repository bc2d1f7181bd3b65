"""Runners: execute a program (hardware_runners/program.py) on one backend and return NumPy outputs.

Names: ``reference`` (the NumPy interpreter), ``xla:<platform>`` for each platform
``jax.devices()`` reports, and the Pallas modes ``pallas:interpret`` (HLO interpret),
``pallas:tpu-interpret``, ``pallas:gpu-interpret``, ``pallas:triton``, ``pallas:mosaic-gpu``,
``pallas:mosaic-tpu``. A runner says whether this machine can run it (``available``) and which
programs it can run (``supports``), each time with the reason when not.
"""
from __future__ import annotations

import contextlib
import functools
import os
from typing import Any, Sequence

import numpy as np

from . import pallas_lowering
from .program import LAX, PALLAS, Program


class BackendUnsupported(Exception):
    """The runner cannot run this program (a missing feature of the backend or of the runner)."""


STAGES = ("trace", "lower", "compile", "execute")


class BackendFailure(Exception):
    """What the backend raised, and at which stage of running the program (one of STAGES): the
    harness judges from these (conformance/classify.py), not from the message."""

    def __init__(self, stage: str, error: BaseException):
        super().__init__(f"{stage}: {type(error).__name__}: {error}")
        self.stage, self.error = stage, error


def run_staged(fn, args) -> list[np.ndarray]:
    """``fn`` (a jitted function) on ``args``, traced, lowered, compiled and executed as four
    stages; a failure is raised as :class:`BackendFailure` naming its stage."""
    import jax
    stage = STAGES[0]
    try:
        traced = fn.trace(*args)
        stage = "lower"
        lowered = traced.lower()
        stage = "compile"
        compiled = lowered.compile()
        stage = "execute"
        return _leaves(jax.block_until_ready(compiled(*args)))
    except BackendUnsupported:
        raise
    except Exception as e:  # noqa: BLE001  (every backend failure is reported with its stage)
        raise BackendFailure(stage, e) from e


def place_on_default_device(inputs) -> list:
    """The inputs on the default device (the runner sets it), uncommitted: the compiled program's
    own device assignment decides placement. Committed arrays (``device_put(a, dev)``) make JAX
    0.10.2's AOT call compare layouts and reject every sub-byte argument (float4_e2m1fn, int4:
    "Passed layout ... sub_byte_element_size_in_bits=0, Required ... =4", from
    jax/_src/interpreters/pxla.py check_array_xla_sharding_layout_match, which skips uncommitted
    arrays); ``jax.jit(f)(x)`` itself accepts them."""
    import jax
    return [jax.device_put(a) for a in inputs]


def _devices(platform: str):
    import jax
    try:
        return jax.devices(platform)
    except RuntimeError:
        return []


def lowering_platform(device) -> str:
    """The platform name JAX lowers for on ``device`` ("cuda"/"rocm" where the device says "gpu"):
    the name ``lax.platform_dependent`` branches on."""
    if device.platform == "gpu":
        for name in ("cuda", "rocm"):
            if device in _devices(name):
                return name
    return device.platform


def describe_device(device) -> dict | None:
    """What a record says about the device it ran on; the physical GPU through the process's
    CUDA_VISIBLE_DEVICES (conformance/process_env.py spreads workers over GPUs with it)."""
    import os
    if device is None:
        return None
    out = {"platform": device.platform, "id": device.id, "kind": getattr(device, "device_kind", None)}
    cc = getattr(device, "compute_capability", None)
    if cc is not None:
        out["compute_capability"] = str(cc)
    if device.platform != "cpu" and os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        out["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return out


def _leaves(out) -> list[np.ndarray]:
    import jax
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]


class Runner:
    name = "?"
    kinds: tuple[str, ...] = ()
    platform = "cpu"   # the platform lax.platform_dependent branches on (the reference follows it)

    def available(self) -> tuple[bool, str]:
        return True, ""

    def supports(self, program: Program) -> tuple[bool, str]:
        if program.not_applicable:
            return False, program.not_applicable
        if program.kind not in self.kinds:
            return False, f"{self.name} runs {'/'.join(self.kinds)} cases, not {program.kind}"
        return _enough_devices(self, program)

    def run(self, program: Program, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def device(self):
        """The jax device the program's arithmetic runs on (for intermediates)."""
        return None


def _enough_devices(runner: Runner, program: Program) -> tuple[bool, str]:
    """SPMD programs need "devices:N" real devices on a backend (the reference interprets them)."""
    wanted = program.devices
    platform = getattr(runner, "platform", None) or "cpu"
    if wanted > 1 and runner.name != "reference" and len(_devices(platform)) < wanted:
        return False, (f"needs {wanted} devices; jax.devices({platform!r}) has {len(_devices(platform))} "
                       "(xla:cpu: set XLA_FLAGS=--xla_force_host_platform_device_count=8 before JAX starts)")
    return True, ""


class ReferenceRunner(Runner):
    """The NumPy reference, standing in for ``platform`` (the platform of the runner it is
    compared with: ``lax.platform_dependent`` takes that platform's branch)."""
    name = "reference"
    kinds = (LAX, PALLAS)

    def __init__(self, platform: str = "cpu"):
        self.platform = platform

    def run(self, program, inputs):
        import interp
        return _leaves(interp.interpret(program.reference(), platform=self.platform)(*inputs))


class XlaRunner(Runner):
    kinds = (LAX,)

    def __init__(self, platform: str):
        self.platform = platform
        self.name = f"xla:{platform}"

    def available(self):
        return (True, "") if _devices(self.platform) else (False, f"jax.devices() has no {self.platform} device")

    def device(self):
        return _devices(self.platform)[0]

    def run(self, program, inputs):
        import jax
        dev = self.device()
        # (an SPMD program places its inputs on its own mesh)
        with jax.default_device(dev):    # what a program places data on (control_flow placement cases)
            args = list(inputs) if program.devices > 1 else place_on_default_device(inputs)
            return run_staged(jax.jit(program.build(None)), args)


class PallasRunner(Runner):
    """A Pallas mode: the program's kernel is built with this runner's ``interpret`` argument."""
    kinds = (PALLAS,)
    no_remote_dma = ""   # why the mode cannot run kernels with remote DMAs (empty: it can)

    def __init__(self, name: str, targets: tuple[str, ...], device_platform: str | None):
        self.name = name
        self.targets = targets      # kernel targets this mode can run: "generic", "tpu", "triton", "mosaic-gpu"
        self.device_platform = device_platform    # hardware platform needed (None: runs on CPU)

    @property
    def platform(self) -> str:
        if not self.device_platform:
            return "cpu"
        devices = _devices(self.device_platform)
        if devices:
            return lowering_platform(devices[0])
        # no device here (a recheck of saved outputs): the platform the mode's compilers target first
        return "cuda" if self.device_platform == "gpu" else self.device_platform

    def interpret_param(self) -> Any:
        return False

    def available(self):
        if self.device_platform and not _devices(self.device_platform):
            return False, f"needs a {self.device_platform} device; jax.devices() has none"
        try:
            self.interpret_param()
        except Exception as e:  # noqa: BLE001  (an optional module that cannot import here)
            return False, f"cannot set up {self.name}: {type(e).__name__}: {e}"
        return True, ""

    def supports(self, program):
        ok, why = super().supports(program)
        if not ok:
            return ok, why
        if not set(program.pallas_targets) & set(self.targets):
            return False, (f"kernel written for {'/'.join(program.pallas_targets)}; "
                           f"{self.name} runs {'/'.join(self.targets)} kernels")
        if "hardware-prng" in program.needs and "tpu" not in self.targets:
            return False, "uses the TPU hardware PRNG"
        if "remote-dma" in program.needs and self.no_remote_dma:
            return False, self.no_remote_dma
        return True, ""

    def device(self):
        return _devices(self.device_platform or "cpu")[0]

    def context(self):
        """What the runner sets while it traces and runs a program (nothing for most modes)."""
        return contextlib.nullcontext()

    def check_program(self, jitted, args) -> None:
        """Raise BackendUnsupported if this runner cannot run the traced program as its name says."""

    def run(self, program, inputs):
        import jax
        dev = self.device()
        # (an SPMD program places its inputs on its own mesh)
        with jax.default_device(dev), self.context():
            args = list(inputs) if program.devices > 1 else place_on_default_device(inputs)
            jitted = jax.jit(program.build(self.interpret_param()))
            self.check_program(jitted, args)
            return run_staged(jitted, args)


class GpuCompilerRunner(PallasRunner):
    """``pallas:triton`` / ``pallas:mosaic-gpu``: a compiled Pallas mode that lowers every kernel
    through its own compiler, whatever JAX's default is (hardware_runners/pallas_lowering.py)."""

    def __init__(self, compiler: str, targets: tuple[str, ...]):
        super().__init__(f"pallas:{compiler}", targets, "gpu")
        self.compiler = compiler

    def available(self):
        ok, why = super().available()
        if ok:
            ok, why = pallas_lowering.importable(self.compiler)
        if ok and self.compiler == pallas_lowering.MOSAIC_GPU:
            ok, why = pallas_lowering.compute_capability_ok(self.device())
        return ok, why

    def supports(self, program):
        ok, why = super().supports(program)
        if ok and self.compiler not in program.pallas_targets:
            # a kernel not written for this compiler reaches it only through JAX's default switch
            ok, why = pallas_lowering.default_switchable(self.compiler)
        return ok, why

    def context(self):
        return pallas_lowering.forced_default(self.compiler)

    def check_program(self, jitted, args):
        ok, why = pallas_lowering.check_program(self.compiler, jitted.trace(*args).jaxpr)
        if not ok:
            raise BackendUnsupported(f"{self.name}: {why}")


class HloInterpret(PallasRunner):
    no_remote_dma = (
        "pallas:interpret discharges a kernel on one device: remote DMAs and signals raise "
        "there ('Remote signal not implemented', 'Meshes with more than 1 named dimension not "
        "implemented in dma_start_p': jax/_src/pallas/mosaic/primitives.py discharge rules)")

    def __init__(self):
        super().__init__("pallas:interpret", ("generic", "tpu", "triton"), None)

    def interpret_param(self):
        return True


class TpuInterpret(PallasRunner):
    def __init__(self):
        super().__init__("pallas:tpu-interpret", ("generic", "tpu"), None)

    def interpret_param(self):
        from jax.experimental.pallas import tpu as pltpu
        return pltpu.InterpretParams()


class GpuInterpret(PallasRunner):
    no_remote_dma = (
        "JAX's Mosaic GPU interpret mode runs no multi-GPU kernel: it cannot allocate a "
        "semaphore ('nan + semaphore': mosaic_gpu/interpret/jaxpr_interpret.py "
        "_allocate_buffer -> mosaic/interpret/utils.py get_uninitialized_value) and has no "
        "rule for multimem_store, multimem_load_reduce or semaphore_signal_multicast")

    def __init__(self):
        super().__init__("pallas:gpu-interpret", ("mosaic-gpu",), None)

    def available(self):
        # Whether this JAX has the mode comes first: importing Mosaic GPU can fail for another reason
        # (JAX 0.10.2 without absl) that would hide it. jax.experimental.pallas.mosaic_gpu exports
        # InterpretGPUParams from JAX 0.11 on; JAX 0.10.2 has the mode too, with its parameters
        # only in jax._src.pallas.mosaic_gpu.interpret.params (what plgpu.kernel(interpret=...)
        # takes there).
        import importlib.util
        import jax
        spec = importlib.util.find_spec("jax.experimental.pallas.mosaic_gpu")
        source = open(spec.origin, encoding="utf-8").read() if spec and spec.origin else ""
        public = any(name in source for name in ("InterpretGPUParams", "InterpretParams"))
        if not public and importlib.util.find_spec(_PRIVATE_GPU_INTERPRET_PARAMS) is None:
            return False, (f"JAX {jax.__version__} has no Mosaic GPU interpret mode "
                           "(jax.experimental.pallas.mosaic_gpu exports no InterpretGPUParams)")
        return super().available()

    def interpret_param(self):
        import importlib
        from jax.experimental.pallas import mosaic_gpu as plgpu
        params = getattr(plgpu, "InterpretGPUParams", None) or getattr(plgpu, "InterpretParams", None)
        if params is None:
            params = getattr(importlib.import_module(_PRIVATE_GPU_INTERPRET_PARAMS),
                             "InterpretGPUParams", None)
        if params is None:
            raise ImportError("this JAX has no Mosaic GPU interpret mode")
        return params()


# Where JAX 0.10.2 keeps its Mosaic GPU interpret mode's parameters (not exported publicly).
_PRIVATE_GPU_INTERPRET_PARAMS = "jax._src.pallas.mosaic_gpu.interpret.params"


def builtin_runners() -> list[Runner]:
    """The runners the project ships, for every platform this JAX knows of."""
    import jax
    platforms = ["cpu", "cuda", "rocm", "tpu"]
    try:
        for d in jax.devices():
            if d.platform not in platforms and d.platform != "gpu":   # "gpu" is cuda or rocm
                platforms.append(d.platform)   # PJRT plugins
    except RuntimeError:
        pass
    out: list[Runner] = [ReferenceRunner()]
    out += [XlaRunner(p) for p in platforms]
    out += [HloInterpret(), TpuInterpret(), GpuInterpret(),
            GpuCompilerRunner(pallas_lowering.TRITON, ("generic", "triton")),
            GpuCompilerRunner(pallas_lowering.MOSAIC_GPU, ("generic", "mosaic-gpu")),
            PallasRunner("pallas:mosaic-tpu", ("generic", "tpu"), "tpu")]
    return out


# Runner plugins: a backend the project does not ship (a vendor's own Pallas lowering, a simulator,
# a test's mutant of XLA:CPU) registers runners through this entry point group. Each entry point
# names a callable that returns a list of Runner instances, e.g. in the plugin's pyproject.toml:
#     [project.entry-points."jax_conformance.runners"]
#     mysim = "mysim_conformance:runners"
# Without installing anything, modules named in the environment variable (comma-separated, each
# with a ``runners()`` function) add theirs; both are read in every process, so isolated workers
# and cluster workers see the same runners as the command that started them.
PLUGIN_GROUP = "jax_conformance.runners"
PLUGIN_ENV = "JAX_CONFORMANCE_RUNNERS"


class PluginError(RuntimeError):
    """A runner plugin that cannot be loaded or that returns something other than runners."""


@functools.lru_cache(maxsize=4)
def _entry_points(path: tuple) -> tuple:
    """The group's entry points on this import path (scanning the installed distributions takes
    milliseconds, and runners are looked up per case)."""
    from importlib.metadata import entry_points
    return tuple(entry_points(group=PLUGIN_GROUP))


def _plugin_sources() -> list[tuple[str, Any]]:
    """(where, loader) for each registered source of plugin runners."""
    import importlib
    import sys
    out = [(f"entry point {ep.name} = {ep.value} (group {PLUGIN_GROUP})", ep.load)
           for ep in _entry_points(tuple(sys.path))]
    for name in (m.strip() for m in os.environ.get(PLUGIN_ENV, "").split(",")):
        if name:
            out.append((f"module {name} ({PLUGIN_ENV})", lambda name=name: importlib.import_module(name).runners))
    return out


def plugin_runners() -> list[Runner]:
    """The runners plugins register (``PLUGIN_GROUP``, ``PLUGIN_ENV``); a plugin that fails to load,
    or returns anything but runners, is an error naming it."""
    out: list[Runner] = []
    for where, load in _plugin_sources():
        try:
            found = list(load()())
        except Exception as e:  # noqa: BLE001  (any failure of a plugin is reported with its name)
            raise PluginError(f"runner plugin {where} failed: {type(e).__name__}: {e}") from e
        wrong = [r for r in found if not isinstance(r, Runner)]
        if wrong:
            raise PluginError(f"runner plugin {where} returned {wrong[0]!r}, not a hardware_runners.Runner")
        out += found
    return out


def all_runners() -> list[Runner]:
    """Every runner this JAX knows of, available here or not: the project's, then the plugins'."""
    out = builtin_runners()
    seen = {r.name for r in out}
    for r in plugin_runners():
        if r.name in seen:
            raise PluginError(f"runner plugin registers {r.name!r}, a name already taken")
        seen.add(r.name)
        out.append(r)
    return out


def get_runner(name: str) -> Runner:
    runners = all_runners()
    for r in runners:
        if r.name == name:
            return r
    raise KeyError(f"unknown runner {name!r}; known: {', '.join(r.name for r in runners)}")


def detect() -> list[dict]:
    """[{name, available, reason}] for every runner."""
    rows = []
    for r in all_runners():
        ok, why = r.available()
        rows.append({"name": r.name, "available": ok, "reason": why})
    return rows


def available_runners() -> list[str]:
    return [row["name"] for row in detect() if row["available"]]


DEFAULT_CPU_RUNNERS = ("reference", "xla:cpu", "pallas:interpret", "pallas:tpu-interpret")
