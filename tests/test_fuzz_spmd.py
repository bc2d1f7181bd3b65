"""The spmd program family (conformance/fuzz/families/spmd.py): shard_map programs with collectives,
deterministic, defined by construction, judged on XLA:CPU with 8 host devices, and an injected
collective bug found.

pytest's own process may have started JAX with one device: what needs 8 runs in a campaign's
isolated workers (which get them: conformance/isolation.py) or in one subprocess
(``_compare_main``, as tests/test_spmd.py does)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import ml_dtypes
import numpy as np
import pytest

from conformance.fuzz import ir, values
from conformance.fuzz.campaign import run_campaign
from conformance.fuzz.evaluate import evaluate
from conformance.fuzz.families import FAMILIES, host_devices
from conformance.fuzz.families.spmd import DEVICES
from conformance.fuzz.generate import generate
from conformance.fuzz.shrink import TestCase as FuzzCase  # (a program and its inputs)
from hardware_runners import get_runner
from tests.support import generated_digest, verdicts_with_8_devices

MUTANTS = "conformance.fuzz.mutants"
# sha256 over the sources and input bytes of programs 0-29 of seed 0: the same on JAX 0.10.2 and
# 0.12.0.1 (and 0.11.2, numpy 2.1). Changing it means raising GENERATOR_VERSION.
PINNED = "ff0c60f002051f53a6c361c71f69af80173ba22d45f52a2a426f57fc7be5a018"


def _body(p):
    return p.body.ops[0].blocks[0]


def test_programs_are_deterministic_across_processes_and_jax_versions():
    assert generated_digest("spmd", 0, 30) == PINNED


def test_the_generator_covers_what_it_claims():
    """Over 150 programs: every collective (tiled and untiled forms, over one axis and both),
    float reductions, meshes of one and two axes up to 8 devices, replicated and partitioned specs."""
    seen: set = set()
    for i in range(150):
        p, _ = generate("spmd", 1, i)
        sm = p.body.ops[0]
        assert p.devices == int(np.prod(sm.p["mesh"])) <= DEVICES
        seen.add(f"mesh-rank{len(sm.p['mesh'])}")
        seen |= {"devices8"} if p.devices == 8 else set()
        for kind in ("in", "out"):
            for spec in sm.p[f"{kind}_specs"]:
                seen.add(f"{kind}:" + ("replicated" if all(d is None for d in spec) else "partitioned"))
                seen |= {f"{kind}:two-axes-on-a-dim" for d in spec if d and len(d) == 2}
        seen |= {"rank0-input" for t in _body(p).params if t.rank == 0}
        for op in _body(p).ops:
            name = op.p["fn"] if op.name == "all_reduce" else op.name
            if name in ("all_gather", "psum_scatter"):
                name += ":tiled" if op.p["tiled"] else ":untiled"
            if "axes" in op.p:
                seen.add(name)
                seen |= {"two-axis-collective"} if len(op.p["axes"]) == 2 else set()
                seen |= {f"float-{name}"} if op.outs[0].dtype.startswith("float") and "gather" not in name else set()
    want = {"mesh-rank1", "mesh-rank2", "devices8", "in:replicated", "in:partitioned", "out:replicated",
            "out:partitioned", "in:two-axes-on-a-dim", "rank0-input", "psum", "pmax", "pmin",
            "psum_scatter:tiled", "psum_scatter:untiled", "all_gather:tiled", "all_gather:untiled", "ppermute",
            "all_to_all", "axis_index", "two-axis-collective", "float-psum", "float-pmax", "float-pmin",
            "float-psum_scatter:tiled"}
    assert want <= seen, want - seen


def test_float_reductions_are_of_small_integers_every_order_sums_exactly():
    """A float psum/pmax/pmin/psum_scatter reduces a convert from a small integer type whose sum
    over every device fits the float's significand (so no order can round; no NaN or -0.0)."""
    reductions = 0
    for i in range(150):
        p, _ = generate("spmd", 2, i)
        body = _body(p)
        producer = {vid: op for k, op in enumerate(body.ops) for vid in body.ids_of(k)}
        for op in body.ops:
            if op.name not in ("all_reduce", "psum_scatter") or not op.outs[0].dtype.startswith("float"):
                continue
            reductions += 1
            src = producer.get(op.args[0])
            assert src is not None and src.name == "convert", op
            small = body.types()[src.args[0]].dtype
            info = np.iinfo(np.dtype(small))
            mant = ml_dtypes.finfo(np.dtype(op.outs[0].dtype)).nmant + 1
            assert DEVICES * max(abs(info.min), info.max) <= 2 ** mant, (small, op.outs[0].dtype)
    assert reductions >= 10


