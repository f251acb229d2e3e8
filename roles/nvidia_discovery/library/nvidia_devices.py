#!/usr/bin/python
"""Ansible module: discover the NVIDIA driver, device majors, nodes and GPUs (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_devices
short_description: Discover the NVIDIA driver, device majors, device nodes and GPUs (read-only)
description:
  - Reads C(<root>/proc/devices) for the majors of C(nvidia-frontend) or C(nvidia),
    C(nvidia-uvm) and C(nvidia-caps), by exact name (never C(nvidia-caps-imex-channels)).
  - Stats the NVIDIA character nodes under C(<root>/dev) (C(nvidiaN), C(nvidiactl),
    C(nvidia-uvm), C(nvidia-uvm-tools), C(nvidia-modeset), C(nvidia-caps/*)) for their
    real major and minor.
  - Reads the driver version and the kernel module flavour (open or proprietary) from
    C(<root>/proc/driver/nvidia/version).
  - When I(root) is C(/), asks C(nvidia-smi) for the GPUs (index, name, UUID, PCI bus id,
    memory, power limit). Under another root, GPUs come only from I(nvidia_smi_csv).
  - Takes only NVIDIA nodes. A name under C(/dev) or C(/dev/nvidia-caps) with whitespace, a
    control or a non-ASCII character, an entry of an NVIDIA node's name that is no character
    device (a file, FIFO, symlink, block device), and a node whose major:minor is not its
    driver's (C(nvidia0) at C(1:1), C(/dev/mem)) fail, naming the node.
  - A node whose driver is not loaded (no C(nvidia-uvm) in C(/proc/devices)) is left out, with a
    warning, and listed in C(left_out).
  - An NVIDIA name listed twice in C(/proc/devices), a major out of range, C(nvidia) off 195, a
    dynamic major shared with another driver, and a line of it that does not parse fail, naming
    the line. A FIFO, device or directory where a file is read fails, naming the path; so does a
    malformed nvidia-smi CSV, naming the file and the line.
  - No driver loaded is a result (C(driver_version) null, empty lists), not a failure.
    Never changes anything.
options:
  root:
    description: Directory that stands for C(/) (a fake root in tests).
    type: path
    default: /
  expected_gpus:
    description: GPUs the host must have; with no nvidia-smi list, the /dev/nvidiaN nodes it must have.
    type: int
  modeset:
    description: Whether C(/dev/nvidia-modeset) is required.
    type: bool
    default: false
  uvm_required:
    description: Require the uvm nodes even when nvidia_uvm is not loaded (the host loads it at boot).
    type: bool
    default: false
  nvidia_smi_csv:
    description:
      - A file holding C(nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,power.limit
        --format=csv) output, read instead of running nvidia-smi (captured fixtures).
    type: path
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Discover the NVIDIA devices of this host
  nvidia_devices:
  register: _gpu_host_discovery

- name: Discover a fake root built from a fixture
  nvidia_devices:
    root: /tmp/fake-root
    nvidia_smi_csv: tests/fixtures/gpu/h200-1gpu/query-gpu.csv
"""

RETURN = r"""
nvidia:
  description: What the driver exposes.
  returned: always
  type: dict
  contains:
    driver_version:
      description: Kernel module version, null when no driver is loaded.
      type: str
      sample: 580.159.04
    kernel_module:
      description: C(open), C(proprietary), or null.
      type: str
    majors:
      description: Majors by their exact /proc/devices name.
      type: dict
      sample: {"nvidia": 195, "nvidia-uvm": 238, "nvidia-caps": 241}
    nodes:
      description:
        - Character nodes, in order nvidiaN by N, nvidiactl, nvidia-uvm, nvidia-uvm-tools,
          nvidia-modeset, nvidia-caps/* by number. C(path) as seen inside I(root),
          C(host_path) the file on this machine, C(major) and C(minor) from stat.
      type: list
      elements: dict
      sample: [{"path": "/dev/nvidia0", "host_path": "/dev/nvidia0", "major": 195, "minor": 0}]
    left_out:
      description: Nodes of NVIDIA names whose driver is not loaded, with the reason; never passed through.
      type: list
      elements: dict
    gpus:
      description: GPUs from nvidia-smi (index, name, uuid, pci_bus_id, memory_total_mib, power_limit_w).
      type: list
      elements: dict
    gpu_nodes:
      description: Number of /dev/nvidiaN nodes.
      type: int
    gpu_count:
      description: The host's GPUs, decided here once (nvidia-smi's list, else the /dev/nvidiaN nodes).
      type: int
    required_nodes:
      description: The nodes a container needs from this host (nvidiactl, one per GPU, uvm when loaded or required, modeset when asked).
      type: list
      elements: str
    missing_nodes:
      description: Required nodes the host lacks.
      type: list
      elements: str
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.nvidia_discovery import (  # noqa: E402
    SMI_QUERY, DiscoveryError, discover, read_text_file, with_requirements,
)


def smi_csv_text(module: AnsibleModule) -> tuple[str | None, str]:
    """nvidia-smi's CSV and where it came from: from a file when given, live only when root is /."""
    given = module.params["nvidia_smi_csv"]
    if given:
        try:
            text = read_text_file(given, "nvidia-smi's CSV (nvidia_smi_csv)")
        except DiscoveryError as error:
            module.fail_json(msg=f"nvidia_smi_csv: {error}")
        if text is None:
            module.fail_json(msg=f"nvidia_smi_csv: {given} does not exist; expected nvidia-smi's CSV")
        return text, given
    source = f"nvidia-smi --query-gpu={SMI_QUERY} --format=csv"
    if os.path.realpath(module.params["root"]) != "/":
        return None, source
    smi = module.get_bin_path("nvidia-smi")
    if not smi or not os.path.exists("/proc/driver/nvidia/version"):
        return None, source
    rc, out, err = module.run_command([smi, f"--query-gpu={SMI_QUERY}", "--format=csv"])
    if rc != 0:
        module.warn(f"nvidia-smi failed (rc {rc}): {(err or out).strip()}; gpus left empty")
        return None, source
    return out, source


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "nvidia_smi_csv": {"type": "path"},
            "expected_gpus": {"type": "int"},
            "modeset": {"type": "bool", "default": False},
            "uvm_required": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    root = module.params["root"]
    if not os.path.isdir(root):
        module.fail_json(msg=f"root {root} is not a directory")
    csv_text, source = smi_csv_text(module)
    try:
        nvidia = discover(root, csv_text, source)
    except DiscoveryError as error:
        module.fail_json(msg=f"{error}. Nothing was changed.")
    for node in nvidia["left_out"]:
        module.warn(f"{node['path']} ({node['major']}:{node['minor']}) left out: {node['reason']}")
    params = module.params
    module.exit_json(changed=False, nvidia=with_requirements(nvidia, params["expected_gpus"], params["modeset"],
                                                             params["uvm_required"]))


if __name__ == "__main__":
    main()
