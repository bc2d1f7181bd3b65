"""Jaxpr evaluation: each jaxpr is compiled once into a plan (rule lookup, literal conversion,
buffer release points) and the plan is a short loop over steps.

Plans are cached per (jaxpr, options); loop bodies and repeated calls reuse them.
"""
from __future__ import annotations

import sys
import threading
import weakref
from types import FunctionType
from typing import Any, Callable, Sequence

import numpy as np
import jax
from jax._src import core as jax_core_private
import jax.extend.core as jcore

from .errors import UnsupportedPrimitiveError
from .options import Options, make_options
from .registry import EXTENDED_RULES, NO_RULE, REFUSED, RULES

Literal = jcore.Literal
DropVar = jcore.DropVar


class Token:
    """The value of a JAX token (ordering of effects); it carries nothing."""
    __slots__ = ()

    def __repr__(self):
        return "Token"


TOKEN = Token()


def is_extended(dtype) -> bool:
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.extended)


def split_jaxpr(jaxpr_like) -> tuple[Any, list]:
    """(open jaxpr, consts) of a ClosedJaxpr (any JAX version) or an open Jaxpr (no consts)."""
    jaxpr = getattr(jaxpr_like, "jaxpr", jaxpr_like)
    consts = list(getattr(jaxpr_like, "consts", ()) or ())
    if len(consts) != len(jaxpr.constvars):
        consts = []
    return jaxpr, consts


def scan_layout(params) -> tuple[int, int]:
    """(num_consts, num_carry) of either scan parameter layout.

    JAX <= 0.10: explicit num_consts/num_carry. JAX 0.12: flat trees ft_in = (consts, carry, xs)
    and ft_out = (carry, ys) (jax/_src/lax/control_flow/loops.py _scan_impl)."""
    if "num_consts" in params:
        return params["num_consts"], params["num_carry"]
    consts, carry, _ = params["ft_in"].unpack()
    return len(consts), len(carry)


def literal_value(lit) -> Any:
    aval = lit.aval
    if not hasattr(aval, "dtype"):
        return TOKEN
    if is_extended(aval.dtype):
        return lit.val
    return np.asarray(lit.val, dtype=aval.dtype)


class EqnContext:
    """What a rule knows about its equation, fixed when the plan is built."""
    __slots__ = ("primitive", "name", "params", "in_avals", "out_avals", "options", "source_info",
                 "eqn", "__weakref__")

    def __init__(self, eqn, options: Options):
        self.eqn = eqn
        self.primitive = eqn.primitive
        self.name = eqn.primitive.name
        self.params = eqn.params
        self.in_avals = tuple(v.aval for v in eqn.invars)
        self.out_avals = tuple(v.aval for v in eqn.outvars)
        self.options = options
        self.source_info = getattr(eqn, "source_info", None)

    @property
    def out_aval(self):
        return self.out_avals[0]

    @property
    def out_dtype(self):
        return self.out_avals[0].dtype

    def eval_jaxpr(self, jaxpr_like, *args, consts: Sequence | None = None) -> list:
        """Evaluate a sub-jaxpr (ClosedJaxpr or open Jaxpr) with this equation's options."""
        if consts is not None:
            return get_plan(split_jaxpr(jaxpr_like)[0], self.options).run(consts, args)
        plan, own_consts = get_closed_plan(jaxpr_like, self.options)
        return plan.run(own_consts, args)

    def plan(self, jaxpr_like) -> "Plan":
        return get_plan(split_jaxpr(jaxpr_like)[0], self.options)

    def closed_plan(self, jaxpr_like) -> "tuple[Plan, list]":
        """(plan, consts as reference values) of a sub-jaxpr: what loops run per iteration."""
        return get_closed_plan(jaxpr_like, self.options)

    def unsupported(self, reason: str = "") -> UnsupportedPrimitiveError:
        return UnsupportedPrimitiveError(self.name, dict(self.params), reason)

    def __repr__(self):
        return f"EqnContext({self.name})"


def _checkable(aval) -> "tuple | None":
    """(shape, dtype) a rule's result must have, or None where no check applies (tokens, refs,
    extended dtypes: their values are not plain arrays)."""
    dtype = getattr(aval, "dtype", None)
    if dtype is None or is_extended(dtype) or type(aval).__name__ != "ShapedArray":
        return None
    return (tuple(aval.shape), np.dtype(dtype))


