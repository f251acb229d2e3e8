"""Passthrough entries computed from discovery on real captures and hand-made traps."""

from __future__ import annotations

import copy
import json
import os
import stat
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fake_nvidia_root import build  # noqa: E402
from ansible.module_utils.lxc_config_write import write_in_place  # noqa: E402
from ansible.module_utils.lxc_passthrough import (  # noqa: E402
    checked_nodes,
    checked_result,
    memlock_lines,
    nodes_of,
    nvidia_majors,
    plan_devices,
    plan_raw,
    raw_lines,
    rootfs_problem,
)
from ansible.module_utils.nvidia_discovery import discover  # noqa: E402

GPU = REPO / "tests" / "fixtures" / "gpu"
PCT = REPO / "tests" / "fixtures" / "pct"


def discovered(fixture: str, root: Path, drop: tuple[str, ...] = ()) -> dict:
    """What nvidia_devices reports for a fake root built from a capture."""
    build(GPU / fixture, root, drop)
    return discover(str(root))


def lines_for(nvidia: dict, cgroup: str = "v2", memlock: str = "unlimited") -> list[tuple[str, str]]:
    nodes = nodes_of(nvidia)
    return raw_lines(nodes, cgroup) + memlock_lines(nodes, memlock)


def test_real_two_gpu_capture_gives_one_allow_and_one_mount_per_node(tmp_path: Path) -> None:
    nvidia = discovered("h200-2gpu", tmp_path)
    lines = lines_for(nvidia)
    root = str(tmp_path)
    assert lines == [
        ("lxc.cgroup2.devices.allow", "c 195:0 rwm"),
        ("lxc.cgroup2.devices.allow", "c 195:1 rwm"),
        ("lxc.cgroup2.devices.allow", "c 195:255 rwm"),
        ("lxc.cgroup2.devices.allow", "c 238:0 rwm"),
        ("lxc.cgroup2.devices.allow", "c 238:1 rwm"),
        ("lxc.cgroup2.devices.allow", "c 241:1 rwm"),
        ("lxc.cgroup2.devices.allow", "c 241:2 rwm"),
        ("lxc.mount.entry", f"{root}/dev/nvidia0 dev/nvidia0 none bind,create=file 0 0"),
        ("lxc.mount.entry", f"{root}/dev/nvidia1 dev/nvidia1 none bind,create=file 0 0"),
        ("lxc.mount.entry", f"{root}/dev/nvidiactl dev/nvidiactl none bind,create=file 0 0"),
        ("lxc.mount.entry", f"{root}/dev/nvidia-uvm dev/nvidia-uvm none bind,create=file 0 0"),
        ("lxc.mount.entry", f"{root}/dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,create=file 0 0"),
        ("lxc.mount.entry", f"{root}/dev/nvidia-caps/nvidia-cap1 dev/nvidia-caps/nvidia-cap1 none bind,create=file 0 0"),
        ("lxc.mount.entry", f"{root}/dev/nvidia-caps/nvidia-cap2 dev/nvidia-caps/nvidia-cap2 none bind,create=file 0 0"),
        ("lxc.prlimit.memlock", "unlimited"),
    ]
    assert not any("optional" in value for _, value in lines)
    assert checked_result(nvidia)["gpu_count"] == 2


def test_cgroup_v1_hosts_get_the_v1_key(tmp_path: Path) -> None:
    nvidia = discovered("h200-1gpu", tmp_path)
    keys = {key for key, _ in raw_lines(nodes_of(nvidia), "v1")}
    assert keys == {"lxc.cgroup.devices.allow", "lxc.mount.entry"}
    with pytest.raises(ValueError, match="v1 or v2"):
        raw_lines(nodes_of(nvidia), "v3")


def test_dynamic_uvm_major_comes_from_proc_devices(tmp_path: Path) -> None:
    nvidia = discovered("synthetic-uvm-major-511", tmp_path)
    allows = [value for key, value in lines_for(nvidia) if key.endswith("devices.allow")]
    assert "c 511:0 rwm" in allows and "c 511:1 rwm" in allows
    assert not any(value.startswith("c 238:") for value in allows)


def test_imex_channels_major_is_never_taken_for_caps(tmp_path: Path) -> None:
    for fixture in ("synthetic-8gpu-imex-before-caps", "synthetic-8gpu-imex-after-caps"):
        nvidia = discovered(fixture, tmp_path / fixture)
        assert nvidia["majors"]["nvidia-caps"] != nvidia["majors"].get("nvidia-caps-imex-channels")
        assert checked_result(nvidia)["gpu_count"] == 8


