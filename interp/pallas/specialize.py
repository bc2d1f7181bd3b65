"""The kernel body specialised per grid point.

Most of a Pallas kernel body's scalar work depends on nothing but the grid point: ``program_id``
arithmetic (``i % 2``, ``i + 1 < n``, block offsets) and the ``pl.when`` conditions built from it.
Evaluated equation by equation at every grid step, that work costs more than the kernel's real
work when blocks are small. ``KernelBody`` therefore evaluates, once per grid point, every
equation whose inputs are all known at that point (pure primitives only; results up to
FOLD_MAX_ELEMENTS, the large ones within a byte budget: a causal mask built from iota and the
grid point), inlines the branch a known ``cond`` index selects, the body of a ``jit`` and of a
one-iteration loop without xs/ys (a ``fori_loop`` of trip count 1, as in ops.tpu's flash
attention), and runs the *residual* program: the equations that touch refs or data, with the
known values as constants. The residual programs are plans shared by every grid point that takes
the same branches; the known values are kept per grid point, or rather per distinct program ids
of the axes the body reads (a matmul body reading only its k axis is specialised once per k).
A folded equation that does not read the grid point (``k == 0``, ``k * 128``: pure functions of
their inputs) is evaluated once per distinct input value, since grids revisit the same values.

Values are the ones the generic plan computes (the same rules evaluate the same equations on the
same inputs, inside the same kernel run or, for remembered pure values, an earlier one with the
same options), so specialisation changes speed, never results.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from ..evaluator import (DropVar, Literal, get_plan, literal_value, scan_layout, split_jaxpr,
                         to_reference_value)
from ..registry import RULES

# Results larger than this are not folded. Larger than FOLD_SMALL elements, a folded value (a
# causal mask built from iota and the grid point) counts against FOLD_MAX_BYTES per kernel body:
# grid points that would exceed it run the generic plan.
FOLD_MAX_ELEMENTS = 1 << 16
FOLD_SMALL = 64
FOLD_MAX_BYTES = 64 << 20
# Grid points whose known values are kept (beyond it, further points run the generic plan).
MAX_POINTS = 1 << 16
# Visits of a grid point evaluated by the generic plan before the point is specialised. With
# folded values remembered by input values and the residual program built once per variant,
# specialising a point costs about what one generic evaluation does (measured: first calls of the
# bench kernels equal within noise), and every later call is fast from the second on (a 64-point
# matmul's second call 1.25x, an 8-step DMA kernel's 8x faster than with one generic visit).
GENERIC_VISITS = 0

# Rules of kernel primitives that read or change the state of the running kernel (PRNG state,
# semaphores, DMAs, scoped allocations) or of the reference (XLA's stateful Rng, callbacks):
# never folded, even when JAX declares no effect for them (prng_random_bits has none).
_PALLAS_PURE = {"program_id", "num_programs", "multiple_of", "max_contiguous", "roll", "bitcast",
                "reciprocal", "einshape_lo"}
_STATEFUL = {"rng_uniform", "pure_callback", "io_callback", "debug_callback", "debug_print"}
# Pure kernel primitives whose value is the running kernel's grid point, not a function of their
# inputs: equations containing them are folded per point but never memoised by input values.
_GRID_READS = {"program_id", "num_programs"}
# Folded results remembered by (equation, input values) per kernel body: a value such as
# ``k == 0`` or ``k * 128`` takes few distinct inputs over a grid, so most points reuse it.
MAX_MEMO = 1 << 16


class _Var:
    """A variable of a residual program (what ``Plan`` reads of a jaxpr variable)."""
    __slots__ = ("aval",)

    def __init__(self, aval):
        self.aval = aval

    def __repr__(self):
        return f"spec_var:{self.aval}"


class _Jaxpr:
    """A residual program: the four fields ``Plan`` reads of a jaxpr."""
    __slots__ = ("constvars", "invars", "outvars", "eqns", "__weakref__")

    def __init__(self, constvars, invars, outvars, eqns):
        self.constvars, self.invars, self.outvars, self.eqns = constvars, invars, outvars, eqns


def _sub_jaxprs(params):
    for v in params.values():
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            j = getattr(x, "jaxpr", x)
            if hasattr(j, "eqns"):
                yield j


_pure_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _is_pallas_rule(rule) -> bool:
    """Whether a rule belongs to a Pallas family: interp/rules/pallas.py or a dialect's
    interp/rules/pallas_<dialect>.py (their primitives act on kernel state unless listed pure)."""
    return rule.__module__.rpartition(".")[2].startswith("pallas")


def _pure(eqn) -> bool:
    """Whether an equation's value depends only on its inputs (recursively for sub-jaxprs)."""
    if eqn.effects:
        return False
    name = eqn.primitive.name
    if name in _STATEFUL:
        return False
    rule = RULES.get(name)
    if rule is not None and _is_pallas_rule(rule) and name not in _PALLAS_PURE:
        return False
    for j in _sub_jaxprs(eqn.params):
        ok = _pure_cache.get(j)
        if ok is None:
            ok = _pure_cache[j] = all(_pure(e) for e in j.eqns)
        if not ok:
            return False
    return True


