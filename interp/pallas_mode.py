"""The drop-in mode: the Pallas kernels of an unchanged JAX program run in the reference.

    with interp.pallas_mode():            # this thread; interp.pallas_mode().enable(): every thread
        y = jax.jit(model)(x)             # each kernel: the reference; the rest: XLA as usual

    pytest --pallas-reference             # a whole test suite (conformance/plugin.py)

Where it intercepts: at lowering. JAX applies its own transformations first (``vmap`` batches a
kernel into a larger grid, ``grad`` differentiates it by its JVP rule or custom_vjp, ``checkify``
adds error outputs, ``scan`` puts it in a loop body, ``core_map`` is discharged into an
``mpmd_map``), so the equation that reaches lowering is the kernel that runs. Inside the mode, the
lowering rules of ``pallas_call`` and ``mpmd_map`` (``pl.kernel``, ``pl.core_map``,
``plgpu.kernel``) become one host callback each, which evaluates that one equation with
:func:`interp.eval_jaxpr`; a ``shard_map`` whose body holds a kernel becomes one callback for the
whole ``shard_map`` (remote DMAs and semaphores need every device's kernel), which the reference
runs on its interpreted devices. Everything else lowers as JAX lowers it.

Lowering rules are wrapped once, for the process, and route only while a mode is active (a thread
that is not in the mode lowers exactly as JAX does). The mode is a JAX configuration value that
is part of the jit cache key and of the trace context, so a function compiled outside the mode is
compiled again inside it, and vice versa (jax_conformance_pallas_reference).

Options: the reference's own (:class:`interp.Options`), given to ``pallas_mode`` (they win), and
the kernel's ``interpret=`` value mapped onto them where a field has a meaning there
(:data:`INTERPRET_FIELDS`: ``detect_races``, ``uninitialized_memory``, ``random_seed``,
``on_race``, ``num_cores_or_threads``); a field that has none is refused (UnsupportedPrimitiveError) when it would change
what a test observes, or named in a warning (once per field and value) when it only steers JAX's
simulation (docs/pallas-mode.md lists them).

Undefined behaviour raises the reference's error in the callback; JAX hands it to the caller as
a ``JaxRuntimeError`` whose message holds the reference's (leaving a ``pallas_mode`` block, the
reference's own exception is raised again, chained). Where JAX's interpret modes report races in
their own form, the mode reports them in that form too: a kernel run with
``InterpretParams(detect_races=True)`` sets ``races.races_found`` of JAX's TPU or GPU interpret
state, and under ``on_race="warn"`` (JAX 0.12) or on a JAX whose detector only records (0.10,
0.11) a race is logged and flagged and the kernel goes on: races are recorded where found
(``Options.on_race="record"``, the racing accesses applied in the schedule's order: spec
pallas_tpu/recorded-race, mosaic_gpu/recorded-race); what has no order to go on in (a deadlock, a
buffer that does not exist) is raised.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import warnings

import numpy as np

from .errors import UnsupportedPrimitiveError
from .options import Options, make_options
from .schedule import recording_races

logger = logging.getLogger(__name__)

CONFIG_NAME = "jax_conformance_pallas_reference"
KERNEL_PRIMITIVES = ("pallas_call", "mpmd_map", "core_map")

# JAX's interpret parameters (InterpretParams / InterpretGPUParams fields on any JAX in range):
# what each means here. "option": mapped onto a reference option; "refuse": what the test
# observes would depend on JAX's simulation, the reference does not run it; "ignore": a knob of
# JAX's simulator that moves no value the reference computes (warned once if set).
INTERPRET_FIELDS = {
    "detect_races": "option: detect_races",
    "uninitialized_memory": "option: uninitialized ('nan' or 'zero')",
    "random_seed": "option: seed (the order of shuffled parallel grid axes, with grid_order)",
    "on_race": "reported: 'raise' raises the reference's RaceError, 'warn' logs and flags",
    "out_of_bounds_reads": "ignore: the reference raises OutOfBoundsError at any out-of-bounds "
                           "access ('uninitialized' reads are not given values)",
    "buffer_bounds": "ignore: bounds are the logical shape ('padded' is Mosaic's tiling)",
    "dma_execution_mode": "ignore: under detect_races every DMA stays in flight until its wait, "
                          "which covers both 'eager' and 'on_wait'",
    "num_cores_or_threads": "option: tpu_cores for TPU kernels (the cores a pallas_call's leading "
                            "'parallel' grid axes are split over); ignored for GPU kernels, whose "
                            "threads are the kernel's own (warpgroups, its mesh)",
    "num_cores_per_device": "option: as num_cores_or_threads",
    "vector_clock_size": "ignore: JAX's race detector's internals",
    "num_tma_threads_per_device": "ignore: JAX's simulation of the TMA unit",
    "logging_mode": "ignore: JAX's simulator's logging",
    "inline_mgpu": "ignore: whether JAX's GPU simulator skips plgpu.inline_mgpu blocks it cannot "
                   "run; the reference runs them or refuses them itself",
    "allow_hbm_allocation_in_run_scoped": "honoured: True lets a TPU kernel's run_scoped "
                                          "allocate HBM, JAX's interpreter's extension (refused "
                                          "otherwise, as on a real TPU: pallas_call/c19), one "
                                          "buffer shared by a device's cores, as in JAX",
    "skip_floating_point_ops": "refuse: float results would be JAX's inf placeholders",
    "grid_point_recorder": "refuse: a callback into JAX's simulated grid traversal",
}


# -- the mode ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Mode:
    """What the active mode says (hashable: it is part of JAX's jit and trace keys)."""
    options: tuple          # the explicit reference options, sorted (name, value) pairs

    def options_for(self, interpret) -> "tuple[Options, _Interpret]":
        how = _Interpret.of(interpret)
        return make_options(**{**how.options, **dict(self.options)}), how


class pallas_mode:
    """Run every Pallas kernel lowered inside the block (this thread) in the reference.

    ``options`` are the reference's (``uninitialized``, ``detect_races``, ``check_bounds``,
    ``grid_order``, ``seed``, ``platform``, ``on_race``, ``tpu_cores``) and win over what a kernel's ``interpret=`` says.
    ``enable()`` / ``disable()``: the same for every thread, until disabled (the pytest
    option ``--pallas-reference``)."""

    def __init__(self, **options):
        make_options(**options)        # an unknown option or value fails here
        self.mode = _Mode(tuple(sorted(options.items())))
        self._prev = []

    def __enter__(self):
        state = _install()
        self._prev.append(state.swap_local(self.mode))
        return self

    def __exit__(self, exc_type, exc, tb):
        _install().set_local(self._prev.pop())
        if exc is not None:
            original = _reference_error(exc)
            if original is not None:
                raise original from exc
        return False

    def enable(self):
        _install().set_global(self.mode)
        return self

    @staticmethod
    def disable():
        _install().set_global(None)


def active() -> bool:
    """Whether kernels lowered now (in this thread) go to the reference."""
    return _STATE is not None and _STATE.value is not None


# -- interception -----------------------------------------------------------------------------

_STATE = None
_install_lock = threading.Lock()


def _install():
    """The mode's configuration value, and the wrapped lowering rules (once per process)."""
    global _STATE
    with _install_lock:
        if _STATE is None:
            from jax._src import config
            from jax._src.interpreters import mlir
            state = config.config_ext.Config(CONFIG_NAME, None, include_in_jit_key=True,
                                             include_in_trace_context=True)
            for prim, route in _routed_primitives():
                entry = mlir._lowerings.get(prim)
                if entry is not None:
                    mlir._lowerings[prim] = dataclasses.replace(
                        entry, rule=_routing_rule(entry.rule, route, state))
            from jax._src import core as jax_core
            jax_core.EvalTrace.process_shard_map = _staged_eager_shard_map(
                jax_core.EvalTrace.process_shard_map, state)
            _STATE = state
    return _STATE


def _routed_primitives():
    from jax._src import shard_map
    from jax._src.pallas import pallas_call
    prims = [(pallas_call.pallas_call_p, _lower_kernel)]
    try:
        from jax._src.pallas import mpmd
        prims.append((mpmd.mpmd_map_p, _lower_kernel))
    except ImportError:       # (every JAX in range has it: 0.10.2 discharges core_map into it)
        pass
    prims.append((shard_map.shard_map_p, _lower_shard_map))
    return prims


def _routing_rule(original, route, state):
    def rule(ctx, *in_nodes, **params):
        mode = state.value
        if mode is None:
            return original(ctx, *in_nodes, **params)
        if getattr(ctx.module_context.lowering_parameters, "for_export", False):
            # jax.export serializes the program to run elsewhere: a host callback into this
            # process cannot be serialized (nor run on the platform it is exported for)
            _warn_once("for_export", None, "a kernel lowered for jax.export keeps JAX's own "
                                           "lowering: the reference runs only kernels that run here")
            return original(ctx, *in_nodes, **params)
        return route(ctx, in_nodes, params, mode, original)
    rule.__wrapped__ = original
    return rule


def _staged_eager_shard_map(original, state):
    """An eager shard_map runs its body primitive by primitive on the devices' shards, so its
    kernels would reach lowering one device at a time. Inside the mode it runs as
    ``jax.jit(shard_map)`` instead (the same values), so a shard_map holding a kernel is lowered,
    and routed, whole."""
    def process_shard_map(trace, prim, fun, args, **params):
        if state.value is None:
            return original(trace, prim, fun, args, **params)
        import jax
        from jax._src import core as jax_core
        staged_out = []

        def staged(*xs):
            xs = args.update(xs) if hasattr(args, "update") else xs   # (a FlatTree, JAX >= 0.10)
            out = jax_core.trace_ctx.trace.process_shard_map(prim, fun, xs, **params)
            staged_out.append(out)
            return list(out)
        vals = jax.jit(staged)(*list(args))
        out = staged_out[0]
        return out.update(vals) if hasattr(out, "update") else vals
    return process_shard_map


def _lower_kernel(ctx, in_nodes, params, mode, original):
    from .pallas.memory import refuse_direct_hbm_access
    # A kernel its compiler refuses is refused here, where JAX's interpret mode and the compiler
    # raise: at lowering, to the caller (not later, from inside the callback).
    refuse_direct_hbm_access(params, params.get("name") or ctx.primitive.name)
    options, how = mode.options_for(params.get("interpret"))
    return _lower_to_callback(ctx, in_nodes, params, _KernelCall(
        _one_equation(ctx, params), options, how))


def _lower_shard_map(ctx, in_nodes, params, mode, original):
    if not _holds_kernel(params["jaxpr"]):
        return original(ctx, *in_nodes, **params)
    interprets = list(_kernel_interprets(params["jaxpr"]))
    options, how = mode.options_for(interprets[0] if interprets else None)
    return _lower_to_callback(ctx, in_nodes, params, _KernelCall(
        _one_equation(ctx, params), options, how))


def _lower_to_callback(ctx, in_nodes, params, host):
    import jax
    from jax._src import callback
    from jax._src.interpreters import mlir
    out_types = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in ctx.avals_out]
    # JAX's TPU/GPU interpret params give a kernel ordered IO effects: the callback then takes
    # the token, so kernels keep their program order; otherwise an unordered (never elided)
    # callback.
    ordered = callback._OrderedIOEffect in ctx.tokens_in.effects()

    def impl(*args):
        return callback.io_callback(host, out_types, *args, ordered=ordered)
    return mlir.lower_fun(impl, multiple_results=True)(ctx, *in_nodes)


