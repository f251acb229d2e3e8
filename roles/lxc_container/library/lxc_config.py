#!/usr/bin/python
"""Ansible module: a plain-LXC container's config: its network link and its GPU entries, in one write."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lxc_config
short_description: Make a plain-LXC container's config what is asked - its network link, GPU entries and model store
description:
  - The one writer of a plain-LXC container's config - its network link, with I(nvidia) its GPU
    entries, and with I(model_dir) the model store's read-only bind mount, planned on the text read
    once and written in place in one write.
  - >-
    With I(bridge) empty, the container has no network: its config carries C(lxc.net.0.type = empty).
  - With I(bridge), a host-only link for ssh, as production reaches its containers. The host
    bridge is created with C(ip) and carries only I(host_address) (link-local, no route, no NAT);
    the config carries a veth on it named C(eth0) with the static I(address) and a MAC derived
    from I(name); the guest's C(iface eth0 inet dhcp) (the Debian template's) becomes C(manual);
    I(pubkey) is added to root's C(authorized_keys) in I(rootfs).
  - >-
    With I(nvidia) (the C(nvidia) result of nvidia_devices), the config carries exactly one allow
    entry and one bind mount per node and C(lxc.prlimit.memlock); entries of ours that are no longer
    wanted are removed and every other line is kept. A node that is not an NVIDIA node of its majors,
    or a memlock no config line may carry, is refused before any change.
  - >-
    With I(model_dir), the config carries one C(lxc.mount.entry = MODEL_DIR MOUNT none
    bind,ro,create=dir 0 0) for I(model_mount), every other mount entry left alone.
  - State is read from the things themselves (C(ip -j -d addr show), the config, the files).
  - An existing container whose config has neither the role's mark line (C(OWNER_MARK), put there at
    creation) nor the veth MAC derived from I(name) was not made by the role and is refused before
    any change, unless I(adopt), which adds the mark line.
  - Every value is checked before any change; a bridge name taken by another kind of interface,
    another address on the bridge, or another interface in the link's network is refused.
  - >-
    Without I(config_path) it only checks and plans. With I(when_missing=check) and no file at
    I(config_path), it does the same and returns I(exists) false, so that the caller creates the
    container and calls it again; a container that exists needs one call, not a probe first.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  name:
    description: The container's name (the MAC of its veth is derived from it).
    type: str
    required: true
  bridge:
    description: Host bridge of the link; empty for no network.
    type: str
    default: ""
  host_address:
    description: The host's address on the bridge, link-local with a prefix (169.254.77.1/24).
    type: str
    default: ""
  address:
    description: The container's address on the bridge, without a prefix.
    type: str
    default: ""
  pubkey:
    description: An OpenSSH public key line for root's authorized_keys in the container.
    type: str
    default: ""
  config_path:
    description: The container's config, whose lxc.net.* lines are made the wanted ones in place.
    type: path
  rootfs:
    description: The container's root file system (on the host), for the guest's files.
    type: path
  require_host_key:
    description: Fail when I(rootfs) holds no ssh host key (the container is reached by ssh).
    type: bool
    default: false
  lxcpath:
    description:
      - Where containers live. Given with I(config_path), the config must name
        C(LXCPATH/NAME/rootfs) as its rootfs and that rootfs must hold sbin/init, before any
        line is written or any bridge made.
    type: path
  adopt:
    description: Take over an existing container the role did not make (C(lxc_container_adopt)) - the mark line is added.
    type: bool
    default: false
  nvidia:
    description: The C(nvidia) result of nvidia_devices on this host; omitted, the GPU entries are left as they are.
    type: dict
  cgroup:
    description: Which allow key to write; C(auto) reads the host (a unified hierarchy means v2).
    type: str
    choices: [auto, v1, v2]
    default: auto
  memlock:
    description: Value of C(lxc.prlimit.memlock) while any GPU node is passed; empty leaves it out.
    type: str
    default: unlimited
  model_dir:
    description: The node's model store, mounted read-only at I(model_mount); empty, no such entry is made.
    type: str
    default: ""
  model_mount:
    description: Where the model store is mounted inside the container.
    type: str
    default: /models
  when_missing:
    description:
      - What to do when I(config_path) does not exist. C(fail) (the container must be there), or
        C(check) (only check and plan, return I(exists) false, change nothing).
    type: str
    choices: [fail, check]
    default: fail
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: A host-only link for ssh and the host's GPUs
  lxc_config:
    name: sglang-demo
    bridge: sgldemo0
    host_address: 169.254.77.1/24
    address: 169.254.77.2
    pubkey: "{{ lookup('ansible.builtin.file', '~/.cache/sglang-deploy/demo-ssh/id_ed25519.pub') }}"
    config_path: /var/lib/lxc/sglang-demo/config
    rootfs: /var/lib/lxc/sglang-demo/rootfs
    nvidia: "{{ discovery.nvidia }}"
"""

