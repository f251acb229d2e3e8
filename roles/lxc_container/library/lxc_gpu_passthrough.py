#!/usr/bin/python
"""Ansible module: make a Proxmox container's GPU passthrough lines match host discovery."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lxc_gpu_passthrough
short_description: Compute and apply the GPU passthrough lines of a Proxmox container's config
description:
  - Takes the C(nvidia) result of the nvidia_devices module (majors and nodes read on the host,
    never hardcoded) and makes the container's passthrough entries match it, in one call that
    applies either style and returns what a restart and the verification need.
  - With I(style=raw), makes the container config (Proxmox's C(/etc/pve/lxc/VMID.conf), a key
    and its value after a colon) carry exactly one allow entry and one bind mount per node and
    C(lxc.prlimit.memlock), removing entries of ours that are no longer wanted and leaving every
    other line as it was. The file is rewritten in place, without chmod or rename, which pmxcfs
    refuses.
  - >-
    With I(style=devices), the nodes go in as Proxmox C(devN) entries (module pve_lxc_devices,
    which takes the same C(nvidia) result): the config file then carries only
    C(lxc.prlimit.memlock), and raw node lines left from the raw style are removed.
  - Passes every node discovery found. Whether the host has the GPUs and nodes it must have is
    discovery's fact (C(gpu_count), C(missing_nodes)), which the role checks before anything changes.
  - Fails before any change when a node of I(nvidia) is not an NVIDIA node of its majors (a path
    with whitespace or a control character, C(nvidia0) at C(1:1)).
  - A plain-LXC container's config has one writer, plain_lxc_container, which makes its GPU entries in the
    same write as its network link.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  nvidia:
    description: The C(nvidia) result of nvidia_devices on the container's host.
    type: dict
    required: true
  style:
    description: C(raw) lxc.* keys in the config file, or Proxmox C(devN) entries.
    type: str
    choices: [raw, devices]
    default: raw
  config_path:
    description:
      - The container config to edit (raw lines, and C(lxc.prlimit.memlock) in both styles).
      - In check mode it may not exist yet (a container a real run would create first).
    type: path
    required: true
  cgroup:
    description: Which allow key to write; C(auto) reads the host (unified hierarchy means v2).
    type: str
    choices: [auto, v1, v2]
    default: auto
  memlock:
    description: Value of C(lxc.prlimit.memlock) while any GPU node is passed; empty leaves it out.
    type: str
    default: unlimited
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Pass the host's GPUs into a Proxmox container as raw lxc.* keys
  lxc_gpu_passthrough:
    nvidia: "{{ discovery.nvidia }}"
    style: raw
    config_path: /etc/pve/lxc/120.conf
  register: passthrough
"""

RETURN = r"""
nodes:
  description: Container paths of the nodes passed through.
  returned: always
  type: list
node_ids:
  description: C(PATH MAJOR:MINOR) of each node, as C(stat --format='%n %Hr:%Lr') prints it inside.
  returned: always
  type: list
cgroup:
  description: The cgroup version whose allow key was used (v1 or v2).
  returned: always
  type: str
entries:
  description: The raw lines the config carries for the GPUs (I(style=raw)).
  returned: always
  type: list
added:
  description: Raw lines added.
  returned: always
  type: list
removed:
  description: Raw lines removed.
  returned: always
  type: list
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lxc_passthrough import (
    host_cgroup,
    memlock_lines,
    node_ids,
    nodes_of,
    nvidia_majors,
    plan_raw,
    raw_lines,
)
from ansible.module_utils.lxc_config_write import write_in_place, write_problem

SEPARATOR = ": "  # Proxmox's key: value


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "nvidia": {"type": "dict", "required": True},
            "style": {"type": "str", "choices": ["raw", "devices"], "default": "raw"},
            "config_path": {"type": "path", "required": True},
            "cgroup": {"type": "str", "choices": ["auto", "v1", "v2"], "default": "auto"},
            "memlock": {"type": "str", "default": "unlimited"},
        },
        supports_check_mode=True,
    )
    params = module.params
    nvidia = params["nvidia"]
    try:
        nodes = nodes_of(nvidia)
        memlock_lines(nodes, params["memlock"])  # refuses a value no config line may carry
    except ValueError as exc:
        module.fail_json(msg=f"{exc}. Nothing was changed.")
    cgroup = host_cgroup(params["cgroup"])
    result = {
        "changed": False,
        "nodes": [node.path for node in nodes],
        "node_ids": node_ids(nodes),
        "cgroup": cgroup,
        "entries": [],
        "added": [],
        "removed": [],
    }
    if params["style"] == "devices":
        # devN entries replace the node lines; memlock stays a raw key, and raw
        # node lines left from the other style go.
        wanted = memlock_lines(nodes, params["memlock"])
    else:
        wanted = raw_lines(nodes, cgroup) + memlock_lines(nodes, params["memlock"])
    result["entries"] = [f"{key}{SEPARATOR}{value}" for key, value in wanted]
    path = params["config_path"]
    if os.path.exists(path) and not os.path.isfile(path):
        module.fail_json(msg=f"{path} is not a regular file; expected the container's config file.")
    if not os.path.exists(path) and not module.check_mode:
        module.fail_json(msg=f"{path} does not exist: create the container first.")
    text = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    plan = plan_raw(text, wanted, nvidia_majors(nvidia), SEPARATOR)
    result.update(
        added=plan.added,
        removed=plan.removed,
        changed=plan.changed,
    )
    if plan.changed:
        result["diff"] = {"before": text, "after": plan.text, "before_header": path, "after_header": path}
        # Probed in check mode too: --check fails where the real run would.
        problem = write_problem(path)
        if problem:
            module.fail_json(msg=f"The container's GPU entries must change, but {problem}. Nothing was written.",
                             **dict(result, changed=False))
        if not module.check_mode:
            try:
                write_in_place(path, plan.text)
            except ValueError as exc:
                module.fail_json(msg=f"{exc}. Nothing was written.", **dict(result, changed=False))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
