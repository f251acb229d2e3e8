#!/usr/bin/python
"""Ansible module: the SGLang unit's current start, or a wait until that start is ready."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_server_state
short_description: Read the SGLang unit's current start, or wait until it is ready
description:
  - Without I(wait), reads C(systemctl show) for the unit and reports whether it runs and
    its invocation ID. Read-only; supports check mode. Whether it needs a restart is
    decided by the systemd_current module (the systemd_files role), which also acts.
  - With I(wait), polls I(url) until it answers 200, for at most I(timeout) seconds,
    and fails as soon as systemd says the start failed (the process exited, the unit
    is restarting or failed). On failure the message names the unit's state and
    ends with the journal of this invocation. Skipped in check mode.
options:
  name:
    description: The unit name without C(.service).
    type: str
    required: true
  wait:
    description: Wait for readiness instead of reading the state.
    type: bool
    default: false
  url:
    description: Readiness URL (with I(wait)).
    type: str
  timeout:
    description: Seconds to wait for readiness (with I(wait)).
    type: int
    default: 5400
  journal_lines:
    description: Journal lines of this invocation to show on failure.
    type: int
    default: 80
  secrets:
    description:
      - Values masked wherever they appear in the result (SGLang logs its arguments, the API
        key among them, and the failure message shows the journal).
    type: list
    elements: str
    default: []
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Read the server's current invocation
  sglang_server_state:
    name: sglang
  register: state

- name: Wait until this start answers
  sglang_server_state:
    name: sglang
    wait: true
    url: http://127.0.0.1:30000/health_generate
    timeout: 5400
"""

RETURN = r"""
running:
  description: The unit is active or activating (not failed, not waiting to restart).
  returned: always
  type: bool
invocation_id:
  description: systemd's InvocationID of the current start (journal field _SYSTEMD_INVOCATION_ID).
  returned: always
  type: str
unit_state:
  description: ActiveState, SubState, Result, exit status and restart count, in words.
  returned: always
  type: str
waited:
  description: Seconds waited for readiness.
  returned: with wait
  type: float
"""

import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_service import start_failure
from ansible.module_utils.systemd_state import SHOW_PROPERTIES, parse_show


def show(module: AnsibleModule, name: str):
    argv = ["systemctl", "show", f"{name}.service"] + [f"--property={p}" for p in SHOW_PROPERTIES]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"systemctl show {name}.service failed: {err.strip()}")
    return parse_show(out)


def journal(module: AnsibleModule, name: str, invocation: str, lines: int) -> str:
    match = [f"_SYSTEMD_INVOCATION_ID={invocation}"] if invocation else ["-u", f"{name}.service"]
    _, out, err = module.run_command(["journalctl", *match, "--no-pager", "-o", "cat",
                                      "-n", str(lines)])
    return out or err


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (the server's URL)
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait(module: AnsibleModule) -> None:
    params = module.params
    name = params["name"]
    first = show(module, name)
    began = time.monotonic()
    while True:
        now = show(module, name)
        failure = start_failure(first, now)
        if failure is None and answers(params["url"]):
            module.exit_json(changed=False, running=True, invocation_id=now.invocation,
                             unit_state=now.describe(), waited=round(time.monotonic() - began, 1))
        waited = time.monotonic() - began
        if failure is None and waited >= params["timeout"]:
            failure = (f"{params['url']} did not answer 200 within {params['timeout']} s "
                       f"(sglang_server_ready_timeout; {now.describe()})")
        if failure is not None:
            time.sleep(1)  # let journald write the last lines of the process that just ended
            text = journal(module, name, first.invocation or now.invocation, params["journal_lines"])
            module.fail_json(msg=f"{name}.service did not become ready: {failure}. Journal of this "
                             f"start (last {params['journal_lines']} lines):\n{text}",
                             running=now.running, invocation_id=now.invocation,
                             unit_state=now.describe(), waited=round(waited, 1))
        time.sleep(min(2.0, max(0.1, params["timeout"] - waited)))


def status(module: AnsibleModule) -> None:
    state = show(module, module.params["name"])
    module.exit_json(changed=False, running=state.running, invocation_id=state.invocation,
                     unit_state=state.describe())


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            wait=dict(type="bool", default=False),
            url=dict(type="str"),
            timeout=dict(type="int", default=5400),
            journal_lines=dict(type="int", default=80),
            secrets=dict(type="list", elements="str", default=[], no_log=True),
        ),
        required_if=[("wait", True, ("url",))],
        supports_check_mode=True,
    )
    if module.params["wait"]:
        if module.check_mode:
            module.exit_json(changed=False, skipped=True, msg="check mode: the server is not started")
        wait(module)
    status(module)


if __name__ == "__main__":
    main()