RETURN = r"""
net_lines:
  description: The config's lxc.net.* lines for this link, as C(key = value).
  returned: always
  type: list
bridge_commands:
  description: The C(ip) commands run (or, in check mode, that would run) for the bridge.
  returned: always
  type: list
config_changed:
  description: Whether the config changed - its lxc.net.* lines, GPU entries or mark (a running container restarts for it).
  returned: always
  type: bool
host_keys:
  description: The container's ssh host public keys (C(TYPE BASE64)), read from I(rootfs).
  returned: always
  type: list
exists:
  description: >-
    Whether the container is there: its config, without the C(partial) marker that lxc-create leaves
    beside it until it has finished (true when no I(config_path) is given).
  returned: always
  type: bool
owner_mark:
  description: The line the role creates containers with (their config's first line of its own), its mark of ownership.
  returned: always
  type: str
node_ids:
  description: C(PATH MAJOR:MINOR) of each node passed (empty without I(nvidia)), as the container sees it inside.
  returned: always
  type: list
cgroup:
  description: The cgroup version whose allow key is used (v1 or v2).
  returned: always
  type: str
entries:
  description: The config's lines for the GPUs, as C(key = value) (empty without I(nvidia)).
  returned: always
  type: list
added:
  description: GPU lines added (or, in check mode, that would be).
  returned: always
  type: list
removed:
  description: GPU lines removed (or, in check mode, that would be).
  returned: always
  type: list
model_line:
  description: The model store's entry the config carries (empty without I(model_dir)).
  returned: always
  type: str
"""

import glob
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lxc_config_write import write_in_place, write_problem
from ansible.module_utils.lxc_link_plan import (
    OWNER_MARK,
    hwaddr,
    net_lines,
    owned,
    parse_link,
    parse_pubkey,
    plan_authorized_keys,
    plan_bridge,
    plan_interfaces,
    plan_net,
    with_mark,
)
from ansible.module_utils.model_mount import mount_problems, plan_raw_mount, raw_line
from ansible.module_utils.lxc_passthrough import (
    host_cgroup,
    memlock_lines,
    nodes_of,
    nvidia_majors,
    plan_raw,
    raw_lines,
    rootfs_problem,
)


