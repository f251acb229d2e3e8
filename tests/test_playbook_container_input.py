"""playbooks/container.yml refuses bad input before any container is created or changed.

The play runs against this machine as a member of lxc_hosts (and, for the proxmox
cases, proxmox_hosts); each case must fail before the first change, so no
container directory, creation config or Proxmox call appears.

All cases run in one ansible-playbook process, each an inventory host of its own whose host
variables are what its `-e` arguments give (conftest.run_cases): a refusal fails only its host.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from conftest import REPO, as_host_vars, run_cases, tree_digest
from fake_nvidia_root import build

GPU = REPO / "tests" / "fixtures" / "gpu"


# A valid host-only link (the bridge name is the tests' own: it must never appear).
LINK = ["-e", "lxc_container_lxc_bridge=pytestbr0", "-e", "lxc_container_lxc_bridge_address=169.254.201.1/24",
        "-e", "lxc_container_address=169.254.201.2"]
BRIDGE = Path("/sys/class/net/pytestbr0")
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFUTfvKgDP7n02jjUZS110jtzEaz1fD43Qlp79MirPJ8 pytest"


def link_with(**changes: str) -> list[str]:
    values = {"lxc_container_lxc_bridge": "pytestbr0", "lxc_container_lxc_bridge_address": "169.254.201.1/24",
              "lxc_container_address": "169.254.201.2", **changes}
    return ["-e", json.dumps(values)]


LIVE = json.loads((GPU / "h200-2gpu" / "live-nvidia-devices.json").read_text())["nvidia"]


def given_nvidia(index: int, **changes: object) -> list[str]:
    """-e lxc_container_nvidia=<the live discovery with one node changed>, as JSON."""
    nvidia = copy.deepcopy(LIVE)
    nvidia["nodes"][index].update(changes)
    return ["-e", json.dumps({"lxc_container_nvidia": nvidia})]


def given_without(path: str, **claims: object) -> list[str]:
    """-e lxc_container_nvidia=<the live discovery without one node>, claiming what it likes of itself."""
    nvidia = copy.deepcopy(LIVE)
    nvidia["nodes"] = [node for node in nvidia["nodes"] if node["path"] != path]
    return ["-e", json.dumps({"lxc_container_nvidia": {**nvidia, **claims}})]


LXC_CASES = [
    ("h200-2gpu", given_nvidia(0, path="/dev/nvidia0\nlxc.apparmor.profile = unconfined"),
     ["node path '/dev/nvidia0\\nlxc.apparmor.profile = unconfined' is not an NVIDIA node"]),
    ("h200-2gpu", given_nvidia(5, path="/dev/nvidia-caps/nvidia-cap1\nlxc.mount.entry = / host none bind 0 0"),
     ["node path '/dev/nvidia-caps/nvidia-cap1\\nlxc.mount.entry"]),
    ("h200-2gpu", given_nvidia(0, major=1, minor=1), ["/dev/nvidia0 is 1:1, expected 195:0 (nvidia)"]),
    ("h200-2gpu", given_nvidia(0, host_path="/ /dev/nvidia0"), ["host_path '/ /dev/nvidia0'"]),
    ("h200-2gpu", ["-e", "lxc_container_expected_gpus=8"],
     ["The host has 2 GPU(s) (counted from its /dev/nvidiaN nodes)", "expected 8 (lxc_container_expected_gpus)",
      "nothing was changed"]),
    ("h200-2gpu", ["-e", "lxc_container_expected_gpus=1"], ["The host has 2 GPU(s)", "expected 1 "]),
    # Handed in: nvidia-smi's list counts, and the result's own claims are decided again.
    ("h200-2gpu", [*given_nvidia(0), "-e", "lxc_container_expected_gpus=8"],
     ["The host has 2 GPU(s) (nvidia-smi: 00000000:00:06.0, 00000000:00:07.0), expected 8"]),
    ("h200-2gpu", given_without("/dev/nvidia1", gpu_count=2, missing_nodes=[]),
     ["these nodes are missing: /dev/nvidia1."]),
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
     ['lxc_container_vmid="42" is not a Proxmox container id', "100 to 999999999"]),
    ("h200-2gpu", ["-e", "lxc_container_backend=proxmox", "-e", '{"lxc_container_vmid": "120 "}',
                   "-e", "lxc_container_api_token_id=deploy", "-e", "lxc_container_api_token_secret=x"],
     ['lxc_container_vmid="120 " is not a Proxmox container id: digits only (no space, sign or leading 0)']),
    ("h200-2gpu", ["-e", "lxc_container_name=sglang-"], ["is not a host name", "neither starting nor ending with -"]),
    ("h200-2gpu", ["-e", "lxc_container_backend=proxmox", "-e", "lxc_container_address=10.0.0.5"],
     ["needs an API token", "lxc_container_api_token_secret is empty", "Ansible Vault"]),
    # How later plays reach a plain LXC container, and its host-only link.
    ("h200-2gpu", ["-e", "lxc_container_connection=ssh", "-e", json.dumps({"lxc_container_pubkey": KEY})],
     ["lxc_container_connection=ssh needs a host-only link", "lxc_container_lxc_bridge", "169.254.77.1/24"]),
    ("h200-2gpu", ["-e", "lxc_container_connection=ssh", *LINK],
     ["lxc_container_connection=ssh needs lxc_container_pubkey"]),
    ("h200-2gpu", ["-e", "lxc_container_connection=pct"],
     ["lxc_container_connection=pct is for the proxmox backend"]),
    ("h200-2gpu", ["-e", "lxc_container_connection=telnet"],
     ["lxc_container_connection", "ssh, pct, lxc", "telnet"]),
    ("h200-2gpu", ["-e", "lxc_container_backend=proxmox", "-e", "lxc_container_connection=lxc",
                   "-e", "lxc_container_passthrough=raw", "-e", "lxc_container_api_token_id=deploy",
                   "-e", "lxc_container_api_token_secret=x"],
     ["lxc_container_connection=lxc (lxc-attach) is for the lxc backend"]),
    ("h200-2gpu", ["-e", '{"lxc_container_lxc_create_config": ["lxc.apparmor.profile = unconfined", '
                         '"lxc.net.0.type = veth", "lxc.net.0.link = lxcbr0"]}'],
     ["lxc_container_lxc_create_config has", "lxc.net.0.link = lxcbr0", "remove the lxc.net lines"]),
    ("h200-2gpu", link_with(lxc_container_lxc_bridge="pytest br"), ["bridge 'pytest br' is not an interface name"]),
    ("h200-2gpu", link_with(lxc_container_lxc_bridge="br0\nlxc.rootfs.path = dir:/"), ["is not an interface name"]),
    ("h200-2gpu", link_with(lxc_container_lxc_bridge_address="10.0.0.1/24", lxc_container_address="10.0.0.2"),
     ["host_address 10.0.0.1/24 is not link-local", "must not take an address of a real network"]),
    ("h200-2gpu", link_with(lxc_container_address="169.254.202.2"),
     ["address 169.254.202.2 is not a host address of the bridge's network 169.254.201.0/24"]),
    ("h200-2gpu", link_with(lxc_container_lxc_bridge="", lxc_container_address=""),
     ["host_address given without a bridge"]),
    ("h200-2gpu", link_with(lxc_container_lxc_bridge="lo"), ["lo exists and is not a bridge", "another bridge name"]),
    ("h200-2gpu", [*LINK, "-e", json.dumps({"lxc_container_pubkey": KEY + "\n" + KEY})], ["pubkey has 2 lines"]),
    ("h200-2gpu", [*LINK, "-e", json.dumps({"lxc_container_pubkey": 'command="sh" ' + KEY})],
     ["pubkey is not one OpenSSH public key line", "no options"]),
]


@pytest.fixture(scope="module")
def lxc_cases(tmp_path_factory):
    """Every case of LXC_CASES in one run of container.yml: each an lxc_hosts member of its own (a
    local-connection alias of this machine) with its own fake device root and lxcpath."""
    tmp = tmp_path_factory.mktemp("lxc-cases")
    seed = Path("/etc/lxc/sglang-deploy/pytest-gpu.conf")
    cases, roots = {}, {}
    for index, (fixture, extra, _) in enumerate(LXC_CASES):
        name = f"case{index:02d}"
        roots[name] = (tmp / name / "lxc", tmp / name / "fake-root")
        build(GPU / fixture, roots[name][1])
        cases[name] = {"lxc_container_backend": "lxc", "lxc_container_name": "pytest-gpu",
                       "lxc_container_lxcpath": str(roots[name][0]), "lxc_container_device_root": str(roots[name][1]),
                       **as_host_vars(extra)}
    before = {name: tree_digest(*paths, seed, BRIDGE) for name, paths in roots.items()}
    runs = run_cases(tmp / "runner", "container.yml", cases, [], group="lxc_hosts")
    return {name: (run, before[name], tree_digest(*roots[name], seed, BRIDGE)) for name, run in runs.items()}


@pytest.mark.parametrize(("index", "needles"), [(i, needles) for i, (_, _, needles) in enumerate(LXC_CASES)],
                         ids=[f"{fixture}-{' '.join(extra)[:50]}" for fixture, extra, _ in LXC_CASES])
def test_bad_container_request_changes_nothing(lxc_cases, index, needles):
    run, before, after = lxc_cases[f"case{index:02d}"]
    assert run.status == "failed", run.stdout
    assert run.changed == 0
    message = " ".join(run.failures)
    for needle in needles:
        assert needle in message, message
    assert after == before
    assert not BRIDGE.exists()
    assert "Create the container" not in run.stdout
    assert not {"ansible.builtin.apt", "ansible.builtin.copy"} & set(run.actions), run.actions
