# Two commands on a fresh machine:  `make conformance` (the main job)  and  `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PROFILE ?= quick
OUT ?= conformance-report
# CONSTRAINTS=<file>: pip constraints for the install (CI's lowest-dependency environment uses
# .ci/lowest-deps.txt); empty installs the newest versions pip resolves.
CONSTRAINTS ?=
# EXTRAS: the project's extras `make test` installs (CI adds `cluster` in one environment, so that
# the Ray cluster tests run there instead of skipping).
EXTRAS ?= test,mosaic-gpu

.PHONY: venv test conformance bench coverage-docs clean

# mosaic-gpu: JAX 0.10.2's Mosaic GPU imports absl-py; without it every Mosaic GPU test and case
# would skip on the oldest JAX.
$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]' $(if $(CONSTRAINTS),--constraint $(CONSTRAINTS))
	touch $@

venv: $(VENV)/.installed

# Then the tests whose results could depend on which loops NumPy picks for its transcendental
# ufuncs, again with the host's optional CPU features turned off (tests/numpy_dispatch.py): results
# must not depend on the host CPU (issue 22).
test: venv
	$(PY) -m pytest -n auto tests
	@features=$$($(PY) -m tests.numpy_dispatch) || exit 1; \
	if [ -z "$$features" ]; then \
	  echo "=== no optional NumPy CPU features on this host: the dispatch pass would repeat the first"; \
	else \
	  echo "=== the dispatch-sensitive tests again with NumPy's optional CPU features off: $$features"; \
	  NPY_DISABLE_CPU_FEATURES="$$features" $(PY) -m pytest -n auto $$($(PY) -m tests.numpy_dispatch --tests); \
	fi

conformance: venv
	$(VENV)/bin/jax-conformance run --profile $(PROFILE) --out $(OUT)

bench: venv
	$(PY) -m bench

coverage-docs: venv
	$(PY) -m interp.coverage_table docs/

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache
