"""sglang_server's service state: restart when a file changed after the process started,
and when a start being waited on has failed. systemctl output shapes as systemd 252 prints them."""

from __future__ import annotations

from ansible.module_utils import sglang_service as ss

RUNNING = """LoadState=loaded
ActiveState=active
SubState=running
Result=success
ExecMainStatus=0
NRestarts=0
InvocationID=0f1e2d3c4b5a69788796a5b4c3d2e1f0
MainPID=4242
ExecMainStartTimestampMonotonic=1000000000
"""


def test_parse_show():
    state = ss.parse_show(RUNNING)
    assert state.running and state.invocation.startswith("0f1e") and state.main_pid == 4242
    assert "ActiveState=active SubState=running" in state.describe()


def test_started_epoch_from_monotonic_stamp():
    state = ss.parse_show(RUNNING)  # started at monotonic 1000 s
    assert ss.started_epoch(state, monotonic_now=1100.0, wall_now=5000.0) == 4900.0


def test_stale_paths_only_those_changed_after_the_start():
    mtimes = {"/etc/systemd/system/sglang.service": 4800.0, "/etc/sglang/sglang.env": 4950.0,
              "/opt/sglang/current": 4899.0, "/gone": None}
    assert ss.stale_paths(mtimes, 4900.0) == ["/etc/sglang/sglang.env"]


def test_not_running_means_nothing_is_stale():
    stopped = ss.parse_show(RUNNING.replace("ActiveState=active", "ActiveState=inactive")
                            .replace("SubState=running", "SubState=dead"))
    assert ss.started_epoch(stopped, 1100.0, 5000.0) is None
    assert ss.stale_paths({"/x": 9999.0}, None) == []


def test_start_still_coming_up():
    first = ss.parse_show(RUNNING)
    assert ss.start_failure(first, first) is None


def test_crash_loop_named():
    first = ss.parse_show(RUNNING)
    now = ss.parse_show(RUNNING.replace("ActiveState=active", "ActiveState=activating")
                        .replace("SubState=running", "SubState=auto-restart")
                        .replace("Result=success", "Result=exit-code").replace("ExecMainStatus=0", "ExecMainStatus=1")
                        .replace("NRestarts=0", "NRestarts=1"))
    message = ss.start_failure(first, now)
    assert "systemd is restarting it" in message
    assert "SubState=auto-restart" in message and "ExecMainStatus=1" in message
    assert not now.running


def test_failed_unit_named():
    now = ss.parse_show(RUNNING.replace("ActiveState=active", "ActiveState=failed")
                        .replace("SubState=running", "SubState=failed"))
    assert "is not running (ActiveState=failed" in ss.start_failure(ss.parse_show(RUNNING), now)


def test_another_invocation_named():
    now = ss.parse_show(RUNNING.replace("InvocationID=0f1e", "InvocationID=aaaa"))
    assert "restarted while starting" in ss.start_failure(ss.parse_show(RUNNING), now)
