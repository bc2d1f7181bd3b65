"""The fuzzer's oracle: does a backend compute what a generated program means?

The suite's own machinery judges (compliance modes, allowances, known divergences); what a
random program adds is composition: an error an operation may make (exp within 6 ulp, a sum in any
order) moves everything computed from it, so no per-output mode of the whole program is both sound
and strict. The judgement therefore goes equation by equation, on the backend's own values:

1. **Whole program, exactly.** The backend's outputs against the reference's, EXACT, with the
   runner's allowances replayed over the whole program (flush-to-zero, FMA contraction, XLA's
   algebraic rewrites, the order of duplicate scatter updates...). A program of operations that are
   all defined bit for bit is judged here.
2. **Inexact operations as the backend computes them.** The reference is replayed with every
   operation whose mode is not EXACT (transcendentals: ULP budgets; sums, dots, convolutions:
   DOT_PRODUCT bounds) evaluated by the backend instead, on the replay's own operands (that
   operation alone, through the runner). Each such value is first judged against its operation's
   mode, allowances and known divergences (one equation: the suite's ``compare``); the rest of the
   program must then follow exactly, with the allowances replayed again. An operation that fails its
   own judgement is the finding (its inputs are in hand: a one-equation reproducer). A
   transcendental whose result reaches only outputs (through bit moves) may also be computed
   differently in the compiled program than alone: those outputs may instead be within its
   budget of the reference's value (:func:`terminal_operations`).
3. **Localisation.** A program still unexplained is compiled once more with every intermediate
   value as an output (through the runner), and each equation is judged on the backend's own
   operands (the reference replayed with each equation's value replaced by the backend's once it
   has been judged; the runner's two-equation allowances, FMA contraction, algebraic rewrites and
   excess precision, are checked on the producer's values). The first that fails is the divergent
   equation; if none does and that compile gives the program's outputs, the program is explained;
   otherwise the difference comes from how the whole program was compiled (fusion, rewrites), a
   finding of its own kind.

A backend's result is explained when one of these shows every output reachable from per-equation
compliant steps; whatever stays unexplained is a finding. Findings are bucketed by (primitive,
dtype, runner, symptom) so that one bug is one report.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import time

import numpy as np

from interp import dtypes as D
from conformance import allowance_models as AM
from spec import compliance as C
from spec import divergences as DV

from . import suite
from .suite import CRASH, FAIL, GOOD, KNOWN_DIVERGENCE, PASS, PASS_ALLOWANCE, Case

PER_OPERATION = "per-operation-budgets"
ULP_NEIGHBOURS = "(ulp-neighbours)"     # suffix: explained with an elementwise source moved within its budget
# Float operations whose result depends on an evaluation order the program does not fix: judged
# with the DOT_PRODUCT bound (K terms; sum |terms| from the reference on |operands| in float64).
ORDER_FREE_SUMS = ("dot_general", "conv_general_dilated", "reduce_sum", "cumsum", "reduce_window_sum",
                   "scatter-add", "scatter_add")
# Primitives that are IEEE additions whatever their name (JAX's cotangent accumulation).
IEEE_ADDS = ("add_any",)


# --------------------------------------------------------------------------------------------
# One equation: its modes, its function, its reference value.
# --------------------------------------------------------------------------------------------
def _float_like(dtype) -> bool:
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        return False
    return D.is_float(dtype) or D.is_complex(dtype)


def _avals(eqn):
    return [v.aval for v in eqn.outvars]


def sum_terms(eqn) -> int:
    """K of an order-free sum: the most terms one output element adds."""
    name, p = eqn.primitive.name, eqn.params
    shapes = [tuple(getattr(v.aval, "shape", ())) for v in eqn.invars]
    if name == "dot_general":
        (lc, _), _ = p["dimension_numbers"]
        return max(1, math.prod(shapes[0][d] for d in lc))
    if name == "conv_general_dilated":
        rhs = shapes[1]
        out_feature = p["dimension_numbers"].rhs_spec[0]
        return max(1, math.prod(rhs) // max(1, rhs[out_feature]))
    if name == "reduce_sum":
        return max(1, math.prod(shapes[0][a] for a in p["axes"]))
    if name == "cumsum":
        return max(1, shapes[0][p["axis"]])
    if name == "reduce_window_sum":
        return max(1, math.prod(p["window_dimensions"]))
    if name in ("scatter-add", "scatter_add"):
        idx = shapes[1]
        return 1 + max(1, math.prod(idx[:-1]) if idx else 1)
    raise ValueError(name)


def eqn_modes(eqn) -> list[C.Mode]:
    """The compliance mode of each output of one equation."""
    name = eqn.primitive.name
    out = []
    for aval in _avals(eqn):
        dtype = getattr(aval, "dtype", None)
        if dtype is None or not _float_like(dtype) or name in IEEE_ADDS:
            out.append(C.exact("definition" if dtype is None or not _float_like(dtype) else "ieee754"))
        elif name in ORDER_FREE_SUMS:
            narrow = name not in ("dot_general", "conv_general_dilated") and np.dtype(dtype).itemsize < 4
            if narrow:      # summed in the operand type (spec/compliance.py "sum-in-operand-type")
                bits = int(D.finfo(np.dtype(dtype)).nmant) + 1
                out.append(C.dot_product(sum_terms(eqn), "sum-in-operand-type", acc_bits=bits))
            else:
                out.append(C.dot_product(sum_terms(eqn)))
        else:
            out.append(C.mode_for_primitive(name, dtype))
    return out


def is_inexact(eqn) -> bool:
    """Whether a backend may compute the equation other than bit for bit (a budget, not EXACT), and
    can compute it alone. A collective (an equation over named mesh axes, in a shard_map body) has
    no value off its devices: the replays keep the reference's, so a float all-reduce is judged
    exactly (conformance/fuzz/families/spmd.py generates only float reductions every order gives
    exactly)."""
    return not spans_mesh_axes(eqn) and any(m.kind != C.EXACT for m in eqn_modes(eqn))


def spans_mesh_axes(eqn) -> bool:
    """Whether the equation names mesh axes (psum's ``axes``, the other collectives' and
    axis_index's ``axis_name``: strings; a reduction's ``axes`` are integers)."""
    for key in ("axes", "axis_name"):
        v = eqn.params.get(key)
        if any(isinstance(a, str) for a in (v if isinstance(v, (tuple, list)) else (v,))):
            return True
    return False


def _abs64(v):
    v = np.asarray(v)
    if D.is_complex(v.dtype):
        return np.abs(v.astype(np.complex128))
    if D.is_float(v.dtype):
        return np.abs(v.astype(np.float64))
    return v


def abs_bound(eqn, invals) -> list[np.ndarray]:
    """sum over the finite terms of |term| per output element: the equation evaluated by the
    reference on the operands' magnitudes in float64 (the DOT_PRODUCT bound). An infinite term is
    left out: the result is that infinity, or NaN where the finite terms' partial sums reach the
    opposite one in the backend's order, which the bound is what tells (checks._dot_product_bad).
    A NaN term (a NaN operand, 0 * inf) keeps the bound NaN: the result is NaN in any order. Finite
    terms whose magnitudes overflow float64 give float64's largest value (past every accumulator's)."""
    import jax
    from jax import lax

    import interp
    name, p = eqn.primitive.name, eqn.params
    a = [_abs64(v) for v in invals]
    f64 = np.float64
    if name == "dot_general":
        def f(x, y):
            return lax.dot_general(x, y, p["dimension_numbers"], preferred_element_type=f64)
    elif name == "conv_general_dilated":
        def f(x, y):
            return lax.conv_general_dilated(x, y, p["window_strides"], p["padding"], p["lhs_dilation"],
                                            p["rhs_dilation"], p["dimension_numbers"], p["feature_group_count"],
                                            p["batch_group_count"], preferred_element_type=f64)
    elif name == "reduce_sum":
        def f(x):
            return lax.reduce_sum(x, p["axes"])
    elif name == "cumsum":
        def f(x):
            return lax.cumsum(x, p["axis"], p["reverse"])
    elif name == "reduce_window_sum":
        def f(x):
            return lax.reduce_window(x, f64(0), lax.add, p["window_dimensions"], p["window_strides"], p["padding"],
                                     p["base_dilation"], p["window_dilation"])
    elif name in ("scatter-add", "scatter_add"):
        def f(o, i, u):
            return lax.scatter_add(o, i, u, p["dimension_numbers"], indices_are_sorted=p["indices_are_sorted"],
                                   unique_indices=p["unique_indices"], mode=p["mode"])
    else:
        raise ValueError(f"no magnitude bound for {name}")
    def finite(v):
        return np.where(np.isinf(v), 0, v) if D.is_float(v.dtype) or D.is_complex(v.dtype) else v

    with jax.enable_x64(True), np.errstate(invalid="ignore", over="ignore"):
        every = jax.tree_util.tree_leaves(interp.interpret(f)(*a))
        finite_only = jax.tree_util.tree_leaves(interp.interpret(f)(*[finite(v) for v in a]))
    f64_max = float(np.finfo(np.float64).max)
    return [np.where(np.isinf(e), np.minimum(np.asarray(b), f64_max), np.asarray(e))
            for e, b in zip(every, finite_only)]


def _signature(eqn) -> tuple:
    import jax.extend.core as jcore
    lits = tuple((i, repr(a.val)) for i, a in enumerate(eqn.invars) if isinstance(a, jcore.Literal))
    return (eqn.primitive.name, repr(sorted(eqn.params.items(), key=lambda kv: kv[0])),
            tuple(str(v.aval) for v in eqn.invars), lits)


_EQN_FUNCTIONS: dict = {}


def eqn_function(eqn):
    """``f(*operands)`` binding the equation, every operand (its literals too) an argument, so that
    a one-equation judgement sees all of them (a divisor a known divergence models); one function
    per equation signature, so that jit caches compile each distinct equation once."""
    key = _signature(eqn)
    fn = _EQN_FUNCTIONS.get(key)
    if fn is None:
        prim = eqn.primitive
        params = prim.get_bind_params(eqn.params)

        def fn(*vals):
            out = prim.bind(*vals, **params)
            return tuple(out) if prim.multiple_results else (out,)
        fn.__name__ = f"eqn_{prim.name.replace('-', '_')}"
        if len(_EQN_FUNCTIONS) > 4096:
            _EQN_FUNCTIONS.clear()
        _EQN_FUNCTIONS[key] = fn
    return fn


def operands(eqn, invals) -> list:
    """The equation's operands as :func:`eqn_function` takes them: literals as arrays of their
    avals' dtypes."""
    import jax.extend.core as jcore
    return [np.asarray(v, a.aval.dtype) if isinstance(a, jcore.Literal) else v for a, v in zip(eqn.invars, invals)]


