#!/usr/bin/python
"""Ansible module: the SGLang server's unit, environment file and API key file, owned whole."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_server_unit
short_description: Write the SGLang server's systemd unit and its files, verified first
description:
  - Owns the files a server unit runs from - C(/etc/sglang/NAME.env) (root, 0600),
    C(/etc/sglang/NAME.secrets.yaml), the API key file SGLang reads with C(--config) (the service
    user's, 0600; removed when the key goes another way), and C(/etc/systemd/system/NAME.service)
    (root, 0644).
  - Renders each from its options with systemd's escaping (C(%) and C($) doubled, every argument
    quoted); control characters are refused naming the value.
  - A changed unit is proved with C(systemd-analyze verify) under its own name first; a unit
    systemd rejects replaces nothing, and no file is written.
  - Each file is replaced through a temporary file in its directory that already has its final
    owner and mode.
  - Check mode and C(--diff) are honest; secrets never appear in the diff or the result.
  - Does not reload systemd or restart the server; the result's C(changed_files) says which files
    changed, for the restart decision.
options:
  name:
    description: The unit's name without C(.service).
    type: str
    required: true
  version:
    description: The SGLang release the flags were checked against (a comment in the unit).
    type: str
    required: true
  user:
    description: The service account the server runs as.
    type: str
    required: true
  group:
    description: The service account's group.
    type: str
    required: true
  python:
    description: The virtualenv's interpreter, run as C(python -m sglang.launch_server).
    type: path
    required: true
  argv:
    description: The checked flags, in the spelling the installed release accepts (sglang_flags' C(argv)).
    type: list
    elements: str
    default: []
  env_flags:
    description: (flag, VARIABLE) pairs systemd fills from the environment file at start.
    type: list
    elements: list
    default: []
  environment:
    description:
      - Variables for the environment file. Values of names that look like secrets (C(*_TOKEN),
        C(*_KEY), ...) are hidden from the output; I(--diff) masks every value not in
        I(environment_public).
    type: dict
    default: {}
  environment_public:
    description:
      - Names in I(environment) whose values I(--diff) may show (the role's own NCCL, Gloo and CUDA
        variables, and C(sglang_server_environment_public)). C(HF_TOKEN) and C(SGLANG_SERVER_API_KEY)
        are never shown.
    type: list
    elements: str
    default: []
  autotune_cache:
    description: C(off) sets C(SGLANG_FLASHINFER_AUTOTUNE_CACHE=0); C(local) and C(fleet) leave SGLang's default.
    type: str
    choices: [fleet, local, "off"]
    default: local
  hf_token:
    description: Hugging Face token, as C(HF_TOKEN) in the environment file.
    type: str
    default: ""
  api_key:
    description: The server's API key.
    type: str
    default: ""
  api_key_way:
    description:
      - C(config) - in the key file, read with C(--config) (I(argv) names the file);
        C(environment) - in the environment file as C(SGLANG_SERVER_API_KEY) for I(env_flags);
        C(none) - no key.
    type: str
    choices: [none, config, environment]
    default: none
  api_key_name:
    description: The key's flag name in the key file (C(api-key)).
    type: str
    default: api-key
  verify:
    description: Prove a changed unit with C(systemd-analyze verify) before it replaces the installed one.
    type: bool
    default: true
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Write the environment file, the API key file and the unit (verified)
  sglang_server_unit:
    name: sglang
    version: 0.5.23
    user: sglang
    group: sglang
    python: /opt/sglang/current/bin/python
    argv: [--model-path, /models/GLM-5-NVFP4, --tp-size, "8", --config, /etc/sglang/sglang.secrets.yaml]
    environment: {NCCL_IB_DISABLE: "1"}
    api_key: "{{ vault_sglang_api_key }}"
    api_key_way: config
  register: sglang_server_files
"""

