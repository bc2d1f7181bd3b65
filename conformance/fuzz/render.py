"""Programs as Python source: the function a campaign runs and the standalone reproducer are one text.

``source(program)`` is a module defining ``program(*inputs)`` from ``jax.lax`` calls (blocks become
nested functions); ``function(program)`` executes that text and returns the function. Nothing but
the text is executed, so what a reproducer shows is exactly what ran.
"""
from __future__ import annotations

import functools

from .ir import GRAD, VMAP, Block, Program
from .ops import KERNEL_IMPORTS, KERNEL_INTERPRET, RENDER, RENDER_BLOCKS, missing_api

HEADER = ("import ml_dtypes\nimport numpy as np\nimport jax\nimport jax.numpy as jnp\nfrom jax import lax\n")
PALLAS_HEADER = ("from jax.experimental import pallas as pl\nfrom jax.experimental.pallas import tpu as pltpu\n")

# How each operation with blocks calls them (see _block_def).
_CONVENTIONS = {"switch": "positional", "cond": "positional", "call": "positional", "while": "carry",
                "fori": "fori", "scan": "scan", "pallas_call": "kernel",
                "shard_map": "positional"}


def _names(prefix: str, block: Block, param_names: list[str]) -> list[str]:
    names = list(param_names)
    k = len(param_names)
    for op in block.ops:
        for _ in op.outs:
            names.append(f"{prefix}{k}")
            k += 1
    return names


def _block_lines(block: Block, names: list[str], prefix: str, indent: str, note: bool = False) -> list[str]:
    """The statements computing ``block``'s operations (nested functions first where an op has blocks);
    ``note``: each op's results also passed to ``_note(prefix, k, *results)`` (see :func:`function_source`)."""
    lines: list[str] = []
    for k, op in enumerate(block.ops):
        args = [names[a] for a in op.args]
        outs = [names[i] for i in block.ids_of(k)]
        if op.blocks:
            fns = []
            captures = op.p.get("captures", 0)
            captured = args[len(args) - captures:] if captures else []
            for j, sub in enumerate(op.blocks):
                fn = f"{prefix}f{k}_{j}"
                lines += _block_def(op.name, j, sub, fn, f"{prefix}b{k}_{j}_", captured, op.p, indent, note)
                fns.append(fn)
            own_args = args[:len(args) - captures] if captures else args
            lines += [indent + s for s in RENDER_BLOCKS[op.name](op, own_args, outs, fns)]
        elif note and op.name == "broadcast_in_dim":
            # (tracing variant: the shape asked of _shape, which may follow a sliced operand)
            lines.append(f"{indent}{outs[0]} = lax.broadcast_in_dim({args[0]}, _shape({prefix!r}, {k}, {args[0]}), "
                         f"{tuple(op.p['dims'])!r})")
        else:
            lines += [indent + s for s in RENDER[op.name](op, args, outs)]
        if note and outs:
            lines.append(f"{indent}_note({prefix!r}, {k}, {', '.join(outs)})")
    return lines


def _tuple(names: list[str]) -> str:
    return "(" + "".join(n + ", " for n in names) + ")"


def _block_def(opname: str, j: int, block: Block, fn: str, prefix: str, captured: list[str], p: dict,
               indent: str, note: bool = False) -> list[str]:
    """A nested function for block ``j`` of an operation, in the calling convention of ``opname``.
    Captured values (refs a body writes) are the block's last parameters, referred to by their outer
    names."""
    n_own = len(block.params) - len(captured)
    own = [f"{prefix}p{i}" for i in range(n_own)]
    names = _names(prefix + "v", block, own + captured)
    conv = _CONVENTIONS[opname]
    inner = indent + "    "
    if conv in ("positional", "kernel"):
        head = [f"{indent}def {fn}({', '.join(own)}):"]
    elif conv == "carry":
        head = [f"{indent}def {fn}(carry):", f"{inner}{_tuple(own)} = carry"]
    elif conv == "fori":
        head = [f"{indent}def {fn}({own[0]}, carry):", f"{inner}{_tuple(own[1:])} = carry"]
    elif conv == "scan":
        n = p["n_carry"]
        head = [f"{indent}def {fn}(carry, xs):", f"{inner}{_tuple(own[:n])} = carry",
                f"{inner}{_tuple(own[n:])} = xs"]
    else:
        raise ValueError(conv)
    body = _block_lines(block, names, prefix + "v", inner, note)
    if note:        # the block's parameters, as the operation passes them
        head.append(f"{inner}_note({prefix + 'v'!r}, 'params', {', '.join(own + captured)})")
    if conv == "kernel":       # a Pallas kernel writes its output refs and returns nothing
        return head + (body or [f"{inner}pass"])
    outs = [names[o] for o in block.outputs]
    if opname == "while" and j == 0:
        ret = outs[0]                        # the loop condition: one bool
    elif conv == "scan":
        n = p["n_carry"]
        ret = f"({_tuple(outs[:n])}, {_tuple(outs[n:])})"
    else:
        ret = _tuple(outs)
    return head + body + [f"{inner}return {ret}"]


