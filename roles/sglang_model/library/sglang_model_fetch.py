#!/usr/bin/python
"""Ansible module: one Hub repo at one commit, complete and checked, in the node's model store."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_model_fetch
short_description: Fetch a Hugging Face repo at one commit into the node's store, checked against the Hub's tree
description:
  - Resolves I(revision) to its commit (a commit whose folder is complete needs no Hub call), reads
    the Hub's recursive tree (size, LFS sha256, git blob id of every file), and makes
    I(dir)/ORG--NAME/COMMIT hold exactly those files, each checked before it gets its final name.
  - Bytes go to I(dir)/ORG--NAME/.partial/COMMIT/PATH.incomplete and a killed run resumes them with
    HTTP Range. A file that differs from the tree is removed, named, and fetched again next run.
  - The free space is checked against the bytes still needed before any file is fetched.
  - A converged run compares sizes and the recorded digest manifest and downloads nothing;
    I(verify=full) hashes every file again.
  - I(dir)/ORG--NAME/current is switched to COMMIT only once COMMIT is complete.
  - Progress (percent, rate, time left) goes to I(progress_file) (JSON) and I(log_file) while it runs.
  - Runs in the role's virtualenv, where huggingface_hub is pinned.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  repo: {description: The Hub repo id ORG/NAME., type: str, required: true}
  revision: {description: A commit hash (recommended), branch or tag., type: str, default: main}
  dir: {description: The store root on the node's storage., type: path, required: true}
  endpoint: {description: The Hub or a mirror (HF_ENDPOINT)., type: str, default: "https://huggingface.co"}
  token: {description: A Hub read token for gated repos (never printed)., type: str, default: ""}
  verify: {description: cheap (sizes and the manifest) or full (hash every file)., type: str, choices: [cheap, full], default: cheap}
  source: {description: "Empty: the Hub. A directory: another store laid out the same way.", type: path, default: ""}
  keep_free_gb: {description: GiB that must stay free after the fetch., type: float, default: 10}
  progress_file: {description: JSON progress written while the fetch runs., type: path, default: ""}
  log_file: {description: One progress line each 5 s, for tail -f., type: path, default: ""}
  run_id: {description: Written into the progress file so a reader can tell this run from an old one., type: str, default: ""}
  validate_only:
    description: Check the request only (any Python, before the virtualenv exists) and change nothing.
    type: bool
    default: false
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Fetch GLM-5-NVFP4 at a pinned commit
  sglang_model_fetch:
    repo: nvidia/GLM-5-NVFP4
    revision: 0123456789abcdef0123456789abcdef01234567
    dir: /var/lib/sglang-models
  vars:
    ansible_python_interpreter: /opt/sglang-model/venv/bin/python
"""

RETURN = r"""
commit: {description: The commit the revision resolved to., returned: success, type: str}
dir: {description: The commit's folder., returned: success, type: str}
fetched: {description: Files fetched in this run., returned: success, type: list}
refused: {description: Files fetched now that differed from the tree (removed; fetched again next run)., returned: always, type: list}
replaced: {description: Files on disk that differed from the tree (removed and fetched again in this run)., returned: success, type: list}
bytes: {description: Bytes of the whole tree., returned: success, type: int}
bytes_needed: {description: Bytes still to fetch when the run began., returned: success, type: int}
hub_called: {description: Whether the source was asked to resolve the revision., returned: success, type: bool}
seconds: {description: Seconds the fetch and the checks took (not the Hub's resolve and tree)., returned: when files were fetched or checked, type: float}
bytes_fetched: {description: Bytes fetched in this run., returned: when files were fetched or checked, type: int}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.model_fetch import DirSource, FetchFault, Progress, Request, converge
from ansible.module_utils.model_store import input_problems


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "repo": {"type": "str", "required": True},
            "revision": {"type": "str", "default": "main"},
            "dir": {"type": "path", "required": True},
            "endpoint": {"type": "str", "default": "https://huggingface.co"},
            "token": {"type": "str", "default": "", "no_log": True},
            "verify": {"type": "str", "choices": ["cheap", "full"], "default": "cheap"},
            "source": {"type": "path", "default": ""},
            "keep_free_gb": {"type": "float", "default": 10},
            "progress_file": {"type": "path", "default": ""},
            "log_file": {"type": "path", "default": ""},
            "run_id": {"type": "str", "default": ""},
            "validate_only": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    problems = input_problems(p["repo"], p["revision"], p["dir"], p["verify"], p["source"] or "")
    if problems:
        module.fail_json(msg=f"Invalid model request: {'; '.join(problems)}. Nothing was changed.", refused=[])
    if p["validate_only"]:
        module.exit_json(changed=False)
    # Here, not at the top: validate_only runs in the node's Python, before the virtualenv
    # that holds huggingface_hub exists.
    from ansible.module_utils.model_hub import VERSION, HubFault, hub_source
    source = DirSource(p["source"], p["repo"]) if p["source"] else hub_source(p["endpoint"], p["token"], p["repo"])
    progress = Progress("" if module.check_mode else p["progress_file"] or "",
                        "" if module.check_mode else p["log_file"] or "", p["run_id"])
    request = Request(p["repo"], p["revision"], os.path.normpath(p["dir"]), p["verify"] == "full",
                      int(p["keep_free_gb"] * 1024 ** 3), module.check_mode)
    progress.write("starting", f"Resolving {p['repo']}@{p['revision']} and reading its tree from {source.where}.")
    try:
        result = converge(request, source, progress)
    except (FetchFault, HubFault, OSError) as exc:
        progress.end("failed", str(exc))
        module.fail_json(msg=str(exc), refused=[], huggingface_hub=VERSION)
    result["huggingface_hub"] = VERSION
    if result["changed"]:
        result["diff"] = {
            "before_header": f"{result['current']}", "after_header": f"{result['current']}",
            "before": f"{os.readlink(result['current']) if os.path.islink(result['current']) else '(absent)'}\n",
            "after": f"{result['commit']} ({len(result['to_fetch'])} file(s) to fetch, "
                     f"{len(result['to_check'])} to check)\n",
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
