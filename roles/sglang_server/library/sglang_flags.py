#!/usr/bin/python
"""Ansible module: check a profile of SGLang server flags against the installed SGLang."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_flags
short_description: Check SGLang server flags against the installed release (read-only)
description:
  - Finds the installed SGLang package, either from I(package_dir) or from the
    package that I(python) would import, and reads the server's command-line
    flags from its source with Python's AST (the module imports neither SGLang
    nor torch).
  - Understands the three ways SGLang has declared its flags
    (C(parser.add_argument) calls up to 0.5.13; annotated C(ServerArgs) fields
    from 0.5.14; fields split over C(srt/arg_groups/fields/) from 0.5.23).
  - Resolves I(flags) into an argv list in the spelling the installed release
    accepts. Known renames (C(--nsa-*-backend) <-> C(--dsa-*-backend)) are
    translated, with a note. Argparse prefix abbreviations (C(--tp)) are not
    accepted; the canonical spelling is emitted.
  - Fails, listing every problem at once, on unknown flags (with the closest
    valid names), invalid choices (with the valid ones), a value given to a
    switch, a bare switch given to a flag that needs a value, or a flag SGLang
    declares required (C(--model-path)) left out.
  - Where I(python) can import SGLang (a full install), SGLang's own parser is
    asked too, and it leads; see I(runtime_check).
  - Never changes anything.
options:
  package_dir:
    description: The sglang package directory (the folder holding C(srt/)), taken literally (no C($VAR) or C(~)).
    type: str
  python:
    description:
      - Python interpreter of the SGLang virtualenv; used to locate the package
        when I(package_dir) is not given (found, not imported), and to run SGLang's
        own parser (I(runtime_check)). Taken literally.
    type: str
  flags:
    description:
      - The profile, flag name without dashes -> value. C(true) passes a bare
        switch; C(false) or C(null) leaves the flag out; a list gives several
        values (flags taking nargs only); anything else is one value.
    type: dict
    default: {}
  env_flags:
    description:
      - Flags whose value systemd takes from the environment file at start, flag name
        without dashes -> environment variable (C(api-key) -> C(SGLANG_SERVER_API_KEY)). Their
        spelling is checked like I(flags); the value never passes through this module.
    type: dict
    default: {}
  server:
    description:
      - The sglang_server role's settings (variable name -> value, without the API key and the
        token), checked first, every fact once on every way in (C(sglang_settings.py)); then the
        effective flags are checked instead of I(flags), and the result returns C(effective) (flags,
        host, port, TP size, readiness URL) and C(command) (argv, and how the API key reaches the
        server).
    type: dict
  api_key:
    description: With I(server), the server's API key (checked, never shown; it makes C(--api-key) a flag to check).
    type: str
    default: ""
  hf_token:
    description: With I(server), the Hugging Face token (checked, never shown).
    type: str
    default: ""
  runtime_check:
    description:
      - Also ask SGLang's own argument parser, run by I(python) (needs SGLang's dependencies
        there; no GPU; read-only, so in check mode too). Where it can run it leads - a
        disagreement with the static reader is one message, the failure where SGLang's parser
        refuses the flags, a warning where it accepts what the static reader refused.
      - Not done with I(package_dir). Where SGLang cannot be imported (the demo, C(--no-deps)
        installs, CI) the static reader decides, with a note.
    type: bool
    default: true
  autotune:
    description:
      - With I(server), the sglang_autotune role's published result (C(sglang_autotune_result)), or
        C(null) where that role did not run. Its C(server_args), with the flags of this start's
        answer-check fallback, are the second flag source; its C(enabled), less an C(untuned)
        fallback, decides whether this start is tuned (C(tuning)).
    type: raw
  autotune_required:
    description:
      - With I(server), fail before any change unless I(autotune) holds the role's boolean
        C(enabled) (the journal proof checks it: C(sglang_server_check_autotune)).
    type: bool
    default: false
  answers_record:
    description:
      - With I(server), the replica's last answer verdict (JSON), whose C(fallback) this start
        takes when it was measured on the install I(python) runs from. Missing: no fallback.
    type: str
    default: ""
  fallback_args:
    description: With I(server), the server flags of each answer-check fallback (C(none), C(skip_ops), C(untuned)).
    type: dict
    default: {}
  fallback:
    description:
      - With I(server), the answer-check fallback this start takes whatever the verdict says (after
        failed answers, the one just taken); empty - the verdict's, for the install I(python) runs from.
    type: str
    default: ""
  check_installed:
    description:
      - With I(server), C(false) checks the settings and returns C(effective) without reading any
        installed SGLang (no C(command), C(settings_only) true). For a check before the release
        the flags are meant for is installed, such as a rolling upgrade's check of every replica
        before the first leaves the gateway.
    type: bool
    default: true
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Check the GLM-5 profile against the SGLang in the virtualenv
  sglang_flags:
    python: /opt/sglang/current/bin/python
    flags:
      model-path: /models/GLM-5-NVFP4
      tp-size: 8
      quantization: modelopt_fp4
      moe-runner-backend: flashinfer_cutlass
      disable-radix-cache: true
      nsa-prefill-backend: trtllm
  register: sglang_cli

- name: Check the role's settings, then its effective flags (register it: its effective and command are what the role reads)
  sglang_flags:
    python: /opt/sglang/current/bin/python
    server:
      sglang_server_profile: {model-path: /models/GLM-5-NVFP4, tp-size: 8}
      sglang_server_port: 30000
      sglang_server_unit_name: sglang
    api_key: "{{ vault_sglang_api_key }}"
"""

