#!/usr/bin/python
"""Ansible module: a unit enabled, running, and running its current files."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: systemd_current
short_description: Enable a unit, start it, and restart it once when a file it runs on changed
description:
  - The one restart rule of every service the project owns (the SGLang server, the gateway,
    the node's device-node unit). It reads systemd, not this run's notes, so a controller
    killed between writing a file and restarting still restarts on the next run.
  - Reloads systemd when it says the unit file changed on disk (C(NeedDaemonReload)), enables the
    unit when it is not, then starts it when it is not running, or restarts it once when the unit
    file, one of its drop-ins, or one of I(paths) changed after its main process started.
  - In check mode nothing is done, and the result says what would be; a unit whose file is not
    written yet would be started, and I(pending) counts what check mode did not write.
options:
  name:
    description: The unit name without C(.service).
    type: str
    required: true
  paths:
    description:
      - Files and links, besides the unit file and its drop-ins, whose change after the process
        started needs a restart (their own modification time; a link's is that of the link).
      - A path that does not exist does not count.
    type: list
    elements: path
    default: []
  run:
    description: Whether the unit runs here. False enables it only.
    type: bool
    default: true
  restart:
    description: Restart it once even when nothing it runs on changed (a peer of a multi-node replica restarts).
    type: bool
    default: false
  pending:
    description:
      - In check mode, whether this run changes a file the unit runs on (check mode writes none, so
        their times cannot tell). Ignored in a real run, where the files themselves tell.
    type: bool
    default: false
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Start the gateway, or restart it once when its files changed after it started
  systemd_current:
    name: smg
    paths: [/etc/sglang/smg.env, /opt/smg/current]
  register: gateway
"""

RETURN = r"""
action:
  description: What was done (or would be, in check mode) to the running process.
  returned: always
  type: str
  choices: [start, restart, none]
reason:
  description: Why, in words (the files that changed after the process started, when those).
  returned: always
  type: str
stale:
  description: The unit file, drop-ins and I(paths) changed after the process started.
  returned: always
  type: list
  elements: str
reloaded:
  description: systemd was reloaded because the unit file changed on disk.
  returned: always
  type: bool
enabled_now:
  description: The unit was enabled by this call.
  returned: always
  type: bool
invocation_id:
  description: systemd's InvocationID after the call (journal field _SYSTEMD_INVOCATION_ID).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.systemd_state import ServiceError, converge_service


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            paths=dict(type="list", elements="path", default=[]),
            run=dict(type="bool", default=True),
            restart=dict(type="bool", default=False),
            pending=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    name = params["name"]
    if not name or "/" in name or name.endswith(".service") or any(c.isspace() or ord(c) < 32 for c in name):
        module.fail_json(msg=f"name is {name!r}: expected a unit name without .service, no slash or "
                         f"whitespace. Nothing was changed.")
    try:
        done = converge_service(module.run_command, name, params["paths"], params["run"], params["restart"],
                                params["pending"], module.check_mode)
    except ServiceError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=done.changed, diff=done.diff, **done.as_dict())


if __name__ == "__main__":
    main()