def test_no_driver_passes_nothing_and_misses_nothing(tmp_path: Path) -> None:
    nvidia = discovered("synthetic-no-driver", tmp_path)
    assert nodes_of(nvidia) == []
    assert lines_for(nvidia) == []
    assert checked_result(nvidia)["missing_nodes"] == []


def test_missing_uvm_node_is_named(tmp_path: Path) -> None:
    nvidia = discovered("synthetic-missing-uvm-node", tmp_path)
    assert checked_result(nvidia, 8)["missing_nodes"] == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]


def test_a_gpu_node_dropped_after_a_reboot_is_missing(tmp_path: Path) -> None:
    nvidia = discovered("h200-2gpu", tmp_path, drop=("/dev/nvidia1",))
    # Without nvidia-smi's list, the expected count says which nvidiaN must exist.
    assert checked_result(nvidia, 2)["missing_nodes"] == ["/dev/nvidia1"]
    assert checked_result(nvidia)["missing_nodes"] == []


def test_seven_of_eight(tmp_path: Path) -> None:
    nvidia = discovered("synthetic-7-of-8-gpus", tmp_path)
    assert checked_result(nvidia)["gpu_count"] == 7


def test_raw_plan_adds_then_converges_and_keeps_other_lines(tmp_path: Path) -> None:
    nvidia = discovered("h200-2gpu", tmp_path)
    config = (PCT / "120-before.conf").read_text()
    wanted = lines_for(nvidia)
    first = plan_raw(config, wanted, nvidia_majors(nvidia), ": ")
    assert len(first.added) == len(wanted) and first.removed == []
    # The user's own device (tun, 10:200) and the snapshot section stay as they were.
    assert "lxc.cgroup2.devices.allow: c 10:200 rwm" in first.text
    assert first.text.split("[snapshot-1]")[1] == config.split("[snapshot-1]")[1]
    main = first.text.split("[snapshot-1]")[0]
    assert all(f"{key}: {value}" in main for key, value in wanted)
    again = plan_raw(first.text, wanted, nvidia_majors(nvidia), ": ")
    assert not again.changed and again.text == first.text


def test_removing_a_gpu_removes_exactly_its_entries(tmp_path: Path) -> None:
    both = discovered("h200-2gpu", tmp_path / "both")
    one = discovered("h200-2gpu", tmp_path / "one", drop=("/dev/nvidia1",))
    before = plan_raw("", lines_for(both), nvidia_majors(both), " = ").text
    # The test roots differ; compare by what a real host would see: same paths.
    before = before.replace(str(tmp_path / "both"), str(tmp_path / "one"))
    after = plan_raw(before, lines_for(one), nvidia_majors(one), " = ")
    root = tmp_path / "one"
    assert after.added == []
    assert after.removed == [
        "lxc.cgroup2.devices.allow = c 195:1 rwm",
        f"lxc.mount.entry = {root}/dev/nvidia1 dev/nvidia1 none bind,create=file 0 0",
    ]


def test_duplicated_entries_collapse_to_one(tmp_path: Path) -> None:
    nvidia = discovered("h200-1gpu", tmp_path)
    wanted = lines_for(nvidia)
    text = plan_raw("", wanted, nvidia_majors(nvidia), " = ").text
    doubled = text + "lxc.cgroup2.devices.allow = c 195:0 rwm\n"
    plan = plan_raw(doubled, wanted, nvidia_majors(nvidia), " = ")
    assert plan.removed == ["lxc.cgroup2.devices.allow = c 195:0 rwm"] and plan.added == []


# GET /nodes/{node}/lxc/120/config as the API answers it (JSON: numbers as numbers).
API_CONFIG_WITH_DEVICES = {
    "arch": "amd64", "cores": 32, "dev0": "/dev/nvidia0,mode=0666", "dev1": "/dev/nvidiactl,mode=0660",
    "dev2": "/dev/nvidia5,mode=0666", "dev3": "/dev/fuse", "features": "nesting=1", "hostname": "sglang1",
    "memory": 262144, "onboot": 1, "ostype": "debian", "rootfs": "local-lvm:vm-120-disk-0,size=200G",
    "swap": 0, "unprivileged": 1, "digest": "5b1e0f6c0a1d9f2e7c3b4a5d6e7f8091a2b3c4d5",
}


