#!/usr/bin/python
"""Ansible module: the gateway's systemd unit and environment file, owned whole."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_router_unit
short_description: Write the smg gateway's systemd unit and environment file, verified first
description:
  - Owns C(/etc/sglang/NAME.env) (root, 0600; the API key as C(SGLANG_ROUTER_API_KEY)) and
    C(/etc/systemd/system/NAME.service) (root, 0644) running C(smg launch ARGV).
  - Every word is quoted by systemd's rules (C(%) and C($) doubled); C(${VAR}) words are left for
    systemd to fill from the environment file. Control characters are refused naming the value.
  - A changed unit is proved with C(systemd-analyze verify) under its own name first; a unit
    systemd rejects replaces nothing, and no file is written.
  - A unit this project did not write is refused before anything is written, naming
    C(sglang_router_unit_name) - a file at the unit's path without the role's header (or,
    without it, our C(Description=) and program), or a unit of that name elsewhere in
    systemd's directories (a package's C(ssh.service)).
  - The account I(user) (its group of the same name) is made where missing, a system user with no
    login shell and no home, once every check passed and before the first write; an existing one is
    used as it is, and one whose primary group is not its own name is refused before anything changes.
  - Check mode and C(--diff) are honest; the key never appears in the diff or the result.
  - Does not reload systemd or restart the gateway; C(changed_files) says what changed.
options:
  name:
    description: The unit's name without C(.service).
    type: str
    required: true
  version:
    description: The smg release the flags were checked against (a comment in the unit).
    type: str
    required: true
  user:
    description: The account (and group) the gateway runs as (C(sglang_router_user)), made where missing.
    type: str
    required: true
  program:
    description: The C(smg) executable of the current virtualenv.
    type: path
    required: true
  argv:
    description: The checked flags after C(launch) (smg_flags' C(argv)).
    type: list
    elements: str
    default: []
  api_key:
    description: The gateway's API key, for C(${SGLANG_ROUTER_API_KEY}) in I(argv).
    type: str
    default: ""
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Write the gateway's environment file and unit (verified)
  sglang_router_unit:
    name: sglang-router
    version: 1.13.0
    user: sglang-router
    program: /opt/sglang-router/current/bin/smg
    argv: [--host, 127.0.0.1, --port, "30000", --worker-urls, http://10.0.0.2:30000]
  register: sglang_router_files
"""

RETURN = r"""
account:
  description: The commands that made the account (or would, in check mode); [] when it was there.
  returned: always
  type: list
  elements: list
changed_files:
  description: The files written (or that would be, in check mode).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.service_account import Account, AccountError
from ansible.module_utils.sglang_router_text import KEY_VARIABLE, env_file_text, unit_text
from ansible.module_utils.systemd_files import FilesError, Wanted, converge
from ansible.module_utils.systemd_text import UnitError

CONFIG_DIR = "/etc/sglang"
UNIT_DIR = "/etc/systemd/system"


def run(module: AnsibleModule) -> None:
    params = module.params
    name = params["name"]
    environment = {KEY_VARIABLE: params["api_key"]} if params["api_key"] else {}
    try:
        env = Wanted(f"{CONFIG_DIR}/{name}.env", env_file_text(name, environment), 0o600)
        unit = Wanted(f"{UNIT_DIR}/{name}.service",
                      unit_text(name, params["version"], params["user"], params["program"], params["argv"]))
    except UnitError as exc:
        module.fail_json(msg="refusing to render the unit: " + "; ".join(exc.problems), problems=exc.problems,
                         changed_files=[], account=[])
    # The account is made by the writer once every check passed, before the files are written.
    account = Account(params["user"], params["user"], "/nonexistent", False, (),
                      "sglang_router_user", "sglang_router_user")
    try:
        changed, diff, made = converge([env, unit], unit, name, module.run_command, module.check_mode,
                                       env=env, secret_names=frozenset({KEY_VARIABLE}),
                                       name_option="sglang_router_unit_name", account=account)
    except AccountError as exc:
        module.fail_json(msg=str(exc), changed=bool(exc.ran), account=exc.ran, changed_files=[])
    except FilesError as exc:
        module.fail_json(msg=str(exc), changed=bool(exc.written), changed_files=exc.written)
    module.exit_json(changed=bool(changed or made), diff=diff, changed_files=changed, account=made)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            version=dict(type="str", required=True),
            user=dict(type="str", required=True),
            program=dict(type="path", required=True),
            argv=dict(type="list", elements="str", default=[]),
            api_key=dict(type="str", default="", no_log=True),
        ),
        supports_check_mode=True,
    )
    run(module)


if __name__ == "__main__":
    main()
