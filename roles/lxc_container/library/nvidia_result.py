#!/usr/bin/python
"""Ansible module: check an NVIDIA discovery result handed in, and decide its facts as discovery does."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_result
short_description: Check an nvidia_devices result handed in and decide its GPU facts (read-only)
description:
  - Takes the C(nvidia) result of nvidia_devices that a caller hands in (the gpu_host role's
    C(gpu_host_nvidia), or a user's C(lxc_container_nvidia)) in place of reading the host again.
  - >-
    Refuses it before anything changes when a node is not an NVIDIA node of its majors (a path
    with whitespace or a control character, C(nvidia0) at C(1:1)): no string of it can reach a
    container config.
  - >-
    Decides C(gpu_count), C(required_nodes) and C(missing_nodes) again for I(expected_gpus), by
    discovery's own rule (nvidia_discovery's with_requirements), and returns the result as
    nvidia_devices would have: the same facts, decided in one place.
  - Never changes anything.
options:
  nvidia:
    description: The C(nvidia) result of nvidia_devices on the container's host.
    type: dict
    required: true
  expected_gpus:
    description: GPUs the host must have; with no nvidia-smi list, the /dev/nvidiaN nodes it must have.
    type: int
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Check the discovery the gpu_host role published
  nvidia_result:
    nvidia: "{{ gpu_host_nvidia }}"
    expected_gpus: 8
  register: given
"""

RETURN = r"""
nvidia:
  description: The result handed in, with gpu_count, required_nodes and missing_nodes decided for I(expected_gpus).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lxc_passthrough import checked_result


def main() -> None:
    module = AnsibleModule(
        argument_spec={"nvidia": {"type": "dict", "required": True}, "expected_gpus": {"type": "int"}},
        supports_check_mode=True,
    )
    try:
        nvidia = checked_result(module.params["nvidia"], module.params["expected_gpus"])
    except ValueError as exc:
        module.fail_json(msg=f"{exc}. Nothing was changed.")
    module.exit_json(changed=False, nvidia=nvidia)


if __name__ == "__main__":
    main()
