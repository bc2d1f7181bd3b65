"""The isolated worker process: ``python -m conformance.worker REQ_FD RESP_FD``.

Reads pickled requests {case, runner, seed, first_divergence, keep_outputs}, answers each with
{"record": its results record, "outputs": the backend's outputs when ``keep_outputs``, else None}.
"""
from __future__ import annotations

import os
import sys
import traceback


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    req_fd, resp_fd = int(argv[0]), int(argv[1])
    from conformance.isolation import _recv, _send
    from conformance.cases import all_cases, get
    from conformance.execute import base_record, run_case
    from reports.schema import CRASH
    import interp  # noqa: F401  (import everything before saying ready)
    all_cases("nightly")   # build the case registry now: a case's timeout covers only the case
    _send(resp_fd, "ready")
    worker_id = os.environ.get("PYTEST_XDIST_WORKER", "main")
    while True:
        req = _recv(req_fd, None)
        if req is None:
            return
        outputs = [] if req.get("keep_outputs") else None
        try:
            rec = run_case(get(req["case"]), req["runner"], req["seed"],
                           first_divergence=req.get("first_divergence", True), keep_outputs=outputs)
        except Exception as e:  # noqa: BLE001  (an error of the harness itself: a crash record)
            rec = base_record(req["case"], req["runner"], req["seed"])
            rec.outcome, rec.detail = CRASH, f"harness error: {type(e).__name__}: {e}"
            rec.output = traceback.format_exc()[-4000:]
            outputs = None
        rec.worker = worker_id
        sys.stdout.flush()
        sys.stderr.flush()
        _send(resp_fd, {"record": rec, "outputs": outputs or None})


if __name__ == "__main__":
    main()
