"""The one restart rule (systemd_state) and sglang_server's wait: restart when a file changed
after the process started, and when a start being waited on has failed. systemctl output
shapes as systemd 252 prints them."""

from __future__ import annotations

import pytest

from ansible.module_utils import sglang_service as ss
from ansible.module_utils import systemd_state as st

RUNNING = """LoadState=loaded
ActiveState=active
SubState=running
Result=success
ExecMainStatus=0
NRestarts=0
InvocationID=0f1e2d3c4b5a69788796a5b4c3d2e1f0
MainPID=4242
ExecMainStartTimestampMonotonic=1000000000
NeedDaemonReload=no
UnitFileState=enabled
FragmentPath=/etc/systemd/system/sglang.service
DropInPaths=/etc/systemd/system/sglang.service.d/a.conf /etc/systemd/system/sglang.service.d/b.conf
"""


def test_parse_show():
    state = st.parse_show(RUNNING)
    assert state.running and state.invocation.startswith("0f1e") and state.main_pid == 4242
    assert "ActiveState=active SubState=running" in state.describe()


def test_started_epoch_from_monotonic_stamp():
    state = st.parse_show(RUNNING)  # started at monotonic 1000 s
    assert st.started_epoch(state, monotonic_now=1100.0, wall_now=5000.0) == 4900.0


def test_stale_paths_only_those_changed_after_the_start():
    mtimes = {"/etc/systemd/system/sglang.service": 4800.0, "/etc/sglang/sglang.env": 4950.0,
              "/opt/sglang/current": 4899.0, "/gone": None}
    assert st.stale_paths(mtimes, 4900.0) == ["/etc/sglang/sglang.env"]


def test_not_running_means_nothing_is_stale():
    stopped = st.parse_show(RUNNING.replace("ActiveState=active", "ActiveState=inactive")
                            .replace("SubState=running", "SubState=dead"))
    assert st.started_epoch(stopped, 1100.0, 5000.0) is None
    assert st.stale_paths({"/x": 9999.0}, None) == []


def test_start_still_coming_up():
    first = st.parse_show(RUNNING)
    assert ss.start_failure(first, first) is None


def test_crash_loop_named():
    first = st.parse_show(RUNNING)
    now = st.parse_show(RUNNING.replace("ActiveState=active", "ActiveState=activating")
                        .replace("SubState=running", "SubState=auto-restart")
                        .replace("Result=success", "Result=exit-code").replace("ExecMainStatus=0", "ExecMainStatus=1")
                        .replace("NRestarts=0", "NRestarts=1"))
    message = ss.start_failure(first, now)
    assert "systemd is restarting it" in message
    assert "SubState=auto-restart" in message and "ExecMainStatus=1" in message
    assert not now.running


def test_failed_unit_named():
    now = st.parse_show(RUNNING.replace("ActiveState=active", "ActiveState=failed")
                        .replace("SubState=running", "SubState=failed"))
    assert "is not running (ActiveState=failed" in ss.start_failure(st.parse_show(RUNNING), now)


def test_another_invocation_named():
    now = st.parse_show(RUNNING.replace("InvocationID=0f1e", "InvocationID=aaaa"))
    assert "restarted while starting" in ss.start_failure(st.parse_show(RUNNING), now)


def test_parse_show_reads_what_the_rule_needs():
    state = st.parse_show(RUNNING)
    assert state.enabled and not state.need_reload
    assert state.fragment == "/etc/systemd/system/sglang.service"
    assert state.drop_ins == ("/etc/systemd/system/sglang.service.d/a.conf",
                              "/etc/systemd/system/sglang.service.d/b.conf")
    changed = st.parse_show(RUNNING.replace("NeedDaemonReload=no", "NeedDaemonReload=yes")
                            .replace("UnitFileState=enabled", "UnitFileState=disabled"))
    assert changed.need_reload and not changed.enabled
    assert st.parse_show("UnitFileState=static\n").enabled


def test_a_oneshot_that_ran_counts_as_running():
    oneshot = st.parse_show(RUNNING.replace("SubState=running", "SubState=exited").replace("MainPID=4242", "MainPID=0"))
    assert oneshot.running
    assert st.started_epoch(oneshot, monotonic_now=1100.0, wall_now=5000.0) == 4900.0


STOPPED = RUNNING.replace("ActiveState=active", "ActiveState=inactive").replace("SubState=running", "SubState=dead")


@pytest.mark.parametrize("show, stale, run, restart, pending, action, why", [
    (RUNNING, [], True, False, False, "none", "it runs its current files"),
    (RUNNING, ["/etc/sglang/sglang.env"], True, False, False, "restart",
     "/etc/sglang/sglang.env changed after it started"),
    (RUNNING, ["/a", "/b"], True, True, True, "restart", "/a, /b changed after it started"),
    (RUNNING, [], True, True, False, "restart", "a restart was asked for"),
    (RUNNING, [], True, False, True, "restart", "this run changes what it runs on"),
    (STOPPED, [], True, False, False, "start", "it was not running (ActiveState=inactive"),
    (STOPPED, [], True, True, True, "start", "it was not running"),
    ("LoadState=not-found\nActiveState=inactive\n", [], True, False, True, "start", "its unit is new"),
    (RUNNING, ["/x"], False, True, True, "none", "it is not to run here"),
    (STOPPED, [], False, False, False, "none", "it is not to run here"),
])
def test_one_restart_rule(show, stale, run, restart, pending, action, why):
    decided, reason = st.decide(st.parse_show(show), stale, run, restart, pending)
    assert decided == action
    assert reason.startswith(why), reason
