#!/usr/bin/python
"""Ansible module: the gateway's settings checked, its flags decided and checked against the installed smg (read-only)."""

from __future__ import annotations

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_router_flags import SPEC_SCRIPT, check_flags, hidden_parts
from ansible.module_utils.sglang_router_settings import decided, settings_problems
from ansible.module_utils.sglang_router_text import KEY_VARIABLE

DOCUMENTATION = r"""
---
module: smg_flags
short_description: Check the gateway's settings and decide its smg flags, checked against the installed smg (read-only)
description:
  - Checks the settings and the replicas, every problem at once, each naming the role variable
    (C(sglang_router_<option>)) or the replica, what was expected and how to fix it.
  - Decides the gateway's flags (the options, C(--worker-urls) from I(replicas), then
    I(extra_flags)), its workers and its local URL, once; the API key goes in as
    C(--api-key ${SGLANG_ROUTER_API_KEY}), which systemd fills from the environment file.
  - Where smg is installed, runs the virtualenv's Python on smg's own parser builder
    (C(RouterArgs.add_cli_args)) to list every option of C(smg launch), checks the flags against
    it (unknown flags with close names, choices, switches, values), then lets smg's
    C(parse_router_args) judge the whole command line.
  - In check mode with no virtualenv yet (before the install), returns what the settings decide
    with C(not_installed); otherwise a missing smg fails. Never changes anything.
options:
  python:
    description: "Python interpreter of the gateway's virtualenv."
    type: path
    required: true
  host:
    description: "The address the gateway listens on."
    type: str
    required: true
  port:
    description: "The gateway's port (1-65535)."
    type: int
    required: true
  policy:
    description: "The load-balancing policy (the installed smg checks the choice)."
    type: str
    required: true
  metrics_host:
    description: "Address of the Prometheus metrics."
    type: str
    required: true
  metrics_port:
    description: "Port of the Prometheus metrics, not the gateway's."
    type: int
    required: true
  health_check_endpoint:
    description: "Path smg polls on each worker, starting with C(/)."
    type: str
    required: true
  health_check_interval_secs:
    description: "Seconds between health checks."
    type: int
    required: true
  health_check_timeout_secs:
    description: "Timeout of one health check."
    type: int
    required: true
  health_failure_threshold:
    description: "Failed checks before a worker is unhealthy."
    type: int
    required: true
  health_success_threshold:
    description: "Passed checks before it is healthy again."
    type: int
    required: true
  replicas:
    description: "Each replica's C(name), C(address) and C(port); C(undecided) where its server decided nothing."
    type: list
    elements: dict
    required: true
  extra_flags:
    description: "smg launch flags, name without dashes -> value; true a bare switch, false leaves it out."
    type: dict
    default: {}
  api_key:
    description: "The gateway's API key; here only whether one is set matters."
    type: str
    default: ""
  unit_name:
    description:
      - "The gateway's unit name without C(.service) (C(sglang_router_unit_name)): a name systemd
        accepts, with no C(/) and no unit type's suffix (C(.socket)), as the server's name is checked."
    type: raw
    required: true
"""

RETURN = r"""
flags:
  description: "the flags decided (name without dashes -> value)"
  type: dict
  returned: success
workers:
  description: "the replicas' worker URLs"
  type: list
  returned: success
by_host:
  description: "replica host -> worker URL"
  type: dict
  returned: success
url:
  description: "the gateway as its own host reaches it"
  type: str
  returned: success
version:
  description: "the installed smg's version (its dist-info); empty before the install"
  type: str
  returned: always
argv:
  description: "the arguments after C(smg launch), the key as C(${SGLANG_ROUTER_API_KEY})"
  type: list
  returned: always
not_installed:
  description: "true in check mode when the virtualenv is not there yet"
  type: bool
  returned: success
"""

SETTINGS = {
    "python": {"type": "path", "required": True},
    "host": {"type": "str", "required": True},
    "port": {"type": "int", "required": True},
    "policy": {"type": "str", "required": True},
    "metrics_host": {"type": "str", "required": True},
    "metrics_port": {"type": "int", "required": True},
    "health_check_endpoint": {"type": "str", "required": True},
    "health_check_interval_secs": {"type": "int", "required": True},
    "health_check_timeout_secs": {"type": "int", "required": True},
    "health_failure_threshold": {"type": "int", "required": True},
    "health_success_threshold": {"type": "int", "required": True},
    "replicas": {"type": "list", "elements": "dict", "required": True},
    "extra_flags": {"type": "dict", "default": {}},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "unit_name": {"type": "raw", "required": True},
}


def main() -> None:
    module = AnsibleModule(argument_spec=SETTINGS, supports_check_mode=True)
    params = module.params
    problems = settings_problems(params)
    if problems:
        module.fail_json(msg="\n  - ".join(["The sglang_router settings cannot make a gateway:"] + problems),
                         version="", argv=[])
    result = decided(params)
    python = params["python"]
    if not os.path.exists(python):
        if module.check_mode:
            module.exit_json(changed=False, not_installed=True, version="", argv=[], **result)
        module.fail_json(msg=f"{python} does not exist: smg is not installed in the gateway's virtualenv",
                         version="", argv=[])
    env_flags = {"api-key": KEY_VARIABLE} if params["api_key"] else {}
    rc, out, err = module.run_command([python, "-c", SPEC_SCRIPT], data="[]")
    if rc != 0:
        module.fail_json(msg=f"reading smg's options with {python} failed: {err.strip()[-500:]}", version="", argv=[])
    spec = json.loads(out)
    module.no_log_values.update(hidden_parts(result["flags"]))
    argv, problems = check_flags(spec, result["flags"], env_flags)
    if not problems:
        probe = [("placeholder-not-the-key" if a.startswith("${") else a) for a in argv]
        rc, out, err = module.run_command([python, "-c", SPEC_SCRIPT], data=json.dumps(probe))
        verdict = json.loads(out) if rc == 0 else {"error": err.strip()[-500:]}
        if verdict["error"]:
            problems.append(f"smg {spec['version']}'s own parser refused the command line: {verdict['error']}")
    if problems:
        module.fail_json(msg="\n  - ".join([f"The gateway's flags do not fit smg {spec['version']}:"] + problems),
                         version=spec["version"], argv=[])
    module.exit_json(changed=False, not_installed=False, version=spec["version"], argv=argv, **result)


if __name__ == "__main__":
    main()