def _check_aval(ctx: EqnContext, aval, value, i: int) -> None:
    expect = _checkable(aval)
    if expect is None:
        return
    vshape = getattr(value, "shape", None)
    vdtype = getattr(value, "dtype", None)
    if vshape != expect[0] or vdtype != expect[1]:
        raise AssertionError(
            f"reference rule for '{ctx.name}' returned output {i} as "
            f"{vdtype}{list(vshape) if vshape is not None else type(value).__name__}, "
            f"expected {expect[1]}{list(expect[0])} (this is a bug in the reference)")


def _store_multiple(ctx: EqnContext, env: list, outs: tuple, result, expect) -> None:
    """Store a multiple-results step's outputs; ``expect``: each output's (shape, dtype) or None
    (see _checkable), computed at plan time, or None where results are not checked."""
    if len(result) != len(outs):
        raise AssertionError(f"reference rule for '{ctx.name}' returned {len(result)} "
                             f"outputs, expected {len(outs)} (bug in the reference)")
    if expect is None:
        for s, v in zip(outs, result):
            env[s] = v
        return
    for i, (s, v, e) in enumerate(zip(outs, result, expect)):
        if e is not None and _differs(v, e):
            _check_aval(ctx, ctx.out_avals[i], v, i)
        env[s] = v


def _differs(value, expect: tuple) -> bool:
    """Whether ``value`` lacks the (shape, dtype) ``expect`` (Plan.run inlines this check)."""
    try:
        return value.shape != expect[0] or value.dtype != expect[1]
    except AttributeError:
        return True


# Buffer reuse. A rule (or the function its ``prepare`` returns) may have an ``inplace``
# attribute: ``inplace(eqn, out, *args, **params)`` computes the same result into ``out``, an
# array of the result's shape and dtype that may be one of ``args`` (NumPy ufuncs allow out= to
# alias an input elementwise). The plan offers an input buffer only where (statically) its value
# dies at this equation, is an intermediate of this plan (never an argument, constant, literal or
# output), has the result's shape and dtype and is large enough for the allocation to matter; and
# (at run time) the array owns its memory, is writeable and nothing else refers to it: no other
# slot, view, closure or caller (the reference count says so, as for NumPy's own temporary
# elision). Reusing dying buffers avoids a fresh allocation (and its page faults) per equation.
DONATE_MIN_ELEMENTS = 1 << 14


def _refcount_at(args: list, pos: int) -> int:
    return sys.getrefcount(args[pos])


def _sole_refcount() -> int:
    """The count :func:`_refcount_at` reports for an array held only by ``args`` and the
    caller's one local: measured with the very call pattern the plan uses (CPython-version proof)."""
    args = [np.empty(1)]
    buf = args[0]  # noqa: F841  (the local the plan holds too)
    return _refcount_at(args, 0)


_SOLE = _sole_refcount()


def _run_donating(env: list, rule, ctx, ins: tuple, params, donate) -> Any:
    pos, inplace, slot, shape, dtype = donate
    args = [env[s] for s in ins]
    env[slot] = None   # the slot dies at this step (released now so that the count below is exact)
    buf = args[pos]
    if (type(buf) is np.ndarray and buf.base is None and buf.flags.writeable
            and buf.shape == shape and buf.dtype == dtype and _refcount_at(args, pos) == _SOLE):
        return inplace(ctx, buf, *args, **params)
    return rule(ctx, *args, **params)


# Plan-time hooks ``hook(ctx, rule) -> rule``: a rule family may wrap every step's function under
# options that need it (lax.empty's written-mask under uninitialized="raise",
# interp/rules/lax_structure.py); a hook returns ``rule`` itself otherwise, so plans built under
# other options are unchanged.
STEP_HOOKS: list[Callable[[EqnContext, Callable], Callable]] = []