RETURN = r"""
package_dir:
  description: The sglang package directory inspected.
  returned: always
  type: str
version:
  description: SGLang version (dist-info METADATA, else the package's version file).
  returned: success
  type: str
  sample: 0.5.23
argv:
  description: The flags as an argument list, in profile order.
  returned: success
  type: list
  elements: str
  sample: ["--tp-size", "8", "--disable-radix-cache"]
command_line:
  description: I(argv) shell-quoted and joined (shlex.join).
  returned: success
  type: str
  sample: --tp-size 8 --disable-radix-cache
notes:
  description: Renames applied, deprecated flags used, choices that could not be checked.
  returned: success
  type: list
  elements: str
flag_count:
  description: How many flags the installed SGLang defines.
  returned: success
  type: int
env_flags:
  description: I(env_flags) in the installed release's spelling, as [flag, VARIABLE] pairs.
  returned: success
  type: list
  elements: list
  sample: [["--api-key", "SGLANG_SERVER_API_KEY"]]
config_flag:
  description:
    - How this release reads options from a YAML file (C(--config)), or empty where it has no
      such flag; the service role passes the API key that way where it can.
  returned: success
  type: str
  sample: --config
runtime_parser:
  description:
    - What SGLang's own parser said - C(agrees), C(decided) (it accepted what the static reader
      refused), C(not available) (it cannot be imported here), or C(not asked).
  returned: success
  type: str
effective:
  description:
    - With I(server), what the settings come to - flags, host, port, TP size, model path, readiness
      URL, node rank. Register the result (the role registers C(sglang_server_validated)) and read
      C(effective) from it; nothing is published as an injected fact.
  returned: success, with I(server)
  type: dict
command:
  description:
    - With I(server), the argv and how the API key reaches the server (C(api_key_way),
      C(api_key_name), C(api_key_file), C(env_flags)).
  returned: success, with I(server), when SGLang is installed and I(check_installed)
  type: dict
tuning:
  description:
    - With I(server), what this start runs with - C(venv) (the install), C(verdict) (the replica's
      last answer verdict), C(fallback), C(tuned), C(server_args), C(gate_file) and
      C(gate_edited) (this run edits the gate: a restart is due).
  returned: success, with I(server)
  type: dict
run:
  description:
    - With I(server), whether the server runs here - C(sglang_server_start), with C(auto) true
      only where the NVIDIA device node C(/dev/nvidiactl) exists (elsewhere the unit is rendered
      and enabled, not started).
  returned: success, with I(server)
  type: bool
settings_only:
  description: The flags were not checked against an install (I(check_installed) false).
  returned: success, with I(server) and I(check_installed) false
  type: bool
problems:
  description: Every problem found, one per entry.
  returned: failure
  type: list
  elements: str
"""

import inspect
import json
import shlex
from typing import Callable, Optional

from ansible.module_utils import sglang_parser_probe
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_flag_table import FlagError
from ansible.module_utils.sglang_locate import (
    LOCATE_ARGUMENT_SPEC,
    LOCATE_REQUIRED_ONE_OF,
    locate_package,
)
from ansible.module_utils.sglang_runtime_args import RuntimeAnswer, check_flags, parse_answer
from ansible.module_utils.sglang_settings import (
    FLAG_SOURCES,
    SECRET_FLAG_RE,
    effective,
    secret_env_names,
    server_command,
    server_problems,
)
from ansible.module_utils.sglang_start_tuning import Tuning, server_runs, start_tuning

SETTINGS_FAILED = "The sglang_server settings cannot make a unit systemd accepts:"


def parser_asker(module: AnsibleModule) -> Optional[Callable[[list[str]], RuntimeAnswer]]:
    """SGLang's own parser, run by the virtualenv's interpreter (read-only, so in check mode too)."""
    params = module.params
    if not params["runtime_check"] or params["package_dir"]:
        return None
    probe = inspect.getsource(sglang_parser_probe)

    def ask(argv: list[str]) -> RuntimeAnswer:
        rc, out, err = module.run_command([params["python"], "-B", "-c", probe, json.dumps(argv)])
        return parse_answer(rc, out, err)

    return ask


