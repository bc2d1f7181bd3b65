"""The case model: a JAX program, a deterministic input generator, and a compliance mode per output.

A case is identified by a readable id ``family/name/dtype/shape``; its inputs depend only on
(id, seed), so ``jax-conformance repro ID --runner R --seed S`` recreates them anywhere.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from typing import Any, Callable, Sequence

import numpy as np

from hardware_runners.program import LAX, PALLAS, Program
from interp import dtypes as D
from spec import compliance as C

from .values import special_values


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    fn: Callable | None                        # LAX: the program (positional array arguments)
    inputs: Callable[[np.random.Generator], Sequence[np.ndarray]]
    modes: Any = None                          # Mode, list of Modes (per output), or None: derived
    kind: str = LAX
    build: Callable[[Any], Callable] | None = None   # PALLAS: interpret param -> program
    pallas_targets: tuple[str, ...] = ("tpu", "gpu")  # which Pallas lowerings the kernel is written for
    x64: bool = False                          # trace and run with jax_enable_x64
    jax_config: tuple[tuple[str, Any], ...] = ()  # other jax.config values while tracing/running
    reference_fn: Callable | None = None       # what the reference runs instead (the function a
                                               # shipped kernel claims to compute)
    primitives: tuple[str, ...] = ()           # what the case exercises (for divergence matching)
    profile: str = "quick"                     # smallest profile that runs it: quick < nightly
    needs: frozenset = frozenset()             # runner features: "hardware-prng", "multi-device"...
    tags: tuple[str, ...] = ()
    magnitude: Callable | None = None          # ABS_REL: inputs -> max |input| (default: computed)
    dot_bound: Callable | None = None          # DOT_PRODUCT: inputs -> list of sum|a||b| arrays
    unfused_fn: Callable | None = None         # a fused program's meaning before fusion: the
                                               # reference runner requires the same bits from both
                                               # and names the first differing equation
    examples: int | None = None                # at most this many seeds per runner in a seed search
                                               # (nightly); None: the profile's default. Heavy cases ask for fewer
    revision: int = 0                          # raised when the program changes: saved outputs of
                                               # another revision are not rechecked (docs/conformance.md)
    not_applicable: str = ""                   # why the installed JAX cannot express this case (an API
                                               # or lowering it lacks): every runner, the reference
                                               # included, records it backend-unsupported with this
                                               # reason. A case is never left out of the list silently.

    @property
    def family(self) -> str:
        return self.id.split("/", 1)[0]

    def program(self, interpret=None) -> Callable:
        """The JAX function to run; Pallas cases are built for one interpret setting."""
        if self.kind == PALLAS:
            return self.build(interpret)
        return self.fn

    def reference_program(self) -> Callable:
        if self.reference_fn is not None:
            return self.reference_fn
        # The reference runs a Pallas kernel whatever it was traced for; trace it the cheap way.
        return self.build(True) if self.kind == PALLAS else self.fn

    def as_program(self) -> Program:
        """What a runner is given to run this case (runners know programs, not cases)."""
        return Program(build=self.program, reference=self.reference_program, kind=self.kind,
                       pallas_targets=self.pallas_targets, needs=self.needs, not_applicable=self.not_applicable)

    @contextlib.contextmanager
    def context(self):
        """jax_enable_x64 and the case's other jax.config values, restored afterwards."""
        import jax
        settings = (("jax_enable_x64", self.x64),) + tuple(self.jax_config)
        old = [(name, getattr(jax.config, name)) for name, _ in settings]
        try:
            for name, value in settings:
                jax.config.update(name, value)
            yield
        finally:
            for name, value in old:
                jax.config.update(name, value)

    def make_inputs(self, seed: int) -> list[np.ndarray]:
        return [np.asarray(a) for a in self.inputs(rng_for(self.id, seed))]

    def modes_for(self, outputs: Sequence[np.ndarray]) -> list[C.Mode]:
        m = self.modes
        if m is None:
            m = [C.mode_for_primitive(self.primitives[0] if self.primitives else "", o.dtype)
                 for o in outputs]
        elif isinstance(m, C.Mode):
            m = [m] * len(outputs)
        elif callable(m):
            m = list(m(outputs))
        if len(m) != len(outputs):
            raise ValueError(f"{self.id}: {len(m)} modes for {len(outputs)} outputs")
        return list(m)


def jaxpr_primitives(j, seen: set | None = None) -> set:
    """Names of the primitives in a jaxpr, its sub-jaxprs (loop bodies, calls, kernels) included."""
    import jax.extend.core as jcore
    seen = set() if seen is None else seen
    for e in getattr(j, "jaxpr", j).eqns:
        seen.add(e.primitive.name)
        for v in e.params.values():
            for sub in (v if isinstance(v, (tuple, list)) else (v,)):
                if isinstance(sub, (jcore.Jaxpr, jcore.ClosedJaxpr)):
                    jaxpr_primitives(sub, seen)
    return seen


def applicable_if(available: bool, why_not: str) -> str:
    """``Case.not_applicable`` for a case that needs something the installed JAX may lack:
    empty where ``available`` (found by probing the installed JAX), else ``why_not`` with the
    installed version."""
    if available:
        return ""
    import jax
    return f"not applicable to JAX {jax.__version__}: {why_not}"


def rng_for(case_id: str, seed: int) -> np.random.Generator:
    """A generator that depends only on (case id, seed)."""
    h = hashlib.sha256(f"{case_id}\0{seed}".encode()).digest()
    return np.random.default_rng(int.from_bytes(h[:8], "little"))


# --------------------------------------------------------------------------------------------
# Input helpers shared by the families.
# --------------------------------------------------------------------------------------------
def random_array(rng: np.random.Generator, dtype, shape, *, specials: float = 0.25, low=None, high=None,
                 positive: bool = False) -> np.ndarray:
    """Random values of ``dtype`` with a fraction ``specials`` of special values mixed in."""
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    n = int(np.prod(shape, dtype=np.int64))
    if D.is_bool(dtype):
        return rng.integers(0, 2, size=shape).astype(bool)
    if D.is_int(dtype):
        info = D.iinfo(dtype)
        lo = int(info.min) if low is None else max(int(low), int(info.min))
        hi = int(info.max) if high is None else min(int(high), int(info.max))
        if positive:
            lo = max(lo, 0)
        wide = np.int64 if D.is_signed(dtype) else np.uint64
        vals = rng.integers(lo, hi, size=n, dtype=wide, endpoint=True)
        # Small magnitudes matter more than uniform 64-bit ones: half the values from [-100, 100].
        small = rng.integers(max(lo, -100), min(hi, 100), size=n, endpoint=True).astype(wide)
        vals = np.where(rng.random(n) < 0.5, small, vals).astype(dtype)
    elif D.is_complex(dtype):
        part = np.float32 if dtype == np.complex64 else np.float64
        re = random_array(rng, part, (n,), specials=specials, low=low, high=high)
        im = random_array(rng, part, (n,), specials=specials, low=low, high=high)
        vals = (re.astype(dtype) + 1j * im.astype(dtype)).astype(dtype)
        return vals.reshape(shape)
    else:
        lo = -10.0 if low is None else low
        hi = 10.0 if high is None else high
        if positive:
            lo = max(lo, 0.0)
        # Log-uniform magnitudes spread values over many binades, plus a uniform part.
        mag = np.exp(rng.uniform(np.log(1e-3), np.log(max(abs(lo), abs(hi), 1e-3)), size=n))
        sign = np.where(rng.random(n) < 0.5, -1.0, 1.0) if lo < 0 else 1.0
        vals = np.where(rng.random(n) < 0.5, mag * sign, rng.uniform(lo, hi, size=n))
        vals = np.clip(vals, lo, hi)
        with np.errstate(over="ignore"):
            vals = vals.astype(dtype)
    if specials and n:
        pool = special_values(dtype)
        if positive and not D.is_complex(dtype):
            with np.errstate(invalid="ignore"):
                pool = pool[~(pool.astype(np.float64) < 0)]
        pick = rng.random(n) < specials
        vals = vals.copy()
        vals[pick] = rng.choice(pool, size=int(pick.sum()))
    return vals.reshape(shape)


def special_grid(dtype, arity: int) -> list[np.ndarray]:
    """Every combination of special values for an ``arity``-ary op, as 1-D arrays."""
    pool = special_values(dtype)
    grids = np.meshgrid(*([np.arange(pool.size)] * arity), indexing="ij")
    return [pool[g.ravel()] for g in grids]


def max_abs(arrays) -> float:
    """max |x| over the finite values of float inputs (ABS_REL's magnitude)."""
    m = 0.0
    for a in arrays:
        a = np.asarray(a)
        if D.is_float(a.dtype) or D.is_complex(a.dtype):
            v = np.abs(a.astype(np.complex128 if D.is_complex(a.dtype) else np.float64))
            v = v[np.isfinite(v)]
            if v.size:
                m = max(m, float(v.max()))
    return m


def shape_id(shape) -> str:
    return "x".join(map(str, shape)) if len(shape) else "scalar"


def dtype_id(dtype) -> str:
    return np.dtype(dtype).name
