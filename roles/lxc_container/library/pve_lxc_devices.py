#!/usr/bin/python
"""Ansible module: a Proxmox container's devN entries for the host's NVIDIA nodes."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pve_lxc_devices
short_description: Make a Proxmox VE container's devN entries pass exactly the host's NVIDIA nodes
description:
  - Takes the C(nvidia) result of nvidia_devices and passes every node it lists, checked by the
    same function lxc_gpu_passthrough uses (C(nodes_of)), so both modules pass one node set.
  - Reads the container's config as the API's JSON, keeps the index of every NVIDIA devN entry
    already there, leaves every other devN entry (the user's own) alone, adds the missing nodes
    at the lowest free index and removes NVIDIA entries for nodes the host no longer has.
  - Writes only what differs, then reads the config back and proves every wanted entry is there.
  - PVE lets only root@pam set devN (pve-container's check_ct_modify_config_perm), API tokens of
    root@pam included. So I(transport=api) reads with the token and writes with a root@pam
    ticket from I(api_password), on the controller; I(transport=pct) runs on the node as root,
    reads with C(pvesh get ... --output-format json) and writes with C(pct set).
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  transport:
    description: C(api) (controller, root@pam password) or C(pct) (on the node, as root).
    type: str
    choices: [api, pct]
    required: true
  nvidia:
    description: The C(nvidia) result of nvidia_devices on the container's host.
    type: dict
    required: true
  vmid: {description: "The container id: digits only, 100 to 999999999.", type: raw, required: true}
  node: {description: The Proxmox node that holds the container., type: str, required: true}
  mode: {description: Node mode inside the container., type: str, default: "0666"}
  gid: {description: Group id of the nodes inside the container., type: int}
  pct: {description: The pct command on the node (I(transport=pct))., type: path, default: /usr/sbin/pct}
  pvesh: {description: The pvesh command on the node (I(transport=pct))., type: path, default: /usr/bin/pvesh}
  api_host: {description: The API address (I(transport=api))., type: str, default: ""}
  api_port: {description: The API port., type: int, default: 8006}
  api_user: {description: The token's user., type: str, default: root@pam}
  api_token_id: {description: The token id, for reading., type: str, default: ""}
  api_token_secret: {description: The token secret., type: str, default: ""}
  api_password: {description: root@pam's password, for the write (Ansible Vault)., type: str, default: ""}
  validate_certs: {description: Verify the API's TLS certificate., type: bool, default: true}
  api_timeout: {description: Seconds per API request., type: int, default: 30}
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Pass the GPUs as devN entries through the API (root@pam's password)
  pve_lxc_devices:
    transport: api
    nvidia: "{{ discovery.nvidia }}"
    vmid: 120
    node: pve1
    api_host: pve1.example.internal
    api_token_id: ansible
    api_token_secret: "{{ vault_token }}"
    api_password: "{{ vault_root_password }}"
  delegate_to: localhost
"""

RETURN = r"""
devices:
  description: The NVIDIA devN entries the container has after the run, key to value.
  returned: always
  type: dict
set:
  description: Entries written (or that would be, in check mode).
  returned: always
  type: dict
deleted:
  description: Entries removed.
  returned: always
  type: list
"""

import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lxc_passthrough import DevicesPlan, nodes_of, plan_devices
from ansible.module_utils.pve_container import vmid_of
from ansible.module_utils.pve_api import (
    API_ARGUMENT_SPEC,
    ApiLogin,
    PveFault,
    call,
    connect,
    lock_problem,
    proxmoxer_missing,
)

# The API options are pve_api's; here the API is only needed for transport=api.
ARGUMENT_SPEC = dict(
    API_ARGUMENT_SPEC,
    api_host={"type": "str", "default": ""},
    transport={"type": "str", "choices": ["api", "pct"], "required": True},
    nvidia={"type": "dict", "required": True},
    vmid={"type": "raw", "required": True},
    mode={"type": "str", "default": "0666"},
    gid={"type": "int"},
    pct={"type": "path", "default": "/usr/sbin/pct"},
    pvesh={"type": "path", "default": "/usr/bin/pvesh"},
)