class Plan:
    """A jaxpr compiled for repeated evaluation.

    ``steps`` holds one tuple per equation: (rule, EqnContext, input slots, output slot(s),
    multiple_results, params, slots to release after the step, expected (shape, dtype) of a single
    result or None (of multiple results: a tuple of them, or None unchecked), donation or None).
    Dropped outputs (``_``) get a slot of their own that is released at once. A donation is (argument position, inplace function, its slot, shape, dtype):
    see DONATE_MIN_ELEMENTS.
    """
    __slots__ = ("jaxpr", "options", "nslots", "template", "const_slots", "in_slots", "out_slots",
                 "steps", "__weakref__")

    def __init__(self, jaxpr, options: Options):
        self.jaxpr = jaxpr
        self.options = options
        slot_of: dict[Any, int] = {}
        template: list = []

        def new_slot(var) -> int:
            template.append(None)
            if not isinstance(var, DropVar):
                slot_of[var] = len(template) - 1
            return len(template) - 1

        def read_slot(atom) -> int:
            if isinstance(atom, Literal):
                template.append(literal_value(atom))
                return len(template) - 1
            return slot_of[atom]

        self.const_slots = [new_slot(v) for v in jaxpr.constvars]
        self.in_slots = [new_slot(v) for v in jaxpr.invars]
        check = options.check_avals
        steps = []
        last_use: dict[int, int] = {}
        dropped: dict[int, list[int]] = {}
        for k, eqn in enumerate(jaxpr.eqns):
            ctx = EqnContext(eqn, options)
            rule = _lookup_rule(ctx)
            # A rule may specialise itself once per equation (dtype dispatch, parameter parsing)
            # by having a ``prepare(ctx)`` attribute returning the function to call instead.
            registered = rule
            prepare = getattr(rule, "prepare", None)
            if prepare is not None:
                rule = prepare(ctx)
            check_params(ctx, registered, rule)
            for hook in STEP_HOOKS:
                rule = hook(ctx, rule)
            if options.observer is not None:
                # outermost: the observer sees (and may replace) the step as the plan runs it
                rule = options.observer.wrap(ctx, rule)
            ins = tuple(read_slot(a) for a in eqn.invars)
            for s in ins:
                last_use[s] = k
            outs = tuple(new_slot(v) for v in eqn.outvars)
            dropped[k] = [s for s, v in zip(outs, eqn.outvars) if isinstance(v, DropVar)]
            multiple = eqn.primitive.multiple_results
            expect = None
            if not multiple:
                outs = outs[0]
                expect = _checkable(ctx.out_avals[0]) if check else None
            elif check:   # (per output: loops and calls return several on every iteration)
                expect = tuple(_checkable(a) for a in ctx.out_avals)
            steps.append([rule, ctx, ins, outs, multiple, eqn.params, (), expect, None])
        self.out_slots = tuple(read_slot(a) for a in jaxpr.outvars)
        keep = set(self.out_slots) | set(self.const_slots) | set(self.in_slots)
        # Release intermediate buffers after their last use so large programs do not hold them all.
        frees: dict[int, list[int]] = dropped
        for s, k in last_use.items():
            if s not in keep and template[s] is None:
                frees[k].append(s)
        for k, step in enumerate(steps):
            step[6] = tuple(frees.get(k, ()))
            step[8] = _donation(step, k, last_use, keep, template)
        self.steps = [tuple(s) for s in steps]
        self.template = template
        self.nslots = len(template)

    def run(self, consts: Sequence, args: Sequence) -> list:
        if len(args) != len(self.in_slots):
            raise TypeError(f"jaxpr takes {len(self.in_slots)} arguments, got {len(args)}")
        if len(consts) != len(self.const_slots):
            raise TypeError(f"jaxpr takes {len(self.const_slots)} constants, got {len(consts)}")
        env = self.template.copy()
        for s, v in zip(self.const_slots, consts):
            env[s] = v
        for s, v in zip(self.in_slots, args):
            env[s] = v
        # The hot loop: one rule call per equation, the result check inlined for the common case.
        for rule, ctx, ins, out, multiple, params, frees, expect, donate in self.steps:
            if donate is None:
                result = rule(ctx, *[env[s] for s in ins], **params)
            else:
                result = None   # (drop this frame's hold on the previous result before the count)
                result = _run_donating(env, rule, ctx, ins, params, donate)
            if multiple:
                if out or len(result):   # (effect-only rules: no outputs, [] returned)
                    _store_multiple(ctx, env, out, result, expect)
            else:
                if expect is not None:
                    try:
                        bad = result.shape != expect[0] or result.dtype != expect[1]
                    except AttributeError:
                        bad = True
                    if bad:
                        _check_aval(ctx, ctx.out_avals[0], result, 0)
                env[out] = result
            if frees:
                for s in frees:
                    env[s] = None
        return [env[s] for s in self.out_slots]


def _donation(step: list, k: int, last_use: dict, keep: set, template: list) -> "tuple | None":
    """The input buffer step ``k`` may compute its result into (see DONATE_MIN_ELEMENTS)."""
    rule, ctx, ins, _, multiple, _, _, expect, _ = step
    inplace = getattr(rule, "inplace", None)
    if inplace is None or multiple or expect is None:
        return None
    shape, dtype = expect
    if int(np.prod(shape, dtype=np.int64)) < DONATE_MIN_ELEMENTS:
        return None
    for pos, (s, aval) in enumerate(zip(ins, ctx.in_avals)):
        if (s in keep or template[s] is not None or last_use.get(s) != k or ins.count(s) != 1
                or _checkable(aval) != expect):
            continue
        return (pos, inplace, s, shape, dtype)
    return None


