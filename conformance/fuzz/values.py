"""Input values of a generated program: ordinary values with special ones mixed in, from a key.

Data inputs come from the suite's own generator (``conformance.case.random_array``: log-uniform
magnitudes over many binades, NaN, +-inf, +-0, subnormals and integer extremes from
``conformance.values.special_values``), drawn with a NumPy generator seeded from the program's key,
so a (seed, program index) gives the same values wherever the same NumPy runs.
"""
from __future__ import annotations

import hashlib

import numpy as np

from interp import dtypes as D

from .ir import DATA, INDEX, KEY_DATA, VMAP, Program
from .ops import numpy_dtype


def is_float_name(name: str) -> bool:
    return not name.startswith("key<") and D.is_float(numpy_dtype(name))


def rng(key: str) -> np.random.Generator:
    h = hashlib.sha256(f"fuzz-values\0{key}".encode()).digest()
    return np.random.default_rng(int.from_bytes(h[:8], "little"))


def make_inputs(program: Program, key: str) -> list[np.ndarray]:
    from .suite import random_array
    g = rng(key)
    out = []
    for inp in program.inputs:
        shape = inp.type.shape
        if program.transform == VMAP:
            shape = (program.vmap_size,) + tuple(shape)
        dtype = numpy_dtype(inp.type.dtype)
        if inp.kind == INDEX:
            out.append(g.integers(inp.lo, inp.hi, size=shape, endpoint=True).astype(dtype))
        elif inp.kind == KEY_DATA:
            out.append(g.integers(0, 2 ** 32, size=shape, dtype=np.uint64).astype(dtype))
        elif inp.kind == DATA:
            out.append(np.asarray(random_array(g, dtype, shape, specials=inp.specials / 100.0)))
        else:
            raise ValueError(f"unknown input kind {inp.kind!r}")
    return out