class Nodes:
    """The container's config through pct and pvesh, as root on the node."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.params = module.params

    def read(self) -> dict:
        path = f"/nodes/{self.params['node']}/lxc/{self.params['vmid']}/config"
        argv = [self.params["pvesh"], "get", path, "--output-format", "json"]
        rc, out, err = self.module.run_command(argv)
        if rc != 0:
            raise PveFault(f"`{' '.join(argv)}` failed on the node (rc {rc}): {err.strip() or out.strip()}")
        try:
            config = json.loads(out)
        except ValueError:
            raise PveFault(f"`{' '.join(argv)}` printed no JSON: {out[:200]!r}") from None
        return config

    def write(self, plan: DevicesPlan, digest: str) -> None:
        argv = [self.params["pct"], "set", str(self.params["vmid"])]
        for key, value in sorted(plan.set.items()):
            argv += [f"--{key}", value]
        if plan.delete:
            argv += ["--delete", ",".join(plan.delete)]
        rc, out, err = self.module.run_command(argv)
        if rc != 0:
            raise PveFault(f"`{' '.join(argv)}` failed on the node (rc {rc}): {err.strip() or out.strip()}. "
                           "Nothing else was changed; re-run once the cause is fixed.")


class Api:
    """The container's config through the API: read with the token, write as root@pam."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.params = module.params
        self.reader = ApiLogin.from_params(module.params)
        self.path = f"nodes/{self.params['node']}/lxc/{self.params['vmid']}/config"

    def read(self) -> dict:
        api = connect(self.reader)
        return call(self.reader, f"GET /{self.path}", api(self.path).get)

    def write(self, plan: DevicesPlan, digest: str) -> None:
        writer = ApiLogin.from_params(dict(self.params, api_user="root@pam"), with_password=True)
        api = connect(writer)
        data: dict = dict(plan.set)
        if plan.delete:
            data["delete"] = ",".join(plan.delete)
        data["digest"] = digest
        call(writer, f"PUT /{self.path}", api(self.path).put, **data)


def run(module: AnsibleModule) -> dict:
    params = module.params
    params["vmid"] = vmid_of(params["vmid"])
    try:
        nodes = nodes_of(params["nvidia"])
    except ValueError as exc:
        raise PveFault(f"{exc}. Nothing was changed.") from None
    if params["transport"] == "api":
        if not params["api_password"]:
            raise PveFault("transport=api writes devN entries as root@pam and needs lxc_container_api_password.")
        missing = proxmoxer_missing()
        if missing:
            raise PveFault(missing)
        side: Api | Nodes = Api(module)
    else:
        side = Nodes(module)
    config = side.read()
    problem = lock_problem(params["vmid"], config, params["node"])
    current = {str(k): str(v) for k, v in config.items()}
    plan = plan_devices(current, nodes, params["mode"], params["gid"])
    result = {"changed": plan.changed, "set": plan.set, "deleted": plan.delete, "devices": plan.wanted}
    if not plan.changed:
        return result
    if problem:
        raise PveFault(problem)
    before = {k: v for k, v in current.items() if k in plan.set or k in plan.delete}
    result["diff"] = {
        "before": "".join(f"{k}: {before[k]}\n" for k in sorted(before)),
        "after": "".join(f"{k}: {v}\n" for k, v in sorted(plan.set.items())),
        "before_header": f"CT {params['vmid']} devN", "after_header": f"CT {params['vmid']} devN",
    }
    if module.check_mode:
        return result
    side.write(plan, str(config.get("digest", "")))
    after = {str(k): str(v) for k, v in side.read().items()}
    wrong = [f"{key} (wanted {value!r}, found {after.get(key)!r})" for key, value in plan.wanted.items()
             if after.get(key) != value]
    wrong += [f"{key} (should be gone)" for key in plan.delete if key in after]
    if wrong:
        raise PveFault(f"Container {params['vmid']}'s config does not hold the devN entries just written: "
                       f"{', '.join(wrong)}. Look at it on the node (`pct config {params['vmid']}`) and re-run.")
    return result


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_if=[("transport", "api", ["api_host", "api_token_id", "api_token_secret"])])
    try:
        result = run(module)
    except (PveFault, ValueError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
