"""The lockstep evaluation of shard_map bodies (interp/spmd_lockstep.py) against the per-device
evaluation it replaces: the same bits for every output, on float data where rounding matters
(random normal values: psums and dots round), and the bodies it must not take.

The per-device evaluation is itself checked against XLA:CPU with 8 devices in tests/test_spmd.py
(which now runs the straight-line programs there in lockstep as well)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import interp
from interp import spmd_lockstep

MESH = jax.sharding.AbstractMesh((2, 4), ("data", "model"),
                                 axis_types=(jax.sharding.AxisType.Auto,) * 2)


def _normal(*shapes, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def _mlp_step(x, t, w1, w2):
    # bench/spmd.py's step: data- and tensor-parallel MLP, gradients, pmean, SGD.
    def loss(x, t, w1, w2):
        return jnp.mean((lax.psum(jnp.tanh(x @ w1) @ w2, "model") - t) ** 2)

    def body(x, t, w1, w2):
        g1, g2 = jax.grad(loss, argnums=(2, 3))(x, t, w1, w2)
        g1, g2 = lax.pmean((g1, g2), "data")
        return w1 - 0.1 * g1, w2 - 0.1 * g2
    return jax.shard_map(body, mesh=MESH, in_specs=(P("data"), P("data"), P(None, "model"), P("model")),
                         out_specs=(P(None, "model"), P("model")))(x, t, w1, w2)


def _collectives(x, y):
    # psum over both axes in both orders, over one axis with a reduction before it, axis_index,
    # pmax (per device), integer arithmetic.
    def body(x, y):
        s = lax.psum(x * y, ("model", "data")) - lax.psum(x, ("data", "model"))
        u = lax.psum(jnp.sum(x, axis=1), "data") + lax.axis_index("model")
        k = lax.psum(jnp.round(x * 8).astype(jnp.int32), "model") * 3
        return s, u, lax.pmax(x, "model"), k
    spec = P("data", "model")
    return jax.shard_map(body, mesh=MESH, in_specs=(spec, spec),
                         out_specs=(spec, P("model"), spec, spec))(x, y)


def _segment_reading_nothing(x):
    # After the psum, a batched segment that reads no value of the body (an iota and arithmetic on
    # it): found by the spmd fuzz family.
    def body(x):
        return lax.psum(x, "model"), lax.broadcasted_iota(jnp.int32, (4,), 0) * 2
    return jax.shard_map(body, mesh=MESH, in_specs=P("data", "model"), out_specs=(P("data"), P()))(x)


def _with_cond(x):
    # A collective under control flow: only the per-device evaluation can tell devices apart.
    def body(x):
        return lax.cond(lax.axis_index("model") >= 0, lambda v: lax.psum(v, "model"), lambda v: v, x)
    return jax.shard_map(body, mesh=MESH, in_specs=P("data", "model"),
                         out_specs=P("data", "model"), check_vma=False)(x)


def _both_ways(fn, args, monkeypatch):
    """(lockstep outputs, per-device outputs, the lockstep programs built) of ``fn``."""
    built = []
    program = spmd_lockstep.program

    def recording(*a):
        prog = program(*a)
        built.append(prog)
        return prog
    monkeypatch.setattr(spmd_lockstep, "program", recording)
    lockstep = interp.interpret(fn)(*args)
    monkeypatch.setattr(spmd_lockstep, "program", lambda *a: None)
    per_device = interp.interpret(fn)(*args)
    return jax.tree.leaves(lockstep), jax.tree.leaves(per_device), built


@pytest.mark.parametrize("fn, args", [
    (_mlp_step, _normal((16, 8), (16, 8), (8, 32), (32, 8))),
    (_collectives, _normal((8, 16), (8, 16), seed=1)),
    (_segment_reading_nothing, _normal((8, 16), seed=3)),
], ids=["mlp_step", "collectives", "segment_reading_nothing"])
def test_lockstep_matches_per_device_bit_for_bit(fn, args, monkeypatch):
    got, want, built = _both_ways(fn, args, monkeypatch)
    assert built and all(p is not None for p in built)   # the lockstep path ran
    kinds = {step[0] for p in built for step in p.steps}
    assert "batched" in kinds and "psum" in kinds
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.asarray(g).tobytes() == np.asarray(w).tobytes()


def test_control_flow_keeps_per_device_evaluation(monkeypatch):
    x, = _normal((8, 16), seed=2)
    got, want, built = _both_ways(_with_cond, [x], monkeypatch)
    assert built == [None]
    assert got[0].tobytes() == want[0].tobytes()


def test_two_participant_sum_is_the_correctly_rounded_sum():
    """psum of two float32 participants (its IEEE-addition path) against the general certified
    path, reached by adding a third participant -0.0 that leaves every exact sum unchanged: ties
    at float32 midpoints, cancellations to zero (+0.0), subnormals, far-apart magnitudes."""
    from interp.rules.spmd import participants_sum
    rng = np.random.default_rng(3)
    a = rng.standard_normal(4096).astype(np.float32) * np.float32(2.0) ** rng.integers(-140, 100, 4096)
    b = rng.standard_normal(4096).astype(np.float32) * np.float32(2.0) ** rng.integers(-140, 100, 4096)
    b[:512] = -a[:512]                                     # exact cancellation: +0.0
    a[512:1024] = 1.0
    b[512:1024] = np.float32(2.0 ** -24)                   # ties at a float32 midpoint
    b[1024:1536] = np.float32(3 * 2.0 ** -25)              # just above it
    a[1536:2048] = np.float32(-0.0)
    b[1536:2048] = np.float32(-0.0)                        # -0 + -0: +0.0 as the general path
    assert np.isfinite(a + b).all()                       # (the two-participant path applies)
    pair = np.stack([a, b], axis=-1)
    triple = np.stack([a, b, np.full_like(a, -0.0)], axis=-1)
    two = participants_sum(None, pair, np.float32)
    general = participants_sum(None, triple, np.float32)
    assert two.dtype == general.dtype == np.float32
    assert two.tobytes() == general.tobytes()
