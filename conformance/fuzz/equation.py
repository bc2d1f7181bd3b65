"""The fuzzer's oracle, one equation: its modes (the suite's compliance modes, with the order-free
sums and IEEE additions a program may compute in any order), the absolute bound of its sums, a
function and a one-equation case of it, its reference value, and the words of a verdict
(conformance/fuzz/oracle.py says how the levels fit together)."""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from interp import dtypes as D
from spec import compliance as C

from . import suite
from .suite import Case


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
