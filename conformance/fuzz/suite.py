"""The one module through which the fuzzer uses the suite's machinery (conformance/case.py,
conformance/execute.py, reports/schema.py): when those move, only this file changes."""
from __future__ import annotations

from conformance.case import LAX, Case, jaxpr_primitives, max_abs, random_array  # noqa: F401
