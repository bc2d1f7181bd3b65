"""Unreduced arrays across shard_maps (interp/rules/spmd.py; semantics spec/spmd.py shard_map).

Against XLA:CPU with 8 host devices (a subprocess with XLA_FLAGS set before JAX starts:
tests/support.py verdicts_with_8_devices): the unreduced cases of the SPMD family and programs that hand a
device's partials from one shard_map to the next, bit for bit (integer-valued inputs: every sum
is exact). Reference only: hand-computed partials, and what the reference refuses with the reason
(unreduced operands whose partials it does not carry) although JAX runs them.
"""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import interp
from conformance.cases.spmd import (explicit_mesh, has_unreduced_kinds, in_mesh, unreduced_in_spec,
                                    unreduced_kind_program, unreduced_out_spec)
from interp.errors import UndefinedBehaviorError, UnsupportedPrimitiveError
from tests.support import verdicts_with_8_devices

SHAPE, NAMES = (2, 4), ("x", "y")
NO_KINDS = "no PartitionSpec.unreduced_kind / unreduced_pmax in this JAX (new in 0.11)"


def _ints(shape, lo=-100, hi=100, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)


def _produce(mesh, x):
    """Device (x, y)'s block plus 100 y, left unreduced over y: partials differ per device."""
    from jax._src.lax.parallel import vary_unreduced_cast

    def body(b):
        return vary_unreduced_cast(b + lax.axis_index("y").astype(b.dtype) * 100, "y")
    return jax.shard_map(body, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", unreduced={"y"}))(
        jax.sharding.reshard(x, P("x", "y")))


def _show_partials(mesh, u, spec=P("x", unreduced={"y"}), out=P("x", "y")):
    """Every device's partial of ``u`` side by side (check_vma=False: a plain block out)."""
    return jax.shard_map(lambda b: b, mesh=mesh, in_specs=spec, out_specs=out, check_vma=False)(u)


# Programs JAX runs but whose partials the reference does not carry into a shard_map (each makes
# an array unreduced some other way than a shard_map's out_specs).
def _reshard_to_unreduced(x):
    mesh = explicit_mesh(SHAPE, NAMES)
    with in_mesh(mesh):
        a = jax.sharding.reshard(x, P("x", None))   # (from P(None, None), JAX 0.12 raises NotImplementedError)
        return _show_partials(mesh, jax.sharding.reshard(a, P("x", None, unreduced={"y"})))


def _reduced_then_unreduced(x):
    mesh = explicit_mesh(SHAPE, NAMES)
    with in_mesh(mesh):
        reduced = jax.sharding.reshard(_produce(mesh, x), P("x", None))
        return _show_partials(mesh, jax.sharding.reshard(reduced, P("x", None, unreduced={"y"})))


def _dot_left_unreduced(x):
    mesh = explicit_mesh(SHAPE, NAMES)
    with in_mesh(mesh):
        a = jax.sharding.reshard(x, P("x", "y"))
        w = jax.sharding.reshard(jnp.ones((8, 2), x.dtype), P("y", None))
        return _show_partials(mesh, jnp.dot(a, w, out_sharding=P("x", None, unreduced={"y"})))


def _max_left_unreduced(x):
    mesh = explicit_mesh(SHAPE, NAMES)
    un = P("x", unreduced={"y"}, unreduced_kind=jax.sharding.UnreducedKind.max)
    with in_mesh(mesh):
        m = lax.reduce_max(jax.sharding.reshard(x, P("x", "y")), (1,), out_sharding=un)
        return _show_partials(mesh, m, un, P(("x", "y")))


REFUSED = {"reshard_to_unreduced": _reshard_to_unreduced,
           "reduced_then_unreduced": _reduced_then_unreduced,
           "dot_left_unreduced": _dot_left_unreduced,
           "max_left_unreduced": _max_left_unreduced}   # (JAX >= 0.11: has_unreduced_kinds)


def _applies(name: str) -> bool:
    return name != "max_left_unreduced" or has_unreduced_kinds()

CASES_ON_XLA = {"spmd/unreduced_out_spec/float32/2x4": "pass",
                "spmd/grad_of_reduced_in_spec/float32/2x4": "pass",
                "spmd/unreduced_in_spec/float32/2x4": "pass",
                **{f"spmd/unreduced_kind/{k}/int32/2x4": "pass" if has_unreduced_kinds() else
                   "backend-unsupported not applicable" for k in ("max", "min")}}


