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
3. **kernels**: a smaller grid (the arrays cut to the blocks it visits), then kernel operations
   removed (an effect dropped, a result replaced by an earlier value of its type); **shard_maps**
   (conformance/fuzz/families/spmd.py): one output kept, body operations removed the same way;
   then the operands neither reads;
4. **scalarise** elementwise programs: every value of one shape becomes the single failing
   element (rank 0);
5. **slice** the inputs: each group of dimensions that must keep one size together (a dot's
   contracting pair, an elementwise operation's operands, a loop's carry: ``dim_groups``) cut to
   one element, else to a half, three quarters or all but one, around the failing element where
   the group reaches the failing output; every type re-derived by tracing the program in JAX
   (``retyped``), a candidate JAX rejects dropped;
6. simplify input values: elements that do not matter become 0 (or 1).

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
# Shapes: inputs sliced smaller, every type re-derived through JAX
# --------------------------------------------------------------------------------------------
# Operations whose parameter ``shape`` is their (first) result's shape: sliced with it.
SHAPE_PARAM = ("constant", "iota", "broadcast_in_dim", "random")


def retyped(program: Program, inputs: list) -> Program | None:
    """The program on ``inputs`` (of other shapes than its declared ones), every value's type
    re-derived by tracing it (JAX's own shape rules); None where JAX rejects it."""
    import jax

    from conformance.case import Case

    from . import render
    seen: dict = {}

    broadcasts = dict(_broadcasts(program.body, ""))

    def note(block, k, *values):
        seen[(block, k)] = tuple(tuple(np.shape(v)) for v in values)

    def shape(block, k, x):
        """A broadcast's shape: its operand's new sizes where the operand's dimension was not
        broadcast (was as large as the result's)."""
        old_x, out, dims = broadcasts[(block, k)]
        new = list(out)
        for i, o in enumerate(dims):
            if old_x[i] == out[o]:
                new[o] = np.shape(x)[i]
        seen[(block, k, "shape")] = tuple(new)
        return tuple(new)
    decls = tuple(dataclasses.replace(i, type=i.type.with_shape(np.shape(x))) for i, x in zip(program.inputs, inputs))
    prog = dataclasses.replace(program, inputs=decls, origin=(),
                               body=dataclasses.replace(program.body, params=tuple(d.type for d in decls)))
    env: dict = {"_note": note, "_shape": shape}
    try:
        exec(compile(render.HEADER + render.function_source(prog, note=True), "<shapes>", "exec"), env)  # noqa: S102
        with Case("shapes", None, list, x64=prog.x64, jax_config=prog.config).context(), np.errstate(all="ignore"):
            jax.eval_shape(env["program"], *inputs)
        body = _retyped_block(prog.body, "", prog.body.params, seen)
    except Exception:  # noqa: BLE001  (types JAX cannot derive: not a program)
        return None
    return dataclasses.replace(prog, body=body)


def _broadcasts(block: Block, prefix: str):
    """((block prefix, op index), (operand shape, shape, dims)) of every broadcast_in_dim, blocks
    included (prefixes as render.function_source names them)."""
    types = block.types()
    for k, op in enumerate(block.ops):
        if op.name == "broadcast_in_dim":
            yield (prefix, k), (types[op.args[0]].shape, tuple(op.p["shape"]), tuple(op.p["dims"]))
        for j, b in enumerate(op.blocks):
            yield from _broadcasts(b, f"{prefix}b{k}_{j}_v")


def _retyped_block(block: Block, prefix: str, params, seen: dict) -> Block:
    def shaped(types, shapes):
        if len(types) != len(shapes):
            raise ValueError("a different number of values")
        return tuple(t.with_shape(s) for t, s in zip(types, shapes))
    ops = []
    for k, op in enumerate(block.ops):
        subs = tuple(_retyped_block(b, f"{prefix}b{k}_{j}_v", None, seen) for j, b in enumerate(op.blocks))
        outs = shaped(op.outs, seen[(prefix, k)]) if op.outs else ()
        if (prefix, k, "shape") in seen:
            op = dataclasses.replace(op, params=tuple(sorted(dict(op.p, shape=seen[(prefix, k, "shape")]).items())))
        ops.append(dataclasses.replace(op, outs=outs, blocks=subs))
    if params is None:
        params = shaped(block.params, seen[(prefix, "params")])
    return Block(tuple(params), tuple(ops), block.outputs)


