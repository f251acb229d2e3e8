#!/usr/bin/python
"""Ansible module: check the gateway's flags against the installed smg (read-only)."""

from __future__ import annotations

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_router_flags import SPEC_SCRIPT, check_flags

DOCUMENTATION = r"""
---
module: smg_flags
short_description: Check smg launch flags against the installed smg (read-only)
description:
  - Runs the gateway virtualenv's Python on smg's own parser builder
    (C(RouterArgs.add_cli_args)) to list every option of C(smg launch), checks
    I(flags) against it (unknown flags with close names, choices, switches,
    values), then lets smg's C(parse_router_args) judge the whole command line.
  - Fails listing every problem at once; never changes anything.
options:
  python:
    description: Python interpreter of the gateway's virtualenv.
    type: path
    required: true
  flags:
    description: Flag name without dashes -> value; true a bare switch, a list several values.
    type: dict
    required: true
  env_flags:
    description: Flag -> environment variable systemd expands there (the API key); never shown.
    type: dict
    default: {}
"""

RETURN = r"""
version: {description: the installed smg's version (its dist-info), type: str, returned: always}
argv: {description: the arguments after C(smg launch), env flags as C(${VAR}), type: list, returned: always}
not_installed: {description: true in check mode when the virtualenv is not there yet, type: bool, returned: always}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "flags": {"type": "dict", "required": True},
            "env_flags": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    python = module.params["python"]
    if not os.path.exists(python):
        if module.check_mode:
            module.exit_json(changed=False, not_installed=True, version="", argv=[])
        module.fail_json(msg=f"{python} does not exist: smg is not installed in the gateway's virtualenv")
    env_flags = {k: str(v) for k, v in module.params["env_flags"].items()}
    rc, out, err = module.run_command([python, "-c", SPEC_SCRIPT], data="[]")
    if rc != 0:
        module.fail_json(msg=f"reading smg's options with {python} failed: {err.strip()[-500:]}")
    spec = json.loads(out)
    argv, problems = check_flags(spec, module.params["flags"], env_flags)
    if not problems:
        probe = [("placeholder-not-the-key" if a.startswith("${") else a) for a in argv]
        rc, out, err = module.run_command([python, "-c", SPEC_SCRIPT], data=json.dumps(probe))
        verdict = json.loads(out) if rc == 0 else {"error": err.strip()[-500:]}
        if verdict["error"]:
            problems.append(f"smg {spec['version']}'s own parser refused the command line: {verdict['error']}")
    if problems:
        module.fail_json(msg="\n  - ".join([f"The gateway's flags do not fit smg {spec['version']}:"] + problems),
                         version=spec["version"], argv=[])
    module.exit_json(changed=False, not_installed=False, version=spec["version"], argv=argv)


if __name__ == "__main__":
    main()