def _config() -> tuple:
    import jax
    return (("jax_threefry_partitionable", jax.config.jax_threefry_partitionable),)


def eqn_case(eqn) -> Case:
    """The suite's Case of one equation (its modes, its bound, its primitive for the known
    divergences): what the equation is judged as on its own."""
    import jax
    name = eqn.primitive.name
    modes = eqn_modes(eqn)
    needs_bound = any(m.needs_dot_bound for m in modes)
    return Case(id=f"fuzz-eqn/{name}", fn=eqn_function(eqn), inputs=lambda rng: [], modes=modes,
                dot_bound=(lambda *vals: abs_bound(eqn, vals)) if needs_bound else None,
                x64=bool(jax.config.jax_enable_x64), jax_config=_config(), primitives=(name,))


@functools.lru_cache(maxsize=2048)
def _interpreted(fn, platform: str):
    import interp
    return interp.interpret(fn, platform=platform)


def reference_eqn(eqn, invals, platform: str = "cpu") -> list[np.ndarray]:
    return [np.asarray(o) for o in _interpreted(eqn_function(eqn), platform)(*invals)]


def judged_as(runner) -> str:
    """The runner name allowances and known divergences are looked up by (a runner that wraps
    another backend, such as a mutant of XLA:CPU, is judged as that backend)."""
    return getattr(runner, "judged_as", runner.name)


