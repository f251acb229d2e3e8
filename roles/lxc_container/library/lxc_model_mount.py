#!/usr/bin/python
"""Ansible module: mount the node's model store read-only into the container."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lxc_model_mount
short_description: Mount the node's model store read-only into an LXC container (mpN or lxc.mount.entry)
description:
  - I(style=mp) (Proxmox, devN style) sets C(mpN HOSTDIR,mp=MOUNT,ro=1,backup=0), keeping the index
    of the entry already mounted at MOUNT. PVE lets only root@pam set a bind mount of a host path,
    API tokens included, so I(transport=api) writes with a root@pam ticket from I(api_password) and
    I(transport=pct) runs C(pct set) as root on the node.
  - I(style=raw) (Proxmox raw style) writes C(lxc.mount.entry HOSTDIR MOUNT none bind,ro,create=dir 0 0)
    into the config file in place (pmxcfs refuses chmod and rename). A plain-LXC container's config
    has one writer, plain_lxc_container, which writes this entry with the rest.
  - >-
    Every other mount entry is left alone. The weights stay on the node: the container can be
    destroyed and made again without a download.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  host_dir: {description: The store on the node., type: str, required: true}
  mount: {description: The path inside the container., type: str, default: /models}
  style: {description: mp or raw., type: str, choices: [mp, raw], required: true}
  config_path: {description: The container's config file (I(style=raw))., type: path}
  transport: {description: api or pct (I(style=mp))., type: str, choices: [api, pct], default: pct}
  vmid: {description: The container id (I(style=mp))., type: int, default: 0}
  node: {description: The Proxmox node., type: str, default: ""}
  pct: {description: pct on the node., type: path, default: /usr/sbin/pct}
  pvesh: {description: pvesh on the node., type: path, default: /usr/bin/pvesh}
  api_host: {description: The API address (I(transport=api))., type: str, default: ""}
  api_port: {description: The API port., type: int, default: 8006}
  api_user: {description: The token's user., type: str, default: root@pam}
  api_token_id: {description: The token id, for reading., type: str, default: ""}
  api_token_secret: {description: The token secret., type: str, default: ""}
  api_password: {description: root@pam's password, for the write., type: str, default: ""}
  validate_certs: {description: Verify the API's TLS certificate., type: bool, default: true}
  api_timeout: {description: Seconds per API request., type: int, default: 30}
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Mount the model store read-only (pct on the node)
  lxc_model_mount:
    host_dir: /var/lib/sglang-models
    style: mp
    transport: pct
    vmid: 120
    node: pve1
"""

RETURN = r"""
key: {description: The mpN key set (I(style=mp)), or empty when nothing changed., returned: always, type: str}
value: {description: The wanted entry., returned: always, type: str}
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lxc_config_write import write_in_place, write_problem
from ansible.module_utils.model_mount import mount_problems, plan_mp, plan_raw_mount, raw_line
from ansible.module_utils.pve_api import API_ARGUMENT_SPEC, ApiLogin, PveFault, call, connect, lock_problem

ARGUMENT_SPEC = dict(
    API_ARGUMENT_SPEC,
    api_host={"type": "str", "default": ""},
    node={"type": "str", "default": ""},
    host_dir={"type": "str", "required": True},
    mount={"type": "str", "default": "/models"},
    style={"type": "str", "choices": ["mp", "raw"], "required": True},
    config_path={"type": "path"},
    transport={"type": "str", "choices": ["api", "pct"], "default": "pct"},
    vmid={"type": "int", "default": 0},
    pct={"type": "path", "default": "/usr/sbin/pct"},
    pvesh={"type": "path", "default": "/usr/bin/pvesh"},
)


def read_config(module: AnsibleModule) -> dict:
    p = module.params
    path = f"nodes/{p['node']}/lxc/{p['vmid']}/config"
    if p["transport"] == "api":
        login = ApiLogin.from_params(p)
        return call(login, f"GET /{path}", connect(login)(path).get)
    argv = [p["pvesh"], "get", "/" + path, "--output-format", "json"]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        raise PveFault(f"`{' '.join(argv)}` failed on the node (rc {rc}): {err.strip() or out.strip()}")
    return json.loads(out)


def write_mp(module: AnsibleModule, key: str, value: str, digest: str) -> None:
    p = module.params
    if p["transport"] == "api":
        writer = ApiLogin.from_params(dict(p, api_user="root@pam"), with_password=True)
        path = f"nodes/{p['node']}/lxc/{p['vmid']}/config"
        call(writer, f"PUT /{path}", connect(writer)(path).put, **{key: value, "digest": digest})
        return
    argv = [p["pct"], "set", str(p["vmid"]), f"--{key}", value]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        raise PveFault(f"`{' '.join(argv)}` failed on the node (rc {rc}): {err.strip() or out.strip()}. Nothing "
                       "else was changed.")


def run_mp(module: AnsibleModule) -> dict:
    p = module.params
    if p["transport"] == "api" and not p["api_password"]:
        raise PveFault("transport=api sets the bind mount as root@pam and needs lxc_container_api_password.")
    config = {str(k): str(v) for k, v in read_config(module).items()}
    key, value = plan_mp(config, p["host_dir"], p["mount"])
    result = {"changed": key is not None, "key": key or "", "value": value}
    if key is None:
        return result
    problem = lock_problem(p["vmid"], config)
    if problem:
        raise PveFault(problem)
    result["diff"] = {"before": f"{key}: {config.get(key, '')}\n", "after": f"{key}: {value}\n",
                      "before_header": f"CT {p['vmid']} {key}", "after_header": f"CT {p['vmid']} {key}"}
    if module.check_mode:
        return result
    write_mp(module, key, value, config.get("digest", ""))
    after = {str(k): str(v) for k, v in read_config(module).items()}
    if plan_mp(after, p["host_dir"], p["mount"])[0] is not None:
        raise PveFault(f"Container {p['vmid']}'s config does not hold {key}: {value} just written; look at "
                       f"`pct config {p['vmid']}` on the node and re-run.")
    return result


def run_raw(module: AnsibleModule) -> dict:
    p = module.params
    separator = ": "  # Proxmox's key: value
    path = p["config_path"]
    if module.check_mode and path and not os.path.exists(path):
        # Check mode before the container exists: the run creates it, then writes this line.
        return {"changed": True, "key": "", "value": raw_line(p["host_dir"], p["mount"], separator)}
    if not path or not os.path.isfile(path):
        raise PveFault(f"The container's config {path!r} does not exist on the node: create the container first.")
    with open(path, encoding="utf-8") as handle:
        before = handle.read()
    after = plan_raw_mount(before, p["host_dir"], p["mount"], separator)
    result = {"changed": after != before, "key": "", "value": raw_line(p["host_dir"], p["mount"], separator)}
    if result["changed"]:
        result["diff"] = {"before": before, "after": after, "before_header": path, "after_header": path}
        # Probed in check mode too: --check fails where the real run would.
        problem = write_problem(path)
        if problem:
            raise PveFault(f"The container's model store entry must be added, but {problem}. Nothing was written.")
        if not module.check_mode:
            write_in_place(path, after)
    return result


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_if=[("style", "raw", ["config_path"]), ("style", "mp", ["vmid", "node"]),
                                        ("transport", "api", ["api_host", "api_token_id", "api_token_secret"])])
    p = module.params
    problems = mount_problems(p["host_dir"], p["mount"])
    if problems:
        module.fail_json(msg=f"Invalid model mount: {'; '.join(problems)}. Nothing was changed.")
    try:
        result = run_mp(module) if p["style"] == "mp" else run_raw(module)
    except (PveFault, ValueError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
