"""A plain-LXC container's run state, through LXC's commands: started when stopped, restarted once
when its config changed after its init started, booted, and what it sees inside.

The module adapter (plain_lxc_container) calls converge_run after it has written the config;
the decisions are lxc_state's and systemd_state's plain functions.
"""

from __future__ import annotations

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


def lxc(module: AnsibleModule, name: str, lxcpath: str, *argv: str, changed: bool = False) -> None:
    """Run an lxc-* command on the container; ``changed``: what this call already changed (its config)."""
    rc, out, err = module.run_command([*argv, f"--name={name}", f"--lxcpath={lxcpath}"])
    if rc != 0:
        module.fail_json(msg=f"{' '.join(argv)} --name={name} failed (rc {rc}): {(err or out).strip()}. See "
                         f"lxc-start --name={name} --foreground --logpriority=DEBUG --logfile=/tmp/{name}.log for why.",
                         changed=changed)


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


def start(module: AnsibleModule, name: str, lxcpath: str, action: str, changed: bool = False) -> ContainerState:
    """Start it, or stop and start it (``action`` restart); fails unless it then runs."""
    if action == "restart":
        lxc(module, name, lxcpath, "lxc-stop", changed=changed)
        changed = True
    lxc(module, name, lxcpath, "lxc-start", "--daemon", changed=changed)
    after = info(module, name, lxcpath) or ContainerState()
    if not after.running:
        module.fail_json(msg=f"lxc-start --name={name} returned but it is {after.state or 'gone'}. See lxc-start "
                         f"--name={name} --foreground --logpriority=DEBUG --logfile=/tmp/{name}.log for why.",
                         action=action, changed=True)
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


def converge_run(module: AnsibleModule, name: str, lxcpath: str, bridge: str, pending: bool, wait_timeout: int,
                 inside: list[str], inside_wanted: list[str], written: bool) -> dict:
    """Start it, or restart it once when its config changed after it started; wait for its boot; read what it
    sees inside and restart once more when that is not what is wanted. ``pending``: in check mode, whether
    this call would have changed the config; ``written``: whether it did (said in a failure's changed)."""
    config = os.path.join(lxcpath, name, "config")
    before = info(module, name, lxcpath)
    if before is None:
        if module.check_mode:
            return {"changed": True, "action": "start", "reason": "it does not exist yet", "stale": [], "pid": 0,
                    "booted": "", "inside": [], "inside_stderr": "", "reread": False, "run_diff": {}}
        module.fail_json(msg=f"lxc-info finds no container {name} in {lxcpath}: create it first. "
                         + ("Its config was written; nothing else was changed." if written else "Nothing was changed."),
                         changed=written)
    if before.state not in SETTLED_STATES:
        module.fail_json(msg=f"{name} is {before.state or 'in no state lxc-info names'}: expected RUNNING or STOPPED. "
                         f"Wait for it, or lxc-unfreeze --name={name} a frozen one, then re-run. "
                         + ("Its config was written; nothing else was changed." if written else "Nothing was changed."),
                         changed=written)
    stale: list[str] = []
    action, reason = "start", f"it was {before.state.lower()}"
    if before.running:
        stale = stale_paths(mtimes([config]), started(before.pid))
        away = off_bridge(before.links, bridge, {link: link_master(SYSFS_NET, link) for link in before.links})
        action, reason = ("restart", away) if away and not stale else \
            decide_restart(True, "", stale, False, pending and module.check_mode)
    if action != "none":
        refuse_foreign_rootfs(module, name, lxcpath, config, action)
    after = before
    if action != "none" and not module.check_mode:
        after = start(module, name, lxcpath, action, changed=written)
    changed = action != "none"
    said = ""
    if wait_timeout > 0 and not module.check_mode:
        said = wait_for_boot(module, name, lxcpath, wait_timeout, changed=changed or written, action=action,
                             reason=reason)
    seen, seen_err, reread, first = [], "", False, action
    if inside and not module.check_mode:
        seen, seen_err = read_inside(module, name, lxcpath, inside, changed or written)
        why = inside_difference(seen, inside_wanted)
        if why:
            # Once: a second difference is the caller's to report (tasks/verify.yml names what is missing).
            earlier = {"start": "started", "restart": "restarted"}.get(first, "")
            refuse_foreign_rootfs(module, name, lxcpath, config, "restart", earlier)
            after, reread, changed = start(module, name, lxcpath, "restart", changed=True), True, True
            action, reason = "restart", why if action == "none" else f"{reason}; then {why}"
            if wait_timeout > 0:
                said = wait_for_boot(module, name, lxcpath, wait_timeout, changed=True, action=action, reason=reason)
            seen, seen_err = read_inside(module, name, lxcpath, inside, True)
    done = ({"none": "restarted once", "start": "started, then restarted once", "restart": "restarted twice"} if reread
            else {"start": "started", "restart": "restarted once", "none": "left as it is"})[first]
    return {"changed": changed, "action": action, "reason": reason, "stale": stale, "pid": after.pid, "booted": said,
            "inside": seen, "inside_stderr": seen_err, "reread": reread,
            "run_diff": {"before": f"{name}: {before.state}\n", "after": f"{name}: {done}: {reason}\n",
                         "before_header": f"{name} (run state)", "after_header": f"{name} (run state)"}
            if changed else {}}