# --------------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Culprit(Exception):
    """An equation whose backend value, given its own operands, fails its judgement."""
    eqn: object
    invals: list
    reference: list
    backend: list
    record: dict          # the one-equation compare record (modes, max ulp, first mismatch, detail)

    def describe(self) -> dict:
        from conformance.replay import eqn_text
        eqn = self.eqn
        modes = eqn_modes(eqn)
        failing = next((i for i, m in enumerate(modes) if not _complies(m, self.reference[i], self.backend[i], eqn,
                                                                          self.invals, i)), 0)
        return {"primitive": eqn.primitive.name, "eqn": eqn_text(eqn),
                "dtype": str(getattr(eqn.outvars[failing].aval, "dtype", "")), "mode": modes[failing].describe(),
                "max_ulp": self.record.get("max_ulp"), "first_mismatch": self.record.get("first_mismatch"),
                "symptom": symptom(self.reference[failing], self.backend[failing]),
                "operands": [_brief(v) for v in self.invals]}


def _complies(mode, ref, out, eqn, invals, i) -> bool:
    from conformance import checks
    bound = abs_bound(eqn, invals)[i] if mode.needs_dot_bound else None
    return checks.check(mode, ref, out, magnitude=suite.max_abs(invals), bound=bound).passed


def _brief(v) -> str:
    v = np.asarray(v)
    with np.printoptions(threshold=8, edgeitems=2):
        return f"{v.dtype}{list(v.shape)} {v!r}"[:300]


def symptom(ref, out) -> str:
    """What kind of difference: shape, nan (placement of NaN), inf, zero-sign, or value."""
    ref, out = np.asarray(ref), np.asarray(out)
    if ref.shape != out.shape or ref.dtype != out.dtype:
        return "shape"
    if not _float_like(ref.dtype):
        return "value"
    parts = [(ref.real, out.real), (ref.imag, out.imag)] if D.is_complex(ref.dtype) else [(ref, out)]
    for r, o in parts:
        r, o = r.astype(np.float64), o.astype(np.float64)
        if (np.isnan(r) != np.isnan(o)).any():
            return "nan"
        if ((np.isinf(r) | np.isinf(o)) & ~np.isnan(r) & ~np.isnan(o) & (r != o)).any():
            return "inf"
    equal, signs = True, False
    for r, o in parts:
        r, o = r.astype(np.float64), o.astype(np.float64)
        equal &= bool(((r == o) | (np.isnan(r) & np.isnan(o))).all())
        signs |= bool(((r == 0) & (o == 0) & (np.signbit(r) != np.signbit(o))).any())
    return "zero-sign" if equal and signs else "value"


def judge_eqn(eqn, invals, outs, runner, platform: str = "cpu", reference=None):
    """(explained, one-equation record, reference outputs): one equation's backend outputs ``outs``
    given its operands ``invals``. Control flow is judged as a program (its body equation by
    equation); anything else with the suite's compare: the equation's modes, the runner's
    allowances, the known divergences of its primitive."""
    from conformance.observe import holds_jaxprs
    if holds_jaxprs(eqn):
        v = explain_program(_one_eqn_program(eqn), invals, outs, runner, platform)
        return v.explained, v.record, v.reference
    ref = reference if reference is not None else reference_eqn(eqn, invals, platform)
    case = eqn_case(eqn)
    rec = suite.new_record(case=case.id, runner=runner.name, seed=0)
    with case.context(), np.errstate(all="ignore"):
        suite.compare(case, judged_as(runner), list(invals), ref, list(outs), rec, first_divergence=False)
    return rec["outcome"] in (PASS, PASS_ALLOWANCE, KNOWN_DIVERGENCE), rec, ref


@dataclasses.dataclass(frozen=True)
class _Program:
    """What explain_program judges: a function of the inputs."""
    fn: object


def _one_eqn_program(eqn) -> _Program:
    return _Program(eqn_function(eqn))