_SIGNATURES: "weakref.WeakKeyDictionary[Callable, tuple | None]" = weakref.WeakKeyDictionary()
_SIGNATURES_BY_CODE: "dict[tuple, tuple | None]" = {}
_MISSING = object()


def _keywords(fn: Callable) -> "tuple[frozenset, frozenset] | None":
    """(the parameter names ``fn`` accepts, those it requires): its keyword-only parameters. None
    where it takes ``**params`` (it declares nothing). A callable without a Python signature, or a
    ufunc (whose keywords are NumPy's: casting, where...), accepts none."""
    try:
        return _SIGNATURES[fn]
    except (KeyError, TypeError):
        pass
    # Rules that ``prepare`` makes per equation are closures of a few ``def``s: a plain function's
    # keyword-only parameters, and which have defaults, are its ``def``'s, so they are computed
    # once per code object (inspect.signature costs ~0.2 ms; a kernel plans hundreds of closures).
    # Not for functions whose signature inspect takes from elsewhere (__wrapped__, __signature__).
    by_code = None
    if type(fn) is FunctionType and not hasattr(fn, "__wrapped__") and \
            not hasattr(fn, "__signature__"):
        by_code = (fn.__code__, frozenset(fn.__kwdefaults__ or ()))
        out = _SIGNATURES_BY_CODE.get(by_code, _MISSING)
        if out is not _MISSING:
            return out
    import inspect
    try:
        sig = None if isinstance(fn, np.ufunc) else inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    if sig is None:
        out = (frozenset(), frozenset())
    else:
        ps = list(sig.parameters.values())
        if any(p.kind is p.VAR_KEYWORD for p in ps):
            out = None
        else:
            keyword_only = [p for p in ps if p.kind is p.KEYWORD_ONLY]
            out = (frozenset(p.name for p in keyword_only),
                   frozenset(p.name for p in keyword_only if p.default is p.empty))
    if by_code is not None:
        _SIGNATURES_BY_CODE[by_code] = out
    try:
        _SIGNATURES[fn] = out
    except TypeError:   # not weak-referenceable: recomputed next time
        pass
    return out