def _one_equation(ctx, params):
    """A jaxpr of the one equation being lowered (the reference evaluates jaxprs)."""
    from jax._src import api_util, core as jax_core
    invars = [jax_core.Var(a) for a in ctx.avals_in]
    outvars = [jax_core.Var(a) for a in ctx.avals_out]
    eqn = jax_core.new_jaxpr_eqn(invars, outvars, ctx.primitive, params, jax_core.no_effects)
    info = api_util.debug_info("interp.pallas_mode", lambda *operands: None, tuple(ctx.avals_in),
                               {}, result_paths_thunk=lambda: tuple(f"[{i}]" for i in range(len(outvars))))
    return jax_core.Jaxpr([], invars, outvars, [eqn], debug_info=info)


def _holds_kernel(jaxpr) -> bool:
    return any(True for _ in _kernel_eqns(jaxpr))


def _kernel_interprets(jaxpr):
    for eqn in _kernel_eqns(jaxpr):
        yield eqn.params.get("interpret")


def _kernel_eqns(jaxpr):
    from jax._src import core as jax_core
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in KERNEL_PRIMITIVES:
            yield eqn
        else:
            for sub in jax_core.jaxprs_in_params(eqn.params):
                yield from _kernel_eqns(sub)


# -- the host side ----------------------------------------------------------------------------