# --------------------------------------------------------------------------------------------
# Level 2: the reference with the backend's inexact operations
# --------------------------------------------------------------------------------------------
class Explanations:
    """How the equations judged on their own were explained: counts per (primitive, allowance or
    known divergence or "budget"), and the known divergences themselves."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.divergences: dict[str, dict] = {}

    def note(self, eqn, rec: dict) -> None:
        div = rec.get("known_divergence")
        if div:
            self.divergences.setdefault(div["id"], div)
        why = rec.get("allowance") or (div or {}).get("id") or "budget"
        key = f"{eqn.primitive.name}:{why}"
        self.counts[key] = self.counts.get(key, 0) + 1

    def apply(self, rec: dict) -> None:
        """A record explained with these: a known divergence where one was needed."""
        rec["explained_operations"] = self.counts
        if self.divergences:
            first = next(iter(self.divergences.values()))
            rec.update(outcome=KNOWN_DIVERGENCE, known_divergence=first,
                       known_divergences=sorted(self.divergences))


class _OpJudge:
    """Evaluates and judges the inexact operations of a hybrid replay (see the module docstring)."""

    def __init__(self, runner, platform: str):
        self.runner, self.platform = runner, platform
        self.explained = Explanations()           # how substituted operations were explained
        self._cache: dict = {}

    def backend(self, eqn, invals) -> list[np.ndarray]:
        h = hashlib.sha256()
        for v in invals:
            v = np.ascontiguousarray(v)
            h.update(str((v.dtype, v.shape)).encode())
            h.update(v.tobytes())
        key = (_signature(eqn), h.hexdigest())
        if key not in self._cache:
            case = eqn_case(eqn)
            self._cache[key] = [np.asarray(o) for o in suite.run(self.runner, case, [np.asarray(v) for v in invals])]
        return self._cache[key]

    def __call__(self, eqn, invals, reference) -> list:
        outs = self.backend(eqn, invals)
        ok, rec, _ = judge_eqn(eqn, invals, outs, self.runner, self.platform, reference=reference)
        if not ok:
            raise Culprit(eqn, list(invals), list(reference), outs, rec)
        self.explained.note(eqn, rec)
        return outs


def _widened(eqn):
    """The equation on float32 operands (None where it has literal operands or is not elementwise
    over one narrow float type): how a backend computes it in excess precision."""
    import jax
    import jax.extend.core as jcore
    from conformance.replay import SHADOWED
    if any(isinstance(a, jcore.Literal) for a in eqn.invars) or len(eqn.outvars) != 1:
        return None
    avals = [a.aval for a in eqn.invars]
    if any(np.dtype(a.dtype) not in SHADOWED for a in avals):
        return None
    fn = eqn_function(eqn)
    try:
        closed = jax.make_jaxpr(fn)(*[jax.ShapeDtypeStruct(a.shape, np.float32) for a in avals])
    except Exception:  # noqa: BLE001  (a primitive whose parameters fix the dtype: not widened)
        return None
    eqns = closed.jaxpr.eqns
    return eqns[0] if len(eqns) == 1 and eqns[0].primitive is eqn.primitive else None


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


def _hybrid_watcher(judge: _OpJudge, keep_reference: frozenset = frozenset(), bounds: dict | None = None,
                    moved: tuple | None = None, track: dict | None = None):
    """The hybrid replay's watcher: inexact operations from the backend (judged first), except
    those in ``keep_reference`` (ids of terminal operations), which keep the reference's value
    (and, for a sum, leave its DOT_PRODUCT bound on its operands in ``bounds``), and the one
    ``moved`` = (id, k) names, whose reference value is moved k ulp (elementwise_sources); with
    ``track``, every value computed from that one gets its :func:`index_map` there (by var)."""
    import jax.extend.core as jcore

    from conformance.checks import ulp_neighbour
    from conformance.observe import CALLS, call_body
    from conformance.replay import _Replay
    from interp.evaluator import split_jaxpr

    class Hybrid(_Replay):
        def step(self, ctx, rule, invals, params):
            body = call_body(ctx.eqn) if track is not None and ctx.name in CALLS else None
            if body is None:
                return super().step(ctx, rule, invals, params)
            inner = split_jaxpr(body)[0]        # a call passes index maps on, in and out
            for iv, a in zip(inner.invars, ctx.eqn.invars):
                if not isinstance(a, jcore.Literal) and a in track:
                    track[iv] = track[a]
                else:
                    track.pop(iv, None)
            result = super().step(ctx, rule, invals, params)
            for ov, iv in zip(ctx.eqn.outvars, inner.outvars):
                if not isinstance(iv, jcore.Literal) and iv in track:
                    track[ov] = track[iv]
            return result

        def eval_eqn(self, ctx, rule, invals, params):
            outs = self._value(ctx, rule, invals, params)
            if track is not None:
                eqn = ctx.eqn
                maps = [None if isinstance(a, jcore.Literal) else track.get(a) for a in eqn.invars]
                if id(eqn) == moved[0]:
                    track[eqn.outvars[0]] = np.arange(np.size(outs[0]), dtype=np.int32).reshape(np.shape(outs[0]))
                elif any(m is not None for m in maps):
                    track[eqn.outvars[0]] = index_map(eqn, maps, invals, judge.platform)
                else:
                    for ov in eqn.outvars:
                        track.pop(ov, None)
            return outs

        def _value(self, ctx, rule, invals, params):
            eqn = ctx.eqn
            if not is_inexact(eqn):
                return super().eval_eqn(ctx, rule, invals, params)
            if moved is not None and id(eqn) == moved[0]:
                return [ulp_neighbour(np.asarray(r), moved[1]) for r in super().eval_eqn(ctx, rule, invals, params)]
            if id(eqn) in keep_reference:
                ref = super().eval_eqn(ctx, rule, invals, params)
                ops = operands(eqn, invals)
                judge(eqn, ops, [np.asarray(r) for r in ref])    # judged all the same
                if bounds is not None and eqn_modes(eqn)[0].kind == C.DOT_PRODUCT:
                    bounds[id(eqn)] = abs_bound(eqn, ops)[0]
                return ref
            if self.v.excess:
                wide_eqn = _widened(eqn)
                if wide_eqn is not None:
                    # excess precision: the backend computes the operation in float32 on the
                    # float32 values its narrow operands were not rounded from
                    wide = [np.asarray(self.shadow.get(a, x), np.float32) for a, x in zip(eqn.invars, invals)]
                    out = judge(wide_eqn, wide, reference_eqn(wide_eqn, wide, judge.platform))[0]
                    self.shadow[eqn.outvars[0]] = out
                    return [np.asarray(out).astype(eqn.outvars[0].aval.dtype)]
            ref = super().eval_eqn(ctx, rule, invals, params)
            return judge(eqn, operands(eqn, invals), [np.asarray(r) for r in ref])
    return Hybrid


@dataclasses.dataclass
class ProgramVerdict:
    explained: bool
    record: dict
    reference: list
    culprit: Culprit | None = None


def explain_program(program, inputs, outs, runner, platform: str = "cpu", reference=None,
                    case: Case | None = None) -> ProgramVerdict:
    """Levels 1 and 2 of the module docstring for ``program`` (anything with ``fn``) on ``inputs``
    with the backend's outputs ``outs``."""
    import jax
    import jax.extend.core as jcore

    from conformance import checks
    from conformance.replay import Variant, program_ops, reference_replay, scatter_candidates
    from interp.evaluator import split_jaxpr
    fn = program.fn
    case = case or Case(id="fuzz-program", fn=fn, inputs=lambda rng: [], modes=C.exact("definition"),
                        x64=bool(jax.config.jax_enable_x64), jax_config=_config())
    rec = suite.new_record(case=case.id, runner=runner.name, seed=0)
    with np.errstate(all="ignore"):
        closed = jax.make_jaxpr(fn)(*inputs)
        if reference is None:
            import interp
            reference = [np.asarray(r) for r in interp.eval_jaxpr(closed, *inputs, platform=platform)]
        # Level 1: the whole program exactly, with the runner's allowances (no known divergence is
        # looked up for a whole program: the entries describe one primitive's results).
        # (a kernel program is compared as the function it is under interpret=True, so that the
        # runner's allowances are replayed through the kernel's equations too)
        whole = dataclasses.replace(case, kind=suite.LAX, build=None) if case.kind == suite.PALLAS else case
        suite.compare(whole, judged_as(runner), list(inputs), reference, list(outs), rec, first_divergence=False)
        if rec["outcome"] in GOOD:
            return ProgramVerdict(True, rec, reference)
        if case.kind == suite.PALLAS:
            # A generated kernel is defined bit for bit (conformance/fuzz/families/pallas.py) and
            # judged whole: a known divergence of kernels (primitive pallas_call) explains it.
            return ProgramVerdict(rec["outcome"] == KNOWN_DIVERGENCE, rec, reference)
        ops = program_ops(closed)
        exact_only = not _has_inexact(closed)      # level 2 can only replay the divergences' folds
        if exact_only and not _divergence_replays(judged_as(runner), ops):
            return ProgramVerdict(False, rec, reference)
        # Level 2: the backend's inexact operations, judged one by one, and the rest exactly.
        judge = _OpJudge(runner, platform)
        terminal = terminal_operations(closed)
        watchers = [_hybrid_watcher(judge)]
        sum_bounds: dict = {}
        if terminal["eqns"]:
            watchers.append(_hybrid_watcher(judge, frozenset(terminal["eqns"]), sum_bounds))

        sources = elementwise_sources(closed)

        def hybrid(variant: dict | None, moved: tuple | None = None, track: dict | None = None) -> list[tuple]:
            """[(replay with every inexact operation from the backend, the same with the terminal
            operations' reference values, or None)] per scatter candidate; with ``moved`` = (id, k),
            [(the replay with that operation's reference value moved k ulp, None)] (and the index
            maps of the values computed from it in ``track``)."""
            fields = {k: v for k, v in (variant or {}).items() if k != "scatter_winner"}
            runs = []
            for w in ([_hybrid_watcher(judge, moved=moved, track=track)] if moved else watchers):
                if variant and "scatter_winner" in variant:
                    runs.append(scatter_candidates(closed, list(inputs), Variant(**fields), watcher=w))
                else:
                    runs.append([reference_replay(closed, list(inputs), Variant(**fields), watcher=w)[0]])
            return list(zip(runs[0], runs[1] if len(runs) > 1 else [None] * len(runs[0])))

        try:
            base = hybrid(None)
        except Culprit as c:
            rec.update(outcome=FAIL, detail=f"{c.eqn.primitive.name}: its backend value fails its own "
                                           f"judgement ({c.record.get('detail')})")
            return ProgramVerdict(False, rec, reference, c)
        replays: dict = {}
        neighbours: dict = {}           # name -> (the replays with one elementwise source moved, labels)
        by_neighbours: set = set()      # the names explained only with them
        program_outvars = split_jaxpr(closed)[0].outvars

        def neighbour_replays(variant) -> tuple[list, dict]:
            """(the replays with one elementwise source moved k ulp, for every |k| up to its budget
            and at most MAX_NEIGHBOUR_REPLAYS in all; {output index: flat labels of its elements,
            equal where they share an element of a source}). Where an output element depends on
            several elements of one source (which, the map does not say), that whole output is one
            group."""
            runs, maps, count = [], {}, 0
            for eqn_id, budget in sources.items():
                track: dict = {}
                mine = []
                for k in range(-budget, budget + 1):   # (k = 0: the reference's value, not the backend's alone)
                    if count == MAX_NEIGHBOUR_REPLAYS:
                        break
                    count += 1
                    try:
                        mine += hybrid(variant, (eqn_id, k), track)
                    except Exception:  # noqa: BLE001  (Culprit included: that value explains nothing)
                        pass
                reached = [(i, track[v].reshape(-1)) for i, v in enumerate(program_outvars)
                           if not isinstance(v, jcore.Literal) and v in track]
                if mine and reached:
                    runs += mine
                    for i, m in reached:
                        maps.setdefault(i, []).append(np.zeros_like(m) if (m == SEVERAL_ELEMENTS).any() else m)
            return runs, {i: shared_elements(ms) for i, ms in maps.items()}

        def complies(pairs, mode_change, labels: dict | None = None) -> bool:
            """Whether every output element is what one of the replays ``pairs`` gives; the elements
            ``labels`` groups (sharing an element of a moved source) all by the same replay."""
            for i, out in enumerate(outs):
                exact = C.exact("definition")
                exact = mode_change(exact) if mode_change else exact
                ok = np.zeros(np.shape(out), bool)
                label = (labels or {}).get(i)
                for sub, kept in pairs:
                    this = checks.complies(exact, sub[i], out)
                    if kept is not None and i in terminal["outputs"]:
                        this = this | checks.complies(C.ulp(terminal["outputs"][i], "spec-semantics"), kept[i], out)
                    if kept is not None and i in terminal["sums"]:
                        eqn_id, mode = terminal["sums"][i]
                        if eqn_id in sum_bounds:
                            this = this | checks.complies(mode, kept[i], out, bound=sum_bounds[eqn_id])
                    if label is not None:
                        failed = np.bincount(label, weights=~np.reshape(this, -1), minlength=label.size)
                        this = np.reshape(failed[label] == 0, np.shape(out))
                    ok |= this
                if not ok.all():
                    return False
            return True

        def attempt(variant, mode_change, name) -> bool:
            pairs = list(base)
            if variant:
                if name not in replays:
                    try:
                        replays[name] = hybrid(variant)
                    except Exception:  # noqa: BLE001  (Culprit included: that replay explains nothing)
                        replays[name] = None
                if replays[name] is None and mode_change is None:
                    return False
                pairs += replays[name] or []
            if complies(pairs, mode_change):
                return True
            if not sources:
                return False
            if name not in neighbours:
                neighbours[name] = neighbour_replays(variant)
            runs, labels = neighbours[name]
            if runs and complies(pairs + runs, mode_change, labels):
                by_neighbours.add(name)
                return True
            return False

        found = None
        name = PER_OPERATION if attempt(None, None, "") else None
        if name is None and not exact_only:
            found = AM.explain(judged_as(runner), attempt, ops)
            name = f"{PER_OPERATION}+{found}" if found else None
        divergences = _explained_by_divergences(judged_as(runner), attempt, ops) if name is None else []
        if divergences:
            div = DV.BY_ID[divergences[0]]
            rec.update(outcome=KNOWN_DIVERGENCE, allowance=None,
                       known_divergence={"id": div.id, "link": div.link, "summary": div.summary},
                       known_divergences=divergences,
                       detail="the program replayed with " + " and ".join(divergences) + " applied to every "
                              "equation it can (loop bodies included) gives the backend's outputs")
            return ProgramVerdict(True, rec, reference)
    if name is None:
        rec["detail"] = ("the backend's inexact operations each comply on their own, but the program's "
                         "outputs do not follow from them: " + str(rec.get("detail")))
        return ProgramVerdict(False, rec, reference)
    if name == PER_OPERATION and "" in by_neighbours or found and found in by_neighbours:
        # an elementwise source computed within its budget otherwise than alone (never observed)
        name = name.replace(PER_OPERATION, PER_OPERATION + ULP_NEIGHBOURS, 1)
    rec.update(outcome=PASS_ALLOWANCE, allowance=name)
    judge.explained.apply(rec)
    return ProgramVerdict(True, rec, reference)


