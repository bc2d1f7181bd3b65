"""Cost of interpreted devices: a data- and tensor-parallel MLP training step on a 2-D mesh of 8
devices (2 data x 4 model) in the reference, against the same step on one device with the same
total work (the whole batch, the whole hidden layer). Target: at most 3x (per-device bookkeeping:
threads, the baton, rendezvous, slicing and assembling blocks, must not dominate).

Per device: x (B/2, D) @ w1 (D, H/4) -> tanh -> @ w2 (H/4, D), psum over "model" (Megatron
row-parallel), squared error; gradients of w1, w2 by jax.grad inside the body, pmean over "data";
one SGD update. The single-device program does the same arithmetic (the same multiply-adds) on
whole arrays; the two are not the same function (the per-shard mean and the pmean scale the
gradients differently), so their outputs are not compared here: tests/test_spmd.py and the spmd
conformance family compare the sharded program with XLA:CPU. The devices are interpreted (an
AbstractMesh: no real devices needed).

Columns: the reference as it runs the step (8 devices: in lockstep where
interp/spmd_lockstep.py takes the body, i.e. small shards), the same with lockstep off (every
device interpreted on its own), one device; ratios of the alternating rounds' medians, wall and
(CPU). Measured 2026-11-27 on the shared 2-core development VM (load average 4-6 from other
users, OPENBLAS_NUM_THREADS=1: with threaded OpenBLAS on a loaded machine every BLAS call costs
~60 ms of thread wake-up whatever its size), JAX 0.12.0.1, --repeats=9:
(64, 64, 256) 2.13x (CPU 1.93x), per device 5.66x; (256, 256, 1024) 1.25x; (512, 512, 2048)
1.35x. JAX 0.10.2: 1.96x, per device 5.52x; 1.53x; 1.38x. Before this work, the same run of the
previous code on JAX 0.12.0.1: 8.84x, 2.52x, 2.20x (8 threads handing a baton through a condition
each woke on; every equation once per device; psums of two float32 participants through the
general certified sum). Target met at every size.

    python -m bench.spmd [--quick] [--repeats N]
"""
from __future__ import annotations

import argparse
import contextlib

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

import interp
from interp import spmd_lockstep
from bench._timing import compare

TARGET = 3.0


def _loss(x, t, w1, w2, reduce_model):
    y = reduce_model(jnp.tanh(x @ w1) @ w2)
    return jnp.mean((y - t) ** 2)


def sharded_step(mesh):
    def body(x, t, w1, w2):
        g1, g2 = jax.grad(_loss, argnums=(2, 3))(x, t, w1, w2, lambda v: lax.psum(v, "model"))
        g1, g2 = lax.pmean((g1, g2), "data")
        return w1 - 0.1 * g1, w2 - 0.1 * g2
    return jax.shard_map(body, mesh=mesh, in_specs=(P("data"), P("data"), P(None, "model"), P("model")),
                         out_specs=(P(None, "model"), P("model")))


def single_step(x, t, w1, w2):
    g1, g2 = jax.grad(_loss, argnums=(2, 3))(x, t, w1, w2, lambda v: v)
    return w1 - 0.1 * g1, w2 - 0.1 * g2


def main(flags=()) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(list(flags))
    auto = (jax.sharding.AxisType.Auto,) * 2
    mesh = jax.sharding.AbstractMesh((2, 4), ("data", "model"), axis_types=auto)
    sizes = ((64, 64, 256),) if args.quick else ((64, 64, 256), (256, 256, 1024), (512, 512, 2048))
    rng = np.random.default_rng(0)
    print(f"JAX {jax.__version__}; medians of {args.repeats} alternating rounds (wall; CPU in "
          f"brackets); target <= {TARGET}x")
    print(f"{'MLP step (B, D, H)':<20} {'8 devices':>16} {'8 dev per-device':>18} "
          f"{'1 device':>16} {'8 dev / 1':>15} {'per-dev / 1':>15}  target")
    for b, d, h in sizes:
        args_ = [rng.standard_normal(s).astype(np.float32) * 0.5 for s in ((b, d), (b, d), (d, h), (h, d))]
        f8 = interp.interpret(sharded_step(mesh))
        f1 = interp.interpret(single_step)
        lock = compare(lambda: f8(*args_), lambda: f1(*args_), args.repeats)
        with per_device_only():
            f8_old = interp.interpret(sharded_step(mesh))
            old = compare(lambda: f8_old(*args_), lambda: f1(*args_), args.repeats)
        ok = "ok" if lock.ratio <= TARGET else "MISSED"
        ms = (lambda wall, cpu: f"{wall * 1e3:.1f} ({cpu * 1e3:.1f})ms")
        print(f"{str((b, d, h)):<20} {ms(lock.a, lock.cpu_a):>16} {ms(old.a, old.cpu_a):>18} "
              f"{ms(lock.b, lock.cpu_b):>16} {lock.ratio:>6.2f}x ({lock.cpu_a / lock.cpu_b:.2f}x) "
              f"{old.ratio:>6.2f}x ({old.cpu_a / old.cpu_b:.2f}x)  {ok}", flush=True)


@contextlib.contextmanager
def per_device_only():
    """The shard_map body interpreted once per device (the evaluation before lockstep)."""
    program = spmd_lockstep.program
    spmd_lockstep.program = lambda *a: None
    try:
        yield
    finally:
        spmd_lockstep.program = program

if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
