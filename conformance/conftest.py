"""Activates the conformance pytest plugin for ``pytest --pyargs conformance`` and ``pytest conformance``."""
from conformance.plugin import conformance_session, pytest_addoption, pytest_generate_tests  # noqa: F401