# Known divergences of XLA:CPU that a whole-program replay applies (replay.Variant fields): an
# equation folded or rewritten where per-equation judgement cannot see it (a loop body, judged at
# the loop boundary; a fused producer never observed alone, moved within its budget by the
# neighbour replay). The primitives each needs in the program.
DIVERGENCE_REPLAYS = {
    "xla-cpu-add-zero-keeps-negative-zero": ("zero_added_kept", ("add", "sub")),
    "xla-cpu-divide-by-constant-as-reciprocal": ("reciprocal_division", ("div",)),
}


def _divergence_replays(runner: str, ops) -> list[str]:
    """The DIVERGENCE_REPLAYS entries for ``runner`` on the installed JAX that ``ops`` can meet."""
    import fnmatch

    import jax

    from spec.versions import version_in
    names = {op[0] for op in ops}
    return [i for i, (_, prims) in DIVERGENCE_REPLAYS.items()
            if any(fnmatch.fnmatchcase(runner, p) for p in DV.BY_ID[i].runners)
            and version_in(jax.__version__, DV.BY_ID[i].jax_versions) and names & set(prims)]


def _explained_by_divergences(runner: str, attempt, ops) -> list[str]:
    """The known divergences (ids) with which the whole program replayed (each one's Variant flag,
    loop bodies included), alone or with the runner's replay allowances, explains the outputs:
    each divergence alone, then all together; [] where none does."""
    ids = _divergence_replays(runner, ops)
    if not ids:
        return []
    replays = [a.variant for a in AM.for_runner(runner) if a.variant and AM.applies_to_program(a, ops)]
    merged: dict = {}
    for v in replays:
        merged.update(v)
    for chosen in [[i] for i in ids] + ([ids] if len(ids) > 1 else []):
        flags = {DIVERGENCE_REPLAYS[i][0]: True for i in chosen}
        for v in [{}] + replays + ([merged] if len(replays) > 1 else []):
            if attempt({**v, **flags}, None, f"{'+'.join(chosen)}+{sorted(v.items())}"):
                return chosen
    return []


