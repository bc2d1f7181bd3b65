"""What a failure of a runner was: the backend refusing the program (``backend-unsupported``) or
a crash, judged by what raised it, never by the words of its message."""
from __future__ import annotations

import traceback

from hardware_runners.base import BackendFailure, BackendUnsupported
from reports.schema import BACKEND_UNSUPPORTED, CRASH

# XLA status codes (absl::StatusCode, which XLA's runtime errors begin with) that say "this backend
# has no implementation" rather than "this went wrong": UNIMPLEMENTED anywhere; NOT_FOUND while
# compiling, where it means a custom call with no implementation on the platform (XLA:CPU:
# "NOT_FOUND: No registered implementation for untyped custom call to Pin for Host", the lowering
# of pin/unpin).
_REFUSING_STATUS = {"UNIMPLEMENTED": ("trace", "lower", "compile", "execute", None),
                    "NOT_FOUND": ("compile",)}

# Lowering rules that refuse a parameter with a ValueError instead of NotImplementedError, named by
# the function that raises (module, function, exception type). jax/_src/lax/lax.py
# _handle_dot_precision: "The CPU backend silently ignores the algorithm spec, so we check here"
# (the presets XLA:CPU does not implement).
_REFUSING_FRAMES = {("jax._src.lax.lax", "_handle_dot_precision", "ValueError")}


def _chain(e: BaseException):
    """``e`` and the exceptions it was raised from (``__cause__``, else ``__context__``)."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def _raised_at(e: BaseException) -> tuple[str | None, str | None]:
    """(module, function) of the innermost frame that raised ``e`` (where JAX kept its frames)."""
    tb = e.__traceback__
    if tb is None:
        return None, None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_globals.get("__name__"), tb.tb_frame.f_code.co_name


def _raised_in(e: BaseException) -> str | None:
    """The module of the innermost frame that raised ``e``."""
    return _raised_at(e)[0]


def _status_code(e: BaseException) -> str | None:
    """The XLA status code of a JAX runtime error ("UNIMPLEMENTED: ..."), else None."""
    import jax
    runtime = getattr(jax.errors, "JaxRuntimeError", None)
    if runtime is None or not isinstance(e, runtime):
        return None
    head = str(e).split(":", 1)[0].strip()
    return head if head.isupper() and head.replace("_", "").isalpha() else None


def classify_failure(e: BaseException) -> tuple[str, dict]:
    """(outcome, facts) for what a runner raised, judged by what raised it, never by the words of
    its message: ``backend-unsupported`` when the backend refused the program (the runner's
    BackendUnsupported; a NotImplementedError anywhere in the chain, which is how JAX and its Pallas
    lowerings say a primitive or parameter has no rule; a lowering rule of ``_REFUSING_FRAMES``;
    an XLA status in ``_REFUSING_STATUS``),
    ``crash`` otherwise. ``facts``: stage (trace/lower/compile/execute, where the runner says),
    error type, the module that raised it, and the message."""
    stage = e.stage if isinstance(e, BackendFailure) else None
    err = e.error if isinstance(e, BackendFailure) else e
    facts = {"stage": stage, "type": type(err).__name__, "raised_in": _raised_in(err), "message": str(err)[:2000]}
    refusal = next((x for x in _chain(err) if isinstance(x, (BackendUnsupported, NotImplementedError))), None)
    if refusal is not None:
        facts.update(refused_by=type(refusal).__name__, raised_in=_raised_in(refusal) or facts["raised_in"])
        return BACKEND_UNSUPPORTED, facts
    refusing = next((x for x in _chain(err) if (*_raised_at(x), type(x).__name__) in _REFUSING_FRAMES), None)
    if refusing is not None:
        facts["refused_by"] = ".".join(_raised_at(refusing))
        return BACKEND_UNSUPPORTED, facts
    code = _status_code(err)
    if code is not None and stage in _REFUSING_STATUS.get(code, ()):
        facts["refused_by"] = f"XLA status {code}"
        return BACKEND_UNSUPPORTED, facts
    return CRASH, facts


def short_traceback(e: BaseException, limit: int = 4000) -> str:
    """The last ``limit`` characters of ``e``'s traceback (a crash record's ``output``)."""
    s = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return s[-limit:]
