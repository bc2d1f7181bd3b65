"""The fuzzer's oracle, data flow through a program: which outputs an operation reaches only
through bit moves (terminal operations), which output elements come from one element of an
elementwise operation (ulp-neighbour replays), where each output element of an equation comes from
(index maps) and which elements share a source (conformance/fuzz/oracle.py, level 2)."""
from __future__ import annotations

import numpy as np

from interp import dtypes as D
from spec import compliance as C

from .equation import _EQN_FUNCTIONS, _interpreted, _signature, eqn_function, eqn_modes


def _flow(closed, use) -> tuple[dict, list]:
    """({top-level output var: its output indices}, the equations, calls entered) of a program;
    ``use(var, eqn, outvars)`` for every operand use: ``eqn`` None where a call passes ``var`` on
    to ``outvars`` (into its body or out of it)."""
    import jax.extend.core as jcore

    from conformance.observe import CALLS, call_body
    from interp.evaluator import split_jaxpr
    top = split_jaxpr(closed)[0]
    outputs: dict = {}
    for k, v in enumerate(top.outvars):
        if not isinstance(v, jcore.Literal):
            outputs.setdefault(v, []).append(k)
    eqns: list = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            body = call_body(eqn) if eqn.primitive.name in CALLS else None
            if body is not None:
                inner = split_jaxpr(body)[0]
                for a, iv in list(zip(eqn.invars, inner.invars)) + list(zip(inner.outvars, eqn.outvars)):
                    if not isinstance(a, jcore.Literal):
                        use(a, None, [iv])
                walk(inner)
                continue
            eqns.append(eqn)
            for a in eqn.invars:
                if not isinstance(a, jcore.Literal):
                    use(a, eqn, eqn.outvars)
    walk(top)
    return outputs, eqns


def terminal_operations(closed) -> dict:
    """The inexact equations whose results reach only the program's outputs, directly or through
    equations that merely move bits (replay.MOVES_BITS) and calls (entered):
    ``{"eqns": {id(equation): ULP budget (0 for a sum)}, "outputs": {output index: the largest ULP
    budget of the elementwise ones it comes from}, "sums": {output index: (id, mode)}}`` where a
    sum, dot or convolution (DOT_PRODUCT) is itself the output.

    A backend may compute such an equation differently in the compiled program than alone (fused
    code of a transcendental is not the code of the operation alone; a fused sum may add in
    another order), within the same budget: the outputs it reaches are judged against the
    reference's value with the equation's mode."""
    from conformance.replay import MOVES_BITS
    edges: dict = {}          # var -> vars its value moves to unchanged; absent key: no moves
    stops: set = set()        # vars used by an equation that computes with them

    def use(var, eqn, outvars):
        if eqn is None or eqn.primitive.name in MOVES_BITS:
            edges.setdefault(var, []).extend(outvars)
        else:
            stops.add(var)
    outputs, eqns = _flow(closed, use)
    reach: dict = {}

    def reached(var, depth=0) -> set | None:
        """The outputs ``var`` reaches through moves only, or None if it reaches anything else."""
        if var in reach:
            return reach[var]
        if var in stops or depth > 200:
            reach[var] = None
            return None
        out = set(outputs.get(var, ()))
        for nxt in edges.get(var, ()):
            r = reached(nxt, depth + 1)
            if r is None:
                out = None
                break
            out |= r
        reach[var] = out
        return out

    found, by_output, sums = {}, {}, {}
    for eqn in eqns:
        modes = eqn_modes(eqn)
        if len(modes) != 1:
            continue
        r = reached(eqn.outvars[0])
        if not r:
            continue
        if modes[0].kind == C.ULP:
            found[id(eqn)] = modes[0].ulp
            for k in r:
                by_output[k] = max(by_output.get(k, 0), modes[0].ulp)
        elif modes[0].kind == C.DOT_PRODUCT and eqn.outvars[0] in outputs:
            found[id(eqn)] = 0
            for k in outputs[eqn.outvars[0]]:
                sums[k] = (id(eqn), modes[0])
    return {"eqns": found, "outputs": by_output, "sums": sums}