def _compare_main() -> None:
    """Run with 8 host devices: {check: verdict} as JSON."""
    assert len(jax.devices()) == 8, jax.devices()
    from conformance.cases import get
    from conformance.execute import run_case
    from interp.rules.spmd import unreduced_array_value
    verdicts = {}
    for case_id in CASES_ON_XLA:
        rec = run_case(get(case_id), "xla:cpu", 0)
        verdicts[case_id] = f"{rec.outcome} {str(rec.detail)[:300]}"
    x = _ints((8, 8))
    for name, fn in REFUSED.items():   # JAX runs them: the refusal is the reference's
        if not _applies(name):
            verdicts[name] = "not applicable"   # (the tests skip it, saying why)
            continue
        try:
            jax.block_until_ready(jax.jit(fn)(x))
            verdicts[name] = "jax runs it"
        except Exception as e:  # noqa: BLE001 - reported as the verdict
            verdicts[name] = f"{type(e).__name__}: {str(e)[:300]}"
    # An unreduced jax.Array as the program's argument: its devices hold the partials.
    mesh = explicit_mesh(SHAPE, NAMES)
    with in_mesh(mesh):
        u = jax.jit(lambda a: _produce(mesh, a))(x)

        def consume(v):
            return _show_partials(mesh, v), jax.sharding.reshard(v, P("x", None))
        want = [np.asarray(w) for w in jax.jit(consume)(u)]
        got = interp.eval_jaxpr(jax.make_jaxpr(consume)(u), unreduced_array_value(u))
        interpreted = interp.interpret(consume)(u)   # the argument converted by the SPMD family
    same = all(np.asarray(g).tobytes() == w.tobytes() for g, w in zip(got, want))
    verdicts["unreduced_array_argument"] = "ok" if same else f"differ: {got} {want}"
    same = all(np.asarray(g).tobytes() == w.tobytes() for g, w in zip(interpreted, want))
    verdicts["unreduced_array_argument_interpreted"] = "ok" if same else f"differ: {interpreted}"
    print("VERDICTS " + json.dumps(verdicts))


@pytest.fixture(scope="module")
def xla_verdicts():
    return verdicts_with_8_devices("tests.test_spmd_unreduced")


@pytest.mark.parametrize("case_id", list(CASES_ON_XLA))
def test_case_outcome_on_xla_cpu_with_8_devices(xla_verdicts, case_id):
    assert xla_verdicts[case_id].startswith(CASES_ON_XLA[case_id]), xla_verdicts[case_id]


def test_unreduced_jax_array_argument_gives_each_device_its_partial(xla_verdicts):
    assert xla_verdicts["unreduced_array_argument"] == "ok", xla_verdicts["unreduced_array_argument"]
    interpreted = xla_verdicts["unreduced_array_argument_interpreted"]
    assert interpreted == "ok", interpreted   # interp.interpret converts the argument itself


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_programs_run_in_jax(xla_verdicts, name):
    if not _applies(name):
        pytest.skip(NO_KINDS)
    assert xla_verdicts[name] == "jax runs it", xla_verdicts[name]


# --- reference only -----------------------------------------------------------------------------

def test_unreduced_out_spec_is_the_sum_of_the_partials():
    # Row r, column c of the result sums, over the 4 devices along y, the device's element (r, c)
    # of its block (columns 2y + c) times 3 plus y.
    x = _ints((8, 8))
    got = interp.interpret(unreduced_out_spec(SHAPE, NAMES))(x)
    want = sum(x[:, 2 * y:2 * y + 2] * 3 + y for y in range(4))
    assert got.dtype == np.float32 and got.tobytes() == want.astype(np.float32).tobytes()


def test_unreduced_in_spec_gives_each_device_its_partial():
    # Device (x, y)'s partial is its block (columns 2y, 2y + 1) times 3 plus y: side by side, the
    # partials are x * 3 + (column // 2); their sum is the unreduced_out_spec answer; doubled in a
    # second shard_map and reduced, twice that; all-gathered along x, the same partials.
    x = _ints((8, 8))
    seen, total, doubled, gathered = interp.interpret(unreduced_in_spec(SHAPE, NAMES))(x)
    partials = x * 3 + np.arange(8) // 2
    want_total = sum(partials[:, 2 * y:2 * y + 2] for y in range(4))
    for got, want in ((seen, partials), (total, want_total), (doubled, 2 * want_total), (gathered, partials)):
        assert got.dtype == np.float32 and got.tobytes() == want.astype(np.float32).tobytes()


