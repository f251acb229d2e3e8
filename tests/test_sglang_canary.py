"""The canary's decision logic (roles/sglang_canary/module_utils) and the roll's inventory check.

The end-to-end canary (a candidate promoted, one refused and rolled back, with traffic) is in
tests/test_fleet_roll.py; here the comparison, the decision, the baseline search, the plan after
a killed controller and the promotion log are tried on their own, quickly.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from ansible.module_utils.sglang_canary_decision import (CanaryError, Level, compare, decide, find_baseline,
                                                         log_with, previous_release, promotion_in_progress,
                                                         read_levels, read_log, write_atomic)
from ansible.module_utils.sglang_canary_kept import install_of, kept_installs
from conftest import run_playbook


def levels(**tok_s: float) -> dict[int, Level]:
    """c64=1000 -> concurrency 64 at 1000 tok/s, p99 TTFT 100 ms."""
    return {int(k[1:]): Level(int(k[1:]), v, 100.0) for k, v in tok_s.items()}


def write_run(runs: Path, name: str, host: str, version: str, rows: dict[int, tuple[float, float]],
              started: str, input_len: int = 1024) -> Path:
    run = runs / name
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"label": "x", "host": host, "sglang_version": version,
                                              "started_at": started, "input_len": input_len, "output_len": 1024}))
    (run / "results.jsonl").write_text("".join(
        json.dumps({"max_concurrency": c, "total_throughput": t, "p99_ttft_ms": p}) + "\n"
        for c, (t, p) in rows.items()))
    return run


def test_a_faster_candidate_passes_everywhere():
    verdicts = compare(levels(c64=1000, c256=3000), levels(c64=1100, c256=3300), [64, 256], -3.0, 10.0)
    assert all(v.ok for v in verdicts)
    assert [v.throughput_ratio for v in verdicts] == [1.1, 1.1]
    promote, msg = decide({"passed": True}, verdicts, "r1", "0.5.24", "0.5.23")
    assert promote and "promoted" in msg and "answers passed" in msg


def test_slower_at_one_concurrency_only_is_refused_naming_it():
    verdicts = compare(levels(c64=1000, c256=3000), levels(c64=1200, c256=2880), [64, 256], -3.0, 10.0)
    assert [v.ok for v in verdicts] == [True, False]
    promote, msg = decide({"passed": True}, verdicts, "r1", "0.5.24", "0.5.23")
    assert not promote
    assert "concurrency 256: total throughput 2880.0 tok/s against 3000.0 (-4.0%, tolerance -3.0%)" in msg
    assert "concurrency 64" not in msg


@pytest.mark.parametrize("candidate, ok", [(970.0, True), (969.0, False)])
def test_the_throughput_tolerance_is_its_edge(candidate, ok):
    assert compare(levels(c64=1000), levels(c64=candidate), [64], -3.0, 10.0)[0].ok is ok


def test_p99_ttft_has_its_own_tolerance():
    base = {64: Level(64, 1000, 100.0)}
    assert compare(base, {64: Level(64, 1000, 110.0)}, [64], -3.0, 10.0)[0].ok
    verdict = compare(base, {64: Level(64, 1200, 111.0)}, [64], -3.0, 10.0)[0]
    assert not verdict.ok and verdict.regressions == ["p99 TTFT 111.0 ms against 100.0 (+11.0%, tolerance +10.0%)"]


def test_failed_answers_refuse_a_faster_candidate_naming_the_classes():
    verdicts = compare(levels(c64=1000), levels(c64=2000), [64], -3.0, 10.0)
    promote, msg = decide({"passed": False, "classes": {"drift": 7, "loop": 0}, "msg": "7 of 40 drifted"},
                          verdicts, "r1", "0.5.24", "0.5.23")
    assert not promote and "answers failed (drift 7: 7 of 40 drifted)" in msg and "loop" not in msg


def test_a_level_missing_from_a_run_is_named():
    with pytest.raises(CanaryError, match="the candidate run has no result at concurrency 256"):
        compare(levels(c64=1, c256=1), levels(c64=1), [64, 256], -3.0, 10.0)


@pytest.mark.parametrize("line, expected", [
    ("not json", r"results.jsonl:1: not JSON"),
    ('{"total_throughput": 1}', "no integer max_concurrency"),
    ('{"max_concurrency": 64, "total_throughput": NaN, "p99_ttft_ms": 1}', "total_throughput is nan"),
    ('{"max_concurrency": 64, "total_throughput": -1, "p99_ttft_ms": 1}', "total_throughput is -1"),
])
def test_bad_results_are_named_with_their_line(tmp_path, line, expected):
    (tmp_path / "results.jsonl").write_text(line + "\n")
    with pytest.raises(CanaryError, match=expected):
        read_levels(tmp_path / "results.jsonl")


def test_the_baseline_is_this_replicas_newest_run_of_the_release_with_the_same_workload(tmp_path):
    rows = {64: (1000.0, 100.0), 256: (3000.0, 200.0)}
    write_run(tmp_path, "old", "r1", "0.5.23", rows, "2026-12-01T00:00:00Z")
    newest = write_run(tmp_path, "new", "r1", "0.5.23", rows, "2026-12-02T00:00:00Z")
    write_run(tmp_path, "other-host", "r2", "0.5.23", rows, "2026-12-03T00:00:00Z")
    write_run(tmp_path, "other-release", "r1", "0.5.24", rows, "2026-12-03T00:00:00Z")
    write_run(tmp_path, "one-level", "r1", "0.5.23", {64: (1.0, 1.0)}, "2026-12-03T00:00:00Z")
    write_run(tmp_path, "other-workload", "r1", "0.5.23", rows, "2026-12-03T00:00:00Z", input_len=8)
    (tmp_path / "promotions.json").write_text("{}")
    assert find_baseline(tmp_path, "r1", "0.5.23", [64, 256], 1024, 1024) == str(newest)
    assert find_baseline(tmp_path, "r3", "0.5.23", [64, 256], 1024, 1024) is None
    assert find_baseline(tmp_path / "absent", "r1", "0.5.23", [64], 1024, 1024) is None


def test_after_a_kill_in_the_canary_phase_the_others_say_what_the_fleet_runs():
    # The canary was switched to the candidate when the controller died.
    assert previous_release({"r1": "0.5.24", "r2": "0.5.23", "r3": "0.5.23"}, "r1") == "0.5.23"
    assert previous_release({"r1": "0.5.23", "r2": "0.5.23"}, "r1") == "0.5.23"
    assert previous_release({"r1": "0.5.23"}, "r1") == "0.5.23"   # a fleet of one


def test_a_promotion_is_in_progress_only_while_the_fleet_is_split_between_its_two_releases():
    promoted = {"decision": "promoted", "release": "0.5.24", "previous": "0.5.23", "at": "t"}
    assert promotion_in_progress([promoted], {"r1": "0.5.24", "r2": "0.5.23"}) == promoted
    assert promotion_in_progress([promoted], {"r1": "0.5.24", "r2": "0.5.24"}) is None      # roll done
    # A later canary of another release, killed with the canary switched: a canary again.
    assert promotion_in_progress([promoted], {"r1": "0.5.25", "r2": "0.5.24"}) is None
    assert promotion_in_progress([{**promoted, "decision": "refused"}], {"r1": "0.5.24", "r2": "0.5.23"}) is None
    assert promotion_in_progress([], {"r1": "0.5.24"}) is None


def test_the_log_is_appended_whole_and_a_foreign_file_is_refused(tmp_path):
    log = tmp_path / "sub" / "promotions.json"
    assert read_log(log) == []
    write_atomic(log, log_with([], {"decision": "refused"}))
    write_atomic(log, log_with(read_log(log), {"decision": "promoted"}))
    assert [e["decision"] for e in read_log(log)] == ["refused", "promoted"]
    assert [p.name for p in log.parent.iterdir()] == ["promotions.json"]   # no scratch left
    foreign = tmp_path / "foreign.json"
    foreign.write_text('["x"]')
    with pytest.raises(CanaryError, match="no 'entries' list"):
        read_log(foreign)


def test_the_kept_installs_are_read_from_their_manifests(tmp_path):
    for name, version, at in (("pypi-0.5.23-a", "0.5.23", "1"), ("pypi-0.5.24-b", "0.5.24", "2"),
                              ("unfinished", "", "3")):
        venv = tmp_path / "venvs" / name
        venv.mkdir(parents=True)
        if version:
            (venv / "sglang-manifest.json").write_text(json.dumps({"resolved": {"sglang": version},
                                                                    "installed_at": at}))
    (tmp_path / "current").symlink_to(tmp_path / "venvs" / "pypi-0.5.24-b")
    found = kept_installs(tmp_path)
    assert (found["current"], found["current_version"]) == ("pypi-0.5.24-b", "0.5.24")
    assert [i["name"] for i in found["installs"]] == ["pypi-0.5.23-a", "pypi-0.5.24-b"]
    assert install_of(found["installs"], "0.5.23", "pypi-0.5.24-b") == "pypi-0.5.23-a"
    assert install_of(found["installs"], "0.5.22", None) is None


def test_rolling_upgrade_without_a_gateway_group_fails_naming_it(tmp_path):
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"children": {"sglang_containers": {"hosts": {"r1": {}}}}}}))
    before = hashlib.sha256(inventory.read_bytes()).hexdigest()
    private = tmp_path / "runner"
    private.mkdir()
    run = run_playbook(private, "rolling_upgrade.yml", ["-e", "sglang_version=0.5.23"], inventory=str(inventory))
    assert run.rc != 0
    assert any("group sglang_gateway has 0 hosts (the group is missing)" in f and "Nothing was changed" in f
               for f in run.failures), run.failures
    assert "r1" not in run.stdout.split("PLAY RECAP")[-1]    # no replica was reached
    assert hashlib.sha256(inventory.read_bytes()).hexdigest() == before


def test_rolling_upgrade_refuses_a_replicas_bad_server_settings_before_the_gateway_is_asked(tmp_path):
    """Every replica's server settings are checked (sglang_server, tasks_from: settings) before the
    first leaves the gateway; the gateway reads where each listens from that check, with no fallback."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"children": {
        "sglang_gateway": {"hosts": {"gw": local}},
        "sglang_containers": {"hosts": {"r1": local, "r2": {**local, "sglang_server_extra_flags": {"port": 99999}}}}}}}))
    before = hashlib.sha256(inventory.read_bytes()).hexdigest()
    private = tmp_path / "runner"
    private.mkdir()
    run = run_playbook(private, "rolling_upgrade.yml", ["-e", "sglang_version=0.5.23"], inventory=str(inventory))
    assert run.rc != 0
    (failure,) = run.failures
    assert failure.startswith("The sglang_server settings cannot make a unit systemd accepts:"), failure
    assert "99999" in failure, failure
    # r2 failed in the settings play; the gateway's checks and its /workers were never reached
    assert "TASK [Check the gateway's settings and replicas]" not in run.stdout
    assert "Read which replicas the gateway serves" not in run.stdout
    assert hashlib.sha256(inventory.read_bytes()).hexdigest() == before