def test_devn_plan_from_the_api_config_keeps_indexes(tmp_path: Path) -> None:
    current = {key: str(value) for key, value in API_CONFIG_WITH_DEVICES.items()}
    nvidia = discovered("h200-2gpu", tmp_path)
    plan = plan_devices(current, nodes_of(nvidia), "0666")
    # nvidia0 keeps dev0, nvidiactl keeps dev1 and gets the new mode, dev3 (fuse) stays,
    # the stale nvidia5 entry goes, new nodes take the lowest free indexes.
    assert "dev0" not in plan.set
    assert plan.set["dev1"] == "/dev/nvidiactl,mode=0666"
    assert plan.delete == ["dev2"]
    assert "dev3" not in plan.set and "dev3" not in plan.delete
    assert sorted(plan.wanted.values()) == sorted(f"{node.path},mode=0666" for node in nodes_of(nvidia))
    applied = {key: value for key, value in current.items() if key not in plan.delete} | plan.set
    again = plan_devices(applied, nodes_of(nvidia), "0666")
    assert not again.changed


def test_devn_gid_and_fresh_container(tmp_path: Path) -> None:
    nvidia = discovered("h200-1gpu", tmp_path)
    plan = plan_devices({}, nodes_of(nvidia), "0660", gid=44)
    assert plan.set == {
        "dev0": "/dev/nvidia0,mode=0660,gid=44",
        "dev1": "/dev/nvidiactl,mode=0660,gid=44",
        "dev2": "/dev/nvidia-uvm,mode=0660,gid=44",
        "dev3": "/dev/nvidia-uvm-tools,mode=0660,gid=44",
        "dev4": "/dev/nvidia-caps/nvidia-cap1,mode=0660,gid=44",
        "dev5": "/dev/nvidia-caps/nvidia-cap2,mode=0660,gid=44",
    }


def test_in_place_write_needs_no_chmod_or_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pmxcfs refuses chmod and rename-with-mode: the write must use neither."""
    conf = tmp_path / "120.conf"
    conf.write_text("arch: amd64\nlxc.cgroup2.devices.allow: c 195:0 rwm\n")
    conf.chmod(0o640)

    def refuse(*_args, **_kwargs):
        raise PermissionError(1, "Operation not permitted (pmxcfs)")

    for name in ("chmod", "fchmod", "chown", "fchown", "rename", "replace"):
        monkeypatch.setattr(os, name, refuse)
    write_in_place(str(conf), "arch: amd64\n")
    monkeypatch.undo()
    assert conf.read_text() == "arch: amd64\n"
    assert stat.S_IMODE(conf.stat().st_mode) == 0o640


@pytest.mark.parametrize(
    ("config", "init", "problem"),
    [
        ("lxc.uts.name = c1\n", True, "names no lxc.rootfs.path"),
        ("lxc.rootfs.path = dir:/\n", True, "expected /var/lib/lxc/c1/rootfs"),
        ("lxc.rootfs.path = dir:/var/lib/lxc/c1/rootfs\n", False, "sbin/init does not exist"),
        ("lxc.rootfs.path = dir:/var/lib/lxc/c1/rootfs\n", True, None),
        ("lxc.rootfs.path = /var/lib/lxc/c1/rootfs\n", True, None),
    ],
)
def test_a_container_without_its_own_rootfs_is_never_started(config: str, init: bool, problem: str | None) -> None:
    found = rootfs_problem(config, "c1", "/var/lib/lxc", init)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


def test_live_module_run_matches_discovery_on_the_captured_files(tmp_path: Path) -> None:
    """nvidia_devices run live on a 2-GPU H200 gives what the capture's fake root gives."""
    live = json.loads((GPU / "h200-2gpu" / "live-nvidia-devices.json").read_text())["nvidia"]
    captured = discovered("h200-2gpu", tmp_path)
    for key in ("driver_version", "kernel_module", "majors", "gpu_nodes"):
        assert live[key] == captured[key], key
    assert [(n["path"], n["major"], n["minor"]) for n in live["nodes"]] == [
        (n["path"], n["major"], n["minor"]) for n in captured["nodes"]
    ]
    assert [gpu["index"] for gpu in live["gpus"]] == [0, 1]
    plan = json.loads((GPU / "h200-2gpu" / "live-passthrough-plan.json").read_text())
    assert plan["gpus"] == 2 and plan["cgroup"] == "v2"
    assert plan["node_ids"] == [f"{n['path']} {n['major']}:{n['minor']}" for n in live["nodes"]]


# --- input from lxc_container_nvidia (a user variable) is checked again before any line ---------

REAL = json.loads((GPU / "h200-2gpu" / "live-nvidia-devices.json").read_text())["nvidia"]
INJECT = "\nlxc.apparmor.profile = unconfined"


def with_node(index: int, **changes: object) -> dict:
    """The real live discovery with one node changed."""
    nvidia = copy.deepcopy(REAL)
    nvidia["nodes"][index].update(changes)
    return nvidia