def function_source(program: Program, name: str = "program", note: bool = False) -> str:
    """``def program(x0, ...)``: the program's function (with its transformation applied). ``note``:
    a variant for tracing only, which hands each operation's results (and each block's parameters)
    to a function ``_note(block prefix, op index or 'params', *values)`` the caller defines, and
    asks ``_shape(block prefix, op index, operand)`` for each ``broadcast_in_dim``'s shape."""
    n = len(program.inputs)
    xs = [f"x{i}" for i in range(n)]
    names = _names("v", program.body, xs)
    body = _block_lines(program.body, names, "", "    ", note)
    outs = [names[o] for o in program.body.outputs]
    lines = [f"def _body({', '.join(xs)}):"] + body + [f"    return {_tuple(outs)}", ""]
    if program.transform == VMAP:
        lines += [f"def {name}({', '.join(xs)}):", f"    return jax.vmap(_body)({', '.join(xs)})"]
    elif program.transform == GRAD:
        # The vector-Jacobian product of the first output with a cotangent of ones, with respect to
        # every float input (the others are closed over).
        from .values import is_float_name
        wrt = [i for i, inp in enumerate(program.inputs) if is_float_name(inp.type.dtype)]
        lines += [f"def {name}({', '.join(xs)}):",
                  f"    def first({', '.join(xs[i] for i in wrt)}):",
                  f"        return _body({', '.join(xs)})[0]",
                  f"    out, pullback = jax.vjp(first, {', '.join(xs[i] for i in wrt)})",
                  "    return (out,) + tuple(pullback(jnp.ones_like(out)))"]
    else:
        lines += [f"def {name}({', '.join(xs)}):", f"    return _body({', '.join(xs)})"]
    return "\n".join(lines) + "\n"


def is_kernel(program: Program) -> bool:
    """Whether the program calls Pallas kernels (then its function depends on the Pallas mode)."""
    return "pallas_call" in _op_names(program.body)


def source(program: Program) -> str:
    """A module: the imports and ``program``."""
    return HEADER + "\n\n" + definitions(program)


def definitions(program: Program) -> str:
    """``program``'s definition (after :data:`HEADER`). A program calling Pallas kernels is built
    per Pallas mode: ``build(interpret)`` gives the function with that ``interpret`` argument, and
    ``program`` is ``build(True)`` (JAX's interpret mode; for Mosaic GPU kernels its Mosaic GPU
    interpret mode, ops.KERNEL_INTERPRET)."""
    if not is_kernel(program):
        return function_source(program)
    inner = "".join("    " + line + "\n" if line else "\n" for line in function_source(program).splitlines())
    targets = _kernel_targets(program.body)
    imports = "".join(sorted({KERNEL_IMPORTS.get(t, "") for t in targets}))
    setup, interpret = next((KERNEL_INTERPRET[t] for t in sorted(targets) if t in KERNEL_INTERPRET), ("", "True"))
    return (PALLAS_HEADER + imports + "\n\ndef build(interpret):\n" + inner + "    return program\n\n\n"
            f"{setup}program = build({interpret})\n")


def why_not_renderable(program: Program) -> str:
    """Why the installed JAX cannot run the program (empty if it can)."""
    return missing_api(_op_names(program.body))


def _kernel_targets(block: Block) -> set:
    return {op.p["target"] for op in block.ops if op.name == "pallas_call"}


def _op_names(block: Block) -> set:
    out = set()
    for op in block.ops:
        out.add(op.name)
        for b in op.blocks:
            out |= _op_names(b)
    return out


@functools.lru_cache(maxsize=256)
def _module(text: str) -> dict:
    import hashlib
    import linecache
    # A file name per text, its lines in linecache: tracebacks through a program show its source.
    name = f"<fuzz program {hashlib.sha256(text.encode()).hexdigest()[:12]}>"
    linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    env: dict = {}
    exec(compile(text, name, "exec"), env)   # noqa: S102  (our own generated source)
    return env


def function(program: Program):
    """The program as a Python function of its inputs (returns a tuple of arrays)."""
    return _module(source(program))["program"]


def builder(program: Program):
    """A kernel program's ``build(interpret) -> function`` (see :func:`source`)."""
    return _module(source(program))["build"]