RETURN = r"""
changed_files:
  description: The files written or removed (or that would be, in check mode).
  returned: always
  type: list
  elements: str
unit:
  description: The unit's text (it holds no secret).
  returned: always
  type: str
unit_path:
  description: Where the unit is installed.
  returned: always
  type: str
problems:
  description: Why a value cannot go into the files.
  returned: failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.systemd_files import FilesError, Wanted, converge
from ansible.module_utils.sglang_settings import secret_env_names
from ansible.module_utils.sglang_unit import config_file_text, env_file_text, unit_text
from ansible.module_utils.systemd_text import UnitError

CONFIG_DIR = "/etc/sglang"
UNIT_DIR = "/etc/systemd/system"


def environment_of(params: dict) -> dict:
    """Everything the environment file holds, secrets included; UnitError when a setting is given twice."""
    environment = dict(params["environment"] or {})
    twice = [f"environment sets {name}; set {option} instead (one variable per setting)"
             for name, option in (("HF_TOKEN", "hf_token"), ("SGLANG_SERVER_API_KEY", "api_key"))
             if name in environment and params[option]]
    if twice:
        raise UnitError(twice)
    if params["autotune_cache"] == "off":
        environment["SGLANG_FLASHINFER_AUTOTUNE_CACHE"] = "0"
    if params["hf_token"]:
        environment["HF_TOKEN"] = params["hf_token"]
    if params["api_key_way"] == "environment":
        environment["SGLANG_SERVER_API_KEY"] = params["api_key"]
    return environment


def wanted_files(params: dict, environment: dict) -> tuple[Wanted, Wanted, Wanted]:
    """(environment file, key file, unit) as they should be; UnitError names a refused value."""
    name = params["name"]
    env = Wanted(f"{CONFIG_DIR}/{name}.env", env_file_text(name, environment), 0o600)
    key_text = None
    if params["api_key_way"] == "config":
        key_text = config_file_text(params["api_key_name"], params["api_key"])
    key = Wanted(f"{CONFIG_DIR}/{name}.secrets.yaml", key_text, 0o600, params["user"], params["group"],
                 secret=True)
    unit = Wanted(f"{UNIT_DIR}/{name}.service",
                  unit_text(name, params["version"], params["user"], params["group"], params["python"],
                            params["argv"], params["env_flags"]))
    return env, key, unit


# Set from the module's own options: their values are secrets whatever environment_public says.
SECRET_VARIABLES = frozenset({"HF_TOKEN", "SGLANG_SERVER_API_KEY"})


def run(module: AnsibleModule) -> None:
    params = module.params
    try:
        environment = environment_of(params)
    except UnitError as exc:
        module.fail_json(msg="refusing to render the unit: " + "; ".join(exc.problems),
                         problems=exc.problems, changed_files=[])
    secrets = frozenset(secret_env_names(environment)) | (SECRET_VARIABLES & set(environment))
    module.no_log_values.update(str(v) for k, v in environment.items() if k in secrets and str(v))
    # --diff shows only the values declared public; every other value of the file is masked.
    shown = frozenset(params["environment_public"]) - secrets
    try:
        env, key, unit = wanted_files(params, environment)
    except UnitError as exc:
        module.fail_json(msg="refusing to render the unit: " + "; ".join(exc.problems),
                         problems=exc.problems, changed_files=[])
    try:
        changed, diff = converge([env, key, unit], unit, params["name"], module.run_command,
                                 module.check_mode, params["verify"], env, secrets, shown)
    except FilesError as exc:
        module.fail_json(msg=str(exc), changed_files=exc.written, unit=unit.text)
    module.exit_json(changed=bool(changed), diff=diff, changed_files=changed, unit=unit.text,
                     unit_path=unit.path)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            version=dict(type="str", required=True),
            user=dict(type="str", required=True),
            group=dict(type="str", required=True),
            python=dict(type="path", required=True),
            argv=dict(type="list", elements="str", default=[]),
            env_flags=dict(type="list", elements="list", default=[]),
            environment=dict(type="dict", default={}),
            environment_public=dict(type="list", elements="str", default=[]),
            autotune_cache=dict(type="str", choices=["fleet", "local", "off"], default="local"),
            hf_token=dict(type="str", default="", no_log=True),
            api_key=dict(type="str", default="", no_log=True),
            api_key_way=dict(type="str", choices=["none", "config", "environment"], default="none"),
            api_key_name=dict(type="str", default="api-key"),
            verify=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    run(module)


if __name__ == "__main__":
    main()
