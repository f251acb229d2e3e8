#!/usr/bin/python
"""Ansible module: check the model directory SGLang will load before any (re)start."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_model_dir
short_description: Check that the model directory holds config.json and every indexed shard at its size
description:
  - A Hub repo id (ORG/NAME that is not a directory on this host) is left to SGLang.
  - Otherwise the directory must exist with config.json, and every shard that
    model.safetensors.index.json lists must be present at its size (the store's manifest, or the
    size the shard's safetensors header implies). Fails naming each missing or short file.
  - Reads only; changes nothing.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options:
  path: {description: The server's model path (sglang_server_model_path or its flag)., type: str, required: true}
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Check the model before the server starts
  sglang_model_dir:
    path: /models/nvidia--GLM-5-NVFP4/current
"""

RETURN = r"""
kind: {description: "directory, or hub_id when SGLang fetches it.", returned: always, type: str}
problems: {description: What is missing or short., returned: always, type: list}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_model_files import is_hub_id, model_dir_problems


def main() -> None:
    module = AnsibleModule(argument_spec={"path": {"type": "str", "required": True}}, supports_check_mode=True)
    path = module.params["path"]
    if is_hub_id(path):
        module.exit_json(changed=False, kind="hub_id", problems=[])
    problems = model_dir_problems(path)
    if problems:
        module.fail_json(msg=f"The model at {path} cannot be loaded: {'; '.join(problems)}. The server was not "
                             "(re)started. Run playbooks/model.yml on the node (it fetches and checks the files), "
                             "or point sglang_server_model_path at a complete model.",
                         kind="directory", problems=problems)
    module.exit_json(changed=False, kind="directory", problems=[])


if __name__ == "__main__":
    main()
