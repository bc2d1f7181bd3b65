"""Shrinking a finding: the smallest program and simplest inputs that still fail the same way.

A test case is a program (IR) with explicit input arrays. The passes below each propose smaller
test cases; a proposal is kept when ``still_fails`` says it still falls in the finding's bucket
(same primitive, dtype, runner and symptom), until no pass makes progress or the time is up:

1. keep one output (the first that fails), and drop the ``vmap``/``grad`` transformation;
2. delete operations: dead ones, and live ones by **cutting** the program at their results (the
   result becomes a new input holding the value the reference computes there, so everything
   downstream sees the same values), from the first operation on: a finding deep in a program
   becomes the few operations around its divergent equation; then **bypass** operations whose
   result can be replaced by an operand of the same type (x / transpose(transpose(x)) keeps the
   shared operand that x / x needs);
3. **scalarise** elementwise programs: every value of one shape becomes the single failing
   element (rank 0);
4. simplify input values: elements that do not matter become 0 (or 1).

Every proposal is a well-typed program (the IR edits keep types), and the predicate re-runs the
whole judgement (reference, backend, oracle), so a shrunk finding is one the oracle still reports,
never a plausible-looking artefact.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from .ir import DATA, PLAIN, VMAP, Block, Input, Op, Program, Type

# IR operations that act elementwise on operands of one shape (scalarisation keeps them).
ELEMENTWISE = ("unary", "binary", "round", "integer_pow", "scalar_binary", "select", "clamp", "convert",
               "reduce_precision")


@dataclasses.dataclass
class TestCase:
    program: Program
    inputs: list

    @property
    def size(self) -> tuple:
        """What shrinking minimises, in order: operations, elements, inputs."""
        return (self.program.n_ops, sum(int(np.size(x)) for x in self.inputs), len(self.inputs))


# --------------------------------------------------------------------------------------------
# IR edits (each returns a new, well-typed program, or None where the edit does not apply)
# --------------------------------------------------------------------------------------------
def _rebuild(program: Program, inputs: list, ops: list, outputs: list, new_inputs=()) -> tuple[Program, list]:
    """A program from handle form: ``ops`` as (op, arg handles, result handles) with handles
    ("in", i) for program inputs and ("v", k) for op results; unused inputs and ops dropped."""
    live: set = set(outputs)
    kept = []
    for op, args, res in reversed(ops):
        if any(r in live for r in res) or _has_effect(op):
            kept.append((op, args, res))
            live.update(args)
    kept.reverse()
    all_inputs = [(("in", i), program.inputs[i], x) for i, x in enumerate(inputs)] + list(new_inputs)
    used = [(h, inp, x) for h, inp, x in all_inputs if h in live]
    ids = {h: i for i, (h, _, _) in enumerate(used)}
    for op, _, res in kept:
        for r in res:
            ids[r] = len(ids)
    body = Block(tuple(inp.type for _, inp, _ in used),
                 tuple(Op(op.name, tuple(ids[a] for a in args), op.params, op.outs, op.blocks) for op, args, _ in kept),
                 tuple(ids[o] for o in outputs))
    prog = dataclasses.replace(program, inputs=tuple(inp for _, inp, _ in used), body=body, origin=())
    return prog, [x for _, _, x in used]


def _has_effect(op: Op) -> bool:
    return op.name in ("ref_set", "ref_addupdate") or op.name == "fori" and op.p.get("captures")


def _handles(program: Program):
    """(ops in handle form, handle of every value id)."""
    n_in = len(program.inputs)
    handle = [("in", i) for i in range(n_in)]
    ops = []
    for k, op in enumerate(program.body.ops):
        res = [("v", k, j) for j in range(len(op.outs))]
        ops.append((op, [handle[a] for a in op.args], res))
        handle.extend(res)
    return ops, handle


def keep_outputs(tc: TestCase, which: list[int]) -> TestCase:
    ops, handle = _handles(tc.program)
    outs = [handle[tc.program.body.outputs[i]] for i in which]
    prog, inputs = _rebuild(tc.program, tc.inputs, ops, outs)
    return TestCase(prog, inputs)


def without_transform(tc: TestCase) -> TestCase | None:
    p = tc.program
    if p.transform == PLAIN:
        return None
    inputs = [np.asarray(x)[0] for x in tc.inputs] if p.transform == VMAP else list(tc.inputs)
    return TestCase(dataclasses.replace(p, transform=PLAIN, vmap_size=0, origin=()), inputs)


def cut(tc: TestCase, k: int, values: dict) -> TestCase | None:
    """Op ``k``'s results become new inputs holding ``values[(k, j)]`` (the reference's values)."""
    ops, handle = _handles(tc.program)
    op = tc.program.body.ops[k]
    if any(t.ref or t.is_key for t in op.outs) or any((k, j) not in values for j in range(len(op.outs))):
        return None
    new = []
    for j, t in enumerate(op.outs):
        new.append((("v", k, j), Input(t, DATA, specials=0), np.asarray(values[(k, j)])))
    outs = [handle[o] for o in tc.program.body.outputs]
    rest = [o for o in ops if o[0] is not op]
    prog, inputs = _rebuild(tc.program, tc.inputs, rest, outs, new)
    return TestCase(prog, inputs)


def bypass(tc: TestCase, k: int) -> TestCase | None:
    """Op ``k`` removed, its (one) result replaced by its first operand of the same type."""
    ops, handle = _handles(tc.program)
    op = tc.program.body.ops[k]
    types = tc.program.body.types()
    if len(op.outs) != 1 or _has_effect(op):
        return None
    same = next((a for a in op.args if types[a] == op.outs[0]), None)
    if same is None:
        return None
    old, new = ("v", k, 0), handle[same]
    rest = [(o, [new if a == old else a for a in args], res) for o, args, res in ops if o is not op]
    outs = [new if handle[o] == old else handle[o] for o in tc.program.body.outputs]
    prog, inputs = _rebuild(tc.program, tc.inputs, rest, outs)
    return TestCase(prog, inputs)


def scalarise(tc: TestCase, index: tuple) -> TestCase | None:
    """An elementwise program on arrays of one shape, reduced to the element at ``index``."""
    p = tc.program
    if p.transform != PLAIN or not p.body.ops:
        return None
    shape = tuple(np.shape(tc.inputs[0])) if tc.inputs else None
    if shape is None or len(shape) != len(index) or not shape:
        return None
    types = p.body.types()
    if any(t.shape != shape or t.ref for t in types):
        return None
    if any(op.name not in ELEMENTWISE + ("constant",) for op in p.body.ops):
        return None

    def scalar(t: Type) -> Type:
        return t.with_shape(())
    ops = tuple(Op(op.name, op.args, tuple((k, () if k == "shape" else v) for k, v in op.params),
                   tuple(scalar(t) for t in op.outs), op.blocks) for op in p.body.ops)
    body = Block(tuple(scalar(t) for t in p.body.params), ops, p.body.outputs)
    prog = dataclasses.replace(p, inputs=tuple(dataclasses.replace(i, type=scalar(i.type)) for i in p.inputs),
                               body=body, origin=())
    return TestCase(prog, [np.asarray(x)[index] for x in tc.inputs])


def _simple_values(x: np.ndarray, keep: np.ndarray, fill) -> np.ndarray:
    out = np.array(x, copy=True)
    flat = out.reshape(-1)
    with np.errstate(all="ignore"):
        flat[~keep.reshape(-1)] = np.asarray(fill).astype(x.dtype)
    return out


# --------------------------------------------------------------------------------------------
# The shrinker
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Shrinker:
    still_fails: Callable[[TestCase], bool]
    values_of: Callable[[TestCase], dict]         # (op index, result index) -> reference value
    failing_output: Callable[[TestCase], tuple[int, tuple] | None]   # (output, element index) of the failure
    budget_s: float = 60.0
    tries: int = 0

    def shrink(self, tc: TestCase) -> TestCase:
        self.t0 = time.monotonic()
        progress = True
        while progress and not self._out_of_time():
            progress = False
            for step in (self._outputs, self._transform, self._cut, self._bypass, self._scalarise, self._values):
                better = step(tc)
                if better is not None:
                    tc, progress = better, True
                if self._out_of_time():
                    break
        return tc

    def _out_of_time(self) -> bool:
        return time.monotonic() - self.t0 > self.budget_s

    def _try(self, cand: TestCase | None, than: TestCase) -> bool:
        if cand is None or cand.size > than.size or self._out_of_time():
            return False
        self.tries += 1
        try:
            return bool(self.still_fails(cand))
        except Exception:  # noqa: BLE001  (a proposal the harness cannot run is not smaller)
            return False

    def _outputs(self, tc: TestCase) -> TestCase | None:
        n = len(tc.program.body.outputs)
        if n <= 1:
            return None
        where = self.failing_output(tc)
        order = ([where[0]] if where else []) + [i for i in range(n) if not where or i != where[0]]
        for i in order:
            cand = keep_outputs(tc, [i])
            if self._try(cand, tc):
                return cand
        return None

    def _transform(self, tc: TestCase) -> TestCase | None:
        cand = without_transform(tc)
        return cand if self._try(cand, tc) else None

    def _cut(self, tc: TestCase) -> TestCase | None:
        """Cut at each op from the first on (keeping every cut that still fails)."""
        changed = None
        k = 0
        while k < len(tc.program.body.ops) and not self._out_of_time():
            try:
                values = self.values_of(tc)
            except Exception:  # noqa: BLE001  (no values: no cuts)
                return changed
            cand = cut(tc, k, values)
            if cand is not None and cand.program.n_ops < tc.program.n_ops and self._try(cand, tc):
                tc = changed = cand
                continue          # the op now at k is the next one
            k += 1
        return changed

    def _bypass(self, tc: TestCase) -> TestCase | None:
        """Remove each op whose result can be replaced by its operand (last op first)."""
        changed = None
        for k in reversed(range(len(tc.program.body.ops))):
            if k >= len(tc.program.body.ops) or self._out_of_time():
                continue
            cand = bypass(tc, k)
            if self._try(cand, tc):
                tc = changed = cand
        return changed

    def _scalarise(self, tc: TestCase) -> TestCase | None:
        where = self.failing_output(tc)
        if where is None or not where[1]:
            return None
        cand = scalarise(tc, tuple(where[1]))
        return cand if self._try(cand, tc) else None

    def _values(self, tc: TestCase) -> TestCase | None:
        """Inputs' elements other than the failing position become 0, else 1."""
        where = self.failing_output(tc)
        changed = None
        for i, x in enumerate(tc.inputs):
            x = np.asarray(x)
            if x.size <= 1:
                continue
            keep = np.zeros(x.shape, bool)
            if where is not None and where[1] is not None and len(where[1]) == x.ndim and x.shape == np.shape(
                    tc.inputs[i]) and all(0 <= j < s for j, s in zip(where[1], x.shape)):
                keep[tuple(where[1])] = True
            for fill in (0, 1):
                new = _simple_values(x, keep, fill)
                if np.array_equal(new.view(np.uint8), x.view(np.uint8)):
                    break
                cand = TestCase(tc.program, tc.inputs[:i] + [new] + tc.inputs[i + 1:])
                self.tries += 1
                try:
                    ok = not self._out_of_time() and self.still_fails(cand)
                except Exception:  # noqa: BLE001
                    ok = False
                if ok:
                    tc = changed = cand
                    break
        return changed