def dim_groups(program: Program) -> list[set]:
    """The dimensions of the top-level values, as (value id, dim), grouped into those that must keep
    one size together: a dot's contracting and batch dimensions, an operand's and a result's
    dimensions where they are the same (elementwise operations, loops' carries, reductions' kept
    dimensions, transposes, broadcasts)."""
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    def link(a, b):
        parent[find(a)] = find(b)
    types = program.body.types()
    for v, t in enumerate(types):
        for d in range(t.rank):
            find((v, d))
    for k, op in enumerate(program.body.ops):
        ids, p = program.body.ids_of(k), op.p
        args = [(a, types[a].shape) for a in op.args]
        if op.name == "dot_general":
            (lhs, ls), (rhs, rs) = args
            (lc, rc), (lb, rb) = p["contract"], p["batch"]
            for i, j in zip(lc, rc):
                link((lhs, i), (rhs, j))
            free_l = [d for d in range(len(ls)) if d not in lc + lb]
            free_r = [d for d in range(len(rs)) if d not in rc + rb]
            for o, (v, d) in enumerate([(lhs, d) for d in lb] + [(lhs, d) for d in free_l] + [(rhs, d) for d in free_r]):
                link((v, d), (ids[0], o))
            for i, j in zip(lb, rb):
                link((lhs, i), (rhs, j))
        elif op.name == "transpose":
            for o, d in enumerate(p["perm"]):
                link((op.args[0], d), (ids[0], o))
        elif op.name == "broadcast_in_dim":
            for d, o in enumerate(p["dims"]):
                if args[0][1][d] == op.outs[0].shape[o]:
                    link((op.args[0], d), (ids[0], o))
        elif op.name in ("reduce", "argminmax"):
            gone = p["axes"] if op.name == "reduce" else (p["axis"],)
            kept = [d for d in range(len(args[0][1])) if d not in gone]
            for o, d in enumerate(kept):
                link((op.args[0], d), (ids[0], o))
        elif op.name in ("gather", "scatter"):    # x.at[:, ..., idx]: the indexed values' dimensions
            (x, xs), (idx, ids_) = args[:2]
            axis = p["axis"]
            indexed = ids[0] if op.name == "gather" else op.args[2]
            dims = [(x, d) for d in range(axis)] + [(idx, j) for j in range(len(ids_))] + \
                [(x, d) for d in range(axis + 1, len(xs))]
            for o, vd in enumerate(dims):
                link(vd, (indexed, o))
            if op.name == "scatter":
                for d in range(len(xs)):
                    link((x, d), (ids[0], d))
        else:       # an operand of a result's shape: the same dimensions (elementwise, carries)
            results = list(zip(ids, (t.shape for t in op.outs))) or args[:1]
            for a, shape in args:
                same = next((r for r, rs in results if rs == shape and r != a), None)
                for d in range(len(shape) if same is not None else 0):
                    link((a, d), (same, d))
    groups: dict = {}
    for x in list(parent):
        groups.setdefault(find(x), set()).add(x)
    return list(groups.values())


