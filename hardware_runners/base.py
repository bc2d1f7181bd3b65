"""Runners: execute a conformance case's program on one backend and return NumPy outputs.

Names: ``reference`` (the NumPy interpreter), ``xla:<platform>`` for each platform
``jax.devices()`` reports, and the Pallas modes ``pallas:interpret`` (HLO interpret),
``pallas:tpu-interpret``, ``pallas:gpu-interpret``, ``pallas:triton``, ``pallas:mosaic-gpu``,
``pallas:mosaic-tpu``. A runner says whether this machine can run it (``available``) and which
cases it can run (``supports``), each time with the reason when not.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from conformance.case import LAX, PALLAS, Case


class BackendUnsupported(Exception):
    """The runner cannot run this case (a missing feature of the backend or of the runner)."""


def _devices(platform: str):
    import jax
    try:
        return jax.devices(platform)
    except RuntimeError:
        return []


def _leaves(out) -> list[np.ndarray]:
    import jax
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]


class Runner:
    name = "?"
    kinds: tuple[str, ...] = ()

    def available(self) -> tuple[bool, str]:
        return True, ""

    def supports(self, case: Case) -> tuple[bool, str]:
        if case.not_applicable:
            return False, case.not_applicable
        if case.kind not in self.kinds:
            return False, f"{self.name} runs {'/'.join(self.kinds)} cases, not {case.kind}"
        return True, ""

    def run(self, case: Case, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def device(self):
        """The jax device the program's arithmetic runs on (for intermediates)."""
        return None


class ReferenceRunner(Runner):
    name = "reference"
    kinds = (LAX, PALLAS)

    def run(self, case, inputs):
        import interp
        return _leaves(interp.interpret(case.reference_program())(*inputs))


class XlaRunner(Runner):
    kinds = (LAX,)

    def __init__(self, platform: str):
        self.platform = platform
        self.name = f"xla:{platform}"

    def available(self):
        return (True, "") if _devices(self.platform) else (False, f"jax.devices() has no {self.platform} device")

    def device(self):
        return _devices(self.platform)[0]

    def run(self, case, inputs):
        import jax
        dev = self.device()
        args = [jax.device_put(a, dev) for a in inputs]
        return _leaves(jax.jit(case.program())(*args))


class PallasRunner(Runner):
    """A Pallas mode: the case's kernel is built with this runner's ``interpret`` argument."""
    kinds = (PALLAS,)

    def __init__(self, name: str, targets: tuple[str, ...], platform: str | None):
        self.name = name
        self.targets = targets      # kernel targets this mode can run: "generic", "tpu", "triton", "mosaic-gpu"
        self.platform = platform    # hardware platform needed (None: runs on CPU)

    def interpret_param(self) -> Any:
        return False

    def available(self):
        if self.platform and not _devices(self.platform):
            return False, f"needs a {self.platform} device; jax.devices() has none"
        try:
            self.interpret_param()
        except Exception as e:  # noqa: BLE001  (an optional module that cannot import here)
            return False, f"cannot set up {self.name}: {type(e).__name__}: {e}"
        return True, ""

    def supports(self, case):
        ok, why = super().supports(case)
        if not ok:
            return ok, why
        if not set(case.pallas_targets) & set(self.targets):
            return False, (f"kernel written for {'/'.join(case.pallas_targets)}; "
                           f"{self.name} runs {'/'.join(self.targets)} kernels")
        if "hardware-prng" in case.needs and "tpu" not in self.targets:
            return False, "uses the TPU hardware PRNG"
        return True, ""

    def device(self):
        return _devices(self.platform or "cpu")[0]

    def run(self, case, inputs):
        import jax
        dev = self.device()
        args = [jax.device_put(a, dev) for a in inputs]
        with jax.default_device(dev):
            return _leaves(jax.jit(case.program(self.interpret_param()))(*args))


class HloInterpret(PallasRunner):
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
    def __init__(self):
        super().__init__("pallas:gpu-interpret", ("mosaic-gpu",), None)

    def interpret_param(self):
        from jax.experimental.pallas import mosaic_gpu as plgpu
        params = getattr(plgpu, "InterpretGPUParams", None) or getattr(plgpu, "InterpretParams", None)
        if params is None:
            raise ImportError("this JAX has no Mosaic GPU interpret mode")
        return params()


def all_runners() -> list[Runner]:
    """Every runner this JAX knows of, available here or not."""
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
            PallasRunner("pallas:triton", ("generic", "triton"), "gpu"),
            PallasRunner("pallas:mosaic-gpu", ("mosaic-gpu",), "gpu"),
            PallasRunner("pallas:mosaic-tpu", ("generic", "tpu"), "tpu")]
    return out


def get_runner(name: str) -> Runner:
    for r in all_runners():
        if r.name == name:
            return r
    raise KeyError(f"unknown runner {name!r}; known: {[r.name for r in all_runners()]}")


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
