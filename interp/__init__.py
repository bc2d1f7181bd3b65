"""A pure-NumPy reference interpreter for JAX programs (jaxprs).

    f_ref = interp.interpret(fn, **options)   # like jax.jit(fn), evaluated in NumPy
    outs = interp.eval_jaxpr(closed_jaxpr, *flat_args, **options)
    interp.coverage()                          # {primitive: supported | partial: ... | unsupported}
    with interp.pallas_mode(): ...             # the Pallas kernels of a JAX program run here
"""
from .errors import (InvalidKernelError, OutOfBoundsError, RaceError, UndefinedBehaviorError,
                     UninitializedReadError, UnsupportedPrimitiveError)
from .options import Options
from .evaluator import eval_jaxpr
from .api import interpret
from .coverage import coverage
from .pallas_mode import pallas_mode
from . import rules  # noqa: F401  (registers every rule)

__all__ = ["interpret", "eval_jaxpr", "coverage", "pallas_mode", "Options", "UnsupportedPrimitiveError",
           "UndefinedBehaviorError", "OutOfBoundsError", "UninitializedReadError", "RaceError",
           "InvalidKernelError"]


def __getattr__(name):
    if name == "prng":  # the bit generators, loaded on first use
        import importlib
        return importlib.import_module(".prng", __name__)
    raise AttributeError(name)