def test_the_family_declares_its_devices_and_a_process_without_them_says_so(monkeypatch):
    assert FAMILIES["spmd"].devices == DEVICES and host_devices(["lax", "spmd"]) == DEVICES
    assert host_devices(["lax"]) == 1
    p = next(p for p in (generate("spmd", 0, i)[0] for i in range(50)) if p.devices > 1)
    one = jax.devices()[:1]
    monkeypatch.setattr(jax, "devices", lambda *a: one)
    recs = evaluate(FuzzCase(p, values.make_inputs(p, "k")), [get_runner("xla:cpu")], "fuzz/spmd/x")
    assert recs[0]["outcome"] == "backend-unsupported" and recs[0]["not_applicable"]
    assert f"needs {p.devices} devices" in recs[0]["detail"], recs[0]["detail"]


def test_campaign_on_xla_cpu_passes_and_finds_an_injected_collective_bug(tmp_path, monkeypatch):
    """In isolated workers with 8 host devices: 40 programs judged on XLA:CPU and on XLA:CPU whose
    psum counts device 0's operand twice there. XLA:CPU: nothing unexplained. The mutant: found,
    every bucket is the mutant's, at the shard_map, and shrunk to a shard_map of a few operations
    (measured: 2-4, the psum and the conversions that give its dtype)."""
    monkeypatch.setenv("JAX_CONFORMANCE_RUNNERS", MUTANTS)
    out = str(tmp_path / "c")
    s = run_campaign(["xla:cpu", "mutant:psum-counts-device-0-twice"], ["spmd"], programs=40, out=out, workers=1,
                     shrink_budget_s=30, bisect_budget_s=0, log=lambda *_: None)
    assert s["programs"] == 40
    lines = [json.loads(x) for x in open(os.path.join(out, "programs.jsonl"))]
    outcomes = [line["outcomes"]["xla:cpu"] for line in lines]
    assert set(outcomes) <= {"pass", "pass-with-allowance", "known-divergence"}, outcomes
    assert s["counts"]["xla:cpu"]["findings"] == 0
    mutant = [b for b in s["buckets"] if "mutant:psum-counts-device-0-twice" in b]
    assert mutant, "the injected psum bug was not found in 40 programs"
    assert all(b.startswith("fail:shard_map:") for b in s["buckets"]) and len(mutant) == len(s["buckets"]), \
        s["buckets"]
    findings = list((tmp_path / "c" / "findings").iterdir())
    for f in findings:
        reduced = json.load(open(f / "finding.json"))["reduced"]
        assert reduced["ops"] <= 4, reduced
    # the reproducer is plain JAX that gives itself the devices: on XLA:CPU without the injected
    # bug it agrees with the reference
    repro = findings[0] / "reproducer_reduced.py"
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH", "JAX_CONFORMANCE_RUNNERS")}
    run = subprocess.run([sys.executable, str(repro)], capture_output=True, text=True, timeout=300, env=env,
                         cwd=str(tmp_path))
    assert run.returncode == 0 and "agrees with the reference" in run.stdout, run.stdout + run.stderr[-3000:]


# --- undefined out_specs are the reference's finding (8 devices, subprocess) ---------------------

def _neg_split_over_2_devices(out_spec) -> ir.Program:
    """neg of an int32[8] split over 2 devices, returned with ``out_spec``: ``(None,)`` (P()) is
    what the generator never makes (the devices' blocks differ); ``(("x",),)`` is defined."""
    block, whole = ir.Type("int32", (4,)), ir.Type("int32", (8,))
    body = ir.Block((block,), (ir.Op("unary", (0,), ir.params(fn="neg"), (block,)),), (1,))
    out = block if out_spec == (None,) else whole
    sm = ir.Op("shard_map", (0,), ir.params(mesh=(2,), axes=("x",), in_specs=((("x",),),), out_specs=(out_spec,)),
               (out,), (body,))
    return ir.Program("spmd", (ir.Input(whole),), ir.Block((whole,), (sm,), (1,)))


def _compare_main() -> None:
    assert len(jax.devices()) == 8, jax.devices()
    verdicts = {}
    for name, spec in (("replicated", (None,)), ("partitioned", (("x",),))):
        p = _neg_split_over_2_devices(spec)
        rec = evaluate(FuzzCase(p, values.make_inputs(p, "ub")), [get_runner("xla:cpu")], "fuzz/spmd/ub")[0]
        verdicts[name] = [rec["outcome"], rec.get("bucket"), rec.get("detail")]
    print("VERDICTS " + json.dumps(verdicts))


@pytest.fixture(scope="module")
def verdicts():
    return verdicts_with_8_devices("tests.test_fuzz_spmd")


def test_a_replicated_out_spec_of_a_varying_value_is_a_reference_finding(verdicts):
    outcome, bucket, detail = verdicts["replicated"]
    assert outcome == "crash" and bucket.startswith("reference:") and bucket.endswith(":undefined-behaviour"), \
        (outcome, bucket, detail)
    assert verdicts["partitioned"][0] == "pass", verdicts["partitioned"]
