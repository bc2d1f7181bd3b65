import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from hypothesis import HealthCheck, settings  # noqa: E402

# "ci": fast and deterministic (no example database); "nightly": deeper, on demand:
#   HYPOTHESIS_PROFILE=nightly make test
settings.register_profile("ci", max_examples=25, derandomize=True, database=None, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("nightly", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    # The second pass under another NumPy dispatch (tests/numpy_dispatch.py): it must really run
    # other loops, so every feature it names must read as off (a typo would silently change nothing).
    if os.environ.get("NPY_DISABLE_CPU_FEATURES"):
        from tests import numpy_dispatch
        numpy_dispatch.check_disabled()