class _KernelCall:
    """The callback: one equation evaluated by the reference, with JAX's race reporting."""

    def __init__(self, closed, options: Options, how: "_Interpret"):
        self.closed, self.options, self.how = closed, options, how

    def __call__(self, *args):
        from .evaluator import eval_jaxpr
        how = self.how
        if how.kind is not None:
            how.race_state(fresh=True)   # as JAX at a kernel's start: tests read it after
        try:
            with ieee_subnormals(), recording_races() as races:   # (on_race="record": every engine's races)
                outs = eval_jaxpr(self.closed, *args, options=self.options)
        except Exception as e:
            _remember(e)
            raise
        for race in races:
            if how.reports_races:
                how.race_state().races_found = True
            logger.warning("RACE DETECTED by the reference: %s", race)
        return [np.asarray(o) for o in outs]


# -- the host FPU on XLA's threads --------------------------------------------------------------

# XLA:CPU runs a computation with the FPU flushing subnormals (tsl::port::ScopedFlushDenormal
# around each execution: x86 MXCSR FTZ and DAZ, aarch64 FPCR.FZ; xla/tsl/platform/denormal.cc),
# and a host callback runs on that thread: NumPy there reads and makes subnormals as zero (float64
# included; `x != 0` of a bfloat16 2**-133 is False). The callback clears the flush bits while
# the reference runs and restores XLA's environment after. glibc's fenv_t (bits/fenv.h): on
# x86-64 the MXCSR follows the 28-byte x87 environment; on aarch64 the FPCR is first (FZ bit 24,
# FZ16 bit 19).
_FLUSH_BITS = {"x86_64": (28, 0x8040), "amd64": (28, 0x8040),
               "aarch64": (0, (1 << 24) | (1 << 19)), "arm64": (0, (1 << 24) | (1 << 19))}
