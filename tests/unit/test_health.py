"""The node check's parts and the straggler's verdict, on this machine: interfaces, the fast and durable
roots, NVML's memory verdict (a fake NVML: this machine has no GPU, named as such), a setting no node meets,
a local check that fails the run, the stragglers' streaks, and where status and the report name them.
The same on the SLURM test cluster, with a node left out: tests/slurm/test_slurm_health.py."""
import json
import socket

import pytest

from airetrain.rundir import run_log
from airetrain.health import checks
from airetrain.health.preflight import preflight, setting_problem
from airetrain.plan.sbatch import script
from airetrain.report.collection import health_figures
from airetrain.report.status import run_status
from airetrain.train.stragglers import Streaks, slow_ranks

from conftest import make_plan, write_plan

PRESENT = ["eth0", "ib0", "ib1", "lo"]


def test_the_interfaces_the_environment_names_are_looked_for_as_each_library_reads_them():
    assert checks.interface_problems({"GLOO_SOCKET_IFNAME": "eth0,ib1"}, PRESENT) == []
    assert checks.interface_problems({"NCCL_SOCKET_IFNAME": "ib"}, PRESENT) == []     # a prefix
    assert checks.interface_problems({"NCCL_SOCKET_IFNAME": "^docker,lo"}, PRESENT) == []   # only avoided
    assert checks.interface_problems({"NCCL_SOCKET_IFNAME": "hsn,ib"}, PRESENT) == []  # one of them is enough
    [exact] = checks.interface_problems({"NCCL_SOCKET_IFNAME": "=ib"}, PRESENT)        # =: this name exactly
    assert exact["check"] == "interfaces"
    [gloo] = checks.interface_problems({"GLOO_SOCKET_IFNAME": "eth0,nope0"}, PRESENT)  # gloo opens each name
    assert gloo["reason"] == ("GLOO_SOCKET_IFNAME=eth0,nope0: no interface nope0 on this node; its interfaces are "
                              "eth0, ib0, ib1, lo")


def test_a_fast_root_that_cannot_be_written_or_is_too_small_is_a_problem(tmp_path):
    plan = make_plan({}, tmp_path)
    assert checks.fast_root_problems(plan) == []
    blocked = make_plan({}, tmp_path / "b")
    (tmp_path / "b").mkdir(exist_ok=True)
    (tmp_path / "b" / "fast").write_text("a file where the fast root's folder should be")
    [problem] = checks.fast_root_problems(blocked)
    assert problem["check"] == "fast_root" and "is not writable" in problem["reason"]
    huge = plan.replace(dataset_size={"files": 1, "bytes": 10 ** 18, "from": "index"})
    [full] = checks.fast_root_problems(huge)
    assert "free; the run needs 1000000.0 TB (its data and checkpoint.keep + 1 checkpoints)" in full["reason"]


def test_the_room_a_run_needs_counts_its_data_unless_staged_and_keep_plus_one_checkpoints(tmp_path):
    plan = make_plan({}, tmp_path).replace(dataset_size={"bytes": 1000}, memory_estimate={"checkpoint_bytes": 10})
    assert checks.room_needed(plan, staged=False) == 1000 + 3 * 10   # checkpoint.keep 2, and the one being written
    assert checks.room_needed(plan, staged=True) == 30
    prepared = tmp_path / "data"   # a dataset the workflow prepared: no size in the plan, its files counted
    prepared.mkdir()
    (prepared / "x.npy").write_bytes(b"\0" * 700)
    assert checks.room_needed(plan.replace(dataset=prepared, dataset_size=None, memory_estimate=None), False) == 700


def test_a_durable_root_that_cannot_be_listed_or_hangs_is_a_problem(tmp_path, monkeypatch):
    plan = make_plan({}, tmp_path)
    (tmp_path / "scratch").mkdir(exist_ok=True)
    assert checks.durable_root_problems(plan) == []
    not_yet = plan.replace(roots=plan.roots.__class__(tmp_path / "not" / "made", "config", None))
    assert checks.durable_root_problems(not_yet) == []   # made by the run: its nearest folder answers
    (tmp_path / "a-file").write_text("")
    unusable = plan.replace(roots=plan.roots.__class__(tmp_path / "a-file" / "scratch", "config", None))
    [problem] = checks.durable_root_problems(unusable)
    assert problem["check"] == "durable_root" and "does not answer" in problem["reason"]
    import time
    with pytest.raises(TimeoutError, match="no answer within 0 s"):
        checks.within(0.1, lambda: time.sleep(5))


class FakeNvml:
    """A GPU's NVML, which this machine cannot have: each GPU's memory counters as given."""
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC = 1, 0

    def __init__(self, remapped=None, pending=None, uncorrected=None):
        self.values = {"remapped": remapped, "pending": pending, "uncorrected": uncorrected}

    def _get(self, key):
        if self.values[key] is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self.values[key]

    def nvmlDeviceGetRemappedRows(self, handle):
        return self._get("remapped")

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        return self._get("pending")

    def nvmlDeviceGetTotalEccErrors(self, handle, kind, counter):
        assert (kind, counter) == (1, 0)   # uncorrected, since the driver loaded
        return self._get("uncorrected")


