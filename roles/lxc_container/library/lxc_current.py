#!/usr/bin/python
"""Ansible module: a plain-LXC container running, and running its current config."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lxc_current
short_description: Start a plain-LXC container, or restart it once when its config changed after it started
description:
  - The project's one restart rule (as systemd_current for units), for a container made with
    lxc-create. It reads LXC and the kernel, not this run's notes, so a controller killed between
    writing the config and restarting still restarts on the next run.
  - Starts the container when it is stopped. Restarts it once when its config, or one of I(paths),
    changed after its init process started (the file's own time against C(/proc/PID/stat)), or when
    I(bridge) is given and none of its veths is on that bridge (the bridge was made again).
  - Before any start it checks that the config names the container's own rootfs and that
    C(rootfs/sbin/init) exists, so a config made by C(lxc-create -t none) never boots on the host's /.
  - >-
    With I(wait_timeout), it then waits until the container's systemd has booted
    (C(systemctl is-system-running --wait) through C(lxc-attach)), whether it started it or found it
    running: a run killed right after a start finds it booted on the next run.
  - >-
    With I(inside), it then runs that command inside (through C(lxc-attach)), which lists what the
    running container really got (its NVIDIA nodes, the model store's mount), and compares the lines
    with I(inside_wanted). Entries in the config apply at a start, so a run killed between writing them
    and the restart, or C(optional) mounts, show there and nowhere else. When they differ it restarts
    the container once, waits for it again and reads again; the caller checks that second reading.
  - In check mode nothing is done and the result says what would be; I(pending) counts what check
    mode did not write.
options:
  name:
    description: The container's name.
    type: str
    required: true
  lxcpath:
    description: LXC's container directory.
    type: path
    default: /var/lib/lxc
  paths:
    description: Files besides the container's config whose change after the start needs a restart.
    type: list
    elements: path
    default: []
  bridge:
    description: The host bridge its link is on; empty for a container without network.
    type: str
    default: ""
  pending:
    description:
      - In check mode, whether this run changes the config (check mode writes none, so its time
        cannot tell). Ignored in a real run.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds to wait for the container's systemd to finish booting after the call; 0 does not wait.
        Not in check mode.
    type: int
    default: 0
  inside:
    description:
      - A command (argv) run inside the container after the boot wait that prints what it sees, one
        item a line. Empty reads nothing. Not in check mode.
    type: list
    elements: str
    default: []
  inside_wanted:
    description: The lines I(inside) must print, in any order.
    type: list
    elements: str
    default: []
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Start the container, or restart it once when its config changed after it started
  lxc_current:
    name: sglang-demo
    bridge: sgldemo0
    wait_timeout: 180
    inside: [python3, -c, "{{ lookup('ansible.builtin.file', 'list_nodes.py') }}"]
    inside_wanted: [/dev/nvidia0 195:0, /dev/nvidiactl 195:255]
  register: container
"""

RETURN = r"""
action:
  description: What was done (or would be, in check mode).
  returned: always
  type: str
  choices: [start, restart, none]
reason:
  description: Why, in words.
  returned: always
  type: str
stale:
  description: The config and I(paths) changed after the init process started.
  returned: always
  type: list
  elements: str
pid:
  description: The host PID of the container's init after the call (0 in check mode when it was stopped).
  returned: always
  type: int
booted:
  description: What C(systemctl is-system-running) said inside at the end (empty when not waited for).
  returned: always
  type: str
inside:
  description: The lines I(inside) printed, after the restart when the first reading differed (empty without I(inside)).
  returned: always
  type: list
  elements: str
inside_stderr:
  description: What I(inside) wrote to stderr at that reading.
  returned: always
  type: str
reread:
  description: The first reading differed from I(inside_wanted), so the container was restarted once and read again.
  returned: always
  type: bool
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lxc_passthrough import rootfs_problem
from ansible.module_utils.lxc_state import (BOOT_POLL_SECONDS, INFO_FLAGS, SETTLED_STATES, ContainerState, boot_tries,
                                            booted, inside_difference, link_master, off_bridge, parse_info,
                                            start_ticks, started_epoch)
from ansible.module_utils.systemd_state import decide_restart, mtimes, stale_paths

SYSFS_NET = "/sys/class/net"


def info(module: AnsibleModule, name: str, lxcpath: str) -> ContainerState | None:
    """lxc-info's answer, or None when the container (or LXC itself, before a check-mode install) is missing."""
    lxc_info = module.get_bin_path("lxc-info")
    if not lxc_info:
        return None
    rc, out, _ = module.run_command([lxc_info, f"--name={name}", f"--lxcpath={lxcpath}", *INFO_FLAGS])
    return parse_info(out) if rc == 0 else None


