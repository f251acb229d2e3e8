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
  - No driver loaded is a result (C(driver_version) null, empty lists), not a failure.
    Never changes anything.
options:
  root:
    description: Directory that stands for C(/) (a fake root in tests).
    type: path
    default: /
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
    gpus:
      description: GPUs from nvidia-smi (index, name, uuid, pci_bus_id, memory_total_mib, power_limit_w).
      type: list
      elements: dict
    gpu_nodes:
      description: Number of /dev/nvidiaN nodes.
      type: int
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.nvidia_discovery import SMI_QUERY, discover  # noqa: E402


def smi_csv_text(module: AnsibleModule) -> str | None:
    """nvidia-smi's CSV: from a file when given, live only when root is /."""
    given = module.params["nvidia_smi_csv"]
    if given:
        try:
            with open(given, encoding="utf-8") as handle:
                return handle.read()
        except OSError as error:
            module.fail_json(msg=f"cannot read nvidia_smi_csv {given}: {error}")
    if os.path.realpath(module.params["root"]) != "/":
        return None
    smi = module.get_bin_path("nvidia-smi")
    if not smi or not os.path.exists("/proc/driver/nvidia/version"):
        return None
    rc, out, err = module.run_command([smi, f"--query-gpu={SMI_QUERY}", "--format=csv"])
    if rc != 0:
        module.warn(f"nvidia-smi failed (rc {rc}): {(err or out).strip()}; gpus left empty")
        return None
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "nvidia_smi_csv": {"type": "path"},
        },
        supports_check_mode=True,
    )
    root = module.params["root"]
    if not os.path.isdir(root):
        module.fail_json(msg=f"root {root} is not a directory")
    csv_text = smi_csv_text(module)
    try:
        nvidia = discover(root, csv_text)
    except ValueError as error:
        module.fail_json(msg=str(error))
    module.exit_json(changed=False, nvidia=nvidia)


if __name__ == "__main__":
    main()