# Equations through which each output element depends on one operand element, and distinct output
# elements on distinct ones: arithmetic of same-shaped operands and bijective reshapes.
ELEMENTWISE_PATH = ("add", "sub", "mul", "div", "neg", "abs", "integer_pow", "square", "sqrt", "rsqrt", "max",
                    "min", "select_n", "clamp", "convert_element_type", "copy", "copy_p", "reshape", "squeeze",
                    "expand_dims", "transpose", "rev", "exp", "exp2", "log", "log1p", "expm1", "erf_inv",
                    "reduce_precision")
BIJECTIVE_RESHAPES = ("reshape", "squeeze", "expand_dims", "transpose", "rev")
# Equations through which each output element comes from one element of operand 0 (or from none: a
# fill), where one operand element may feed several outputs: the replay tracks which (index_map).
GATHERS = ("gather",)
# Equations each output element of which is one element of its window of operand 0 (an exact
# selection), the windows disjoint: the replay tracks one representative element per window.
SELECTING_REDUCTIONS = ("reduce_max", "reduce_min")
# At most this many ulp neighbours either side of an operation's reference value are replayed, and
# this many replays in all per program and allowance (the search stays bounded; past it, unexplained).
MAX_NEIGHBOURS = 16
MAX_NEIGHBOUR_REPLAYS = 128


def elementwise_sources(closed) -> dict:
    """``{id(equation): ULP budget}`` of the inexact ULP equations (calls entered) whose value
    reaches exactly one program output, only through ELEMENTWISE_PATH equations on operands of
    the output's shape, through GATHERS (as their operand 0, never their indices) and through
    SELECTING_REDUCTIONS: each element of that output depends on at most one element of the
    equation's value, or (a reduction) on one window of them, disjoint from the other elements'. A backend may compute
    such an equation differently in a fusion (never observed) within its budget; replaying the
    program with its value moved by k ulp (every element alike) and taking, per output element,
    any k within the budget accepts exactly the values that some compliant value of that element
    gives, provided the output elements that share an element of the equation take the same k
    (a gather may copy one element to several outputs, and an arithmetic path may meet an element
    with another one of the same equation): :func:`index_map` says which element each output
    element comes from, and the judgement (explain_program) takes one replay for all of them."""
    uses: dict = {}           # var -> [(the vars a use passes its elements on to, whether on the path, effectful)]

    def use(var, eqn, outvars):
        name = eqn.primitive.name if eqn is not None else None
        shape = getattr(outvars[0].aval, "shape", None) if len(outvars) == 1 else None
        gathered = name in GATHERS and eqn.invars[0] is var and var not in eqn.invars[1:]
        ok = eqn is None or gathered or shape is not None and (name in SELECTING_REDUCTIONS or (
            name in ELEMENTWISE_PATH and (name in BIJECTIVE_RESHAPES or getattr(var.aval, "shape", None) == shape)))
        uses.setdefault(var, []).append((list(outvars), ok, eqn is not None and bool(eqn.effects)))
    outputs, eqns = _flow(closed, use)
    liveness: dict = {}

    def live(var) -> bool:
        """Whether ``var`` reaches an output (or an effect) through any use at all."""
        if var not in liveness:
            liveness[var] = False           # (a cycle adds nothing)
            liveness[var] = var in outputs or any(
                effectful or any(live(v) for v in nxt) for nxt, _, effectful in uses.get(var, ()))
        return liveness[var]

    def reached(var, seen) -> set | None:
        """The output indices ``var`` reaches, or None where a use leaves the path (a dead use,
        one that reaches no output and has no effect, is no use)."""
        if var in seen:
            return set()
        seen.add(var)
        out = set(outputs.get(var, ()))
        for nxt, ok, effectful in uses.get(var, ()):
            if not ok and (effectful or any(live(v) for v in nxt)):
                return None
            if not ok:
                continue
            for v in nxt:
                r = reached(v, seen)
                if r is None:
                    return None
                out |= r
        return out

    found = {}
    for eqn in eqns:
        modes = eqn_modes(eqn)
        if len(modes) != 1 or modes[0].kind != C.ULP or not modes[0].ulp:
            continue
        if not D.is_float(np.dtype(eqn.outvars[0].aval.dtype)) or D.is_complex(np.dtype(eqn.outvars[0].aval.dtype)):
            continue
        if sum(e is eqn for e in eqns) > 1:      # (a function called twice: two values, one equation)
            continue
        r = reached(eqn.outvars[0], set())
        if r is not None and len(r) == 1:
            found[id(eqn)] = min(int(modes[0].ulp), MAX_NEIGHBOURS)
    return found