def test_nvml_memory_errors_are_named_and_counters_a_gpu_lacks_are_skipped():
    assert checks.gpu_memory_reasons(FakeNvml(), "gpu0") == []   # an older GPU: no counter at all
    assert checks.gpu_memory_reasons(FakeNvml(remapped=(3, 0, False, False), pending=0, uncorrected=0), "g") == []
    assert checks.gpu_memory_reasons(FakeNvml(remapped=(0, 1, True, True), pending=1, uncorrected=2), "g") == [
        "a row remapping is pending (the GPU needs a reset)", "a row remapping failed",
        "retired pages are pending (the GPU needs a reset)", "2 uncorrectable ECC errors since the driver loaded"]


def report(host, *checks_failed):
    return {"host": host, "ok": not checks_failed, "seconds": 0.1, "interfaces": ["lo"],
            "problems": [{"check": c, "reason": f"{c} on {host}"} for c in checks_failed]}


def test_a_check_every_node_fails_is_a_setting_only_where_no_node_could_pass(tmp_path):
    shared = make_plan({}, tmp_path)   # roots.tmp_shared: storage every node sees
    both = {"n1": report("n1", "interfaces"), "n2": report("n2", "interfaces")}
    assert "every node of the job failed the interfaces check" in setting_problem(shared, both, {})
    assert setting_problem(shared, {"n1": report("n1", "interfaces"), "n2": report("n2")}, {}) is None
    full = {"n1": report("n1", "fast_root"), "n2": report("n2", "fast_root")}
    assert "fast_root" in setting_problem(shared, full, {})
    assert setting_problem(shared, {"n1": report("n1", "fast_root")}, {}) is None   # one node: try another
    local = make_plan({}, tmp_path / "l").replace(roots=shared.roots.__class__(tmp_path, "config", None))
    assert setting_problem(local, full, {"TMPDIR": "/tmp/job", "SLURM_JOB_ID": "1"}) is None   # each node's own


def test_a_local_check_that_fails_fails_the_run_naming_the_reason_and_writes_no_record(tmp_path, capsys):
    results = tmp_path / "results"
    plan = write_plan(results, tmp_path, "bad")
    plan.roots.scratch.mkdir(parents=True)
    out = results / "bad" / "health.json"
    assert preflight(plan, out, env={"GLOO_SOCKET_IFNAME": "nope0"}) == 1
    said = capsys.readouterr().out
    assert f"health: {socket.gethostname()}: FAILED: interfaces: GLOO_SOCKET_IFNAME=nope0" in said
    assert "NodeCheckError: every node of the job failed the interfaces check" in said
    assert not out.exists()
    [event] = run_log.health_events(plan.durable_dir)
    assert (event["kind"], event["action"]) == ("interfaces", "failed")
    assert preflight(plan, out, env={}) == 0   # this machine passes
    record = json.loads(out.read_text())
    assert record["nodes"][socket.gethostname()]["ok"] and record["seconds"] >= 0


def test_a_rank_is_a_straggler_after_the_intervals_in_a_row_it_is_slow():
    assert slow_ranks([1.0, 1.0, 1.0, 1.5], 1.2) == {3: 1.5}
    assert slow_ranks([1.0, 1.1, 1.0, 1.0], 1.2) == {}
    streaks = Streaks(4, ratio=1.2, intervals=3)
    hosts = ["a", "a", "b", "b"]
    for times in ([1, 1, 1, 2], [1, 1, 1, 2]):
        streaks.add(times)
    assert streaks.current(hosts) == []
    streaks.add([1, 1, 1, 2])
    assert streaks.current(hosts) == [{"rank": 3, "host": "b", "ratio": 2.0}]
    streaks.add([1, 1, 1, 1])   # a fast interval ends the streak
    assert streaks.current(hosts) == []
    assert run_log.straggler_text({"rank": 4, "host": "labgpu2", "ratio": 1.4}) == \
        "straggler: rank 4 on labgpu2, 1.4× the median step"


def test_status_and_the_report_name_the_nodes_left_out_and_the_stragglers(tmp_path):
    results, logs = tmp_path / "results", tmp_path / "logs"
    plan = write_plan(results, tmp_path, "r")
    run_log.record_health(plan.durable_dir, "7", "labgpu1", "fast_root", "/tmp is not writable", "excluded")
    run_log.record_health(plan.durable_dir, "7", "labgpu2", "straggler", "straggler: rank 4 ...", "named")
    (results / "r" / "metrics.jsonl").write_text(json.dumps({
        "step": 40, "of_steps": 100, "epoch": 0, "loss": 0.5, "samples_per_s": 10.0,
        "stragglers": [{"rank": 4, "host": "labgpu2", "ratio": 1.4}]}) + "\n")
    row = run_status("r", results, logs, None, {})
    assert row["state"] == "training"
    assert row["detail"].endswith("[straggler: rank 4 on labgpu2, 1.4× the median step] "
                                  "[left out labgpu1: fast_root: /tmp is not writable]"), row["detail"]
    train = {"health": {"rank_step_s": [0.1, 0.1, 0.1, 0.2], "allreduce_gbps": 1.5,
                        "stragglers": [{"rank": 3, "host": "labgpu2", "ratio": 1.9, "step": 3}]}}
    figures = health_figures(plan, train)
    assert figures == {"health": "labgpu1 left out (fast_root: /tmp is not writable); straggler: rank 3 on "
                                 "labgpu2, 1.9× the median step", "step_spread": 2.0, "allreduce_gbps": 1.5}


def test_the_batch_script_checks_every_node_first_unless_preflight_is_off(tmp_path):
    on = script(make_plan({}, tmp_path), tmp_path, tmp_path)
    assert on.index(" health --plan ") < on.index(" stage --plan ")
    assert " health --plan " not in script(make_plan({"health": {"preflight": False}}, tmp_path), tmp_path, tmp_path)
