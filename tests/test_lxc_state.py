"""A plain-LXC container's restart rule (lxc_state, with systemd_state's decide_restart): started
when stopped, restarted once when its config changed after its init started or its veth is off
the bridge. Start times from this kernel's own /proc. The lxc-info text below has the lines LXC's
lxc-info prints (State, PID, the stats, one Link per veth); Molecule's lxc_container scenario
reads the real thing (its side effect restarts a container whose veth lost its bridge)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from ansible.module_utils import lxc_state as ls
from ansible.module_utils import systemd_state as st

# lxc-info --state --pid --stats --no-humanize of a running container with two veths.
RUNNING = """State:          RUNNING
PID:            52114
CPU use:        1873040000
BlkIO use:      1331200
Memory use:     40587264
KMem use:       0
Link:           vethAbC123
 TX bytes:      1052
 RX bytes:      936
 Total bytes:   1988
Link:           vethDeF456
 TX bytes:      0
 RX bytes:      0
 Total bytes:   0
"""


def test_lxc_info_gives_the_state_the_init_pid_and_each_veth():
    state = ls.parse_info(RUNNING)
    assert state == ls.ContainerState(state="RUNNING", pid=52114, links=("vethAbC123", "vethDeF456"))
    assert state.running


def test_a_stopped_container_has_no_pid_and_does_not_run():
    state = ls.parse_info("State:          STOPPED\n")
    assert state.state == "STOPPED" and state.pid == 0 and not state.running


@pytest.mark.parametrize("comm", ["sleep", "a b) c", "x)"])
def test_the_start_field_is_counted_after_the_command_name(comm: str):
    fields = ["S"] + [str(n) for n in range(4, 22)] + ["98765", "0"]
    assert ls.start_ticks(f"4242 ({comm}) " + " ".join(fields)) == 98765


def test_a_line_that_is_not_proc_stat_is_refused():
    with pytest.raises(ValueError, match="not a /proc/PID/stat line"):
        ls.start_ticks("4242 (sleep) S 1 2")


def test_a_process_start_read_from_proc_is_when_it_started():
    """A real process on this kernel: its start from /proc/PID/stat lies between the times around its spawn."""
    before = time.time()
    child = subprocess.Popen(["sleep", "5"])
    after = time.time()
    try:
        ticks = ls.start_ticks(Path(f"/proc/{child.pid}/stat").read_text())
        started = ls.started_epoch(ticks, os.sysconf("SC_CLK_TCK"), time.clock_gettime(time.CLOCK_BOOTTIME),
                                   time.time())
    finally:
        child.kill()
        child.wait()
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert before - tick <= started <= after + tick


def test_a_config_written_before_the_start_is_not_stale_and_one_written_after_is(tmp_path: Path):
    config = tmp_path / "config"
    config.write_text("lxc.rootfs.path = dir:/var/lib/lxc/c/rootfs\n")
    started = config.stat().st_mtime + 0.5
    assert st.stale_paths(st.mtimes([str(config)]), started) == []
    os.utime(config, (started + 2, started + 2))
    assert st.stale_paths(st.mtimes([str(config), str(tmp_path / "missing")]), started) == [str(config)]


def test_the_bridge_of_a_veth_is_read_from_sysfs(tmp_path: Path):
    (tmp_path / "molgpu0").mkdir()
    (tmp_path / "vethAbC123").mkdir()
    (tmp_path / "vethAbC123" / "master").symlink_to("../molgpu0")
    (tmp_path / "vethLoose").mkdir()
    assert ls.link_master(str(tmp_path), "vethAbC123") == "molgpu0"
    assert ls.link_master(str(tmp_path), "vethLoose") is None
    assert ls.link_master(str(tmp_path), "vethGone") is None


@pytest.mark.parametrize("links, masters, needle", [
    (("vethA",), {"vethA": "molgpu0"}, None),
    (("vethA", "vethB"), {"vethA": None, "vethB": "molgpu0"}, None),
    (("vethA",), {"vethA": None}, "its veth is not on molgpu0 (vethA on no bridge)"),
    (("vethA",), {"vethA": "docker0"}, "vethA on docker0"),
    ((), {}, "it has no veth on molgpu0"),
])
def test_a_veth_off_its_bridge_is_named(links, masters, needle):
    found = ls.off_bridge(links, "molgpu0", masters)
    assert (found is None) if needle is None else (needle in found)


def test_a_container_without_a_bridge_is_never_off_it():
    assert ls.off_bridge((), "", {}) is None


@pytest.mark.parametrize("running, stale, restart, pending, action", [
    (False, [], False, False, "start"),
    (False, ["/var/lib/lxc/c/config"], True, True, "start"),
    (True, ["/var/lib/lxc/c/config"], False, False, "restart"),
    (True, [], True, False, "restart"),
    (True, [], False, True, "restart"),
    (True, [], False, False, "none"),
])
def test_the_container_follows_the_one_restart_rule(running, stale, restart, pending, action):
    decided, reason = st.decide_restart(running, "it was stopped", stale, restart, pending)
    assert decided == action
    if stale and running:
        assert reason == "/var/lib/lxc/c/config changed after it started"


# `systemctl is-system-running --wait` prints one of systemd's states; only these two end the
# boot wait (starting: still booting; offline: lxc-attach reached no systemd; maintenance: rescue).
@pytest.mark.parametrize("said, done", [("running\n", True), ("degraded\n", True), ("starting\n", False),
                                        ("initializing", False), ("maintenance", False), ("offline", False),
                                        ("", False), ("running degraded", False)])
def test_the_boot_wait_ends_only_when_systemd_says_it_has_booted(said: str, done: bool):
    assert ls.booted(said) is done


@pytest.mark.parametrize("timeout, tries", [(180, 60), (181, 61), (3, 1), (1, 1), (0, 1)])
def test_the_boot_wait_tries_every_few_seconds_for_the_whole_timeout(timeout: int, tries: int):
    assert ls.BOOT_POLL_SECONDS == 3
    assert ls.boot_tries(timeout) == tries


def test_what_the_container_sees_inside_is_compared_as_lines_in_any_order():
    wanted = ["/dev/nvidia0 195:0", "/dev/nvidiactl 195:255", "/models mounted read-only"]
    assert ls.inside_difference(list(reversed(wanted)), wanted) == ""
    assert ls.inside_difference([], []) == ""


def test_a_difference_inside_names_what_is_missing_and_what_is_extra():
    wanted = ["/dev/nvidia0 195:0", "/dev/nvidiactl 195:255", "/models mounted read-only"]
    seen = ["/dev/nvidiactl 195:255", "/dev/nvidia1 195:1", "/models not mounted"]
    assert ls.inside_difference(seen, wanted) == (
        "what it sees inside is not what the host passes: it lacks /dev/nvidia0 195:0, /models mounted read-only;"
        " it has /dev/nvidia1 195:1, /models not mounted, which the host does not pass")
    assert ls.inside_difference(wanted[:1], wanted).endswith("it lacks /dev/nvidiactl 195:255, /models mounted read-only")
    assert ls.inside_difference(wanted * 2, wanted).endswith("a line is listed twice")