_grid_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _reads_grid(eqn) -> bool:
    """Whether an equation (or a sub-jaxpr of it) reads the grid point (program_id...)."""
    if eqn.primitive.name in _GRID_READS:
        return True
    for j in _sub_jaxprs(eqn.params):
        hit = _grid_cache.get(j)
        if hit is None:
            hit = _grid_cache[j] = any(_reads_grid(e) for e in j.eqns)
        if hit:
            return True
    return False


def _program_id_axes(jaxpr, axes: set) -> bool:
    """Add the axes of every program_id in ``jaxpr`` (sub-jaxprs included) to ``axes``; False
    where an axis is not a plain int."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "program_id":
            axis = eqn.params.get("axis")
            if type(axis) is not int:
                return False
            axes.add(axis)
        for j in _sub_jaxprs(eqn.params):
            if not _program_id_axes(j, axes):
                return False
    return True


def _value_key(v):
    """A hashable key of a small input value (None for values that are not plain arrays)."""
    if type(v) is np.ndarray or isinstance(v, np.generic):
        return (v.dtype, v.shape, v.tobytes())
    return None


def _small(aval) -> bool:
    return (type(aval).__name__ == "ShapedArray" and
            math.prod(aval.shape) <= FOLD_MAX_ELEMENTS and
            not _extended(aval.dtype))


def _large_bytes(values) -> int:
    """Bytes of the values above FOLD_SMALL elements (what FOLD_MAX_BYTES bounds)."""
    return sum(v.nbytes for v in values
               if type(v) is np.ndarray and v.size > FOLD_SMALL)


def _inlinable(eqn) -> str | None:
    """How ``_walk`` may inline an equation: "cond" (when its index is known), "call" (a jit:
    its body on its operands), or None."""
    name = eqn.primitive.name
    if name == "cond":
        return "cond"
    if name in ("jit", "pjit"):
        return "call"
    if name == "scan" and eqn.params["length"] == 1:
        # One iteration, no xs and no ys: the body on (consts, carry) gives the carry out.
        nc, ncarry = scan_layout(eqn.params)
        if nc + ncarry == len(eqn.invars) and ncarry == len(eqn.outvars):
            return "call"
    return None


def _extended(dtype) -> bool:
    import jax
    return jax.dtypes.issubdtype(dtype, jax.dtypes.extended)


def _foldable(eqn) -> bool:
    return bool(eqn.outvars) and _pure(eqn) and all(_small(o.aval) for o in eqn.outvars)


class KernelBody:
    """A kernel jaxpr run per grid point through its specialised residual plan."""

    def __init__(self, jaxpr, consts, options):
        self.jaxpr = jaxpr
        self.consts = [to_reference_value(c, v.aval) for c, v in zip(consts, jaxpr.constvars)]
        self.options = options
        self.generic = get_plan(jaxpr, options)
        # Known values depend on the grid point only through program_id (num_programs: the
        # grid): points that agree on the axes the body reads share their entry (a matmul body
        # reading only its k axis is specialised once per k, not per (i, j, k)).
        axes: set = set()
        self.axes = tuple(sorted(axes)) if _program_id_axes(jaxpr, axes) else None
        self.points: dict = {}      # (grid, program ids of self.axes) -> (plan, known values)
        self.variants: dict = {}    # branch choices -> (residual jaxpr, plan)
        self.single: dict = {}      # eqn -> (one-equation jaxpr, plan) for folding
        self.memo: dict = {}        # (id(eqn), input value keys) -> folded results
        self.records: dict = {}     # jaxpr -> per-equation walk records
        self.branches: dict = {}    # id(sub-jaxpr) -> (jaxpr, its consts as known values)
        self.held = 0               # bytes of large folded values kept (FOLD_MAX_BYTES)

    def run(self, run, refs) -> list:
        if self.axes is None:
            key = (run.grid, run.point)
        else:
            ids = run.program_ids
            key = (run.grid, tuple([ids[a] for a in self.axes if a < len(ids)]))
        entry = self.points.get(key, 0)
        if entry is None:           # over the byte budget (remembered: the walk is not redone)
            return self.generic.run(self.consts, refs)
        if isinstance(entry, int):
            if entry < GENERIC_VISITS:
                # Early visits of this grid point run the generic plan (GENERIC_VISITS > 0).
                if len(self.points) < MAX_POINTS:
                    self.points[key] = entry + 1
                return self.generic.run(self.consts, refs)
            if len(self.points) >= MAX_POINTS:
                return self.generic.run(self.consts, refs)
            entry = self._specialise()
            size = _large_bytes(entry[1])
            if self.held + size > FOLD_MAX_BYTES:
                self.points[key] = None
                return self.generic.run(self.consts, refs)
            self.held += size
            self.points[key] = entry
        plan, values = entry
        return plan.run(values, refs)

    # ------------------------------------------------------------------------------------------
    def _specialise(self):
        """Walk the body once at the current grid point (inside its kernel run): the known values
        of this point, and the residual program of its branch choices (built once per variant)."""
        holders, choices, env = [], [], self._env()
        self._walk(self.jaxpr, env, None, holders, choices)
        for a in self.jaxpr.outvars:
            self._use(a, env, holders)
        key = (tuple(choices), len(holders))
        variant = self.variants.get(key)
        if variant is None:
            # The residual program depends only on the branch choices (which values are known is
            # structural), so it is built once, by a second walk that also emits the equations.
            eqns, build_holders, env = [], [], self._env()
            self._walk(self.jaxpr, env, eqns, build_holders, [])
            outvars = [self._use(a, env, build_holders) for a in self.jaxpr.outvars]
            residual = _Jaxpr([h for h, _ in build_holders], list(self.jaxpr.invars), outvars, eqns)
            variant = self.variants[key] = (residual, get_plan(residual, self.options))
        return variant[1], [v for _, v in holders]

    def _env(self) -> dict:
        env = {v: ("k", c) for v, c in zip(self.jaxpr.constvars, self.consts)}
        env.update((v, ("a", v)) for v in self.jaxpr.invars)
        return env

    def _use(self, atom, env, holders):
        """The residual program's atom for ``atom``: a known value becomes a constant."""
        if isinstance(atom, Literal):
            return atom
        entry = env[atom]
        if entry[0] != "k":
            return entry[1]  # a residual variable, or the constant already made for it
        x = entry[1]
        h = _Var(atom.aval)
        holders.append((h, x))
        env[atom] = ("h", h, x)
        return h

    def _records(self, jaxpr) -> list:
        """Per equation of ``jaxpr``: (eqn, its variable inputs, foldable, how it inlines, whether
        its folded results may be remembered by input values), once."""
        recs = self.records.get(jaxpr)
        if recs is None:
            recs = self.records[jaxpr] = [
                (eqn, tuple(a for a in eqn.invars if not isinstance(a, Literal)),
                 _foldable(eqn), _inlinable(eqn), not _reads_grid(eqn)) for eqn in jaxpr.eqns]
        return recs

    def _walk(self, jaxpr, env, out, holders, choices):
        for eqn, vins, fold, inline, memoizable in self._records(jaxpr):
            if fold and all(env[a][0] != "a" for a in vins):
                vals = self._evaluate(eqn, [env[a][-1] for a in vins], memoizable)
                for o, v in zip(eqn.outvars, vals):
                    if not isinstance(o, DropVar):
                        env[o] = ("k", v)
                continue
            if inline == "call":
                self._inline(eqn.params["jaxpr"], eqn.invars, eqn.outvars, env, out, holders,
                             choices)
                continue
            if inline == "cond" and self._known(eqn.invars[0], env):
                self._inline_cond(eqn, env, out, holders, choices)
                continue
            new_in = [self._use(a, env, holders) for a in eqn.invars]
            if out is None:   # values only: what is known and which holders, no equations
                for o in eqn.outvars:
                    if not isinstance(o, DropVar):
                        env[o] = ("a", None)
                continue
            new_out = []
            for o in eqn.outvars:
                if isinstance(o, DropVar):
                    new_out.append(o)
                else:
                    n = _Var(o.aval)
                    env[o] = ("a", n)
                    new_out.append(n)
            out.append(eqn.replace(invars=new_in, outvars=new_out))

    @staticmethod
    def _known(atom, env) -> bool:
        return isinstance(atom, Literal) or env[atom][0] != "a"

    @staticmethod
    def _value(atom, env):
        return literal_value(atom) if isinstance(atom, Literal) else env[atom][-1]

    def _inline_cond(self, eqn, env, out, holders, choices):
        # The branch the known index selects, as the cond rule picks it (control_flow.cond:
        # an out-of-range index runs the last branch).
        branches = eqn.params["branches"]
        i = int(self._value(eqn.invars[0], env))
        if not 0 <= i < len(branches):
            i = len(branches) - 1
        choices.append(i)
        self._inline(branches[i], eqn.invars[1:], eqn.outvars, env, out, holders, choices)

    def _inline(self, jaxpr_like, in_atoms, out_vars, env, out, holders, choices):
        """Walk a sub-jaxpr (a chosen branch, a call's body) on ``in_atoms`` in place of its
        equation: its equations join the residual program, its known values fold."""
        sub = self.branches.get(id(jaxpr_like))
        if sub is None:
            bj, bconsts = split_jaxpr(jaxpr_like)
            sub = self.branches[id(jaxpr_like)] = (bj, [
                (v, ("k", to_reference_value(c, v.aval))) for v, c in zip(bj.constvars, bconsts)],
                jaxpr_like)   # (kept alive: the key is its id)
        bj, bconsts, _ = sub
        benv = dict(bconsts)
        for v, a in zip(bj.invars, in_atoms):
            benv[v] = ("k", literal_value(a)) if isinstance(a, Literal) else env[a]
        self._walk(bj, benv, out, holders, choices)
        for o, r in zip(out_vars, bj.outvars):
            if not isinstance(o, DropVar):
                env[o] = ("k", literal_value(r)) if isinstance(r, Literal) else benv[r]

    def _evaluate(self, eqn, values, memoizable: bool) -> list:
        """Run one equation through its own (cached) plan: the generic rule, checks included.
        A pure equation that does not read the grid point gives the same results for the same
        inputs, so they are remembered by input values (the rule runs once per distinct input)."""
        key = None
        if memoizable and all(getattr(v, "size", 0) <= FOLD_SMALL for v in values):
            keys = tuple(_value_key(v) for v in values)
            if None not in keys:
                key = (id(eqn), keys)
                hit = self.memo.get(key)
                if hit is not None:
                    return hit
        entry = self.single.get(eqn)
        if entry is None:
            invars = [a for a in eqn.invars if not isinstance(a, Literal)]
            outvars = [_Var(o.aval) if isinstance(o, DropVar) else o for o in eqn.outvars]
            one = _Jaxpr([], invars, outvars, [eqn.replace(outvars=outvars)])
            entry = self.single[eqn] = (one, get_plan(one, self.options))
        out = entry[1].run([], values)
        if key is not None and len(self.memo) < MAX_MEMO:
            size = _large_bytes(out)
            if self.held + size <= FOLD_MAX_BYTES:
                self.held += size
                self.memo[key] = out
        return out
