"""Where a failing program first goes wrong: the first equation whose backend value differs from
the reference's, both sides evaluated equation by equation (conformance/replay.py)."""
from __future__ import annotations

import numpy as np

from hardware_runners.base import get_runner
from spec import compliance as C

from . import checks
from .case import max_abs

# Primitives whose result depends on the order of a sum: judged by an error bound, not their ULP budget.
_SUMS = ("dot_general", "conv_general_dilated", "reduce_sum", "cumsum", "reduce_prod", "cumprod")


def first_divergent_eqn(jaxpr, inputs, runner_name: str) -> dict:
    """The first equation whose backend value differs from the reference's (calls inlined)."""
    from .replay import backend_intermediates, comparable, eqn_text, reference_replay

    _, trace = reference_replay(jaxpr, inputs, record=True)
    trace = [(e, v, val) for e, v, val in trace if comparable(v.aval)]
    device = get_runner(runner_name).device()
    if device is None:
        return {"error": f"{runner_name} cannot evaluate intermediates"}
    got = backend_intermediates(jaxpr, inputs, device)
    if len(got) != len(trace):
        return {"error": f"{len(got)} backend intermediates vs {len(trace)} reference ones"}
    for k, ((eqn, var, r), b) in enumerate(zip(trace, got)):
        r = np.asarray(r)
        mode = _eqn_mode(eqn, r.dtype)
        res = checks.check(mode, r, b, magnitude=max_abs([np.asarray(r)]))
        if not res.passed:
            return {"index": k, "primitive": eqn.primitive.name, "eqn": eqn_text(eqn), "mode": mode.describe(),
                    "max_ulp": res.max_ulp, "first_mismatch": res.first_mismatch}
    return {"index": None, "note": "every intermediate agrees when computed one by one: the difference "
                                   "comes from how the whole program is compiled (fusion)"}


def _eqn_mode(eqn, dtype) -> C.Mode:
    name = eqn.primitive.name
    if name in _SUMS:
        return C.abs_rel(64, 8, "measured")
    try:
        return C.mode_for_primitive(name, dtype)
    except ValueError:
        return C.abs_rel(64, 8, "measured")