def _has_inexact(closed) -> bool:
    def walk(j) -> bool:
        for eqn in j.eqns:
            if is_inexact(eqn):
                return True
            for v in eqn.params.values():
                for x in (v if isinstance(v, (tuple, list)) else (v,)):
                    inner = getattr(x, "jaxpr", x)
                    if hasattr(inner, "eqns") and walk(inner):
                        return True
        return False
    return walk(closed.jaxpr)


# --------------------------------------------------------------------------------------------
# Level 3: localisation on the backend's own intermediate values
# --------------------------------------------------------------------------------------------
def _intermediates_fn(closed):
    """(f, layout): f(*inputs) -> every comparable value of every top-level equation (calls
    entered), and layout: id(equation) -> per evaluation of it (a function called twice has its
    equations evaluated twice), in order, the positions of its outputs among them (None where an
    output is not comparable: refs, keys)."""
    from conformance.observe import CALLS, call_body
    from conformance.replay import comparable, walk_inlining_calls
    from interp.evaluator import split_jaxpr
    jaxpr, consts = split_jaxpr(closed)
    layout: dict = {}
    count = [0]

    def plan(j):
        for eqn in j.eqns:
            sub = call_body(eqn) if eqn.primitive.name in CALLS else None
            if sub is not None:
                plan(split_jaxpr(sub)[0])
                continue
            pos = []
            for ov in eqn.outvars:
                pos.append(count[0] if comparable(ov.aval) else None)
                count[0] += comparable(ov.aval)
            layout.setdefault(id(eqn), []).append(pos)
    plan(jaxpr)

    def f(*args):
        rec: list = []

        def eval_eqn(eqn, invals):
            outs = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(eqn.params))
            outs = list(outs) if eqn.primitive.multiple_results else [outs]
            rec.extend(o for ov, o in zip(eqn.outvars, outs) if comparable(ov.aval))
            return outs
        walk_inlining_calls(jaxpr, consts, args, eval_eqn, lambda lit: lit.val)
        return tuple(rec)
    return f, layout


def _arrays_only(vals) -> bool:
    return all(isinstance(v, (np.ndarray, np.generic)) for v in vals)