def lxc(module: AnsibleModule, name: str, lxcpath: str, *argv: str) -> None:
    rc, out, err = module.run_command([*argv, f"--name={name}", f"--lxcpath={lxcpath}"])
    if rc != 0:
        module.fail_json(msg=f"{' '.join(argv)} --name={name} failed (rc {rc}): {(err or out).strip()}. See "
                         f"lxc-start --name={name} --foreground --logpriority=DEBUG --logfile=/tmp/{name}.log for why.")


def refuse_foreign_rootfs(module: AnsibleModule, name: str, lxcpath: str, config: str, action: str,
                          done: str = "") -> None:
    """Fails unless config names the container's own rootfs and its sbin/init exists; ``done`` is
    what this call already did (a start before the inside reading), said instead of "nothing"."""
    changed = f"It was {done} earlier in this call; nothing else was changed." if done else "Nothing was changed."
    try:
        with open(config, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        module.fail_json(msg=f"Cannot read {config}: {exc}. {changed}", changed=bool(done))
    init = os.path.join(lxcpath, name, "rootfs", "sbin", "init")
    problem = rootfs_problem(text, name, lxcpath, os.path.lexists(init))
    if problem:
        module.fail_json(msg=f"{name}: {problem}. It was not {action}ed. Inspect {config}; "
                         f"lxc-destroy --name={name} removes a half-made container.", start_problem=problem,
                         changed=bool(done))


def start(module: AnsibleModule, name: str, lxcpath: str, action: str) -> ContainerState:
    """Start it, or stop and start it (``action`` restart); fails unless it then runs."""
    if action == "restart":
        lxc(module, name, lxcpath, "lxc-stop")
    lxc(module, name, lxcpath, "lxc-start", "--daemon")
    after = info(module, name, lxcpath) or ContainerState()
    if not after.running:
        module.fail_json(msg=f"lxc-start --name={name} returned but it is {after.state or 'gone'}. See lxc-start "
                         f"--name={name} --foreground --logpriority=DEBUG --logfile=/tmp/{name}.log for why.",
                         action=action)
    return after


def attach(module: AnsibleModule, name: str, lxcpath: str, *argv: str) -> list[str]:
    """The command line that runs argv inside the container."""
    return [module.get_bin_path("lxc-attach", required=True), f"--name={name}", f"--lxcpath={lxcpath}", "--", *argv]


def read_inside(module: AnsibleModule, name: str, lxcpath: str, argv: list[str],
                changed: bool) -> tuple[list[str], str]:
    """The lines ``argv`` prints inside the running container, and its stderr; fails when it fails."""
    rc, out, err = module.run_command(attach(module, name, lxcpath, *argv))
    if rc != 0:
        module.fail_json(msg=f"Reading what {name} sees inside failed (lxc-attach --name={name} -- {argv[0]} ..., "
                         f"rc {rc}): {(err or out).strip() or 'no output'}. Check that {argv[0]} runs in the "
                         f"container (lxc-attach --name={name} -- {argv[0]} --version).", rc=rc, stderr=err,
                         changed=changed)
    return out.splitlines(), err


def started(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        ticks = start_ticks(handle.read())
    return started_epoch(ticks, os.sysconf("SC_CLK_TCK"), time.clock_gettime(time.CLOCK_BOOTTIME), time.time())


def wait_for_boot(module: AnsibleModule, name: str, lxcpath: str, timeout: int, **result) -> str:
    """Wait until systemd inside has booted; fails naming what it last said after ``timeout`` seconds."""
    argv = attach(module, name, lxcpath, "systemctl", "is-system-running", "--wait")
    said = ""
    for attempt in range(boot_tries(timeout)):
        if attempt:
            time.sleep(BOOT_POLL_SECONDS)
        _, out, err = module.run_command(argv)
        said = out.strip() or err.strip()
        if booted(out):
            return out.strip()
    module.fail_json(msg=f"{name} did not finish booting within {timeout} s: `systemctl is-system-running` inside "
                     f"said {said or 'nothing'!r}. See lxc-attach --name={name} -- journalctl -b; a longer "
                     "lxc_container_wait_timeout gives a slow boot more time.", **result)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            lxcpath=dict(type="path", default="/var/lib/lxc"),
            paths=dict(type="list", elements="path", default=[]),
            bridge=dict(type="str", default=""),
            pending=dict(type="bool", default=False),
            wait_timeout=dict(type="int", default=0),
            inside=dict(type="list", elements="str", default=[]),
            inside_wanted=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    name, lxcpath = p["name"], p["lxcpath"]
    if not name or "/" in name or any(c.isspace() or ord(c) < 32 for c in name):
        module.fail_json(msg=f"name is {name!r}: expected a container name without slash or whitespace. "
                         "Nothing was changed.")
    config = os.path.join(lxcpath, name, "config")
    before = info(module, name, lxcpath)
    if before is None:
        if module.check_mode:
            module.exit_json(changed=True, action="start", reason="it does not exist yet", stale=[], pid=0, booted="")
        module.fail_json(msg=f"lxc-info finds no container {name} in {lxcpath}: create it first. Nothing was changed.")
    if before.state not in SETTLED_STATES:
        module.fail_json(msg=f"{name} is {before.state or 'in no state lxc-info names'}: expected RUNNING or STOPPED. "
                         f"Wait for it, or lxc-unfreeze --name={name} a frozen one, then re-run. Nothing was changed.")
    stale: list[str] = []
    action, reason = "start", f"it was {before.state.lower()}"
    if before.running:
        stale = stale_paths(mtimes([config, *p["paths"]]), started(before.pid))
        away = off_bridge(before.links, p["bridge"], {link: link_master(SYSFS_NET, link) for link in before.links})
        action, reason = ("restart", away) if away and not stale else \
            decide_restart(True, "", stale, False, p["pending"] and module.check_mode)
    if action != "none":
        refuse_foreign_rootfs(module, name, lxcpath, config, action)
    after = before
    if action != "none" and not module.check_mode:
        after = start(module, name, lxcpath, action)
    changed = action != "none"
    said = ""
    if p["wait_timeout"] > 0 and not module.check_mode:
        said = wait_for_boot(module, name, lxcpath, p["wait_timeout"], changed=changed, action=action, reason=reason)
    seen, seen_err, reread, first = [], "", False, action
    if p["inside"] and not module.check_mode:
        seen, seen_err = read_inside(module, name, lxcpath, p["inside"], changed)
        why = inside_difference(seen, p["inside_wanted"])
        if why:
            # Once: a second difference is the caller's to report (tasks/verify.yml names what is missing).
            earlier = {"start": "started", "restart": "restarted"}.get(first, "")
            refuse_foreign_rootfs(module, name, lxcpath, config, "restart", earlier)
            after, reread, changed = start(module, name, lxcpath, "restart"), True, True
            action, reason = "restart", why if action == "none" else f"{reason}; then {why}"
            if p["wait_timeout"] > 0:
                said = wait_for_boot(module, name, lxcpath, p["wait_timeout"], changed=changed, action=action,
                                     reason=reason)
            seen, seen_err = read_inside(module, name, lxcpath, p["inside"], changed)
    done = ({"none": "restarted once", "start": "started, then restarted once", "restart": "restarted twice"} if reread
            else {"start": "started", "restart": "restarted once", "none": "left as it is"})[first]
    module.exit_json(changed=changed, action=action, reason=reason, stale=stale, pid=after.pid, booted=said,
                     inside=seen, inside_stderr=seen_err, reread=reread,
                     diff={"before": f"{name}: {before.state}\n", "after": f"{name}: {done}: {reason}\n"}
                     if changed else {})


if __name__ == "__main__":
    main()
