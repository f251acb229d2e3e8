"""Discovery of NVIDIA majors, nodes, driver and GPUs on real and hand-made fixtures."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tree_digest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fake_nvidia_root import build, parse_ls  # noqa: E402
from ansible.module_utils.nvidia_discovery import (  # noqa: E402
    DiscoveryError,
    discover,
    parse_driver_version,
    parse_proc_devices,
    parse_smi_csv,
    with_requirements,
)

GPU_FIXTURES = REPO / "tests" / "fixtures" / "gpu"
# The module lives in the task-less nvidia_discovery role; ad hoc, its directory stands in for a
# playbook's, so that Ansible searches its library/ and module_utils/.
AD_HOC = ("--playbook-dir", "roles/nvidia_discovery")
# Every fixture directory that exists (real captures and synthetic ones), so a new
# capture dropped in with the same file names is tested without editing this file.
FIXTURES = sorted(p.name for p in GPU_FIXTURES.iterdir() if (p / "proc-devices.txt").exists())
WITH_EXPECTED = [name for name in FIXTURES if (GPU_FIXTURES / name / "expected.json").exists()]


def fake_root(name: str, dest: Path) -> Path:
    build(GPU_FIXTURES / name, dest)
    return dest


def smi_csv(name: str) -> str | None:
    path = GPU_FIXTURES / name / "query-gpu.csv"
    return path.read_text() if path.exists() else None


def without_host_path(result: dict) -> dict:
    return {**result, "nodes": [{k: v for k, v in node.items() if k != "host_path"} for node in result["nodes"]]}


def test_fixtures_found():
    assert "h200-1gpu" in FIXTURES
    assert len(WITH_EXPECTED) >= 9


@pytest.mark.parametrize("name", WITH_EXPECTED)
def test_discover_matches_expected(name, tmp_path):
    root = fake_root(name, tmp_path / "root")
    result = discover(str(root), smi_csv(name))
    expected = json.loads((GPU_FIXTURES / name / "expected.json").read_text())
    assert without_host_path(result) == expected
    for node in result["nodes"]:
        assert node["host_path"] == str(root) + node["path"]


@pytest.mark.parametrize("name", FIXTURES)
def test_sources_agree(name, tmp_path):
    """What the captures say independently of each other must agree in the result."""
    fixture = GPU_FIXTURES / name
    root = fake_root(name, tmp_path / "root")
    result = discover(str(root), smi_csv(name))
    listed = parse_ls((fixture / "ls-dev-nvidia.txt").read_text()) if (fixture / "ls-dev-nvidia.txt").exists() else {}
    wanted = {path: (major, minor) for path, (major, minor, _) in listed.items()
              if not path.startswith("/dev/nvidia-caps-imex-channels/")}
    assert {node["path"]: (node["major"], node["minor"]) for node in result["nodes"]} == wanted
    for node in result["nodes"]:
        assert node["major"] in result["majors"].values(), f"{node} has a major /proc/devices does not name"
    assert result["gpu_nodes"] == sum(1 for node in result["nodes"] if node["path"][len("/dev/nvidia"):].isdigit())
    if result["driver_version"]:
        assert result["kernel_module"] in ("open", "proprietary")
        assert set(result["majors"]) >= {"nvidia-uvm", "nvidia-caps"}
        assert ("nvidia" in result["majors"]) != ("nvidia-frontend" in result["majors"])
        csv_text = smi_csv(name) or ""
        if "driver_version" in csv_text.splitlines()[0]:
            column = [c.strip() for c in csv_text.splitlines()[0].split(",")].index("driver_version")
            for row in csv_text.splitlines()[1:]:
                assert row.split(",")[column].strip() == result["driver_version"]
    else:
        assert result["nodes"] == [] and result["gpus"] == [] and result["majors"] == {}
    assert "nvidia-caps-imex-channels" not in result["majors"]


@pytest.mark.parametrize("name", FIXTURES)
def test_ad_hoc_command(name, tmp_path):
    """`ansible localhost --playbook-dir roles/nvidia_discovery -m nvidia_devices -a root=DIR`, as the README says."""
    root = fake_root(name, tmp_path / "root")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}
    args = f"root={root}"
    if smi_csv(name) is not None:
        args += f" nvidia_smi_csv={GPU_FIXTURES / name / 'query-gpu.csv'}"
    proc = subprocess.run(["ansible", "localhost", *AD_HOC, "-m", "nvidia_devices", "-a", args],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    host = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert host["changed"] is False
    assert host["nvidia"] == with_requirements(discover(str(root), smi_csv(name)))


@pytest.mark.parametrize(("name", "options", "missing"), [
    ("h200-2gpu", {}, []),
    ("h200-2gpu", {"expected_gpus": 8}, []),  # nvidia-smi's two indexes decide, not the count
    ("synthetic-missing-uvm-node", {}, ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]),
    ("synthetic-no-modeset", {"modeset": True}, ["/dev/nvidia-modeset"]),
    ("synthetic-no-driver", {"expected_gpus": 8, "uvm": True}, []),
])
def test_required_and_missing_nodes_are_decided_once_by_discovery(name, options, missing, tmp_path):
    root = fake_root(name, tmp_path / "root")
    nvidia = with_requirements(discover(str(root), smi_csv(name)), **options)
    assert nvidia["missing_nodes"] == missing
    assert set(missing) <= set(nvidia["required_nodes"])
    assert nvidia["gpu_count"] == (len(nvidia["gpus"]) or nvidia["gpu_nodes"])


def test_uvm_is_required_when_loaded_or_when_the_host_must_load_it():
    base = {"driver_version": "580.1", "majors": {"nvidia": 195}, "gpus": [{"index": 0}],
            "nodes": [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidiactl"}], "gpu_nodes": 1}
    assert with_requirements(base)["missing_nodes"] == []
    assert with_requirements(base, uvm=True)["missing_nodes"] == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    loaded = dict(base, majors={"nvidia": 195, "nvidia-uvm": 509})
    assert with_requirements(loaded)["missing_nodes"] == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    no_smi = dict(base, gpus=[])
    assert with_requirements(no_smi, expected_gpus=2)["missing_nodes"] == ["/dev/nvidia1"]


def test_imex_lookalike_never_matches_either_order():
    for lines in (["508 nvidia-caps-imex-channels", "509 nvidia-caps"],
                  ["509 nvidia-caps", "508 nvidia-caps-imex-channels"]):
        text = "Character devices:\n195 nvidia\n" + "\n".join(lines) + "\n510 nvidia-uvm\n"
        assert parse_proc_devices(text) == {"nvidia": 195, "nvidia-caps": 509, "nvidia-uvm": 510}
    assert parse_proc_devices("Character devices:\n508 nvidia-caps-imex-channels\n") == {}


def test_block_devices_and_lookalikes_ignored():
    text = ("Character devices:\n195 nvidiactl\n239 nvidia-nvswitch\n240 nvidia-nvlink\n"
            "\nBlock devices:\n 42 nvidia-uvm\n")
    assert parse_proc_devices(text) == {}


@pytest.mark.parametrize(("line", "expected"), [
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  ",
     ("580.159.04", "open")),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  575.57.08  Release Build  (dvs@x)  Date",
     ("575.57.08", "open")),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024",
     ("550.127.05", "proprietary")),
    ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  580.95.05  Tue Sep 23 2025", ("580.95.05", "proprietary")),
    ("", (None, None)),
    ("GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)", (None, None)),
])
def test_driver_version(line, expected):
    assert parse_driver_version(line + "\nGCC version:  gcc 12\n") == expected


def test_smi_csv_nounits_and_not_available():
    text = ("index, name, uuid, pci.bus_id, memory.total [MiB], power.limit [W]\n"
            "1, NVIDIA B, GPU-b, 00000000:02:00.0, 97887, [N/A]\n"
            "0, NVIDIA A, GPU-a, 00000000:01:00.0, 97887, 600.00\n")
    gpus = parse_smi_csv(text)
    assert [gpu["uuid"] for gpu in gpus] == ["GPU-a", "GPU-b"]
    assert gpus[0]["memory_total_mib"] == 97887 and gpus[0]["power_limit_w"] == 600.0
    assert gpus[1]["power_limit_w"] is None


def test_smi_csv_without_uuid_column_is_an_error():
    with pytest.raises(ValueError, match="uuid"):
        parse_smi_csv("index, name\n0, NVIDIA H200\n")


def test_missing_root_has_no_nodes(tmp_path):
    result = discover(str(tmp_path / "nowhere"))
    assert result["nodes"] == [] and result["gpu_nodes"] == 0 and result["driver_version"] is None


def test_builder_drop_leaves_the_node_out(tmp_path):
    build(GPU_FIXTURES / "h200-1gpu", tmp_path, drop=("/dev/nvidia-uvm",))
    paths = [node["path"] for node in discover(str(tmp_path))["nodes"]]
    assert "/dev/nvidia-uvm" not in paths and "/dev/nvidia-uvm-tools" in paths


def test_builder_cli(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "fake_nvidia_root.py"),
                           str(GPU_FIXTURES / "synthetic-uvm-major-511"), str(tmp_path), "--drop", "/dev/nvidia7"],
                          capture_output=True, text=True, check=True)
    assert "nodes" in proc.stdout
    result = discover(str(tmp_path))
    assert result["gpu_nodes"] == 7
    uvm = next(node for node in result["nodes"] if node["path"] == "/dev/nvidia-uvm")
    assert (uvm["major"], uvm["minor"]) == (511, 0)


# --- hostile hosts: only NVIDIA nodes are taken, everything else is refused by name ----------


def ad_hoc(args: dict) -> dict:
    """`ansible localhost --playbook-dir roles/nvidia_discovery -m nvidia_devices -a JSON`: the module's own result."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}
    proc = subprocess.run(["ansible", "localhost", *AD_HOC, "-m", "nvidia_devices", "-a", json.dumps(args)],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def refused(root: Path, *needles: str, smi: str | None = None) -> str:
    """discover() refuses this root naming what is wrong, and the root is left as it was."""
    before = tree_digest(root)
    with pytest.raises(DiscoveryError) as caught:
        discover(str(root), smi)
    message = str(caught.value)
    for needle in needles:
        assert needle in message, message
    assert tree_digest(root) == before
    return message


def mknod(path: Path, major: int, minor: int, kind: int = stat.S_IFCHR) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    os.mknod(path, kind | 0o666, os.makedev(major, minor))
    return path


@pytest.mark.parametrize("name", [
    "nvidia0\nlxc.apparmor.profile = unconfined",
    "nvidia0 ",
    "nvidia0\t",
    "nvidia\u0663",  # ARABIC-INDIC DIGIT THREE: \\d would take it for 3
    "nvidia\uff11",  # FULLWIDTH DIGIT ONE
    "nvidia-uvm\u00a0",
    "nvidiactl\x1b[2J",
])
def test_a_dirty_node_name_is_refused_naming_it(tmp_path, name):
    root = fake_root("h200-2gpu", tmp_path / "root")
    mknod(root / "dev" / name, 195, 0)
    message = refused(root, "is no NVIDIA node", ascii(name)[1:-1])
    assert "\n" not in message and "\x1b" not in message


@pytest.mark.parametrize("name", [
    "nvidia-cap1\nlxc.cgroup2.devices.allow = a",
    "nvidia-cap\uff11",
    "nvidia-cap1 ",
    "\u200bnvidia-cap1",
])
def test_a_dirty_caps_name_is_refused_naming_it(tmp_path, name):
    root = fake_root("h200-2gpu", tmp_path / "root")
    mknod(root / "dev" / "nvidia-caps" / name, 241, 1)
    refused(root, "nvidia-caps/" + ascii(name)[1:-1], "is no NVIDIA node")


@pytest.mark.parametrize(("relative", "major", "minor", "needles"), [
    ("nvidia0", 1, 1, ["dev/nvidia0: it is 1:1 (mem in /proc/devices), expected 195:0"]),
    ("nvidiactl", 1, 3, ["dev/nvidiactl: it is 1:3 (mem in /proc/devices), expected 195:255"]),
    ("nvidia1", 195, 255, ["dev/nvidia1: it is 195:255", "expected 195:1"]),
    ("nvidia-modeset", 238, 0, ["dev/nvidia-modeset: it is 238:0 (nvidia-uvm in /proc/devices), expected 195:254"]),
    ("nvidia-uvm", 195, 0, ["dev/nvidia-uvm: it is 195:0", "expected 238:0 (nvidia-uvm)"]),
    ("nvidia-uvm-tools", 238, 0, ["dev/nvidia-uvm-tools: it is 238:0", "expected 238:1"]),
    ("nvidia-caps/nvidia-cap1", 238, 1, ["dev/nvidia-caps/nvidia-cap1: it is 238:1", "expected 241:1"]),
    ("nvidia-caps/nvidia-cap2", 242, 2, ["nvidia-cap2: it is 242:2 (nvidia-caps-imex-channels in /proc/devices)"]),
    ("nvidia2", 7, 0, ["dev/nvidia2: it is 7:0 (vcs in /proc/devices), expected 195:2"]),
])
def test_a_node_of_another_driver_is_refused(tmp_path, relative, major, minor, needles):
    root = fake_root("h200-2gpu", tmp_path / "root")
    mknod(root / "dev" / relative, major, minor)
    refused(root, *needles, "not the NVIDIA node it is named after")


def _regular(path: Path) -> None:
    path.write_text("195:0\n")


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.mkdir()


def _symlink_to_real_node(path: Path) -> None:
    path.symlink_to(path.parent / "nvidiactl")


def _block(path: Path) -> None:
    mknod(path, 195, 0, stat.S_IFBLK)


@pytest.mark.parametrize(("make", "kind"), [
    (_regular, "regular file"), (_fifo, "FIFO"), (_directory, "directory"),
    (_symlink_to_real_node, "symlink"), (_block, "block device"),
])
def test_a_node_name_that_is_no_character_device_is_refused(tmp_path, make, kind):
    root = fake_root("h200-2gpu", tmp_path / "root")
    target = root / "dev" / "nvidia0"
    target.unlink()
    make(target)
    refused(root, f"{target} is a {kind}", "not a character device")


@pytest.mark.parametrize(("make", "kind"), [(_regular, "regular file"), (_fifo, "FIFO")])
def test_a_caps_directory_that_is_none_is_refused(tmp_path, make, kind):
    root = fake_root("h200-1gpu", tmp_path / "root")
    caps = root / "dev" / "nvidia-caps"
    for node in caps.iterdir():
        node.unlink()
    caps.rmdir()
    make(caps)
    refused(root, f"{caps} is a {kind}", "nvidia-capN")


def test_a_caps_symlink_to_the_hosts_dev_is_refused(tmp_path):
    root = fake_root("h200-1gpu", tmp_path / "root")
    caps = root / "dev" / "nvidia-caps"
    for node in caps.iterdir():
        node.unlink()
    caps.rmdir()
    caps.symlink_to("/dev")
    refused(root, f"{caps} is a symlink")


def test_nodes_of_an_unloaded_driver_are_left_out_and_named(tmp_path):
    """nvidia_uvm unloaded, its nodes still in /dev: not passed, listed with the reason."""
    root = fake_root("h200-2gpu", tmp_path / "root")
    devices = root / "proc" / "devices"
    devices.write_text(devices.read_text().replace("238 nvidia-uvm\n", ""))
    result = discover(str(root))
    assert [node["path"] for node in result["left_out"]] == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert "nvidia-uvm is not in /proc/devices" in result["left_out"][0]["reason"]
    assert "/dev/nvidia-uvm" not in [node["path"] for node in result["nodes"]]
    # ... unless the stale node's major is another driver's: then it is refused.
    mknod(root / "dev" / "nvidia-uvm", 1, 1)
    refused(root, "dev/nvidia-uvm: it is 1:1, the major of mem in /proc/devices")


def test_nodes_without_any_driver_are_left_out(tmp_path):
    root = fake_root("h200-1gpu", tmp_path / "root")
    (root / "proc" / "devices").write_text("Character devices:\n  1 mem\n\nBlock devices:\n  7 loop\n")
    result = discover(str(root))
    assert result["nodes"] == [] and result["gpu_nodes"] == 0
    assert {node["path"] for node in result["left_out"]} == {
        "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
        "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"}
    mknod(root / "dev" / "nvidia0", 1, 1)
    refused(root, "dev/nvidia0: it is 1:1 (mem in /proc/devices), expected 195:0")


REAL_DEVICES = (GPU_FIXTURES / "h200-2gpu" / "proc-devices.txt").read_text()


@pytest.mark.parametrize(("change", "needles"), [
    (("238 nvidia-uvm\n", "238 nvidia-uvm\n244 nvidia-uvm\n"), [":20: nvidia-uvm is listed again (first on line 19)"]),
    (("238 nvidia-uvm\n", "238 nvidia-uvm\n238 nvidia-uvm\n"), ["nvidia-uvm is listed again"]),
    (("195 nvidia\n", "195 nvidia\n195 nvidia\n"), [":15: nvidia is listed again (first on line 14)"]),
    (("241 nvidia-caps\n", "240 nvidia-caps\n241 nvidia-caps\n"), ["nvidia-caps is listed again"]),
    (("195 nvidia\n", "196 nvidia\n"), [":14: nvidia at major 196", "fixed at 195"]),
    (("195 nvidiactl\n", "194 nvidiactl\n"), ["nvidiactl at major 194"]),
    (("238 nvidia-uvm\n", "0 nvidia-uvm\n"), ["nvidia-uvm at major 0; a major is 1 to 4095"]),
    (("238 nvidia-uvm\n", "5000 nvidia-uvm\n"), ["nvidia-uvm at major 5000"]),
    (("238 nvidia-uvm\n", "241 nvidia-uvm\n"), ["nvidia-uvm at major 241, which nvidia-caps also has"]),
    (("238 nvidia-uvm\n", "195 nvidia-uvm\n"), ["nvidia-uvm at major 195, which nvidia, nvidiactl also has"]),
    (("241 nvidia-caps\n", "1 nvidia-caps\n"), ["nvidia-caps at major 1, which mem also has"]),
    (("238 nvidia-uvm\n", "abc nvidia-uvm\n"), [":19: 'abc nvidia-uvm' is not '<major> <name>'"]),
    (("238 nvidia-uvm\n", "238 nvidia-uvm extra\n"), ["'238 nvidia-uvm extra' is not"]),
    (("238 nvidia-uvm\n", "238 nvidia-uvm\r\n"), ["'238 nvidia-uvm\\r' is not"]),
    (("238 nvidia-uvm\n", "238 nvidia-uvm\x0b\n"), ["'238 nvidia-uvm\\x0b' is not"]),
    (("238 nvidia-uvm\n", "\u0662\u0663\u0668 nvidia-uvm\n"), ["is not '<major> <name>'"]),
])
def test_duplicate_or_impossible_proc_devices_lines_are_refused(tmp_path, change, needles):
    root = fake_root("h200-2gpu", tmp_path / "root")
    old, new = change
    assert old in REAL_DEVICES
    (root / "proc" / "devices").write_text(REAL_DEVICES.replace(old, new, 1))
    refused(root, str(root / "proc" / "devices"), *needles)


def test_real_duplicates_of_other_drivers_are_fine():
    """The real capture lists infiniband_mad twice and 195 for nvidia and nvidiactl: that is how it is."""
    assert REAL_DEVICES.count("infiniband_mad") == 2
    assert parse_proc_devices(REAL_DEVICES) == {"nvidia": 195, "nvidia-uvm": 238, "nvidia-caps": 241}


@pytest.mark.parametrize("relative", ["proc/devices", "proc/driver/nvidia/version"])
@pytest.mark.parametrize(("make", "kind"), [
    (_fifo, "FIFO"), (_directory, "directory"), (lambda path: mknod(path, 1, 3), "character device"),
])
def test_a_fifo_device_or_directory_where_a_file_is_read_is_refused(tmp_path, relative, make, kind):
    root = fake_root("h200-1gpu", tmp_path / "root")
    target = root / relative
    target.unlink()
    make(target)
    refused(root, f"{target} is a {kind}")


def test_a_symlink_to_a_fifo_where_a_file_is_read_is_refused(tmp_path):
    root = fake_root("h200-1gpu", tmp_path / "root")
    os.mkfifo(tmp_path / "pipe")
    (root / "proc" / "devices").unlink()
    (root / "proc" / "devices").symlink_to(tmp_path / "pipe")
    refused(root, "proc/devices is a FIFO")


SMI = (GPU_FIXTURES / "h200-2gpu" / "query-gpu.csv").read_text()
SMI_ROW = "1, NVIDIA H200, GPU-3bdf6da4-c5ee-a2a4-d6b3-9e1f6036bc65, 00000000:00:07.0, 580.159.04, 143771 MiB, 9.0, 700.00 W"


@pytest.mark.parametrize(("row", "needles"), [
    ("1, NVIDIA H200, GPU-3bdf6da4", ["x.csv:3: 3 field(s), the header has 8", "a short or cut row"]),
    (SMI_ROW + ", extra", ["x.csv:3: 9 field(s)"]),
    (SMI_ROW.replace("1,", "one,", 1), ["x.csv:3: index is 'one'"]),
    (SMI_ROW.replace("1,", "\u0661,", 1), ["x.csv:3: index is '\\u0661'"]),
    (SMI_ROW.replace("1,", "0,", 1), ["x.csv:3: GPU 0 is listed twice"]),
    (SMI_ROW.replace("NVIDIA H200", "NVIDIA\x1bH200"), ["x.csv:3: name empty or holding a control character"]),
    (SMI_ROW.replace("GPU-3bdf6da4-c5ee-a2a4-d6b3-9e1f6036bc65", ""), ["x.csv:3: uuid empty"]),
])
def test_a_malformed_smi_row_names_the_file_and_line(row, needles):
    text = SMI.splitlines()[0] + "\n" + SMI.splitlines()[1] + "\n" + row + "\n"
    with pytest.raises(DiscoveryError) as caught:
        parse_smi_csv(text, "x.csv")
    for needle in needles:
        assert needle in str(caught.value), str(caught.value)


def test_an_smi_header_without_uuid_names_the_file():
    with pytest.raises(DiscoveryError, match=r"^q\.csv:1: the header lacks column\(s\) uuid"):
        parse_smi_csv("index, name\n0, NVIDIA H200\n", "q.csv")
    with pytest.raises(DiscoveryError, match=r"noheader\.csv:1: the header lacks"):
        parse_smi_csv((GPU_FIXTURES / "h200-1gpu" / "query-gpu-noheader.csv").read_text(), "noheader.csv")


def _short_row(path: Path) -> None:
    path.write_text(SMI.splitlines()[0] + "\n0, NVIDIA H200\n")


def _not_utf8(path: Path) -> None:
    path.write_bytes(SMI.encode() + b"\xff\xfe\n")


@pytest.mark.parametrize(("make", "needles"), [
    (_directory, ["is a directory; expected nvidia-smi's CSV"]),
    (_fifo, ["is a FIFO (named pipe); expected nvidia-smi's CSV"]),
    (_short_row, [":2: 2 field(s), the header has 8"]),
    (_not_utf8, ["is not UTF-8; expected nvidia-smi's CSV"]),
    (lambda path: None, ["does not exist; expected nvidia-smi's CSV"]),
])
def test_the_module_names_a_bad_smi_csv(tmp_path, make, needles):
    """Through Ansible: a failure naming the file, never 'Module failed' or a traceback."""
    root = fake_root("h200-1gpu", tmp_path / "root")
    csv = tmp_path / "query-gpu.csv"
    make(csv)
    before = tree_digest(tmp_path)
    host = ad_hoc({"root": str(root), "nvidia_smi_csv": str(csv)})
    assert host.get("failed") is True, host
    assert str(csv) in host["msg"], host["msg"]
    for needle in needles:
        assert needle in host["msg"], host["msg"]
    assert "Traceback" not in json.dumps(host) and "MODULE FAILURE" not in json.dumps(host)
    assert tree_digest(tmp_path) == before


def test_the_module_names_a_hostile_node_and_warns_of_a_left_out_one(tmp_path):
    root = fake_root("h200-2gpu", tmp_path / "root")
    devices = root / "proc" / "devices"
    devices.write_text(devices.read_text().replace("238 nvidia-uvm\n", ""))
    host = ad_hoc({"root": str(root)})
    assert host.get("failed") is not True, host
    assert any("/dev/nvidia-uvm (238:0) left out: nvidia-uvm is not in /proc/devices" in warning
               for warning in host["warnings"]), host
    mknod(root / "dev" / "nvidia0\nlxc.apparmor.profile = unconfined", 195, 0)
    host = ad_hoc({"root": str(root)})
    assert host.get("failed") is True
    assert "nvidia0\\nlxc.apparmor.profile = unconfined: a name with whitespace" in host["msg"], host["msg"]