@pytest.mark.skipif(not has_unreduced_kinds(), reason=NO_KINDS)
@pytest.mark.parametrize("kind", ["max", "min"])
def test_unreduced_kind_reduces_the_partials_by_max_or_min(kind):
    x = _ints((8, 8), -1000, 1000, dtype=np.int32)
    resharded, collective, seen, extremum = interp.interpret(unreduced_kind_program(kind, SHAPE, NAMES))(x)
    partials = x * 3 + np.arange(8, dtype=np.int32) // 2
    blocks = np.stack([partials[:, 2 * y:2 * y + 2] for y in range(4)])
    want = blocks.max(0) if kind == "max" else blocks.min(0)
    assert seen.tobytes() == partials.tobytes()
    assert resharded.tobytes() == want.tobytes() and collective.tobytes() == want.tobytes()
    assert extremum.tobytes() == (x.max(1) if kind == "max" else x.min(1)).tobytes()


@pytest.mark.parametrize("name", list(REFUSED))
def test_unreduced_operand_without_carried_partials_is_refused_with_the_reason(name):
    if not _applies(name):
        pytest.skip(NO_KINDS)
    with pytest.raises(UnsupportedPrimitiveError, match=r"in_specs P\('x', unreduced=\{'y'\}.*not as a "
                                                        r"shard_map's unreduced out_specs left it"):
        interp.interpret(REFUSED[name])(_ints((8, 8)))


def test_unreduced_partials_that_differ_between_replicas_are_undefined():
    # Out_specs P(unreduced={'y'}) replicate over x; with check_vma=False device (x, y) leaves
    # x * (2y - 3): every x's partials sum to 0 (so the reduced value is defined), but a later
    # shard_map taking the partials would get x = 0's or x = 1's, which XLA does not say.
    mesh = explicit_mesh(SHAPE, NAMES)

    def program(a, take_partials):
        with in_mesh(mesh):
            def body(b):
                x_, y_ = (lax.axis_index(n).astype(b.dtype) for n in NAMES)
                return jnp.zeros((2, 2), b.dtype) + x_ * (2 * y_ - 3)
            u = jax.shard_map(body, mesh=mesh, in_specs=P("x", "y"), out_specs=P(unreduced={"y"}),
                              check_vma=False)(jax.sharding.reshard(a, P("x", "y")))
            if take_partials:
                return _show_partials(mesh, u, P(unreduced={"y"}), P(None, "y"))
            return jax.sharding.reshard(u, P())
    reduced = interp.interpret(lambda a: program(a, False))(_ints((4, 8)))
    assert reduced.shape == (2, 2) and not reduced.any()
    with pytest.raises(UndefinedBehaviorError, match="partials are not determined.*devices "
                                                     r"\{'x': 0, 'y': 0\} and \{'x': 1, 'y': 0\}"):
        interp.interpret(lambda a: program(a, True))(_ints((4, 8)))


@pytest.mark.parametrize("build", [unreduced_out_spec, unreduced_in_spec], ids=["out_spec", "in_spec"])
def test_unreduced_same_in_lockstep_and_per_device(monkeypatch, build):
    # The lockstep speed path (interp/spmd_lockstep.py) and the per-device path give the same
    # partials and the same reduction of them (shard_map hands blocks out and assembles both the
    # same way).
    from interp import spmd_lockstep
    fn, x = build(SHAPE, NAMES), _ints((8, 8))
    real = spmd_lockstep.program
    taken = []
    monkeypatch.setattr(spmd_lockstep, "program", lambda *a: taken.append(real(*a)) or taken[-1])
    lockstep = jax.tree.leaves(interp.interpret(fn)(x))
    assert any(t is not None for t in taken)       # (a body with unreduced_psum runs per device)
    monkeypatch.setattr(spmd_lockstep, "program", lambda *a: None)
    per_device = jax.tree.leaves(interp.interpret(fn)(x))
    assert len(lockstep) == len(per_device)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(lockstep, per_device))
