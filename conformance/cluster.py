"""Work on a Ray cluster (``--cluster auto|ray://HOST:PORT``; ``pip install 'jax-conformance[cluster]'``).

Ray (https://docs.ray.io) places the work, retries it and carries the results; this module only
says what a unit needs and how a node runs it. Both users hand it self-contained requests:

- ``jax-conformance fuzz --cluster``: fuzz work units (conformance/fuzz/work.py), answered by the
  isolated fuzz worker (conformance/fuzz/worker.py);
- ``jax-conformance run --cluster``: suite items (case, runner, seed, seeds to search), answered
  by the item's record (conformance/search.py over an isolated case worker).

On a node, a Ray task hands its request to an isolated worker process (conformance/isolation.py)
that the Ray worker process keeps between tasks, exactly as the local executors do: a backend that
crashes or hangs is answered ``crash`` / ``timeout`` the same way, and the Ray worker survives it.
A unit needing a device is placed on a node with it, through Ray resources (:func:`resources`).
A node lost mid-run takes its Ray workers with it; Ray resubmits their tasks (``max_retries``) on
the nodes left, and the driver keeps one result per submitted unit (the task's single object), so
nothing is lost or counted twice.

Nothing here is imported unless ``--cluster`` is given: Ray is an optional dependency.
"""
from __future__ import annotations

import os

# Ray resubmits a task whose worker or node died this many times before reporting it lost.
TASK_RETRIES = 8


NEEDS_RAY = "--cluster needs Ray: pip install 'jax-conformance[cluster]'"


def ray_missing() -> str | None:
    """Why --cluster cannot work here (Ray is not installed), or None; without importing Ray."""
    import importlib.util
    return None if importlib.util.find_spec("ray") else NEEDS_RAY


def _ray():
    try:
        import ray
    except ImportError:
        raise RuntimeError(NEEDS_RAY) from None
    return ray


def connect(address: str) -> dict:
    """Connect this process to the Ray cluster at ``address`` (``auto``: the one this machine
    belongs to; ``ray://HOST:PORT``: a remote head through Ray Client) and return its resources.
    The runner plugins named in JAX_CONFORMANCE_RUNNERS go along (installed plugins must be
    installed on the nodes as the project is)."""
    ray = _ray()
    from hardware_runners import PLUGIN_ENV
    env = {k: os.environ[k] for k in (PLUGIN_ENV,) if os.environ.get(k)}
    if not ray.is_initialized():
        ray.init(address=address, runtime_env={"env_vars": env} if env else None, log_to_driver=False,
                 include_dashboard=False)
    return dict(ray.cluster_resources())


def slots(cluster_resources: dict) -> int:
    """How many units the cluster runs at once (its CPUs; at least one)."""
    return max(1, int(cluster_resources.get("CPU", 1)))


def resources(platforms) -> dict:
    """The Ray resources a unit needs to run on runners of these platforms: ``GPU`` for CUDA and
    ROCm, ``TPU`` for TPU, nothing for CPU, and a custom resource named after any other platform (a
    PJRT plugin's or a runner plugin's: start those nodes with ``ray start --resources
    '{"<platform>": N}'``)."""
    out: dict = {}
    for p in platforms:
        p = p or "cpu"
        if p == "cpu":
            continue
        key = "GPU" if p in ("cuda", "rocm", "gpu") else "TPU" if p == "tpu" else p
        out[key] = 1
    return out


def runner_platforms(names) -> list[str]:
    from hardware_runners import get_runner
    return [getattr(get_runner(n), "platform", "cpu") for n in names]


# -- on the nodes -----------------------------------------------------------------------------------
_kept: dict = {}      # key -> an isolated worker or executor the Ray worker process keeps between tasks


def kept(key, make):
    """The object this Ray worker process keeps under ``key`` (made by ``make()`` on first use)."""
    if key not in _kept:
        _kept[key] = make()
    return _kept[key]


def node_id() -> str:
    import ray
    return ray.get_runtime_context().get_node_id()


