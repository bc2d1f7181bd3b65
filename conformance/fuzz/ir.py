"""The program IR: a list of operations over typed values, independent of JAX.

A :class:`Program` is pure data (JSON round trip: :func:`to_json` / :func:`from_json`): its inputs
(types and how their values are drawn), a :class:`Block` of operations, the outputs, a
transformation of the whole function (``vmap``, ``grad``) and the JAX configuration it runs under.
Values are numbered: a block's parameters first, then each operation's results in order. An
operation's ``blocks`` are the functions it takes (loop bodies, branches), each with its own
numbering; they see only their parameters (what a body needs is passed in explicitly).

``conformance.fuzz.render`` turns a program into Python source built from ``jax.lax`` calls: the
function the campaign runs and the standalone reproducer are the same text.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any


@dataclasses.dataclass(frozen=True)
class Type:
    """An array type (``dtype`` a NumPy/ml_dtypes name, or ``key<impl>`` for PRNG keys), or a ref
    to one (``ref``)."""
    dtype: str
    shape: tuple[int, ...] = ()
    ref: bool = False

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def with_shape(self, shape) -> "Type":
        return Type(self.dtype, tuple(shape), self.ref)

    def with_dtype(self, dtype: str) -> "Type":
        return Type(dtype, self.shape, self.ref)

    @property
    def is_key(self) -> bool:
        return self.dtype.startswith("key<")

    def __str__(self) -> str:
        s = f"{self.dtype}[{','.join(map(str, self.shape))}]"
        return f"ref<{s}>" if self.ref else s


# How an input's values are drawn (conformance.fuzz.values): ordinary values with special ones mixed
# in, integers in a range (indices, loop bounds), or key data.
DATA, INDEX, KEY_DATA = "data", "index", "key-data"


@dataclasses.dataclass(frozen=True)
class Input:
    type: Type
    kind: str = DATA
    lo: int = 0            # INDEX: the range [lo, hi]
    hi: int = 0
    specials: int = 25     # DATA: percent of special values (NaN, inf, -0, subnormals, extremes)


@dataclasses.dataclass(frozen=True)
class Block:
    """A function: ``params`` are its parameters' types; ``ops`` in order; ``outputs`` value ids."""
    params: tuple[Type, ...]
    ops: tuple["Op", ...]
    outputs: tuple[int, ...]

    def types(self) -> list[Type]:
        """The type of every value id of the block."""
        out = list(self.params)
        for op in self.ops:
            out.extend(op.outs)
        return out

    def ids_of(self, k: int) -> tuple[int, ...]:
        """The value ids of op ``k``'s results."""
        start = len(self.params) + sum(len(op.outs) for op in self.ops[:k])
        return tuple(range(start, start + len(self.ops[k].outs)))


@dataclasses.dataclass(frozen=True)
class Op:
    name: str                           # an operation of conformance.fuzz.ops
    args: tuple[int, ...]               # value ids of the enclosing block
    params: tuple[tuple[str, Any], ...]  # sorted (name, JSON-able value) pairs
    outs: tuple[Type, ...]
    blocks: tuple[Block, ...] = ()

    @property
    def p(self) -> dict:
        return dict(self.params)


def params(**kw) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, _freeze(v)) for k, v in kw.items()))


def _freeze(v):
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, tuple):
        return tuple(_freeze(x) for x in v)
    return v


# Transformations of the whole function.
PLAIN, VMAP, GRAD = "plain", "vmap", "grad"
TRANSFORMS = (PLAIN, VMAP, GRAD)


@dataclasses.dataclass(frozen=True)
class Program:
    family: str
    inputs: tuple[Input, ...]
    body: Block
    transform: str = PLAIN
    x64: bool = False
    config: tuple[tuple[str, Any], ...] = ()   # other jax.config values (jax_threefry_partitionable)
    origin: tuple[tuple[str, Any], ...] = ()   # (("seed", s), ("index", i)) where generated; edits drop it
    vmap_size: int = 0                          # VMAP: the batch size (the inputs' leading dimension)

    @property
    def n_ops(self) -> int:
        """Operations in the program, bodies included."""
        return _count_ops(self.body)

    @property
    def devices(self) -> int:
        """The devices the program runs on (a shard_map's mesh; 1 without)."""
        return max([math.prod(op.p["mesh"]) for op in self.body.ops if op.name == "shard_map"] or [1])

    @property
    def elements(self) -> int:
        """The largest input's element count."""
        return max((i.type.size for i in self.inputs), default=0)


def _count_ops(block: Block) -> int:
    return sum(1 + sum(_count_ops(b) for b in op.blocks) for op in block.ops)


# --------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------
def to_json(program: Program) -> dict:
    return _enc(program)


def _enc(x):
    if dataclasses.is_dataclass(x):
        return {f.name: _enc(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, tuple):
        return [_enc(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return {"float": repr(x)}
    return x


def _dec_value(x):
    if isinstance(x, list):
        return tuple(_dec_value(v) for v in x)
    if isinstance(x, dict) and set(x) == {"float"}:
        return float(x["float"])
    return x


def _type(d) -> Type:
    return Type(d["dtype"], tuple(d["shape"]), d.get("ref", False))


def _block(d) -> Block:
    return Block(tuple(_type(t) for t in d["params"]), tuple(_op(o) for o in d["ops"]), tuple(d["outputs"]))


def _op(d) -> Op:
    return Op(d["name"], tuple(d["args"]), tuple((k, _dec_value(v)) for k, v in d["params"]),
              tuple(_type(t) for t in d["outs"]), tuple(_block(b) for b in d.get("blocks", ())))


def from_json(d: dict) -> Program:
    return Program(
        family=d["family"],
        inputs=tuple(Input(_type(i["type"]), i["kind"], i["lo"], i["hi"], i["specials"]) for i in d["inputs"]),
        body=_block(d["body"]), transform=d["transform"], x64=d["x64"],
        config=tuple((k, _dec_value(v)) for k, v in d["config"]),
        origin=tuple((k, _dec_value(v)) for k, v in d["origin"]), vmap_size=d.get("vmap_size", 0))


def dumps(program: Program) -> str:
    return json.dumps(to_json(program), sort_keys=True)


def loads(text: str) -> Program:
    return from_json(json.loads(text))