def server_tuning(module: AnsibleModule) -> Tuning:
    """This start's tuning, from the autotune role's result and the replica's last answer verdict."""
    params = module.params
    if FLAG_SOURCES[1] in params["server"]:
        module.fail_json(msg=f"server holds {FLAG_SOURCES[1]}: give the sglang_autotune role's result as "
                         "autotune instead (its server_args are that flag source).", changed=False)
    try:
        tuning = start_tuning(params["python"] or "", params["answers_record"], params["fallback_args"],
                              params["autotune"], params["autotune_required"] and params["check_installed"],
                              params["fallback"])
    except ValueError as exc:
        module.fail_json(msg=str(exc), changed=False)
    if tuning.warning:
        module.warn(tuning.warning)
    return tuning


def server_facts(module: AnsibleModule, tuning: Tuning) -> dict:
    """With ``server``: the settings checked and the effective facts."""
    params = module.params
    settings = dict(params["server"], sglang_server_api_key=params["api_key"],
                    sglang_server_hf_token=params["hf_token"])
    settings[FLAG_SOURCES[1]] = tuning.server_args
    environment = settings.get("sglang_server_environment")
    # The user's variables that look like secrets: never shown (the invocation echoes the options).
    module.no_log_values.update(str(environment[name]) for name in secret_env_names(environment)
                                if str(environment[name]))
    # A refused key such as 'api-key=VALUE': its value is never shown (the invocation echoes the options).
    for source in FLAG_SOURCES:
        flags = settings.get(source)
        if isinstance(flags, dict):
            module.no_log_values.update(
                key.split("=", 1)[1] for key in flags
                if isinstance(key, str) and "=" in key and SECRET_FLAG_RE.search(key.split("=", 1)[0].lower())
                and len(key.split("=", 1)[1]) >= 3)
    problems = server_problems(settings)
    if problems:
        module.fail_json(msg="\n  - ".join([SETTINGS_FAILED, *problems]), problems=problems, changed=False)
    return effective(settings)


def run(module: AnsibleModule) -> None:
    params = module.params
    tuning = server_tuning(module) if params["server"] is not None else None
    server = server_facts(module, tuning) if tuning else None
    flags = server["flags"] if server else params["flags"] or {}
    env_flags = params["env_flags"] or {}
    if server and params["api_key"]:
        env_flags = {"api-key": "SGLANG_SERVER_API_KEY"}
    published = {"effective": server, "tuning": tuning.as_dict(),
                 "run": server_runs(params["server"].get("sglang_server_start", "auto"))} if tuning else {}
    if server and not params["check_installed"]:
        module.exit_json(changed=False, settings_only=True, **published,
                         msg="The settings are checked; the flags were not checked against an install "
                             "(check_installed is false).")
    package_dir = locate_package(module, params["package_dir"], params["python"])
    if package_dir is None:
        module.exit_json(changed=False, not_installed=True, argv=[], command_line="", notes=[],
                         env_flags=[], config_flag="", version="not installed", flag_count=0,
                         **published,
                         msg="SGLang is not installed yet: check mode cannot validate the flags.")
    try:
        checked = check_flags(package_dir, flags, env_flags, parser_asker(module))
    except FlagError as exc:
        module.fail_json(msg=str(exc), problems=exc.problems, package_dir=package_dir, changed=False)
    if checked.warning:
        module.warn(checked.warning)
    if server:
        published["command"] = server_command(
            checked.argv, checked.env_flags, checked.config_flag, bool(params["api_key"]),
            str(params["server"].get("sglang_server_unit_name")))
    module.exit_json(
        changed=False,
        package_dir=package_dir,
        version=checked.version,
        argv=checked.argv,
        command_line=shlex.join(checked.argv),
        notes=checked.notes,
        env_flags=checked.env_flags,
        config_flag=checked.config_flag,
        flag_count=checked.flag_count,
        runtime_parser=checked.runtime_parser,
        **published,
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            LOCATE_ARGUMENT_SPEC,
            flags=dict(type="dict", default={}),
            env_flags=dict(type="dict", default={}),
            server=dict(type="dict"),
            api_key=dict(type="str", default="", no_log=True),
            hf_token=dict(type="str", default="", no_log=True),
            runtime_check=dict(type="bool", default=True),
            check_installed=dict(type="bool", default=True),
            autotune=dict(type="raw"),
            autotune_required=dict(type="bool", default=False),
            answers_record=dict(type="str", default=""),
            fallback_args=dict(type="dict", default={}),
            fallback=dict(type="str", default=""),
        ),
        mutually_exclusive=[("server", "flags"), ("server", "env_flags")],
        required_one_of=LOCATE_REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    run(module)


if __name__ == "__main__":
    main()
