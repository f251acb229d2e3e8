"""A plain-LXC container's config, planned on its text read once and written in one write: the
network link (the host bridge, the lxc.net lines, the guest's eth0 and root's key), the GPU entries
and the model store's mount. The module adapter is plain_lxc_container; the plans are lxc_link_plan's,
lxc_passthrough's and model_mount's plain functions.
"""

from __future__ import annotations

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
    node_ids,
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


CONFIG_ARGUMENT_SPEC = {
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
}


def converge_config(module: AnsibleModule) -> tuple[dict, bool]:
    """The config made what is asked (not in check mode), or only checked and planned when the container is
    not there yet and the caller creates it first: the result, and whether it only planned."""
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
              "node_ids": node_ids(nodes), "cgroup": cgroup,
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
        module.fail_json(msg=f"The config and link of {p['name']} need these files changed, but "
                             f"{'; '.join(problems)}. Nothing was changed.", **dict(result, changed=False))
    if module.check_mode or planning:
        return result, planning
    for command in result["bridge_commands"]:
        rc, _, err = module.run_command(command)
        if rc != 0:
            module.fail_json(msg=f"{' '.join(command)} failed: {err.strip()}", **result)
    for path, _, after, mode in edits:
        try:
            write(module, path, after, mode)
        except (OSError, ValueError) as exc:
            module.fail_json(msg=f"{exc}. Re-run once it is writable.", **result)
    return result, planning
