"""Discovery of NVIDIA majors, nodes, driver and GPUs on real and hand-made fixtures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "roles" / "gpu_host" / "module_utils"))
sys.path.insert(0, str(REPO / "tests"))

from fake_nvidia_root import build, parse_ls  # noqa: E402
from nvidia_discovery import (  # noqa: E402
    discover,
    parse_driver_version,
    parse_proc_devices,
    parse_smi_csv,
)

GPU_FIXTURES = REPO / "tests" / "fixtures" / "gpu"
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
    """`ansible localhost -m nvidia_devices -a root=DIR` from the project root, as the README says."""
    root = fake_root(name, tmp_path / "root")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}
    args = f"root={root}"
    if smi_csv(name) is not None:
        args += f" nvidia_smi_csv={GPU_FIXTURES / name / 'query-gpu.csv'}"
    proc = subprocess.run(["ansible", "localhost", "-m", "nvidia_devices", "-a", args],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    host = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert host["changed"] is False
    assert host["nvidia"] == discover(str(root), smi_csv(name))


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


def test_regular_file_and_missing_root_are_not_nodes(tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").write_text("not a device")
    result = discover(str(tmp_path))
    assert result["nodes"] == [] and result["gpu_nodes"] == 0 and result["driver_version"] is None
    assert discover(str(tmp_path / "nowhere"))["nodes"] == []


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
