"""Evaluation options, shared by every rule of one evaluation (frozen: plans are cached per options)."""
from __future__ import annotations

import dataclasses

UNINITIALIZED_MODES = ("nan", "zero", "raise")
GRID_ORDERS = ("sequential", "shuffled")
ON_RACE = ("raise", "record")


@dataclasses.dataclass(frozen=True)
class Options:
    uninitialized: str = "nan"      # what reads of never-written memory give
    detect_races: bool = False      # Pallas: DMA / semaphore race detection
    # What a race found does (the TPU DMA engine's and remote DMAs' under detect_races; the
    # Mosaic GPU engine checks ordering whatever detect_races says): "raise" its RaceError, or
    # "record" it in the list of the enclosing interp.schedule.recording_races() block and go on
    # (spec: pallas_tpu/recorded-race, mosaic_gpu/recorded-race)
    on_race: str = "raise"
    check_bounds: bool = True       # Pallas: out-of-bounds ref accesses raise
    grid_order: str = "sequential"  # Pallas: order of parallel grid axes
    # Pallas TPU: the TensorCores a pallas_call's leading 'parallel' grid axes are split over
    # (spec: pallas_call/c18; JAX's InterpretParams.num_cores_or_threads). 1: one core, as a
    # v5e / v6e chip; 2: a megacore chip (v4, v5p, v7x).
    tpu_cores: int = 1
    seed: int = 0                   # anything randomised (shuffled grids, emulated hardware PRNG)
    check_avals: bool = True        # every rule's result must match its equation's aval
    platform: str = "cpu"           # the platform the reference stands in for: lax.platform_dependent
                                    # takes its branch (a JAX lowering platform: cpu, cuda, rocm, tpu, ...)
    # A per-equation hook (conformance/observe.py): ``observer.wrap(ctx, rule) -> rule`` is applied to
    # every equation of every plan built under these options, nested jaxprs included (hashable:
    # plans are cached per options, so an observed evaluation never shares plans with a plain one).
    observer: object = None

    def __post_init__(self):
        if self.uninitialized not in UNINITIALIZED_MODES:
            raise ValueError(f"uninitialized must be one of {UNINITIALIZED_MODES}, got {self.uninitialized!r}")
        if self.on_race not in ON_RACE:
            raise ValueError(f"on_race must be one of {ON_RACE}, got {self.on_race!r}")
        if not (isinstance(self.tpu_cores, int) and self.tpu_cores >= 1):
            raise ValueError(f"tpu_cores must be a positive int, got {self.tpu_cores!r}")
        if self.grid_order not in GRID_ORDERS:
            raise ValueError(f"grid_order must be one of {GRID_ORDERS}, got {self.grid_order!r}")
        if self.platform == "gpu" or not self.platform or self.platform != self.platform.lower():
            # (JAX's platform_dependent refuses "gpu" too: a program branches on cuda or rocm)
            raise ValueError(f"platform must be a lowercase JAX lowering platform such as 'cpu', 'cuda', "
                             f"'rocm' or 'tpu', got {self.platform!r}")


def make_options(options: "Options | None" = None, **kwargs) -> Options:
    if options is not None:
        return dataclasses.replace(options, **kwargs) if kwargs else options
    unknown = set(kwargs) - {f.name for f in dataclasses.fields(Options)}
    if unknown:
        raise TypeError(f"unknown interpreter option(s): {sorted(unknown)}")
    return Options(**kwargs)
