#!/usr/bin/python
"""Ansible module: wait a while for a running sglang_model_fetch and say how far it is."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_model_progress
short_description: Wait up to I(wait) seconds for a model fetch, then report its percent, rate and time left
description:
  - Reads the JSON progress file sglang_model_fetch writes once a second. Returns when the run
    named by I(run_id) has ended (done or failed, or its process is gone) or after I(wait) seconds.
  - Reads only; changes nothing.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options:
  progress_file: {description: The fetch's progress file., type: path, required: true}
  run_id: {description: The fetch run to follow., type: str, required: true}
  wait: {description: Seconds to wait at most before reporting., type: int, default: 30}
  jid: {description: "The async job id of the fetch: a job that ended before it wrote progress ends the wait too.", type: str, default: ""}
  async_dir: {description: Where Ansible keeps async job results on this host., type: path, default: ~/.ansible_async}
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Report the fetch's progress
  sglang_model_progress:
    progress_file: /var/lib/sglang-models/.progress/nvidia--GLM-5-NVFP4.json
    run_id: "{{ run_id }}"
"""

RETURN = r"""
finished: {description: Whether the run has ended., returned: always, type: bool}
line: {description: "Percent, rate and time left, or the run's last word.", returned: always, type: str}
state: {description: "starting, running, waiting, done, failed, gone (killed) or ended (job over, no progress).", returned: always, type: str}
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule


def read(path: str, run_id: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("run_id") == run_id else {}


def job_ended(async_dir: str, jid: str) -> bool:
    """Whether Ansible's async job file says the job is over (it holds the module's result then)."""
    if not jid:
        return False
    try:
        with open(os.path.join(os.path.expanduser(async_dir), jid), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and (data.get("finished") == 1 or "started" not in data)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main() -> None:
    module = AnsibleModule(argument_spec={"progress_file": {"type": "path", "required": True},
                                          "run_id": {"type": "str", "required": True},
                                          "wait": {"type": "int", "default": 30},
                                          "jid": {"type": "str", "default": ""},
                                          "async_dir": {"type": "path", "default": "~/.ansible_async"}},
                           supports_check_mode=True)
    p = module.params
    deadline = time.monotonic() + max(p["wait"], 0)
    while True:
        data = read(p["progress_file"], p["run_id"])
        state = str(data.get("state", "starting"))
        if data and state not in ("done", "failed") and not alive(int(data.get("pid", 0))):
            state = "gone"
        elif state not in ("done", "failed") and job_ended(p["async_dir"], p["jid"]):
            state = "ended"
        if state in ("done", "failed", "gone", "ended") or time.monotonic() >= deadline:
            break
        time.sleep(1)
    line = str(data.get("line", "The fetch has not reported yet."))
    if state == "ended":
        line = "The fetch ended before it reported progress; its result follows."
    if state == "gone":
        line = f"The fetch process {data.get('pid')} ended without a word (killed?). Last: {line}"
    module.exit_json(changed=False, finished=state in ("done", "failed", "gone", "ended"), state=state, line=line)


if __name__ == "__main__":
    main()
