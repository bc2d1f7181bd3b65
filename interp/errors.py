"""Errors the reference raises. Undefined behaviour and unsupported input are loud."""
from __future__ import annotations


def _jax_version() -> str:
    import jax
    return jax.__version__


class UnsupportedPrimitiveError(NotImplementedError):
    """A primitive (or a parameter value of one) the reference does not implement."""

    def __init__(self, primitive: str, params: dict | None = None, reason: str = ""):
        self.primitive = primitive
        self.params = dict(params or {})
        self.reason = reason
        shown = ", ".join(f"{k}={_short(v)}" for k, v in sorted(self.params.items()))
        msg = f"primitive '{primitive}' is not supported by the reference interpreter"
        if reason:
            msg += f": {reason}"
        msg += f" (params: {shown or 'none'}; JAX {_jax_version()})"
        super().__init__(msg)


def _short(v, limit: int = 80) -> str:
    s = repr(v).replace("\n", " ")
    return s if len(s) <= limit else s[: limit - 3] + "..."


class InvalidKernelError(ValueError):
    """A kernel its target's compiler refuses (a Mosaic TPU kernel loading or storing an HBM/ANY
    ref directly): raised when the kernel is read, before it runs."""


class UndefinedBehaviorError(RuntimeError):
    """The program did something whose result JAX/XLA leave undefined."""


class OutOfBoundsError(UndefinedBehaviorError, IndexError):
    """A ref access outside the ref's bounds."""


class UninitializedReadError(UndefinedBehaviorError):
    """A read of memory that was never written (with uninitialized='raise')."""


class RaceError(UndefinedBehaviorError):
    """A data race: an access that overlaps an in-flight DMA, or semaphore misuse."""
