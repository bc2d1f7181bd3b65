"""Campaigns and the suite on a Ray cluster (conformance/cluster.py, ``--cluster``): a local
two-node cluster started here (``ray.cluster_utils.Cluster``) gives the same findings and records
as the local executor for the same seed; a node removed mid-campaign loses nothing and counts
nothing twice. CI runs these in one environment (.ci/run installs the [cluster] extra there)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import importlib.util

import pytest

from hardware_runners import PLUGIN_ENV
from conformance.fuzz import run_campaign
from conformance.fuzz.executor import LocalProcesses, RayCluster

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="Ray is not installed: pip install 'jax-conformance[cluster]' "
                                      "(CI installs it in the newest-JAX environment)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MUTANTS = "conformance.fuzz.mutants"
RUNNERS = ["xla:cpu", "mutant:add-ulp"]
SEED, PROGRAMS = 0, 8          # mutant:add-ulp's bug is hit by program 4 of seed 0


def test_nothing_imports_ray_without_cluster():
    """Ray is optional: the command line, the executors and the runner lookup import it only when
    --cluster is given."""
    code = ("import sys; import conformance.cli, conformance.cluster, conformance.fuzz.executor, "
            "conformance.fuzz.campaign, conformance.plugin; from hardware_runners import all_runners; "
            "all_runners(); assert 'ray' not in sys.modules, 'ray imported'")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert res.returncode == 0, res.stderr[-2000:]


@pytest.fixture(scope="module")
def cluster():
    """Two nodes of one CPU each. The nodes' processes inherit this environment: the project on
    PYTHONPATH and the mutant runners (as a plugin would be installed on every node)."""
    import ray
    from ray.cluster_utils import Cluster
    mp = pytest.MonkeyPatch()
    mp.setenv(PLUGIN_ENV, MUTANTS)
    mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False, include_dashboard=False)
    yield c
    ray.shutdown()
    c.shutdown()
    mp.undo()


def _campaign(out, executor):
    return run_campaign(RUNNERS, ["lax", "random"], seed=SEED, programs=PROGRAMS, out=str(out), shrink=False,
                        executor=executor, log=lambda *_: None)


def _records(out) -> tuple[list, list]:
    """What a campaign found, without timings: one line per program (sorted by index) and the
    findings (sorted)."""
    programs = sorted(({k: v for k, v in json.loads(x).items() if k != "seconds"} for x in open(out / "programs.jsonl")),
                      key=lambda x: x["index"])
    findings = sorted((json.loads(x) for x in open(out / "findings.jsonl")), key=lambda x: (x["index"], x["bucket"]))
    return programs, findings


@pytest.fixture(scope="module")
def local(cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "c"
    _campaign(out, LocalProcesses(1, timeout_s=300))
    return _records(out)


@needs_ray
def test_a_campaign_on_the_cluster_finds_what_the_local_one_finds(cluster, local, tmp_path):
    executor = RayCluster(cluster.address, timeout_s=300)
    assert executor.slots == 2
    s = _campaign(tmp_path / "c", executor)
    assert s["status"] == "finished" and s["programs"] == PROGRAMS
    programs, findings = _records(tmp_path / "c")
    assert [x["index"] for x in programs] == list(range(PROGRAMS))
    assert (programs, findings) == local
    assert any(f["runner"] == "mutant:add-ulp" for f in findings), "the injected bug was not hit: no test"
    assert len(set(executor.nodes.values())) == 2, "the units did not spread over both nodes"
    summary = open(tmp_path / "c" / "summary.md").read()
    assert "mutant:add-ulp" in summary


class LosesANode(RayCluster):
    """Removes ``node`` from the cluster (killed, not drained) as soon as it has answered a unit:
    it is then running the next of the units queued beyond the cluster's CPUs."""

    def __init__(self, cluster, node):
        super().__init__(cluster.address, timeout_s=300)
        self.cluster, self.node = cluster, node
        self.in_flight_at_removal = None

    def results(self, timeout=None):
        out = super().results(timeout)
        if self.in_flight_at_removal is None and self.node.node_id in self.nodes.values():
            self.in_flight_at_removal = self.pending()
            self.cluster.remove_node(self.node, allow_graceful=False)
        return out


@needs_ray
def test_a_node_lost_mid_campaign_has_its_units_rescheduled(cluster, local, tmp_path):
    # the node to lose is one whose Ray workers are warm (a fresh node takes its first units only
    # after seconds of starting JAX); a fresh one replaces it for the tests after this one
    node = next(iter(cluster.worker_nodes))
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    executor = LosesANode(cluster, node)
    s = _campaign(tmp_path / "c", executor)
    assert executor.in_flight_at_removal is not None, "the node never answered a unit: nothing was tested"
    assert executor.in_flight_at_removal >= executor.slots, executor.in_flight_at_removal   # it had work
    assert s["status"] == "finished" and s["programs"] == PROGRAMS
    programs, findings = _records(tmp_path / "c")
    assert [x["index"] for x in programs] == list(range(PROGRAMS))     # every unit once
    assert (programs, findings) == local
    late = [k for k, n in executor.nodes.items() if n == node.node_id]
    assert len(late) < PROGRAMS    # the others were answered by the nodes left


@needs_ray
def test_the_suite_on_the_cluster_records_what_the_local_run_records(cluster, tmp_path):
    """`jax-conformance run --cluster ADDRESS`: the same records (outcomes, allowances) as pytest's
    local run, in results files the report reads."""
    cases = "lax_elementwise/add/float32/specials,lax_elementwise/add/float32/3x5"
    env = dict(os.environ)

    def run(*extra, out):
        res = subprocess.run([sys.executable, "-m", "conformance", "run", "--runners", "xla:cpu,mutant:add-ulp",
                              "--cases", cases, "--out", str(out), *extra], capture_output=True, text=True,
                             env=env, cwd=str(tmp_path), timeout=900)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        recs = [json.loads(x) for f in sorted((out / "results").glob("*.jsonl")) for x in open(f)]
        return sorted((r["case"], r["runner"], r["seed"], r["outcome"], r["allowance"])
                      for r in recs if r.get("type") == "result")

    on_cluster = run("--cluster", cluster.address, out=tmp_path / "ray")
    assert on_cluster == run("-n", "0", out=tmp_path / "local")
    assert len(on_cluster) == 4 and os.path.exists(tmp_path / "ray" / "index.html")
