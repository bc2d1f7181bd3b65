"""A finding as a standalone script: plain JAX (no jax-conformance needed), the program's source,
its inputs embedded bit for bit, the reference's outputs and the backend's recorded ones. Running
it evaluates the program with ``jax.jit`` on the default backend and prints where the result
differs from the reference (exit status 1) or says it now agrees (0). A Pallas kernel program runs
in JAX's interpret mode (``program = build(True)``; ``build`` takes another mode's ``interpret``)."""
from __future__ import annotations

import json

import numpy as np

from interp import dtypes as D

from . import render
from .ops import dt
from .shrink import TestCase

_HELPERS = '''
def _array(hex_bits, dtype, shape):
    """An array from its raw bits (little-endian), exactly as the finding recorded it."""
    dtype = np.dtype(dtype)
    return np.frombuffer(bytes.fromhex(hex_bits), dtype).reshape(shape).copy()


def _same(a, b):
    """Elementwise: the same bits, or both NaN (NaN payloads are not compared)."""
    def parts(x):
        x = np.asarray(x)
        raw = np.array(x).reshape(-1).view(np.uint8).reshape(x.shape + (x.dtype.itemsize,))
        try:
            wide = x.astype(np.complex128)
            nan = np.isnan(wide.real) | np.isnan(wide.imag)
        except (TypeError, ValueError):
            nan = np.zeros(x.shape, bool)
        return raw, nan
    (ra, na), (rb, nb) = parts(a), parts(b)
    return (ra == rb).all(-1) & ~na & ~nb | (na & nb)


def main():
    got = jax.tree_util.tree_leaves(jax.jit(program)(*INPUTS))
    bad = 0
    for i, (g, e, b) in enumerate(zip(got, EXPECTED, BACKEND)):
        g = np.asarray(g)
        same = _same(g, e)
        if same.all():
            continue
        bad += 1
        idx = tuple(np.argwhere(~same)[0]) if g.ndim else ()
        print(f"output {i}: {int((~same).sum())} of {g.size} elements differ from the reference; first at {idx}:")
        print(f"  reference {e[idx]!r}, this run {g[idx]!r}, recorded backend {b[idx]!r}")
    print("differs from the reference" if bad else "agrees with the reference: the finding does not reproduce here")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
'''


def _array_source(x) -> str:
    x = np.array(x, copy=True, order="C")      # (np.ascontiguousarray makes a 0-d array 1-d)
    raw = x.reshape(-1).view(D.storage_uint(x.dtype)).astype(D.storage_uint(x.dtype).newbyteorder("<")).tobytes()
    return f"_array({raw.hex()!r}, {dt(x.dtype.name)}, {tuple(x.shape)!r})"


def _arrays_source(name: str, arrays) -> str:
    items = "".join(f"    {_array_source(a)},\n" for a in arrays)
    return f"{name} = [\n{items}]\n"


def _devices(program) -> str:
    """For a program over several devices: XLA:CPU's host devices, set before JAX starts."""
    if program.devices <= 1:
        return ""
    return ("import os\n\nos.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + "
            f"' --xla_force_host_platform_device_count={program.devices}').strip()\n")


def script(tc: TestCase, record: dict, expected, backend) -> str:
    p = tc.program
    where = record.get("first_divergent_eqn") or {}
    info = {k: record.get(k) for k in ("bucket", "runner", "jax_version", "modes", "max_ulp", "detail")}
    info["first_divergent_eqn"] = {k: where.get(k) for k in ("primitive", "eqn", "dtype", "mode", "symptom", "note")
                                   if where.get(k) is not None}
    if record.get("responsible_passes"):
        info["xla_passes"] = record["responsible_passes"]
    doc = ("jax-conformance fuzz finding (generated; run with python, exit status 1 while it reproduces).\n\n"
           + json.dumps(info, indent=1, default=str) + "\n")
    config = "".join(f"jax.config.update({k!r}, {v!r})\n" for k, v in (("jax_enable_x64", p.x64),) + tuple(p.config)
                     if k != "jax_enable_x64" or v)
    return ('"""' + doc.replace('"""', "'''") + '"""\n' + _devices(p) + render.HEADER + "\n" + config + "\n"
            + render.definitions(p) + "\n"
            + _HELPERS.split("\n\ndef main")[0] + "\n\n"
            + _arrays_source("INPUTS", tc.inputs) + _arrays_source("EXPECTED", expected)
            + _arrays_source("BACKEND", backend) + "\n\ndef main" + _HELPERS.split("\n\ndef main", 1)[1])