def check_params(ctx: EqnContext, rule: Callable, prepared: "Callable | None" = None) -> None:
    """Every equation's parameters are checked once, at plan time, against the keyword-only
    parameters of its registered rule (the rule's declaration) and of the function ``prepare``
    gave for it, if another. A parameter a rule does not name, or a parameter it requires that
    the equation lacks (another JAX version's spelling), is an UnsupportedPrimitiveError naming
    it, never a TypeError from the call nor silently ignored. A rule taking ``**params`` declares
    nothing: that is a programming error of the rule, refused here too. A rule registered as
    refused (``register(..., refused=why)``) is not checked: it raises its stated reason."""
    if ctx.name in REFUSED:
        return
    for fn in (rule,) if prepared is None or prepared is rule else (rule, prepared):
        keywords = _keywords(fn)
        if keywords is None:
            raise ctx.unsupported(
                f"the reference's rule {getattr(fn, '__qualname__', fn)!r} takes **params: a rule "
                "must declare the parameters it accepts (interp/evaluator.py check_params)")
        accepted, required = keywords
        unknown = sorted(set(ctx.params) - accepted)
        if unknown:
            raise ctx.unsupported(
                f"parameter{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                f"not implemented (the rule knows {', '.join(sorted(accepted)) or 'none'})")
        missing = sorted(required - set(ctx.params))
        if missing:
            raise ctx.unsupported(
                f"this JAX's equation lacks the parameter{'s' if len(missing) > 1 else ''} "
                f"{', '.join(map(repr, missing))} the rule needs")


def _lookup_rule(ctx: EqnContext) -> Callable:
    name = ctx.name
    avals = ctx.in_avals + ctx.out_avals
    if name in EXTENDED_RULES and any(is_extended(getattr(a, "dtype", None)) for a in avals):
        return EXTENDED_RULES[name]
    rule = RULES.get(name)
    if rule is None:
        raise UnsupportedPrimitiveError(name, dict(ctx.params), NO_RULE.get(name, ""))
    return rule


_plans: "weakref.WeakKeyDictionary[Any, dict[Options, Plan]]" = weakref.WeakKeyDictionary()
_plans_lock = threading.Lock()


def get_plan(jaxpr, options: Options) -> Plan:
    """The cached plan of an open jaxpr under ``options``."""
    with _plans_lock:
        per_jaxpr = _plans.get(jaxpr)
        if per_jaxpr is None:
            per_jaxpr = _plans[jaxpr] = {}
        plan = per_jaxpr.get(options)
    if plan is None:
        plan = Plan(jaxpr, options)
        with _plans_lock:
            per_jaxpr[options] = plan
    return plan


_closed: "weakref.WeakKeyDictionary[Any, dict[Options, tuple[Plan, list]]]" = weakref.WeakKeyDictionary()


def get_closed_plan(jaxpr_like, options: Options) -> "tuple[Plan, list]":
    """The cached plan of a ClosedJaxpr (or open Jaxpr) and its consts converted to reference
    values once (a ClosedJaxpr's consts may be jax.Arrays; rules only ever see NumPy values)."""
    try:
        per = _closed.get(jaxpr_like)
    except TypeError:  # not weak-referenceable: no caching of the consts
        per = None
    entry = per.get(options) if per is not None else None
    if entry is None:
        jaxpr, consts = split_jaxpr(jaxpr_like)
        consts = [to_reference_value(c, v.aval) for c, v in zip(consts, jaxpr.constvars)]
        entry = (get_plan(jaxpr, options), consts)
        try:
            with _plans_lock:
                _closed.setdefault(jaxpr_like, {})[options] = entry
        except TypeError:
            pass
    return entry


# Conversion of user-facing values (jax.Array, Python scalars, key arrays) into reference values.
# Rule families register converters for the values only they understand, each returning None for
# any other value: the PRNG family for typed key arrays, the SPMD family for jax.Arrays left
# unreduced (NumPy conversion refuses them).
VALUE_CONVERTERS: list[Callable[[Any], Any]] = []


def to_reference_value(x, aval=None):
    if type(x) is np.ndarray and aval is not None and x.dtype == getattr(aval, "dtype", None):
        return x   # already a reference value (a plain dtype equal to the aval's is never extended)
    if not isinstance(x, (np.ndarray, np.generic, int, float, complex)):
        for convert in VALUE_CONVERTERS:
            out = convert(x)
            if out is not None:
                return out
    dtype = getattr(x, "dtype", None)
    if is_extended(dtype):
        raise UnsupportedPrimitiveError("<argument>", {"dtype": dtype}, "no converter for extended dtype")
    if aval is not None and hasattr(aval, "dtype") and not is_extended(aval.dtype):
        return np.asarray(x, dtype=aval.dtype)
    if isinstance(x, (np.ndarray, np.generic)):
        return x
    return np.asarray(x)


def eval_jaxpr(closed_jaxpr, *flat_args, options: Options | None = None, **option_kwargs) -> list:
    """Evaluate a (closed) jaxpr on flat arguments in NumPy; returns a list of outputs."""
    opts = make_options(options, **option_kwargs)
    jaxpr = split_jaxpr(closed_jaxpr)[0]
    plan, consts = get_closed_plan(closed_jaxpr, opts)  # consts converted once, not per call
    if len(consts) != len(jaxpr.constvars):
        raise TypeError("eval_jaxpr needs a closed jaxpr (its constants were not found)")
    if len(flat_args) != len(jaxpr.invars):
        raise TypeError(f"jaxpr takes {len(jaxpr.invars)} arguments, got {len(flat_args)}")
    # jax.Ref arguments: the program works on a reference Ref holding a copy of the buffer, and
    # the final value is written back, so the caller sees the mutation as with jax.jit.
    # (type(a) is np.ndarray first: the jax.Ref isinstance check goes through a slow metaclass)
    ref_args = [(i, a) for i, a in enumerate(flat_args) if type(a) is not np.ndarray and isinstance(a, JaxRef)]
    args = [_ref_argument(a, opts) if type(a) is not np.ndarray and isinstance(a, JaxRef)
            else to_reference_value(a, v.aval) for a, v in zip(flat_args, jaxpr.invars)]
    outs = plan.run(consts, args)
    for i, a in ref_args:
        _write_back(a, args[i])
    return [o if type(o) is np.ndarray or isinstance(o, Token) or is_extended(getattr(o, "dtype", None))
            else np.asarray(o) for o in outs]


JaxRef = getattr(jax_core_private, "Ref", ())


def _ref_argument(ref, options: Options):
    from .refs import Ref
    buf = getattr(getattr(ref, "_refs", None), "_buf", None)
    if buf is None:
        raise UnsupportedPrimitiveError("<argument>", {"type": type(ref).__name__},
                                        "a jax.Ref argument that is not a plain array ref")
    return Ref(np.array(buf, copy=True), name="argument", check_bounds=options.check_bounds)


def _write_back(ref, value) -> None:
    """Store the final value in the caller's jax.Ref: a host-to-device transfer, no computation."""
    buf = ref._refs._buf
    ref._refs._buf = jax.device_put(np.array(value.array, copy=True), buf.sharding)