def _localizer(got: list, layout: dict, runner, platform: str, found: dict, explained: Explanations):
    """A replay watcher (conformance/observe.py) that hands every top-level equation (calls entered)
    the backend's recorded values in place of the reference's, after judging them on the operands
    the backend itself had: the first that fails is stored in ``found``."""
    from conformance.observe import as_outputs
    from conformance.replay import _Replay, eqn_text

    class Localizer(_Replay):
        count = 0

        def step(self, ctx, rule, invals, params):
            eqn = ctx.eqn
            top = self.record_eqns is not None and id(eqn) in self.record_eqns
            result = super().step(ctx, rule, invals, params)
            if not top:
                return result
            ref = as_outputs(ctx, result)
            pending = layout.get(id(eqn))
            pos = pending.pop(0) if pending else [None] * len(ref)
            outs = [r if q is None else np.asarray(got[q]) for q, r in zip(pos, ref)]
            k, Localizer.count = Localizer.count, Localizer.count + 1
            if not found and any(q is not None for q in pos):
                ref_arrays = [np.asarray(r) for r in ref]
                ops = operands(eqn, invals)
                if _arrays_only(ops):
                    ok, rec, _ = judge_eqn(eqn, ops, outs, runner, platform,
                                           reference=None if _has_jaxprs(eqn) else ref_arrays)
                else:       # state: an access to a ref moves bits, judged exactly
                    ok = all(_same_bits(r, o) for r, o in zip(ref_arrays, outs))
                    rec = {"modes": ["EXACT"], "detail": "a ref access (exact)"}
                if ok:
                    explained.note(eqn, rec)
                else:
                    ok = self._wider_allowance(eqn, invals, outs)
                if not ok:
                    failing = next((i for i, (r, o) in enumerate(zip(ref_arrays, outs)) if not _same_bits(r, o)), 0)
                    found.update(index=k, primitive=eqn.primitive.name, eqn=eqn_text(eqn),
                                 dtype=str(getattr(eqn.outvars[failing].aval, "dtype", "")),
                                 mode=(rec.get("modes") or [None])[0], max_ulp=rec.get("max_ulp"),
                                 first_mismatch=rec.get("first_mismatch"),
                                 symptom=symptom(ref_arrays[failing], outs[failing]),
                                 operands=[_brief(v) for v in invals if isinstance(v, (np.ndarray, np.generic))],
                                 detail=rec.get("detail"))
            if eqn.primitive.name in ("mul", "square", "integer_pow"):
                self._note_product(eqn, list(invals), np.asarray(outs[0]))
            self._operands[id(eqn)] = list(invals)
            return outs if eqn.primitive.multiple_results else outs[0]

        def _wider_allowance(self, eqn, invals, outs) -> bool:
            """The runner's allowances that span two equations, on the backend's own operands:
            every element of the equation is its own value, or (fma-contraction) the FMA of a
            float32/float64 product feeding an add/sub with the other operand, or (algebraic-rewrite)
            log(exp(x)) = x, sqrt(x * x) = |x|."""
            name = eqn.primitive.name
            allowed = {a.name for a in AM.for_runner(judged_as(runner))}
            if len(outs) != 1 or name not in ("add", "sub", "mul", "div", "log", "sqrt"):
                return False
            out = np.asarray(outs[0])
            plain = np.asarray(reference_eqn(eqn, operands(eqn, invals), platform)[0])
            ok = _same_elements(plain, out)
            if "excess-precision" in allowed and name in ("add", "sub", "mul", "div"):
                ok = ok | _within_excess_interval(name, operands(eqn, invals), out)
                if ok.all():
                    return True
            if name in ("mul", "div"):
                return False
            if name in ("log", "sqrt"):
                rewritten = self._rewrite(eqn, list(invals)) if "algebraic-rewrite" in allowed else None
                return rewritten is not None and bool((ok | _same_elements(rewritten[0], out)).all())
            if np.dtype(eqn.outvars[0].aval.dtype) not in (np.float32, np.float64) or "fma-contraction" not in allowed:
                return False
            for i in (0, 1):
                fused = self.fma_candidate(eqn, list(invals), i)
                if fused is not None:
                    ok = ok | _same_elements(np.broadcast_to(fused, out.shape), out)
            return bool(ok.all())
    return Localizer


def _within_excess_interval(name: str, args, out) -> np.ndarray:
    """Per element: a float16/bfloat16 add, sub, mul or div whose result is what some values of
    its operands within half an ulp of them give (an operand kept in float32, never rounded to its
    type: the excess-precision allowance). The extremes of these bilinear (for div: monotone,
    divisor away from zero) functions lie at the corners of the operands' intervals."""
    from conformance.replay import SHADOWED
    out = np.asarray(out)
    if out.dtype not in SHADOWED or len(args) != 2:
        return np.zeros(out.shape, bool)
    corners = []
    intervals = []
    for a in args:
        a = np.broadcast_to(np.asarray(a), out.shape)
        wide = a.astype(np.float64)
        with np.errstate(all="ignore"):
            half = np.abs(np.spacing(a).astype(np.float64)) / 2 if a.dtype != D.bfloat16 else \
                np.abs(wide) * 2.0 ** -8 + 2.0 ** -134
        intervals.append((wide - half, wide + half))
    with np.errstate(all="ignore"):
        for x in intervals[0]:
            for y in intervals[1]:
                corners.append({"add": x + y, "sub": x - y, "mul": x * y, "div": x / y}[name])
        lo, hi = np.minimum.reduce(corners), np.maximum.reduce(corners)
        if name == "div":
            lo_y, hi_y = intervals[1]
            straddles = (lo_y <= 0) & (hi_y >= 0)
            lo, hi = np.where(straddles, -np.inf, lo), np.where(straddles, np.inf, hi)
        o = out.astype(np.float64)
        inside = (o >= lo.astype(out.dtype).astype(np.float64)) & (o <= hi.astype(out.dtype).astype(np.float64))
    finite = np.all([np.isfinite(np.asarray(a, np.float64)) for a in np.broadcast_arrays(*args)], axis=0)
    return inside & finite & np.isfinite(o)


def _same_elements(a, b) -> np.ndarray:
    from conformance.values import bits, normalize_nans
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    return bits(normalize_nans(a)) == bits(normalize_nans(b))


def _has_jaxprs(eqn) -> bool:
    from conformance.observe import holds_jaxprs
    return holds_jaxprs(eqn)