def suite_task(item: tuple, options: dict) -> dict:
    """A suite item's record (a results line) and this node's environment, from this node's
    isolated case worker (conformance/search.py, as the pytest plugin runs an item)."""
    from conformance.isolation import Executor
    from conformance.search import search
    from hardware_runners.environment import environment
    def make():
        from conformance import process_env
        process_env.apply()       # as every process of the suite does before JAX starts (plugin.py)
        return Executor(timeout=options["timeout"], first_divergence=options["first_divergence"])
    executor = kept(("suite", options["timeout"], options["first_divergence"]), make)
    case_id, runner, seed, examples = item
    rec = search(executor, case_id, runner, seed, examples, options["shrinks"], budget_s=options["budget_s"])
    return {"record": rec.to_json(), "node": node_id(), "environment": environment()}


# -- on the driver ----------------------------------------------------------------------------------
class Units:
    """Submit requests as Ray tasks and collect their answers as they finish: ``submit(key, task,
    args, resources)``, ``ready(timeout) -> [(key, answer)]``, ``pending()``, ``close()``. A task
    whose node is lost is resubmitted by Ray; one that fails for good comes back as an answer
    ``{"harness_error": ...}`` naming the error."""

    def __init__(self):
        self.ray = _ray()
        self._remote = {}
        self._refs: dict = {}          # ObjectRef -> key

    def submit(self, key, task, args: tuple, need: dict) -> None:
        fn = self._remote.get(task)
        if fn is None:
            fn = self._remote[task] = self.ray.remote(task)
        ref = fn.options(num_cpus=1, resources=need or None, max_retries=TASK_RETRIES,
                         retry_exceptions=False).remote(*args)
        self._refs[ref] = key

    def pending(self) -> int:
        return len(self._refs)

    def ready(self, timeout: float | None) -> list:
        if not self._refs:
            return []
        refs = list(self._refs)
        done, rest = self.ray.wait(refs, num_returns=1, timeout=timeout)
        if done and rest:
            more, _ = self.ray.wait(rest, num_returns=len(rest), timeout=0)
            done += more
        out = []
        for ref in done:
            key = self._refs.pop(ref)
            try:
                answer = self.ray.get(ref)
            except Exception as e:  # noqa: BLE001  (a task Ray gave up on: reported with its unit)
                answer = {"harness_error": f"ray: {type(e).__name__}: {str(e)[:2000]}"}
            out.append((key, answer))
        return out

    def close(self) -> None:
        for ref in self._refs:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001  (already finished or gone with its node)
                pass
        self._refs.clear()


def run_suite(address: str, items: list, options: dict, results_dir: str, run_id: str, profile: str,
              log=print) -> list[dict]:
    """Run the suite's items (``(case, runner, seed, examples)``, as plugin.py enumerates them) on
    the cluster; write each node's records, after its environment line, to
    ``results_dir/results-ray-<node>.jsonl`` as they arrive (the files ``reports.merge`` reads, one
    machine per node) and return the harness errors (tasks Ray gave up on)."""
    from reports.schema import JsonlWriter, Record, environment_line
    connect(address)
    units = Units()
    for item in items:
        units.submit(item, suite_task, (item, options), resources(runner_platforms([item[1]])))
    writers: dict = {}
    errors: list[dict] = []
    done = 0
    try:
        while units.pending():
            for item, answer in units.ready(timeout=1.0):
                if "harness_error" in answer:
                    errors.append({"where": f"{item[0]}@{item[1]} seed {item[2]} on the cluster",
                                   "error": answer["harness_error"]})
                    continue
                worker = f"ray-{answer['node'][:12]}"
                if worker not in writers:
                    writers[worker] = JsonlWriter(os.path.join(results_dir, f"results-{worker}.jsonl"))
                    writers[worker].write(environment_line(worker=worker, profile=profile, run_id=run_id,
                                                           environment=answer["environment"]))
                rec = Record.from_json(answer["record"])
                rec.run_id, rec.profile, rec.worker = run_id, profile, worker
                writers[worker].write(rec)
                done += 1
                if done % 200 == 0:
                    log(f"{done} of {len(items)} items done")
    finally:
        units.close()
        for w in writers.values():
            w.close()
    return errors