_SUBNORMALS = (np.array([2.0 ** -1074]), np.array([2.0 ** -149], np.float32))
_libm: list = []


def _flushing() -> bool:
    """Whether this thread's FPU reads subnormals as zero (DAZ) or flushes results (FTZ)."""
    return any(not (t != 0)[0] or not (t * t.dtype.type(1) != 0)[0] for t in _SUBNORMALS)


@contextlib.contextmanager
def ieee_subnormals():
    """This thread's FPU with IEEE subnormals for the block (a no-op where it has them)."""
    if not _flushing():
        yield
        return
    import ctypes
    import ctypes.util
    import platform
    where = _FLUSH_BITS.get(platform.machine().lower())
    if not _libm:
        _libm.append(ctypes.CDLL(ctypes.util.find_library("m")))
    saved = ctypes.create_string_buffer(64)       # (larger than any fenv_t)
    if where is None or _libm[0].fegetenv(saved) != 0:
        raise RuntimeError(f"the FPU of this thread flushes subnormals (XLA's setting for its "
                           f"computations) and the reference cannot clear that on "
                           f"{platform.machine()!r}: its values would be wrong")
    offset, bits = where
    env = ctypes.create_string_buffer(saved.raw, len(saved))
    word = int.from_bytes(env.raw[offset:offset + 4], "little") & ~bits
    ctypes.memmove(ctypes.addressof(env) + offset, word.to_bytes(4, "little"), 4)
    _libm[0].fesetenv(env)
    try:
        if _flushing():
            raise RuntimeError("clearing the FPU's flush-to-zero bits did not give IEEE "
                               "subnormals on this host: the reference's values would be wrong")
        yield
    finally:
        _libm[0].fesetenv(saved)


