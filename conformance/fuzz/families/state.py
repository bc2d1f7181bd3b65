"""The ``state`` family: refs (``jax.new_ref``) read, written, accumulated into and swapped through
static and dynamic indices, in straight-line code and inside ``fori_loop`` bodies that close over
them; every ref is read out at the end.

Dynamic indices are in bounds (drawn from the dimension's range; a loop's counter stays below the
dimension it indexes): an out-of-bounds ref access is not defined by JAX.
"""
from __future__ import annotations

from ..choices import Choices
from ..ir import Program, Type
from .lax import INTS, LaxBuilder, SIMPLE_OPS, body, is_arith, is_float, outputs


def _index(b: LaxBuilder, shape, counter: int | None = None, counter_limit: int = 0):
    """(index spec, dynamic index operands, the indexed shape): per dimension an int, a slice
    (lo, hi), the whole dimension (None), or a dynamic scalar ("dyn")."""
    spec, dyn, out = [], [], []
    if 0 in shape:
        return (), [], tuple(shape)     # JAX refuses an indexer into a ref with an empty dimension
    for d in shape[:b.c.between(0, len(shape))]:
        kind = b.c.weighted([("all", 3), ("int", 2), ("slice", 2), ("dyn", 2)]) if d else "all"
        if kind == "int":
            spec.append(b.c.below(d))
        elif kind == "slice":
            lo = b.c.below(d)
            hi = b.c.between(lo, d)
            spec.append((lo, hi))
            out.append(hi - lo)
        elif kind == "dyn":
            if counter is not None and counter_limit <= d and b.c.below(2) == 0:
                dyn.append(counter)
            else:
                i = b.index_input((), 0, d - 1)
                if i is None:
                    spec.append(None)
                    out.append(d)
                    continue
                dyn.append(i)
            spec.append("dyn")
        else:
            spec.append(None)
            out.append(d)
    out += list(shape[len(spec):])
    return tuple(spec), dyn, tuple(out)


def _value_for(b: LaxBuilder, t: Type) -> int | None:
    return b.value(lambda u: u == t, t.dtype, t.shape)


def op_ref(b: LaxBuilder, refs: list[int], counter=None, limit=0) -> None:
    if not refs:
        return
    r = b.c.choice(refs)
    rt = b.types[r]
    kind = b.c.weighted([("get", 3), ("set", 3), ("addupdate", 2), ("swap", 1)])
    if kind == "addupdate" and not (is_float(rt.dtype) or rt.dtype in INTS):
        kind = "set"
    spec, dyn, shape = _index(b, rt.shape, counter, limit)
    vt = Type(rt.dtype, shape)
    if kind == "get":
        b.emit1("ref_get", [r] + dyn, vt, index=spec)
        return
    v = _value_for(b, vt)
    if v is None:
        return
    if kind == "swap":
        b.emit1("ref_swap", [r, v] + dyn, vt, index=spec)
    else:
        b.emit("ref_set" if kind == "set" else "ref_addupdate", [r, v] + dyn, [], index=spec)
        b.used.add(r)


def op_loop(b: LaxBuilder, refs: list[int]) -> None:
    """A fori_loop whose body reads and writes refs it closes over."""
    if not refs:
        return
    carry = b.value(lambda t: is_arith(t.dtype))
    if carry is None:
        return
    ct = b.types[carry]
    captured = [r for r in refs if b.c.below(2) == 0] or [refs[0]]
    n = b.c.between(0, 4)
    sub = LaxBuilder(b.c, b.x64, [b.counter_type(), ct] + [b.types[r] for r in captured], can_add_inputs=False,
                     defined=[0, 1], exact_only=True)
    inner = [sub.params[2 + i] for i in range(len(captured))]
    for _ in range(b.c.between(1, 4)):
        if b.c.below(2) == 0:
            op_ref(sub, inner, counter=sub.params[0], limit=n)
        else:
            body(sub, 1, SIMPLE_OPS)
    out = sub.pick(lambda u: u == ct)
    b.emit("fori", [carry] + captured, [ct], [sub.block([out])], lo=0, hi=n, unroll=0, captures=len(captured))


def generate(c: Choices) -> Program:
    x64 = c.chance(10)
    b = LaxBuilder(c, x64)
    first = b.input(Type(b.arith_dtype(), b.shape(3)))
    refs = [b.emit1("new_ref", [first], b.types[first].__class__(b.types[first].dtype, b.types[first].shape, True))]
    for _ in range(c.between(1, 8)):
        kind = c.weighted([("ref", 6), ("lax", 3), ("new_ref", 1), ("loop", 2)])
        if kind == "ref":
            op_ref(b, refs)
        elif kind == "lax":
            body(b, 1, SIMPLE_OPS)
        elif kind == "new_ref":
            x = b.value(lambda t: is_arith(t.dtype))
            if x is not None:
                t = b.types[x]
                refs.append(b.emit1("new_ref", [x], Type(t.dtype, t.shape, True)))
        else:
            op_loop(b, refs)
    finals = [b.emit1("ref_get", [r], Type(b.types[r].dtype, b.types[r].shape), index=()) for r in refs]
    outs = list(dict.fromkeys(finals + [o for o in outputs(b) if o not in finals]))[:4]
    return Program("state", tuple(b.inputs), b.block(outs), x64=x64)
