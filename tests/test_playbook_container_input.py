"""playbooks/container.yml refuses bad input before any container is created or changed.

The play runs against this machine as a member of lxc_hosts (and, for the proxmox
cases, proxmox_hosts); each case must fail before the first change, so no
container directory, creation config or Proxmox call appears.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from conftest import REPO, run_playbook, tree_digest
from fake_nvidia_root import build

GPU = REPO / "tests" / "fixtures" / "gpu"


LIVE = json.loads((GPU / "h200-2gpu" / "live-nvidia-devices.json").read_text())["nvidia"]


def given_nvidia(index: int, **changes: object) -> list[str]:
    """-e lxc_container_nvidia=<the live discovery with one node changed>, as JSON."""
    nvidia = copy.deepcopy(LIVE)
    nvidia["nodes"][index].update(changes)
    return ["-e", json.dumps({"lxc_container_nvidia": nvidia})]


LXC_CASES = [
    ("h200-2gpu", given_nvidia(0, path="/dev/nvidia0\nlxc.apparmor.profile = unconfined"),
     ["node path '/dev/nvidia0\\nlxc.apparmor.profile = unconfined' is not an NVIDIA node"]),
    ("h200-2gpu", given_nvidia(5, path="/dev/nvidia-caps/nvidia-cap1\nlxc.mount.entry = / host none bind 0 0"),
     ["node path '/dev/nvidia-caps/nvidia-cap1\\nlxc.mount.entry"]),
    ("h200-2gpu", given_nvidia(0, major=1, minor=1), ["/dev/nvidia0 is 1:1, expected 195:0 (nvidia)"]),
    ("h200-2gpu", given_nvidia(0, host_path="/ /dev/nvidia0"), ["host_path '/ /dev/nvidia0'"]),
    ("h200-2gpu", ["-e", "lxc_container_expected_gpus=8"],
     ["The host has 2 GPU node(s)", "expected 8", "lxc_container_expected_gpus"]),
    ("synthetic-missing-uvm-node", [],
     ["/dev/nvidia-uvm, /dev/nvidia-uvm-tools", "nvidia-modprobe -u -c=0"]),
    ("h200-2gpu", ["-e", "lxc_container_backend=docker"],
     ["lxc_container_backend", "proxmox, lxc", "docker"]),
    ("h200-2gpu", ["-e", "lxc_container_passthrough=bind"],
     ["lxc_container_passthrough", "devices, raw", "bind"]),
    ("h200-2gpu", ["-e", "lxc_container_name=../etc"],
     ["lxc_container_name=\"../etc\"", "is not a host name"]),
    ("h200-2gpu", ["-e", '{"lxc_container_name": "sglang\\nlxc.rootfs.path = dir:/"}'],
     ["lxc_container_name=", "is not a host name"]),
    ("h200-2gpu", ["-e", '{"lxc_container_memlock": "unlimited\\n"}'],
     ["lxc_container_memlock=", "must be unlimited, a number of bytes, or empty"]),
    ("h200-2gpu", ["-e", "lxc_container_backend=proxmox", "-e", "lxc_container_vmid=42",
                   "-e", "lxc_container_api_token_id=ansible@pve!deploy", "-e", "lxc_container_api_token_secret=x"],
     ["lxc_container_vmid=42 is out of range", "100 to 999999999"]),
    ("h200-2gpu", ["-e", "lxc_container_backend=proxmox", "-e", "lxc_container_address=10.0.0.5"],
     ["needs an API token", "lxc_container_api_token_secret is empty", "Ansible Vault"]),
]


@pytest.mark.parametrize(("fixture", "extra", "needles"), LXC_CASES)
def test_bad_container_request_changes_nothing(tmp_path, fixture, extra, needles):
    root = tmp_path / "fake-root"
    build(GPU / fixture, root)
    lxcpath = tmp_path / "lxc"
    seed = Path("/etc/lxc/sglang-deploy/pytest-gpu.conf")
    before = tree_digest(lxcpath, seed, root)
    private = tmp_path / "runner"
    private.mkdir()
    inventory = "[lxc_hosts]\nlocalhost ansible_connection=local\n"
    run = run_playbook(
        private,
        "container.yml",
        ["-e", "lxc_container_backend=lxc", "-e", "lxc_container_name=pytest-gpu",
         "-e", f"lxc_container_lxcpath={lxcpath}", "-e", f"lxc_container_device_root={root}", *extra],
        inventory=inventory,
    )
    assert run.status == "failed", run.stdout
    assert run.changed == 0
    message = " ".join(run.failures)
    for needle in needles:
        assert needle in message, message
    assert tree_digest(lxcpath, seed, root) == before
    assert "Create the container" not in run.stdout
