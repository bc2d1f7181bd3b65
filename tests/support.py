"""Helpers for the project's tests: run a function on XLA:CPU and in the reference."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np

import interp
from conformance.values import assert_same_bits


def xla_cpu(fn, *args, **kwargs):
    """``fn`` compiled by XLA:CPU, outputs as NumPy (the independent side of most tests)."""
    with jax.default_device(jax.devices("cpu")[0]):
        out = jax.jit(fn)(*args, **kwargs)
    return jax.tree_util.tree_map(np.asarray, out)


def reference(fn, *args, **kwargs):
    return interp.interpret(fn)(*args, **kwargs)


def with_params(closed, primitive: str, **params):
    """``closed`` (a ClosedJaxpr) with ``params`` changed in its first top-level ``primitive``
    equation: a program JAX's own tracing would refuse, to reach the rule's check of it."""
    eqns = list(closed.jaxpr.eqns)
    k = next(i for i, e in enumerate(eqns) if e.primitive.name == primitive)
    eqns[k] = eqns[k].replace(params={**eqns[k].params, **params})
    return closed.replace(jaxpr=closed.jaxpr.replace(eqns=eqns))


def x64(enabled: bool = True):
    """Context manager: ``jax_enable_x64`` on (or off) inside the block, on every supported JAX."""
    return jax.enable_x64(enabled)


def assert_tree_same_bits(actual, expected, nan_payloads=False):
    """Same pytree structure, every reference leaf a NumPy array with the same bits as the
    expected leaf (NaN payloads compared only if ``nan_payloads``)."""
    a_leaves, a_tree = jax.tree_util.tree_flatten(actual)
    e_leaves, e_tree = jax.tree_util.tree_flatten(expected)
    assert a_tree == e_tree
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        assert isinstance(a, np.ndarray), type(a)
        assert_same_bits(a, e, nan_payloads=nan_payloads, err_msg=f"(output {i})")


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def verdicts_with_8_devices(module: str) -> dict:
    """Run ``module._compare_main()`` in a subprocess whose JAX has 8 host devices (pytest's own
    process may already have started JAX with one): the JSON it prints after ``VERDICTS ``."""
    env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") +
                                      " --xla_force_host_platform_device_count=8").strip(),
               JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", f"import {module} as t; t._compare_main()"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("VERDICTS ")]
    assert line, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(line[0][len("VERDICTS "):])


def core_map_over_refs(mesh, body):
    """A function of ``x`` that runs ``body(x_ref, o_ref)`` once per core of ``mesh`` under
    ``pl.core_map``, the body closing over two refs (``pl.run_state``; ``o`` starts as -1s), and
    returns both refs' final values. JAX 0.10.2 binds core_map, 0.11 and later mpmd_map."""
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def f(x):
        def stateful(refs):
            pl.core_map(mesh)(lambda: body(*refs))
        return pl.run_state(stateful)((x, jnp.full_like(x, -1)))
    return f


class InProcess:
    """A fuzz executor (conformance/fuzz/executor.py) that runs units in this process, one per
    ``results`` call; after ``stop_after`` results it raises KeyboardInterrupt as a Ctrl-C would."""
    slots = 1

    def __init__(self, stop_after: int | None = None):
        self.todo, self.stop_after, self.given = [], stop_after, 0

    def submit(self, unit, priority=False):
        self.todo.insert(0, unit) if priority else self.todo.append(unit)

    def results(self, timeout=None):
        from conformance.fuzz.work import run_unit
        if self.stop_after is not None and self.given >= self.stop_after:
            raise KeyboardInterrupt
        if not self.todo:
            return []
        unit = self.todo.pop(0)
        self.given += 1
        return [(unit, run_unit(unit))]

    def pending(self):
        return len(self.todo)

    def close(self):
        self.todo.clear()


def generated_digest(family: str, seed: int, n: int) -> str:
    """sha256 over the sources and input bytes of programs 0..n-1 of a fuzz family's seed (pinned by
    the family's tests: the same on every JAX in range), checking on the way that each program
    regenerates from its choices and survives a JSON round trip."""
    import dataclasses
    import hashlib

    from conformance.fuzz import ir, render, values
    from conformance.fuzz.generate import generate, program_key, regenerate
    h = hashlib.sha256()
    for i in range(n):
        p, choices = generate(family, seed, i)
        h.update(render.source(p).encode())
        for a in values.make_inputs(p, program_key(family, seed, i)):
            h.update(a.tobytes())
        assert ir.dumps(regenerate(family, choices)) == ir.dumps(dataclasses.replace(p, origin=()))
        assert ir.dumps(ir.loads(ir.dumps(p))) == ir.dumps(p)
    return h.hexdigest()