def localize(fn, inputs, outs, runner, platform: str = "cpu") -> dict:
    """The first equation whose backend value (in a compile of the program that keeps every
    intermediate value) fails its judgement on the backend's own operands; or, where none does, a
    note saying whether that compile's outputs are the program's (then every equation complies:
    the program is explained) or not (the difference comes from how the whole program is compiled).

    The reference evaluates the program (refs and all) with each top-level equation's value
    replaced by the backend's recorded one once it has been judged."""
    import jax

    from conformance.replay import reference_replay
    closed = jax.make_jaxpr(fn)(*inputs)
    fn_all, layout = _intermediates_fn(closed)
    case = Case(id="fuzz-intermediates", fn=fn_all, inputs=lambda rng: [],
                x64=bool(jax.config.jax_enable_x64), jax_config=_config())
    got = list(suite.run(runner, case, list(inputs)))
    found: dict = {}
    explained = Explanations()
    with np.errstate(all="ignore"):
        finals = reference_replay(closed, list(inputs), record=True,
                                  watcher=_localizer(got, layout, runner, platform, found, explained))[0]
    if found:
        return found
    same = all(_same_bits(a, b) for a, b in zip(finals, outs))
    return {"index": None, "symptom": "fused", "same_outputs": same, "explained": explained,
            "note": "every equation complies on the backend's own operands when the program keeps its "
                    "intermediate values" + (", and that compile gives the program's outputs" if same else
                                             ", but that compile's outputs differ from the program's: the "
                                             "difference comes from how the whole program is compiled "
                                             "(fusion, rewrites)")}


def _same_bits(a, b) -> bool:
    from conformance.values import bits, normalize_nans
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.all(bits(normalize_nans(a)) == bits(normalize_nans(b))))


# --------------------------------------------------------------------------------------------
# The whole judgement of one program on one runner
# --------------------------------------------------------------------------------------------
def bucket(kind: str, primitive: str, dtype: str, runner: str, symptom_: str) -> str:
    return f"{kind}:{primitive}:{dtype}:{runner}:{symptom_}"


def _output_primitive(closed, i: int) -> tuple[str, str]:
    """(primitive, dtype) of the equation that computes output ``i`` (calls entered)."""
    from conformance.observe import CALLS, call_body
    from interp.evaluator import split_jaxpr
    jaxpr = split_jaxpr(closed)[0]
    var = jaxpr.outvars[i]
    while True:
        prod = next((e for e in jaxpr.eqns if var in e.outvars), None)
        if prod is None:
            return "input", str(getattr(var.aval, "dtype", ""))
        if prod.primitive.name in CALLS and call_body(prod) is not None:
            inner = split_jaxpr(call_body(prod))[0]
            var = inner.outvars[prod.outvars.index(var)]
            jaxpr = inner
            continue
        return prod.primitive.name, str(getattr(var.aval, "dtype", ""))


def judge(fn, inputs, reference, runner, platform: str = "cpu", *, localise: bool = True,
          case: Case | None = None) -> dict:
    """A results record for the backend ``runner`` on a program ``fn`` (``reference`` its reference
    outputs on ``inputs``, computed by the caller once for every runner): outcome, allowance,
    first divergent equation, and for a finding its ``bucket``."""
    import jax
    t0 = time.perf_counter()
    program = _Program(fn)
    case = case or Case(id="fuzz-program", fn=fn, inputs=lambda rng: [], modes=C.exact("definition"),
                        x64=bool(jax.config.jax_enable_x64), jax_config=_config())
    rec = suite.new_record(case=case.id, runner=runner.name, seed=0)
    try:
        outs = [np.asarray(o) for o in suite.run(runner, case, list(inputs))]
    except Exception as e:  # noqa: BLE001  (the backend's failure is the result)
        outcome, facts = suite.classify_failure(e)
        rec.update(outcome=outcome, failure=facts, detail=f"{facts['type']}: {facts['message'][:500]}")
        if outcome == CRASH:
            rec.update(output=suite.short_traceback(e), crashed="backend",
                       bucket=bucket("crash", facts.get("stage") or "?", facts["type"], runner.name,
                                     _message_head(facts["message"])))
        rec["duration_s"] = round(time.perf_counter() - t0, 6)
        return rec
    rec["backend_s"] = round(time.perf_counter() - t0, 6)
    verdict = explain_program(program, inputs, outs, runner, platform, reference=reference, case=case)
    rec.update({k: v for k, v in verdict.record.items() if k not in ("case", "runner", "timestamp", "seed")})
    if verdict.explained:
        rec["duration_s"] = round(time.perf_counter() - t0, 6)
        return rec
    rec["outcome"] = FAIL
    rec["backend_outputs"] = outs
    if verdict.culprit is not None:
        where = verdict.culprit.describe()
        where["found_by"] = "hybrid replay"
    elif localise and case.kind != suite.PALLAS:     # (a kernel's equations run inside it, not one by one)
        try:
            where = localize(fn, inputs, outs, runner, platform)
        except Exception as e:  # noqa: BLE001  (localisation is best effort: say why it failed)
            where = {"index": None, "symptom": "value", "error": f"{type(e).__name__}: {str(e)[:300]}"}
        if where.get("same_outputs"):
            # Level 3 explains it: the outputs are those of a compile in which every equation
            # complies on its own operands (an inexact operation fused differs from it alone).
            rec.pop("backend_outputs")
            rec.update(outcome=PASS_ALLOWANCE, allowance=PER_OPERATION + "(intermediates)",
                       duration_s=round(time.perf_counter() - t0, 6))
            where["explained"].apply(rec)
            return rec
        where.pop("explained", None)
    else:
        where = {"index": None}
    if where.get("primitive") is None:
        closed = jax.make_jaxpr(fn)(*inputs)
        failing = (rec.get("first_mismatch") or {}).get("output", 0) or 0
        prim, dtype = _output_primitive(closed, failing)
        where.setdefault("symptom", "value")
        where["output_primitive"], where["dtype"] = prim, dtype
        sym = symptom(reference[failing], outs[failing])
        sym = sym if prim == "pallas_call" else "fused-" + sym
        rec["bucket"] = bucket("fail", prim, dtype, runner.name, sym)
    else:
        rec["bucket"] = bucket("fail", where["primitive"], where["dtype"], runner.name, where["symptom"])
    rec["first_divergent_eqn"] = where
    rec["duration_s"] = round(time.perf_counter() - t0, 6)
    return rec


def _message_head(message: str) -> str:
    """The first line of an error message with numbers and names of values blurred: one bucket per
    kind of crash, not per program."""
    import re
    head = (message or "").strip().splitlines()[0] if message else ""
    head = re.sub(r"0x[0-9a-fA-F]+", "#", head)
    head = re.sub(r"\d+", "#", head)
    return head[:120]
