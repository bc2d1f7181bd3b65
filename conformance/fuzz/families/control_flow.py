"""The ``control_flow`` family: lax programs with ``fori_loop``, ``scan``, ``while_loop``, ``switch``
and ``cond`` whose bodies are lax programs themselves (nested up to two levels), made of
operations defined bit for bit (see LaxBuilder.exact_only).

Loops run a static number of times (a ``while`` counts to a bound it carries); a ``switch`` index
is an input drawn past both ends (``lax.switch`` clamps it: defined); every branch of a
conditional returns values of its operands' types, so any branch can be taken.
"""
from __future__ import annotations

from ..choices import Choices
from ..ir import Program, Type
from .lax import BOOL, SIMPLE_OPS, LaxBuilder, body, is_arith, outputs

MAX_DEPTH = 2


def _operands(b: LaxBuilder, most: int, ok=lambda t: True) -> list[int]:
    out = []
    for _ in range(b.c.between(1, most)):
        h = b.value(lambda t: is_arith(t.dtype) and ok(t))
        if h is not None and h not in out:
            out.append(h)
    return out


def _sub(b: LaxBuilder, types: list[Type], defined, depth: int) -> LaxBuilder:
    """A block over ``types`` with a few operations (control flow again below MAX_DEPTH)."""
    sub = LaxBuilder(b.c, b.x64, types, can_add_inputs=False, defined=defined, exact_only=True)
    ops = SIMPLE_OPS + ([(lambda s: control_op(s, depth + 1), 1)] if depth + 1 < MAX_DEPTH else [])
    body(sub, b.c.between(0, 4), ops)
    return sub


def _results(sub: LaxBuilder, types: list[Type]) -> list[int]:
    """For each type, a value of the block of that type (the computed ones preferred)."""
    return [sub.pick(lambda u, t=t: u == t) for t in types]


def _defined(b: LaxBuilder, args) -> list[int]:
    return [i for i, a in enumerate(args) if a in b.defined]


def op_fori(b: LaxBuilder, depth: int) -> None:
    carry = _operands(b, 3)
    if not carry:
        return
    types = [b.types[a] for a in carry]
    sub = _sub(b, [b.counter_type()] + types, [0] + [i + 1 for i in _defined(b, carry)], depth)
    outs = _results(sub, types)
    lo = b.c.between(0, 2)
    hi = lo + b.c.between(0, 4)
    b.emit("fori", carry, types, [sub.block(outs)], lo=lo, hi=hi, unroll=b.c.choice((0, 2, 1)))


def op_scan(b: LaxBuilder, depth: int) -> None:
    carry = _operands(b, 2)
    if not carry:
        return
    length = b.c.choice((3, 1, 4, 0, 5, 2))
    xs = []
    for _ in range(b.c.below(3)):
        x = b.value(lambda t: t.rank >= 1 and t.shape[0] == length and is_arith(t.dtype),
                    shape=(length,) + b.shape(2))
        if x is not None and x not in xs:
            xs.append(x)
    ctypes = [b.types[a] for a in carry]
    xtypes = [b.types[x].with_shape(b.types[x].shape[1:]) for x in xs]
    sub = _sub(b, ctypes + xtypes, _defined(b, carry + xs), depth)
    couts = _results(sub, ctypes)
    ys = sub.sinks()[:b.c.below(3)]
    ytypes = [sub.types[y] for y in ys]
    outs = ctypes + [t.with_shape((length,) + t.shape) for t in ytypes]
    if not xs:
        # lax.scan needs xs or a length: without xs, the same body as a fori_loop over the length
        sub = _sub(b, [b.counter_type()] + ctypes, [0] + [i + 1 for i in _defined(b, carry)], depth)
        b.emit("fori", carry, ctypes, [sub.block(_results(sub, ctypes))], lo=0, hi=length, unroll=0)
        return
    b.emit("scan", carry + xs, outs, [sub.block(couts + ys)], n_carry=len(carry),
           reverse=b.c.below(2) == 1, unroll=b.c.choice((1, 2, 3)))


def op_while(b: LaxBuilder, depth: int) -> None:
    carry = _operands(b, 2)
    if not carry:
        return
    limit = b.c.between(0, 5)
    types = [Type("int32", ())] + [b.types[a] for a in carry]
    start = b.c.between(-1, 2)
    counter = b.emit1("constant", [], Type("int32", ()), value=start, dtype="int32", shape=())
    # cond: counter < limit
    cond = LaxBuilder(b.c, b.x64, types, can_add_inputs=False, exact_only=True)
    lim = cond.emit1("constant", [], Type("int32", ()), value=limit, dtype="int32", shape=())
    pred = cond.emit1("binary", [cond.params[0], lim], Type(BOOL, ()), fn="lt")
    sub = _sub(b, types, list(range(len(types))), depth)
    nxt = sub.emit1("scalar_binary", [sub.params[0]], Type("int32", ()), fn="add", value=1, dtype="int32", side=0)
    outs = [nxt] + _results(sub, types[1:])
    b.emit("while", [counter] + carry, types, [cond.block([pred]), sub.block(outs)])


def op_switch(b: LaxBuilder, depth: int) -> None:
    ops = _operands(b, 3)
    if not ops:
        return
    types = [b.types[a] for a in ops]
    if b.c.below(3) == 0:
        p = b.value(lambda t: t.dtype == BOOL and t.shape == (), BOOL, ())
        if p is None:
            return
        branches = [_sub(b, types, _defined(b, ops), depth) for _ in range(2)]
        b.emit("cond", [p] + ops, types, [s.block(_results(s, types)) for s in branches])
        return
    n = b.c.between(2, 3)
    idx = b.index_input((), -1, n)
    if idx is None:
        idx = b.emit1("constant", [], Type("int32", ()), value=b.c.between(-1, n), dtype="int32", shape=())
    branches = [_sub(b, types, _defined(b, ops), depth) for _ in range(n)]
    b.emit("switch", [idx] + ops, types, [s.block(_results(s, types)) for s in branches])


CONTROL = [(op_fori, 3), (op_scan, 3), (op_while, 2), (op_switch, 3)]


def control_op(b: LaxBuilder, depth: int = 0) -> None:
    b.c.weighted(CONTROL)(b, depth)


def generate(c: Choices) -> Program:
    x64 = c.chance(15)
    b = LaxBuilder(c, x64)
    b.input(Type(b.arith_dtype(), b.shape(3)))
    body(b, c.between(0, 3))
    for _ in range(c.between(1, 3)):
        control_op(b)
    body(b, c.between(0, 3))
    outs = outputs(b)
    return Program("control_flow", tuple(b.inputs), b.block(outs), x64=x64)