def read(path: str) -> str | None:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def write(module: AnsibleModule, path: str, text: str, mode: int) -> None:
    """A guest file: rewritten in place when it exists, else created with mode."""
    if os.path.exists(path):
        write_in_place(path, text)
        return
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "bridge": {"type": "str", "default": ""},
            "host_address": {"type": "str", "default": ""},
            "address": {"type": "str", "default": ""},
            "pubkey": {"type": "str", "default": ""},
            "config_path": {"type": "path"},
            "rootfs": {"type": "path"},
            "require_host_key": {"type": "bool", "default": False},
            "lxcpath": {"type": "path"},
            "when_missing": {"type": "str", "default": "fail", "choices": ["fail", "check"]},
            "adopt": {"type": "bool", "default": False},
            "nvidia": {"type": "dict"},
            "cgroup": {"type": "str", "choices": ["auto", "v1", "v2"], "default": "auto"},
            "memlock": {"type": "str", "default": "unlimited"},
            "model_dir": {"type": "str", "default": ""},
            "model_mount": {"type": "str", "default": "/models"},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        link = parse_link(p["bridge"], p["host_address"], p["address"])
        key = parse_pubkey(p["pubkey"]) if p["pubkey"] else ""
    except ValueError as exc:
        module.fail_json(msg=f"Invalid network link for {p['name']}: {exc}. Nothing was changed.")
    cgroup = host_cgroup(p["cgroup"])
    try:
        nodes = nodes_of(p["nvidia"]) if p["nvidia"] is not None else []
        gpu_lines = raw_lines(nodes, cgroup) + memlock_lines(nodes, p["memlock"])
    except ValueError as exc:
        module.fail_json(msg=f"GPU entries for {p['name']}: {exc}. Nothing was changed.")
    problems = mount_problems(p["model_dir"], p["model_mount"]) if p["model_dir"] else []
    if problems:
        module.fail_json(msg=f"Invalid model mount: {'; '.join(problems)}. Nothing was changed.")
    wanted = net_lines(link, p["name"])
    # lxc-create writes the config early and removes its `partial` marker last: a killed creation
    # leaves both, and the container is not there yet.
    unfinished = bool(p["config_path"]) and os.path.lexists(os.path.join(os.path.dirname(p["config_path"]), "partial"))
    exists = not p["config_path"] or (os.path.isfile(p["config_path"]) and not unfinished)
    # The config as it is, read once: the rootfs and owner checks and the link's plan all read it.
    text = read(p["config_path"]) if p["config_path"] and exists else None
    # Only check and plan: no config given, or none there yet and the caller creates it first.
    planning = not p["config_path"] or (not exists and p["when_missing"] == "check")
    if unfinished and not planning:
        module.fail_json(msg=f"{p['name']} was left half-made by an lxc-create that did not finish (its partial "
                             f"marker is beside {p['config_path']}). lxc-destroy -f -n {p['name']} removes it; the "
                             "role does that itself before it creates the container. Nothing was changed.")
    if p["config_path"] and exists and p["lxcpath"]:
        # Before this module writes a line or makes a bridge: a config that lxc-start would boot on another root.
        init = os.path.join(p["lxcpath"], p["name"], "rootfs", "sbin", "init")
        problem = rootfs_problem(text or "", p["name"], p["lxcpath"], os.path.lexists(init))
        if problem:
            module.fail_json(msg=(f"{p['name']}: {problem}. Nothing was written to {p['config_path']} and no host "
                                  f"bridge was made. Inspect it; lxc-destroy -n {p['name']} removes a half-made "
                                  "container."), start_problem=problem)
        if not owned(text or "", p["name"]) and not p["adopt"]:
            module.fail_json(msg=(
                f"{p['name']}: the container whose config is {p['config_path']} was not made by this role: its config "
                f"has neither the line {OWNER_MARK!r} the role creates containers with nor the veth MAC "
                f"{hwaddr(p['name'])} it gives them. It may be someone else's, and it is left as it is. If it is the one "
                "meant (made by hand, or by an earlier version of this project), re-run once with "
                "-e lxc_container_adopt=true: that adds the line (the container restarts once to take its config); "
                "otherwise set lxc_container_name to a name no container has. Nothing was written and no host bridge "
                "was made."), owned=False)
    result = {"changed": False, "net_lines": [f"{k} = {v}" for k, v in wanted], "bridge_commands": [],
              "config_changed": False, "host_keys": [], "diff": [], "exists": exists, "owner_mark": OWNER_MARK,
              "node_ids": [f"{node.path} {node.major}:{node.minor}" for node in nodes], "cgroup": cgroup,
              "entries": [f"{k} = {v}" for k, v in gpu_lines], "added": [], "removed": [],
              "model_line": raw_line(p["model_dir"], p["model_mount"], " = ") if p["model_dir"] else ""}

    if link is not None:
        ip = module.get_bin_path("ip")
        if not ip:
            module.fail_json(msg="The link needs iproute2's `ip` on the host (apt-get install iproute2). "
                                 "Nothing was changed.")
        rc, out, err = module.run_command([ip, "-j", "-d", "address", "show"])
        if rc != 0:
            module.fail_json(msg=f"`ip -j -d address show` failed: {err.strip()}. Nothing was changed.")
        try:
            result["bridge_commands"] = [[ip, *argv[1:]] for argv in plan_bridge(json.loads(out or "[]"), link)]
        except ValueError as exc:
            module.fail_json(msg=f"Host bridge for {p['name']}: {exc}. Nothing was changed.")

    edits: list[tuple[str, str, str, int]] = []  # path, before, after, mode
    if not planning:
        if text is None and not module.check_mode:
            module.fail_json(msg=f"{p['config_path']} does not exist: create the container first.")
        plan = plan_net(text or "", wanted)
        after = plan.text if plan.changed else (text or "")
        if p["nvidia"] is not None:
            gpus = plan_raw(after, gpu_lines, nvidia_majors(p["nvidia"]), " = ")
            result.update(added=gpus.added, removed=gpus.removed)
            after = gpus.text if gpus.changed else after
        if p["model_dir"]:
            mounted = plan_raw_mount(after, p["model_dir"], p["model_mount"], " = ")
            after = mounted if mounted.splitlines() != after.splitlines() else after
        if text is not None and not owned(after, p["name"]):  # adopted: the mark makes it the role's
            after = with_mark(after)
        if text is not None and after != text:
            result["config_changed"] = True
            edits.append((p["config_path"], text, after, 0o644))
    if p["rootfs"] and not planning and os.path.isdir(p["rootfs"]):
        interfaces = os.path.join(p["rootfs"], "etc/network/interfaces")
        before = read(interfaces)
        after = plan_interfaces(before) if link is not None and before is not None else None
        if after is not None:
            edits.append((interfaces, before, after, 0o644))
        if key:
            keys = os.path.join(p["rootfs"], "root/.ssh/authorized_keys")
            before = read(keys) or ""
            after = plan_authorized_keys(before, key)
            if after is not None:
                edits.append((keys, before, after, 0o600))
        for path in sorted(glob.glob(os.path.join(p["rootfs"], "etc/ssh/ssh_host_*_key.pub"))):
            fields = (read(path) or "").split()
            if len(fields) >= 2:
                result["host_keys"].append(" ".join(fields[:2]))

    if p["require_host_key"] and not planning and not result["host_keys"] and not module.check_mode:
        module.fail_json(msg=(f"{p['rootfs']}/etc/ssh holds no ssh host key, so {p['name']} cannot be reached by "
                              "ssh: put openssh-server in lxc_container_packages (it is installed at creation; "
                              f"lxc-destroy -f -n {p['name']} and re-run to recreate it). Nothing was changed."))
    # Without a config it only plans (the role's check before any change): nothing to report as changed.
    result["changed"] = not planning and bool(result["bridge_commands"] or edits)
    result["diff"] = [{"before": before, "after": after, "before_header": path, "after_header": path}
                      for path, before, after, _ in edits]
    problems = [problem for problem in (write_problem(path) for path, _, _, _ in edits) if problem]
    if problems and not planning:
        module.fail_json(msg=f"The config and link of {p['name']} need these files changed, but {'; '.join(problems)}. Nothing "
                             "was changed.", **dict(result, changed=False))
    if module.check_mode or planning:
        module.exit_json(**result)
    for command in result["bridge_commands"]:
        rc, _, err = module.run_command(command)
        if rc != 0:
            module.fail_json(msg=f"{' '.join(command)} failed: {err.strip()}", **result)
    for path, _, after, mode in edits:
        try:
            write(module, path, after, mode)
        except (OSError, ValueError) as exc:
            module.fail_json(msg=f"{exc}. Re-run once it is writable.", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
