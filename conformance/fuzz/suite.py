"""The one module through which the fuzzer uses the suite's machinery that is being reorganised
(conformance/case.py, conformance/execute.py, reports/schema.py): when those move, only this file
changes."""
from __future__ import annotations

from conformance.case import LAX, Case, jaxpr_primitives, max_abs, random_array  # noqa: F401
from conformance.execute import (BACKEND_UNSUPPORTED, BAD, CRASH, FAIL, GOOD, KNOWN_DIVERGENCE,  # noqa: F401
                                 PASS, PASS_ALLOWANCE, REFERENCE_UNSUPPORTED, TIMEOUT, classify_failure,
                                 compare)
from conformance.execute import _short_tb as short_traceback  # noqa: F401
from reports.schema import JsonlWriter, dumps, new_record  # noqa: F401