def _windows(n: int, at: int | None) -> list[tuple[int, int]]:
    """Windows (start, size) of a dimension of ``n``, smallest first: one element, half, three
    quarters, all but one; each first where it holds position ``at`` (starting or ending there),
    then at either end."""
    out: list = []
    at = at if at is not None and 0 <= at < n else None
    for m in sorted({1, (n + 1) // 2, n - (n + 3) // 4, n - 1}):
        if not 0 < m < n:
            continue
        starts = ([min(at, n - m), max(0, at - m + 1)] if at is not None else []) + [0, n - m]
        out += [(a, m) for a in dict.fromkeys(starts)]
    return out


def sliced(tc: TestCase, group: set, start: int, size: int) -> TestCase | None:
    """The group's dimensions cut to ``[start, start + size)``: inputs sliced, shape parameters set,
    every other type re-derived (:func:`retyped`)."""
    p = tc.program
    n_in = len(p.inputs)
    inputs = [np.asarray(x) for x in tc.inputs]
    ops = list(p.body.ops)
    owner = {v: k for k in range(len(ops)) for v in p.body.ids_of(k)}
    touched = False
    for v, d in sorted(group):
        if v < n_in:
            x = inputs[v]
            inputs[v] = x[(slice(None),) * d + (slice(start, start + size),)]
            touched = True
        elif ops[owner[v]].name in SHAPE_PARAM and p.body.ids_of(owner[v])[0] == v and \
                tuple(ops[owner[v]].p.get("shape", ())) == p.body.ops[owner[v]].outs[0].shape:
            op = ops[owner[v]]
            shape = list(op.p["shape"])
            shape[d] = size
            ops[owner[v]] = dataclasses.replace(op, params=tuple(sorted(dict(op.p, shape=tuple(shape)).items())))
            touched = True
    if not touched:
        return None
    new = retyped(dataclasses.replace(p, body=dataclasses.replace(p.body, ops=tuple(ops))), inputs)
    return None if new is None else TestCase(new, inputs)


# --------------------------------------------------------------------------------------------
# Kernels: a program of one pallas_call (conformance/fuzz/families/pallas.py)
# --------------------------------------------------------------------------------------------
KERNEL_EFFECTS = ("k_store", "k_accum", "k_masked_store", "k_init", "k_dma_start", "k_dma_wait", "k_tstore",
                  "k_atomic")


def kernel_call(program: Program) -> Op | None:
    return block_call(program, "pallas_call")


def block_call(program: Program, name: str = "") -> Op | None:
    """The program's one operation, where it is a ``pallas_call`` or ``shard_map`` (or ``name``)
    whose block is what shrinking edits."""
    ops = program.body.ops
    ok = (name,) if name else ("pallas_call", "shard_map")
    return ops[0] if len(ops) == 1 and ops[0].name in ok else None


def _with_call(tc: TestCase, call: Op, inputs: list, input_decls=None) -> TestCase:
    p = tc.program
    decls = tuple(input_decls) if input_decls is not None else p.inputs
    body = Block(tuple(i.type for i in decls), (call,), tuple(range(len(decls), len(decls) + len(call.outs))))
    return TestCase(dataclasses.replace(p, inputs=decls, body=body, origin=()), list(inputs))


def _effects(call: Op) -> tuple:
    return KERNEL_EFFECTS if call.name == "pallas_call" else ()


def _kernel_ops(kernel: Block, ops: list, remap: dict, effects=KERNEL_EFFECTS) -> Block:
    """The block (a kernel, a shard_map body) with ``ops`` (a subset of its ops, in order, args
    and outputs remapped by ``remap``), dead results dropped (``effects``: ops kept all the same),
    values renumbered."""
    n = len(kernel.params)
    k_id = n
    old_ids = {}
    for k, op in enumerate(kernel.ops):
        for j in range(len(op.outs)):
            old_ids[(k, j)] = k_id
            k_id += 1
    kept = [(k, op) for k, op in enumerate(kernel.ops) if k in ops]
    outputs = [remap.get(o, o) for o in kernel.outputs]
    # drop pure operations whose results nothing uses (repeatedly, last first)
    while True:
        used = {remap.get(a, a) for _, op in kept for a in op.args} | set(outputs)
        dead = [i for i, (k, op) in enumerate(kept) if op.name not in effects
                and not any(old_ids[(k, j)] in used for j in range(len(op.outs)))]
        if not dead:
            break
        kept.pop(dead[-1])
    ids = {i: i for i in range(n)}
    nxt = n
    new_ops = []
    for k, op in kept:
        new_ops.append(Op(op.name, tuple(ids[remap.get(a, a)] for a in op.args), op.params, op.outs, op.blocks))
        for j in range(len(op.outs)):
            ids[old_ids[(k, j)]] = nxt
            nxt += 1
    return Block(kernel.params, tuple(new_ops), tuple(ids[o] for o in outputs))


def kernel_without(tc: TestCase, k: int) -> TestCase | None:
    """Kernel (or shard_map body) op ``k`` removed: an effect dropped, or a result replaced by the
    latest earlier value of its type (an operand where one fits)."""
    call = block_call(tc.program)
    if call is None or k >= len(call.blocks[0].ops):
        return None
    kernel = call.blocks[0]
    op = kernel.ops[k]
    remap: dict = {}
    if op.name not in _effects(call):
        if len(op.outs) != 1:
            return None
        types = kernel.types()
        first = kernel.ids_of(k)[0]
        same = [a for a in op.args if types[a] == op.outs[0]] or \
            [v for v in range(len(kernel.params), first) if types[v] == op.outs[0]]
        if not same:
            return None
        remap[first] = same[-1]
    new = _kernel_ops(kernel, [i for i in range(len(kernel.ops)) if i != k], remap, _effects(call))
    return _with_call(tc, dataclasses.replace(call, blocks=(new,)), tc.inputs)


def shard_map_output(tc: TestCase, j: int) -> TestCase | None:
    """A shard_map program returning only output ``j`` (its out_spec kept; what only the others
    needed dropped)."""
    call = block_call(tc.program, "shard_map")
    if call is None or len(call.outs) <= 1:
        return None
    body = call.blocks[0]
    body = _kernel_ops(Block(body.params, body.ops, (body.outputs[j],)), list(range(len(body.ops))), {}, ())
    new_call = Op(call.name, call.args, tuple(sorted(dict(call.p, out_specs=(call.p["out_specs"][j],)).items())),
                  (call.outs[j],), (body,))
    return _with_call(tc, new_call, tc.inputs)


def kernel_without_unused_inputs(tc: TestCase) -> TestCase | None:
    """The kernel (or shard_map) without the input blocks its body never reads (their BlockSpecs
    or in_specs and arrays dropped; an input aliased to an output stays: it holds the output's
    initial values)."""
    call = block_call(tc.program)
    if call is None:
        return None
    kernel, nt = call.blocks[0], call.p.get("n_prefetch", 0)
    used = ({a for op in kernel.ops for a in op.args} | set(kernel.outputs)
            | {i for i, _ in call.p.get("aliases", ())})
    unused = [r for r in range(len(call.p["in_specs"])) if nt + r not in used]
    if not unused:
        return None
    gone = {nt + r for r in unused}
    ids, k = {}, 0
    for v in range(len(kernel.types())):
        if v not in gone:
            ids[v] = k
            k += 1
    ops = tuple(Op(op.name, tuple(ids[a] for a in op.args), op.params, op.outs, op.blocks) for op in kernel.ops)
    params_ = tuple(t for v, t in enumerate(kernel.params) if v not in gone)
    in_specs = tuple(spec for r, spec in enumerate(call.p["in_specs"]) if r not in unused)
    new_p = dict(call.p, in_specs=in_specs)
    if "aliases" in new_p:
        new_p["aliases"] = tuple((ids[i], o) for i, o in call.p["aliases"])
    new_call = Op(call.name, tuple(range(len(call.args) - len(unused))),
                  tuple(sorted(new_p.items())), call.outs,
                  (Block(params_, ops, tuple(ids[o] for o in kernel.outputs)),))
    keep = [i for i in range(len(tc.inputs)) if i not in gone]
    return _with_call(tc, new_call, [tc.inputs[i] for i in keep], [tc.program.inputs[i] for i in keep])


def smaller_grid(tc: TestCase, axis: int, extent: int) -> TestCase | None:
    """The kernel on a grid whose ``axis`` has ``extent`` steps: the output and the inputs cut to
    the blocks the smaller grid visits (the masks of partial blocks recomputed)."""
    from .families.pallas import blocks_reached
    call = kernel_call(tc.program)
    if call is None:
        return None
    p = call.p
    grid = list(p["grid"])
    if not 1 <= extent < grid[axis]:
        return None
    grid[axis] = extent
    nt = p["n_prefetch"]
    table_blocks = tc.program.inputs[0].hi + 1 if nt else 1

    def fix(expr):
        return ("lin", expr[1], expr[2], grid[expr[2]]) if expr[0] == "lin" else expr

    def cut_dims(block, index_map, dims):
        return tuple(min(n, blocks_reached(e, grid, table_blocks) * b) for e, b, n in zip(index_map, block, dims))

    out_specs = tuple((b, tuple(fix(e) for e in m)) for b, m in p["out_specs"])
    outs = tuple(t.with_shape(cut_dims(b, m, t.shape)) for t, (b, m) in zip(call.outs, out_specs))
    decls, inputs = list(tc.program.inputs), [np.asarray(x) for x in tc.inputs]
    # (a prefetch table longer than its axis stays as it is: it is read at the axis's indices only)
    kernel = call.blocks[0]
    masks = {}
    in_specs = tuple((b, m if b is None else tuple(fix(e) for e in m)) for b, m in p["in_specs"])
    for r, (b, m) in enumerate(in_specs):
        if b is None:       # a whole array for the kernel's DMAs: their windows stay inside it
            continue
        i = nt + r
        dims = cut_dims(b, m, decls[i].type.shape)
        inputs[i] = inputs[i][tuple(slice(0, n) for n in dims)]
        decls[i] = dataclasses.replace(decls[i], type=decls[i].type.with_shape(dims))
        masks[nt + r] = tuple((d, e, bd, n) for d, (e, bd, n) in enumerate(zip(m, b, dims)) if n % bd)
    ops = []
    for op in kernel.ops:
        if op.name == "k_load" and op.args[0] in masks:
            mask = masks[op.args[0]]
            table = (0,) if nt and any(e[0] == "s" for _, e, _, _ in mask) else ()
            op = Op(op.name, (op.args[0],) + table, tuple(sorted(dict(op.params, mask=mask).items())), op.outs)
        ops.append(op)
    new_p = dict(p, grid=tuple(grid), in_specs=in_specs, out_specs=out_specs)
    new_call = Op(call.name, call.args, tuple(sorted(new_p.items())), outs,
                  (Block(kernel.params, tuple(ops), ()),))
    return _with_call(tc, new_call, inputs, decls)


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
            for step in (self._outputs, self._transform, self._cut, self._bypass, self._kernel, self._scalarise,
                         self._shapes, self._values):
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

    def _kernel(self, tc: TestCase) -> TestCase | None:
        """A kernel's grid made smaller (each axis to 1 step, else one step fewer), a shard_map's
        failing output kept alone, then its operations removed one at a time (last first), then
        the input blocks it no longer reads."""
        call = block_call(tc.program)
        if call is None:
            return None
        changed = None
        if call.name == "shard_map" and len(call.outs) > 1:
            where = self.failing_output(tc)
            for j in ([where[0]] if where else []) + [j for j in range(len(call.outs)) if not where or j != where[0]]:
                cand = shard_map_output(tc, j)
                if self._try(cand, tc):
                    tc = changed = cand
                    break
        for axis, g in enumerate(call.p.get("grid", ())):
            for extent in (1, g - 1):
                cand = smaller_grid(tc, axis, extent)
                if not self._out_of_time() and cand is not None and self._try(cand, tc):
                    tc = changed = cand
                    break
        for k in reversed(range(len(call.blocks[0].ops))):
            call = block_call(tc.program)
            if k >= len(call.blocks[0].ops) or self._out_of_time():
                continue
            cand = kernel_without(tc, k)
            if self._try(cand, tc):
                tc = changed = cand
        cand = kernel_without_unused_inputs(tc)
        if self._try(cand, tc):
            tc = changed = cand
        return changed

    def _shapes(self, tc: TestCase) -> TestCase | None:
        """Each group of dimensions that keep one size together (dim_groups) and slice an input,
        largest first, cut to the first window (_windows) that still fails: around the failing
        element where the group reaches the failing output, else at either end."""
        p = tc.program
        if p.transform != PLAIN or kernel_call(p) is not None:
            return None
        changed, done = None, set()
        while not self._out_of_time():
            n_in = len(tc.program.inputs)
            todo = sorted((frozenset(grp) for grp in dim_groups(tc.program) if frozenset(grp) not in done
                           and self._group_size(tc, grp) > 1 and any(v < n_in for v, _ in grp)),
                          key=lambda grp: (-self._group_size(tc, grp), sorted(grp)))
            if not todo:
                return changed
            group = todo[0]
            where = self.failing_output(tc)
            out, index = (tc.program.body.outputs[where[0]], where[1] or ()) if where else (None, ())
            at = next((index[d] for v, d in group if v == out and d < len(index)), None)
            for start, size in _windows(self._group_size(tc, group), at):
                cand = sliced(tc, group, start, size)
                if self._try(cand, tc):
                    tc = changed = cand
                    break
            else:
                done.add(group)
        return changed

    @staticmethod
    def _group_size(tc: TestCase, group: set) -> int:
        types = tc.program.body.types()
        return max(types[v].shape[d] for v, d in group)

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
