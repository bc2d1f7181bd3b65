"""The program generator (conformance/fuzz): deterministic from (family, seed, index), replayable from
its choices, JSON round trip, and every program it makes traces, runs in the reference without
undefined behaviour and compiles on XLA:CPU."""
from __future__ import annotations

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import interp
from conformance.fuzz import families, ir, render, values
from conformance.fuzz.choices import Choices
from conformance.fuzz.generate import generate, program_key, regenerate

FAMILIES = tuple(families.FAMILIES)


def test_choices_are_deterministic_and_replayable():
    a, b = Choices("k", 1), Choices("k", 1)
    draws = [a.below(n) for n in (2, 3, 1000, 7, 1 << 40)]
    assert draws == [b.below(n) for n in (2, 3, 1000, 7, 1 << 40)]
    assert draws != [Choices("k", 2).below(n) for n in (2, 3, 1000, 7, 1 << 40)]
    replay = Choices(prefix=a.record)
    assert [replay.below(n) for n in (2, 3, 1000, 7, 1 << 40)] == draws
    # past the prefix every answer is the simplest; too large a recorded value is clamped
    short = Choices(prefix=[5])
    assert [short.below(3), short.below(9)] == [2, 0]


@pytest.mark.parametrize("family", FAMILIES)
def test_same_program_from_seed_and_index_and_from_its_choices(family):
    for index in range(20):
        p, choices = generate(family, 7, index)
        q, _ = generate(family, 7, index)
        assert ir.dumps(p) == ir.dumps(q)
        assert ir.dumps(regenerate(family, choices)) == ir.dumps(p.__class__(**{**p.__dict__, "origin": ()}))
        assert ir.dumps(ir.loads(ir.dumps(p))) == ir.dumps(p)
    sources = {render.source(generate(family, 7, i)[0]) for i in range(20)}
    assert len(sources) > 15, "the generator makes (nearly) the same program every time"


def test_generation_does_not_depend_on_the_process():
    code = ("from conformance.fuzz.generate import generate; from conformance.fuzz import render, values; "
            "import hashlib; h = hashlib.sha256()\n"
            "for f in ('lax', 'control_flow', 'random', 'state'):\n"
            "    for i in range(5):\n"
            "        p, _ = generate(f, 3, i); h.update(render.source(p).encode())\n"
            "        for a in values.make_inputs(p, f'{f}/3/{i}'): h.update(a.tobytes())\n"
            "print(h.hexdigest())")
    outs = set()
    for hashseed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=hashseed)
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                check=True).stdout.strip())
    assert len(outs) == 1


def test_unknown_and_planned_families_are_refused_by_name():
    with pytest.raises(families.UnknownFamily, match="implemented: lax, control_flow, random, state"):
        families.get("nope")
    with pytest.raises(families.UnknownFamily, match="no generator yet"):
        families.get("pallas-triton")


# (a family whose programs need several devices runs in workers that have them: tests/test_fuzz_spmd.py)
@pytest.mark.parametrize("family", [f for f in FAMILIES if families.FAMILIES[f].devices == 1])
def test_programs_trace_run_in_the_reference_and_compile(family):
    """Well typed and defined by construction: each program traces, the reference evaluates it
    without raising (no undefined behaviour, nothing unsupported) and XLA:CPU returns outputs of the
    reference's shapes and dtypes."""
    for index in range(12):
        p, _ = generate(family, 11, index)
        assert not render.why_not_renderable(p)
        fn = render.function(p)
        xs = values.make_inputs(p, program_key(family, 11, index))
        settings = (("jax_enable_x64", p.x64),) + p.config
        old = [(k, getattr(jax.config, k)) for k, _ in settings]
        try:
            for k, v in settings:
                jax.config.update(k, v)
            closed = jax.make_jaxpr(fn)(*xs)
            with np.errstate(all="ignore"):
                ref = interp.eval_jaxpr(closed, *xs)
            got = jax.tree_util.tree_leaves(jax.jit(fn)(*xs))
        finally:
            for k, v in old:
                jax.config.update(k, v)
        assert [(np.shape(r), np.asarray(r).dtype) for r in ref] == [(g.shape, g.dtype) for g in got], \
            render.source(p)
