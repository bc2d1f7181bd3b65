"""The isolated fuzz worker: ``python -m conformance.fuzz.worker REQ_FD RESP_FD`` (started by
``conformance.isolation.Worker(module="conformance.fuzz.worker")``). Reads pickled work units
(dicts), answers each with its result; a harness error becomes a result that says so."""
from __future__ import annotations

import sys
import traceback


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    req_fd, resp_fd = int(argv[0]), int(argv[1])
    from conformance.isolation import _recv, _send
    from conformance.fuzz.work import Unit, run_unit
    import interp  # noqa: F401  (import everything before saying ready)
    import jax
    jax.devices()
    _send(resp_fd, "ready")
    while True:
        req = _recv(req_fd, None)
        if req is None:
            return
        try:
            result = run_unit(Unit(**req))
        except Exception as e:  # noqa: BLE001  (the harness's own error: reported, the worker goes on)
            result = {"unit": req, "harness_error": f"{type(e).__name__}: {e}",
                      "traceback": traceback.format_exc()[-4000:]}
        sys.stdout.flush()
        sys.stderr.flush()
        _send(resp_fd, result)


if __name__ == "__main__":
    main()
