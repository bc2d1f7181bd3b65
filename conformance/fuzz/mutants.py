"""Mutant runners: XLA:CPU with one injected bug each, to measure the fuzzer (does it find the bug,
reduce it, and report nothing else?). Test and benchmark use only: ``runners`` is a runner plugin
(hardware_runners/base.py): registered through the entry point group ``jax_conformance.runners``
(tests/test_runner_plugins.py), or by naming this module in ``JAX_CONFORMANCE_RUNNERS``.

A mutant runs the program's jaxpr equation by equation inside one ``jax.jit`` (calls inlined),
with its bug applied to the results of the equations it targets; everything else is XLA:CPU's.
It is judged as ``xla:cpu`` (the same allowances and known divergences apply). One Pallas mutant,
``mutant:pallas-store-ignores-mask``, is JAX's interpret mode with one bug in the kernels it runs,
judged as ``pallas:interpret``.
"""
from __future__ import annotations

import numpy as np

from hardware_runners.base import HloInterpret, XlaRunner, place_on_default_device, run_staged


def _bits_low(x, n: int):
    import jax.numpy as jnp
    from jax import lax
    return lax.bitcast_convert_type(x, jnp.uint32) & jnp.uint32((1 << n) - 1)


def _add_ulp(eqn, args, out):
    """float32 add one ulp up where the first operand's low three bits are 0b101 (1 in 8)."""
    import jax.numpy as jnp
    if eqn.primitive.name != "add" or np.dtype(eqn.outvars[0].aval.dtype) != np.float32:
        return out
    x = jnp.broadcast_to(args[0], out.shape)
    return jnp.where(_bits_low(x, 3) == 5, jnp.nextafter(out, jnp.float32(jnp.inf)), out)


def _exp_far(eqn, args, out):
    """float32 exp about 8000 ulp off for arguments in [1, 2)."""
    import jax.numpy as jnp
    if eqn.primitive.name != "exp" or np.dtype(eqn.outvars[0].aval.dtype) != np.float32:
        return out
    x = args[0]
    return jnp.where((x >= 1) & (x < 2), out * jnp.float32(1 + 2.0 ** -10), out)


def _max_drops_nan(eqn, args, out):
    """float max returns the other operand where one is NaN (instead of NaN)."""
    import jax.numpy as jnp
    if eqn.primitive.name != "max" or not jnp.issubdtype(eqn.outvars[0].aval.dtype, jnp.floating):
        return out
    x, y = (jnp.broadcast_to(a, out.shape) for a in args)
    return jnp.where(jnp.isnan(x), y, jnp.where(jnp.isnan(y), x, out))


BUGS = {"add-ulp": _add_ulp, "exp-far": _exp_far, "max-drops-nan": _max_drops_nan}


class MutantRunner(XlaRunner):
    judged_as = "xla:cpu"

    def __init__(self, bug: str):
        super().__init__("cpu")
        self.name = f"mutant:{bug}"
        self.bug = BUGS[bug]

    def run(self, program, inputs):
        import jax
        from conformance.replay import walk_inlining_calls
        from interp.evaluator import split_jaxpr
        closed = jax.make_jaxpr(program.build(None))(*inputs)
        jaxpr, consts = split_jaxpr(closed)

        def eval_eqn(eqn, invals):
            outs = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(eqn.params))
            outs = list(outs) if eqn.primitive.multiple_results else [outs]
            if len(outs) == 1:
                outs = [self.bug(eqn, invals, outs[0])]
            return outs

        def buggy(*args):
            return walk_inlining_calls(jaxpr, consts, args, eval_eqn, lambda lit: lit.val)

        with jax.default_device(self.device()):
            return run_staged(jax.jit(buggy), place_on_default_device(inputs))


class PsumCountsDeviceZeroTwice(XlaRunner):
    """XLA:CPU whose all-reduce sum adds the first participant's operand twice on that participant
    (``lax.psum`` inside the programs' shard_map bodies, patched while the program is traced afresh).
    Judged as ``xla:cpu``."""
    judged_as = "xla:cpu"

    def __init__(self):
        super().__init__("cpu")
        self.name = "mutant:psum-counts-device-0-twice"

    def run(self, program, inputs):
        import types
        from unittest import mock

        import jax
        import jax.numpy as jnp
        from jax import lax
        psum = lax.psum

        def twice(x, axis_name, **kw):
            first = lax.axis_index(axis_name) == 0
            return jax.tree.map(lambda s, v: s + jnp.where(first, v, jnp.zeros_like(v)), psum(x, axis_name, **kw), x)

        fn = program.build(None)
        # a new function object: jit's trace cache must not hand back a trace made without the bug
        fresh = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        with mock.patch.object(lax, "psum", twice), jax.default_device(self.device()):
            return run_staged(jax.jit(fresh), list(inputs))


class DyingRunner(XlaRunner):
    """XLA:CPU that kills its process (abort: ``mutant:abort-on-<primitive>``) or never returns
    (``mutant:hang-on-<primitive>``) on programs containing one primitive: what isolation is for."""
    judged_as = "xla:cpu"

    def __init__(self, how: str, primitive: str):
        super().__init__("cpu")
        self.name = f"mutant:{how}-on-{primitive}"
        self.how, self.primitive = how, primitive

    def run(self, program, inputs):
        import os
        import time

        import jax
        from conformance.case import jaxpr_primitives
        if self.primitive in jaxpr_primitives(jax.make_jaxpr(program.build(None))(*inputs)):
            if self.how == "abort":
                os.abort()
            time.sleep(10 ** 6)
        return super().run(program, inputs)


class StoreIgnoresMask(HloInterpret):
    """JAX's HLO interpret mode (``pallas:interpret``) in which a masked store ignores its mask: a
    kernel's ``o_ref[...] = jnp.where(pred, v, o_ref[...])`` stores ``v`` everywhere (the generated
    kernels' masked stores are written so: conformance/fuzz/ops.py ``k_masked_store``). Judged as
    ``pallas:interpret``."""
    judged_as = "pallas:interpret"

    def __init__(self):
        super().__init__()
        self.name = "mutant:pallas-store-ignores-mask"

    def run(self, program, inputs):
        from unittest import mock

        import jax.numpy as jnp
        where = jnp.where

        def ignoring_masked_stores(pred, x, y, *args, **kw):
            if _called_from_masked_store():
                return jnp.broadcast_to(x, jnp.shape(y)).astype(jnp.result_type(x, y))
            return where(pred, x, y, *args, **kw)

        with mock.patch.object(jnp, "where", ignoring_masked_stores):
            return super().run(program, inputs)


def _called_from_masked_store() -> bool:
    """Whether the caller's caller is a generated masked store (``r[...] = jnp.where(p, v, r[...])``;
    generated source is in linecache: conformance/fuzz/render.py)."""
    import inspect
    import linecache
    import re
    frame = inspect.currentframe().f_back.f_back
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    return re.match(r"\s*(\w+)\[\.\.\.\] = jnp\.where\(.*, \1\[\.\.\.\]\)$", line.rstrip()) is not None


def runners() -> list:
    return ([MutantRunner(bug) for bug in BUGS] + [DyingRunner("abort", "transpose"), DyingRunner("hang", "transpose")]
            + [StoreIgnoresMask(), PsumCountsDeviceZeroTwice()])