@dataclasses.dataclass(frozen=True)
class _Interpret:
    """A kernel's ``interpret=`` value, read as far as it has a meaning in the reference."""
    options: dict
    kind: str | None = None        # "tpu" / "gpu": JAX's interpret mode whose race state applies
    detect_races: bool = False
    on_race: str = "raise"

    @property
    def reports_races(self) -> bool:
        return self.kind is not None and self.detect_races

    @property
    def records_races(self) -> bool:
        """JAX's detector records the race (and warns) and the kernel goes on."""
        return self.reports_races and self.on_race == "warn"

    @classmethod
    def of(cls, interpret) -> "_Interpret":
        if interpret is None or isinstance(interpret, bool) or not dataclasses.is_dataclass(interpret):
            return cls({})
        kind = "gpu" if "mosaic_gpu" in type(interpret).__module__ else "tpu"
        values = {f.name: getattr(interpret, f.name) for f in dataclasses.fields(interpret)}
        defaults = {f.name: f.default for f in dataclasses.fields(interpret)}
        options = {}
        for name, value in values.items():
            meaning = INTERPRET_FIELDS.get(name)
            if meaning is None:
                _warn_once(name, value, f"{type(interpret).__name__}.{name}={value!r} is not known "
                                        f"to the reference's drop-in mode: ignored")
                continue
            if value == defaults.get(name):
                continue
            if meaning.startswith("refuse"):
                raise UnsupportedPrimitiveError(
                    "pallas_call", {"interpret": interpret},
                    f"{type(interpret).__name__}.{name}={value!r} has no meaning in the reference "
                    f"({meaning[len('refuse: '):]})")
            if meaning.startswith("ignore"):
                _warn_once(name, value, f"{type(interpret).__name__}.{name}={value!r} is ignored "
                                        f"by the reference ({meaning[len('ignore: '):]})")
        cores = values.get("num_cores_or_threads", values.get("num_cores_per_device"))
        if kind == "tpu" and cores is not None:
            options["tpu_cores"] = int(cores)
        elif cores not in (None, 1):
            _warn_once("num_cores_or_threads", cores,
                       f"{type(interpret).__name__}.num_cores_or_threads={cores!r} is ignored by "
                       f"the reference (a GPU kernel's threads are its own)")
        if values.get("detect_races"):
            options["detect_races"] = True
        if values.get("uninitialized_memory") in ("nan", "zero"):
            options["uninitialized"] = values["uninitialized_memory"]
        if values.get("random_seed") is not None:
            options["seed"] = int(values["random_seed"])
        # JAX 0.10 and 0.11 have no on_race: their detectors record and print, never raise.
        on_race = values.get("on_race", "warn")
        if values.get("detect_races") and on_race == "warn":
            options["on_race"] = "record"      # (records_races)
        return cls(options, kind, bool(values.get("detect_races")), on_race)

    def race_state(self, fresh: bool = False):
        """JAX's race detection state of this interpret mode; ``fresh``: a new one, as JAX makes
        at every kernel's start (with its shared memory, which the previous kernel's end
        cleared: interpret_pallas_call.py _initialize_shared_memory / _clear_shared_memory,
        gpu_callbacks.py alike), so ``races_found`` read after a kernel is that kernel's."""
        if self.kind == "tpu":
            from jax._src.pallas.mosaic.interpret import interpret_pallas_call as mod
            name, cls = "races", mod.RaceDetectionState
        else:
            from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks as mod
            name = "_races"
            cls = getattr(mod, "GPURaceDetectionState", None) or mod.RaceDetectionState
        if fresh or getattr(mod, name) is None:
            setattr(mod, name, _new_race_state(cls, self.on_race))
        return getattr(mod, name)


def _new_race_state(cls, on_race):
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    if "on_race" in names:
        kwargs["on_race"] = on_race
    if "num_cores" in names:        # (JAX 0.10: sized by the cores; the reference needs none)
        kwargs["num_cores"] = 1
    return cls(**kwargs)


_warned: set = set()


def _warn_once(name, value, text):
    key = (name, repr(value))
    if key not in _warned:
        _warned.add(key)
        warnings.warn(text, stacklevel=2)


# -- the reference's errors, raised again where the mode's block ends -------------------------

# (callbacks run on XLA's threads, not the caller's: the last one, for the whole process)
_last_error: list = [None]


def _remember(e: Exception) -> None:
    _last_error[0] = e


def _reference_error(exc: BaseException) -> "Exception | None":
    """The reference's exception that ``exc`` (JAX's wrapping of a failed callback) carries."""
    e = _last_error[0]
    if e is None or e is exc or type(exc).__name__ != "JaxRuntimeError":
        return None
    _last_error[0] = None
    first = (str(e).splitlines() or [type(e).__name__])[0]
    return e if first in str(exc) else None