# index_map values: the output element depends on no element of the source (a gather's fill, an
# operand from elsewhere), or on several (an arithmetic path met two of them).
NO_ELEMENT, SEVERAL_ELEMENTS = -1, -2


def index_map(eqn, maps: list, invals, platform: str = "cpu") -> np.ndarray:
    """Per output element of ``eqn`` (on an elementwise_sources path), the flat index of the
    source's element it comes from: ``maps`` holds each operand's map (None: not on the path),
    ``invals`` the operands (a gather's indices)."""
    import jax.extend.core as jcore
    from jax import lax
    shape = tuple(eqn.outvars[0].aval.shape)
    name = eqn.primitive.name
    if name in GATHERS:
        if any(m is not None for m in maps[1:]):
            return np.full(shape, SEVERAL_ELEMENTS, np.int32)
        p = eqn.params
        key = ("index-map",) + _signature(eqn)
        fn = _EQN_FUNCTIONS.get(key)
        if fn is None:
            def fn(o, i):
                return lax.gather(o, i, p["dimension_numbers"], p["slice_sizes"], mode=p["mode"],
                                  unique_indices=p["unique_indices"], indices_are_sorted=p["indices_are_sorted"],
                                  fill_value=NO_ELEMENT)
            _EQN_FUNCTIONS[key] = fn
        return np.asarray(_interpreted(fn, platform)(maps[0], np.asarray(invals[1]))).astype(np.int32)
    if name in SELECTING_REDUCTIONS:
        # A window's representative: its lowest source element. Sound where the windows' source
        # elements are distinct (no source element in two windows): elements of other windows then
        # get other representatives, and a later path meeting any other element of the window with
        # this one's value gives SEVERAL_ELEMENTS.
        m = maps[0]
        if m is None or (m == SEVERAL_ELEMENTS).any() or np.unique(m[m >= 0]).size != (m >= 0).sum():
            return np.full(shape, SEVERAL_ELEMENTS, np.int32)
        none = np.iinfo(np.int32).max
        low = np.min(np.where(m == NO_ELEMENT, none, m), axis=tuple(eqn.params["axes"]), initial=none)
        return np.where(low == none, NO_ELEMENT, low).reshape(shape).astype(np.int32)
    if name in BIJECTIVE_RESHAPES:
        ops = [m if m is not None else np.asarray(v) for m, v in zip(maps, invals)]
        ops = [np.asarray(v, a.aval.dtype) if isinstance(a, jcore.Literal) else v for a, v in zip(eqn.invars, ops)]
        return np.asarray(_interpreted(eqn_function(eqn), platform)(*ops)[0]).astype(np.int32)
    out = np.full(shape, NO_ELEMENT, np.int32)
    for m in maps:                  # arithmetic: the one element its path operands share
        if m is None:
            continue
        m = np.broadcast_to(m, shape)
        out = np.where(out == NO_ELEMENT, m, np.where((m == NO_ELEMENT) | (m == out), out, SEVERAL_ELEMENTS))
    return out.astype(np.int32)


def shared_elements(maps: list) -> np.ndarray:
    """Labels of an output's elements (flat) such that elements sharing a source element (in any of
    ``maps``, the sources' flat index maps on that output) share a label: the groups one replay
    must explain together (connected through any of the sources).

    Why this is sound: every replay is one evaluation of the program, each source element given one
    value within its budget (the backend's alone, or the reference's moved k ulp). An output element
    of an elementwise_sources path depends on at most one element of each source (index_map; where
    one depends on SEVERAL_ELEMENTS, t + rev(t), the map given here is all zeros: the output is one
    group). Output elements in different groups depend on disjoint source elements, so taking a
    different replay for each group is still one assignment of compliant values to the source
    elements. Within a group (a gather copying one element to two outputs, or two sources' copies
    chained), per-element choices could need two values of one source element, which no compliant
    backend computes: one replay must give the whole group."""
    label = np.arange(maps[0].size)
    size = label.size
    while True:
        before = label.copy()
        for m in maps:
            on = m >= 0
            low = np.full(int(m.max(initial=0)) + 1, size)
            np.minimum.at(low, m[on], label[on])
            label[on] = low[m[on]]
            label = label[label]            # (follow the labels to their roots)
        if (label == before).all():
            return label
