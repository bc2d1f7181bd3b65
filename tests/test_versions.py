"""Every supported JAX release and the lowest declared dependencies: nothing vanishes silently.

- Every registered rule's primitive is defined by the installed JAX, or interp/coverage.py
  RULE_NAME_RELEASES says which releases define it (checked against the installed one).
- Every case any supported JAX generates is generated here too: as a runnable case or, where this
  JAX cannot express it, as a not-applicable one that every runner records with its reason
  (tests/data/case_ids.txt: the nightly case ids of JAX 0.12.0.1, regenerate with
  ``jax-conformance list --profile nightly | cut -f1 | sort > tests/data/case_ids.txt``).
- An equation parameter a rule does not name is UnsupportedPrimitiveError naming it.
- CI's lowest-dependency environment pins exactly the lower bounds pyproject.toml declares.
"""
from __future__ import annotations

import os
import re
import tomllib

import jax
import numpy as np
import pytest
from jax import lax

import interp
from conformance.cases import all_cases
from conformance.execute import run_case
from interp.coverage import (RULE_NAME_RELEASES, all_primitives, import_failure, jax_version,
                             rules_not_in_this_jax)
from tests.support import with_params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_rule_names_a_primitive_of_this_jax_or_says_which_releases_do():
    absent = rules_not_in_this_jax()
    unexplained = sorted(n for n, why in absent.items() if why == "unexplained")
    assert not unexplained, (f"rules for primitive names JAX {jax.__version__} does not define: {unexplained}; "
                             "register the name this JAX uses, or add it to RULE_NAME_RELEASES")
    defined, version = all_primitives(), jax_version()
    wrong = {n: (n in defined) for n, r in RULE_NAME_RELEASES.items()
             if (n in defined) != r.defines(version) and not import_failure(n)}
    assert not wrong, f"RULE_NAME_RELEASES is wrong for JAX {jax.__version__}: defined here = {wrong}"


def _listed_case_ids() -> list[str]:
    with open(os.path.join(ROOT, "tests", "data", "case_ids.txt")) as f:
        return [line.strip() for line in f if line.strip()]


def test_no_case_disappears_on_this_jax():
    generated = all_cases("nightly")
    missing = sorted(set(_listed_case_ids()) - set(generated))
    assert not missing, (f"{len(missing)} cases are not generated on JAX {jax.__version__} (generate them "
                         f"with Case.not_applicable stating why instead): {missing[:20]}")


def test_not_applicable_cases_are_recorded_with_their_reason():
    cases = [c for c in all_cases("nightly").values() if c.not_applicable]
    for case in cases:
        assert f"JAX {jax.__version__}" in case.not_applicable, case.not_applicable
    for case in cases[:5]:   # what the runners record (the same code path for every runner)
        for runner in ("reference", "xla:cpu"):
            rec = run_case(case, runner)
            assert (rec.outcome, rec.detail) == ("backend-unsupported", case.not_applicable)


@pytest.mark.parametrize("fn,args", [
    (lax.conj, (np.array([1 + 2j], np.complex64),)),                       # the older spelling _input_dtype
    (lambda x: lax.rev(x, (0,)), (np.arange(3, dtype=np.int32),)),
    (lambda x: lax.clamp(np.int32(0), x, np.int32(2)), (np.arange(4, dtype=np.int32),)),
    (lambda x: lax.transpose(x, (1, 0)), (np.zeros((2, 3), np.float32),)),
], ids=["conj", "rev", "clamp", "transpose"])
def test_an_unknown_parameter_is_unsupported_naming_it(fn, args):
    jaxpr = jax.make_jaxpr(fn)(*args)
    interp.eval_jaxpr(jaxpr, *args)   # runs as traced
    with pytest.raises(interp.UnsupportedPrimitiveError, match="'_input_dtype'"):
        interp.eval_jaxpr(with_params(jaxpr, jaxpr.jaxpr.eqns[0].primitive.name,
                                      _input_dtype=np.dtype(np.float32)), *args)


def test_a_missing_keyword_is_unsupported_naming_it():
    x = np.arange(3, dtype=np.int32)
    jaxpr = jax.make_jaxpr(lambda v: lax.rev(v, (0,)))(x)
    eqn = jaxpr.jaxpr.eqns[0]
    stripped = jaxpr.replace(jaxpr=jaxpr.jaxpr.replace(eqns=[eqn.replace(params={})]))
    with pytest.raises(interp.UnsupportedPrimitiveError, match="'dimensions'"):
        interp.eval_jaxpr(stripped, x)


def _lower_bounds(requirements) -> dict[str, str]:
    out = {}
    for req in requirements:
        m = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+?)(?:\[[^\]]*\])?>=([0-9.]+)", req.replace(" ", ""))
        if m:
            out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


def test_ci_lowest_dependencies_are_the_declared_lower_bounds():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    declared = _lower_bounds(project["dependencies"] + project["optional-dependencies"]["test"])
    pinned = {}
    with open(os.path.join(ROOT, ".ci", "lowest-deps.txt")) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                name, version = line.split("==")
                pinned[name.strip().lower().replace("_", "-")] = version.strip()
    for name, low in declared.items():
        if name == "jax":   # the lowest-dependency environment is the middle of the JAX range
            continue
        assert name in pinned, f"{name} >= {low} is declared but CI never installs its lowest version"
        want = tuple(int(p) for p in low.split("."))
        got = tuple(int(p) for p in pinned[name].split("."))
        assert got[:len(want)] == want and not any(got[len(want):]), (name, low, pinned[name])


def test_the_test_environment_installs_what_mosaic_gpu_needs_to_import():
    """JAX 0.10.2's jax.experimental.pallas.mosaic_gpu imports absl-py (mosaic/gpu/
    layout_inference): the environment `make test` builds (CI's, .ci/run) installs the extra
    holding it, so no Mosaic GPU test or case skips there for want of it."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    with open(os.path.join(ROOT, "Makefile")) as f:
        makefile = f.read()
    install = re.search(r"pip install .*-e '\.\[([^\]]*)\]'", makefile)
    assert install, "the Makefile installs the project with no extras"
    names = install.group(1)
    if names == "$(EXTRAS)":        # the default every environment of .ci/run gets (one adds cluster)
        names = re.search(r"^EXTRAS \?= *(\S+)", makefile, re.M).group(1)
    installed = [req for name in names.split(",") for req in extras[name.strip()]]
    assert any(re.match(r"absl-py\b", req) for req in installed), installed