BAD_INPUTS = [
    (with_node(0, path="/dev/nvidia0" + INJECT), ["node path '/dev/nvidia0\\nlxc.apparmor.profile", "not an NVIDIA node"]),
    (with_node(0, path="/dev/nvidia0 "), ["node path '/dev/nvidia0 '"]),
    (with_node(0, path="/dev/nvidia\u0660"), ["node path '/dev/nvidia\\u0660'"]),
    (with_node(0, path="/dev/mem"), ["node path '/dev/mem'"]),
    (with_node(0, path="dev/nvidia0"), ["node path 'dev/nvidia0'"]),
    (with_node(5, path="/dev/nvidia-caps/../../etc/shadow"), ["node path '/dev/nvidia-caps/../../etc/shadow'"]),
    (with_node(5, path="/dev/nvidia-caps/nvidia-cap1" + INJECT), ["node path '/dev/nvidia-caps/nvidia-cap1\\n"]),
    (with_node(0, path=7), ["node path 7"]),
    (with_node(0, host_path="/dev/nvidia0" + INJECT), ["host_path '/dev/nvidia0\\nlxc.apparmor"]),
    (with_node(0, host_path="/ /dev/nvidia0"), ["host_path '/ /dev/nvidia0'", "no whitespace"]),
    (with_node(0, host_path="/srv/../dev/nvidia0"), ["host_path '/srv/../dev/nvidia0'"]),
    (with_node(0, host_path="/dev/nvidia1"), ["host_path '/dev/nvidia1' is not a plain absolute path ending in /dev/nvidia0"]),
    (with_node(0, major=1, minor=1), ["/dev/nvidia0 is 1:1, expected 195:0 (nvidia)"]),
    (with_node(0, minor=255), ["/dev/nvidia0 is 195:255, expected 195:0"]),
    (with_node(3, major=195), ["/dev/nvidia-uvm is 195:0, expected 238:0 (nvidia-uvm)"]),
    (with_node(0, major="195\n"), ["/dev/nvidia0: major is '195\\n'"]),
    (with_node(0, major=True), ["/dev/nvidia0: major is True"]),
    (with_node(0, major=195.0), ["/dev/nvidia0: major is 195.0"]),
    (with_node(0, minor=-1), ["/dev/nvidia0: minor is -1"]),
    (with_node(0, major=5000), ["/dev/nvidia0: major is 5000; expected a number from 0 to 4095"]),
    ({**REAL, "majors": {**REAL["majors"], "nvidia": 1}}, ["nvidia.majors['nvidia'] is 1"]),
    ({**REAL, "majors": {**REAL["majors"], "nvidia-uvm": 195}}, ["nvidia.majors['nvidia-uvm'] is 195"]),
    ({**REAL, "majors": {**REAL["majors"], "nvidia-uvm": "238" + INJECT}}, ["nvidia.majors['nvidia-uvm'] is '238\\n"]),
    ({**REAL, "majors": {**REAL["majors"], "mem": 1}}, ["nvidia.majors has 'mem'"]),
    ({**REAL, "majors": {"nvidia": 195}}, ["/dev/nvidia-uvm: nvidia.majors names no nvidia-uvm"]),
    ({**REAL, "nodes": REAL["nodes"] + REAL["nodes"][:1]}, ["nvidia.nodes lists /dev/nvidia0 more than once"]),
    ({**REAL, "nodes": ["/dev/nvidia0"]}, ["a node is '/dev/nvidia0'; expected a mapping"]),
    ({**REAL, "nodes": "/dev/nvidia0"}, ["nvidia.nodes is '/dev/nvidia0'; expected a list"]),
]


@pytest.mark.parametrize(("nvidia", "needles"), BAD_INPUTS)
def test_a_node_no_discovery_would_give_is_refused_naming_it(nvidia, needles):
    with pytest.raises(ValueError) as caught:
        checked_nodes(nvidia)
    message = str(caught.value)
    for needle in needles:
        assert needle in message, message
    assert "\n" not in message


def test_real_discovery_and_string_numbers_pass():
    assert [node.path for node in checked_nodes(REAL)] == [node["path"] for node in REAL["nodes"]]
    as_strings = with_node(0, major="195", minor="0")
    assert checked_nodes(as_strings)[0].major == 195
    frontend = {**REAL, "majors": {"nvidia-frontend": 195, "nvidia-uvm": 238, "nvidia-caps": 241}}
    assert len(checked_nodes(frontend)) == len(REAL["nodes"])


@pytest.mark.parametrize("memlock", ["unlimited" + INJECT, "unlimited ", "1 2", "\u0661"])
def test_a_memlock_no_line_may_carry_is_refused(memlock):
    with pytest.raises(ValueError, match="memlock is"):
        memlock_lines(nodes_of(REAL), memlock)
