"""Isolation: every case runs in a long-lived worker subprocess; a case that crashes the process
(segfault, abort, device error) or hangs becomes a ``crash`` / ``timeout`` record with the
worker's output, the worker is replaced, and the run goes on.

The worker imports JAX once and then serves requests over a pipe, so isolation costs one pipe
round trip per case (well under a millisecond) plus one worker start per crash.

:class:`Executor` runs one (case, runner, seed) the way a run asks (isolated or in this process,
keeping the backend's outputs or not): the seed search (conformance/search.py) runs each seed
through it.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time

from reports.schema import Record

STARTUP_TIMEOUT_S = 300.0


def _send(fd: int, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    os.write(fd, struct.pack("<Q", len(data)))
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _recv_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    buf = b""
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise TimeoutError
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None  # the worker died
        buf += chunk
    return buf


def _recv(fd: int, deadline: float | None):
    head = _recv_exact(fd, 8, deadline)
    if head is None:
        return None
    body = _recv_exact(fd, struct.unpack("<Q", head)[0], deadline)
    return None if body is None else pickle.loads(body)


def _signal_name(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


# Host devices a worker's XLA:CPU has (--xla_force_host_platform_device_count): the SPMD cases' and
# the spmd fuzz family's meshes (#14, #25).
HOST_DEVICES = 8


class Worker:
    """One isolated worker process; restarted transparently after a crash or timeout. Its XLA:CPU
    has ``host_devices`` devices (at least :data:`HOST_DEVICES`)."""

    def __init__(self, env: dict | None = None, module: str = "conformance.worker", host_devices: int = HOST_DEVICES):
        self.module = module       # the worker's main module (it answers the requests)
        self.env = dict(os.environ if env is None else env)
        count = max(host_devices, HOST_DEVICES)
        self.env["XLA_FLAGS"] = (self.env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={count}").strip()
        self.proc = None
        self.starts = 0

    def _start(self) -> None:
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        self.log = tempfile.NamedTemporaryFile(prefix="conformance-worker-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, str(req_r), str(resp_w)],
            pass_fds=(req_r, resp_w), stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            env=self.env, start_new_session=True)
        os.close(req_r)
        os.close(resp_w)
        self.starts += 1
        ready = _recv(self.resp_r, time.monotonic() + STARTUP_TIMEOUT_S)
        if ready != "ready":
            out = self._log_tail(0)
            self.close()
            raise RuntimeError(f"conformance worker failed to start: {out}")

    def _log_tail(self, offset: int, limit: int = 8000) -> str:
        try:
            with open(self.log.name, "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return ""
        return data[-limit:].decode("utf-8", "replace")

    def _log_size(self) -> int:
        try:
            return os.path.getsize(self.log.name)
        except OSError:
            return 0

    def request(self, req: dict, timeout: float) -> dict | tuple[str, str]:
        """The worker's answer to ``req`` ({"record", "outputs"}), or ("crash"|"timeout", output)
        if it died or hung."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        offset = self._log_size()
        try:
            _send(self.req_w, req)
            reply = _recv(self.resp_r, time.monotonic() + timeout)
        except TimeoutError:
            out = self._log_tail(offset)
            self.close()
            return "timeout", f"no result after {timeout:g} s; worker output:\n{out}"
        except (BrokenPipeError, OSError):
            reply = None
        if reply is None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            how = _signal_name(self.proc.returncode)
            out = self._log_tail(offset)
            self.close()
            return "crash", f"worker {how}; output:\n{out}"
        return reply

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            self.proc.wait()
        for fd in (self.req_w, self.resp_r):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.unlink(self.log.name)
        except OSError:
            pass
        self.proc = None


def run_isolated(worker: Worker, case_id: str, runner: str, seed: int, timeout: float,
                 first_divergence: bool = True, keep_outputs: list | None = None) -> Record:
    """One results record for (case, runner, seed), whatever happens to the worker. A hang or a
    dead worker that a known divergence explains (spec/divergences.py ``outcomes``) is recorded as
    that divergence (conformance/judge.py: explain_outcome). ``keep_outputs``: a list the backend's
    outputs are appended to."""
    from .cases import all_cases
    from .execute import base_record
    from .judge import explain_outcome
    t0 = time.perf_counter()
    reply = worker.request({"case": case_id, "runner": runner, "seed": seed, "first_divergence": first_divergence,
                            "keep_outputs": keep_outputs is not None}, timeout)
    if isinstance(reply, dict):
        if keep_outputs is not None and reply["outputs"]:
            keep_outputs.extend(reply["outputs"])
        return reply["record"]
    outcome, output = reply
    rec = base_record(case_id, runner, seed)
    rec.outcome, rec.output, rec.duration_s = outcome, output, round(time.perf_counter() - t0, 6)
    rec.detail = output.splitlines()[0] if output else outcome
    case = all_cases("nightly").get(case_id)
    return explain_outcome(rec, tuple(case.primitives) if case is not None else ())


class Executor:
    """Runs one (case, runner, seed) and returns its record: in an isolated worker process (started
    on first use, replaced after a crash or hang; ``timeout`` seconds per case), or in this process
    with ``isolated=False``. ``first_divergence``: locate a fail at its first divergent equation.
    ``outputs``: an outputs.Writer that keeps every backend output (``run --save-outputs``)."""

    def __init__(self, *, timeout: float, isolated: bool = True, first_divergence: bool = True,
                 outputs=None, env: dict | None = None):
        self.isolated, self.timeout, self.first_divergence = isolated, timeout, first_divergence
        self.outputs, self.env = outputs, env
        self.worker: Worker | None = None

    def run(self, case_id: str, runner: str, seed: int) -> Record:
        from .cases import get
        kept = [] if self.outputs is not None and runner != "reference" else None
        if not self.isolated:
            from .execute import run_case
            rec = run_case(get(case_id), runner, seed, first_divergence=self.first_divergence, keep_outputs=kept)
        else:
            if self.worker is None:
                self.worker = Worker(env=self.env)
            rec = run_isolated(self.worker, case_id, runner, seed, self.timeout,
                               first_divergence=self.first_divergence, keep_outputs=kept)
        if kept:
            self.outputs.add(case_id, runner, seed, kept, revision=get(case_id).revision)
        return rec

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
