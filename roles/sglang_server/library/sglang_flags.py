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
    flags from its source with Python's AST (SGLang and torch are not imported).
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
  - Never changes anything.
options:
  package_dir:
    description: The sglang package directory (the folder holding C(srt/)).
    type: path
  python:
    description:
      - Python interpreter of the SGLang virtualenv; used to locate the package
        when I(package_dir) is not given. The package is found, not imported.
    type: path
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
        without dashes -> environment variable (C(api-key: SGLANG_SERVER_API_KEY)). Their
        spelling is checked like I(flags); the value never passes through this module.
    type: dict
    default: {}
  runtime_check:
    description:
      - Also parse the effective argv with SGLang's own argument parser, run by I(python)
        (needs SGLang's dependencies there; no GPU). The two checks must agree; where the
        static reader cannot read the layout, SGLang's parser decides, with a warning.
      - Not done in check mode or with I(package_dir); where SGLang cannot be imported
        (CI, --no-deps installs) the static reader decides, with a note.
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

- name: Write the unit with the checked flags
  ansible.builtin.template:
    src: sglang.service.j2
    dest: /etc/systemd/system/sglang.service
  vars:
    sglang_args: "{{ sglang_cli.command_line }}"
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
  description: What SGLang's own parser said - agrees, not available, or not asked.
  returned: success
  type: str
problems:
  description: Every problem found, one per entry.
  returned: failure
  type: list
  elements: str
"""

import json
import shlex
from pathlib import Path
from typing import Optional

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_locate import (
    LOCATE_ARGUMENT_SPEC,
    LOCATE_REQUIRED_ONE_OF,
    locate_package,
    sglang_version,
)
from ansible.module_utils.sglang_flags import (
    FlagError,
    extract_flags,
    resolve_profile,
)
from ansible.module_utils.sglang_runtime_args import (
    RUNTIME_CHECK,
    RuntimeAnswer,
    Verdict,
    decide,
    naive_argv,
    parse_answer,
)


def runtime_answer(module: AnsibleModule, argv: list[str]) -> Optional[RuntimeAnswer]:
    """SGLang's own parser on argv, where it may run; None where it is not asked."""
    params = module.params
    if not params["runtime_check"] or params["package_dir"] or module.check_mode:
        return None
    rc, out, err = module.run_command([params["python"], "-c", RUNTIME_CHECK, json.dumps(argv)])
    return parse_answer(rc, out, err)


def run(module: AnsibleModule) -> None:
    params = module.params
    package_dir = locate_package(module, params["package_dir"], params["python"])
    if package_dir is None:
        module.exit_json(changed=False, not_installed=True, argv=[], command_line="", notes=[],
                         env_flags=[], config_flag="", version="not installed", flag_count=0,
                         msg="SGLang is not installed yet: check mode cannot validate the flags.")
    flags = params["flags"] or {}
    table = None
    resolution = None
    static_error: Optional[FlagError] = None
    try:
        table = extract_flags(package_dir)
        resolution = resolve_profile(table, flags, require=True)
    except FlagError as exc:
        static_error = exc
    env_flags = []
    for name, variable in (params["env_flags"] or {}).items():
        spelled = f"--{name}"
        if table is not None:
            try:  # the placeholder only proves the spelling; systemd supplies the value
                spelled = resolve_profile(table, {name: "from-environment"}).argv[0].split("=")[0]
            except FlagError as exc:
                static_error = static_error or exc
        env_flags.append([spelled, variable])

    fallback = naive_argv(flags)
    runtime = runtime_answer(module, (resolution.argv if resolution else fallback)
                             + [item for flag, _ in env_flags for item in (flag, "from-environment")])
    if runtime is None:  # check mode, a bare package directory, or runtime_check=false
        if static_error is not None:
            module.fail_json(msg=str(static_error), problems=static_error.problems,
                             package_dir=package_dir, changed=False)
        verdict = Verdict(resolution.argv, [])
    else:
        verdict = decide(resolution.argv if resolution and static_error is None else None,
                         str(static_error) if static_error else None, table is None, runtime, fallback)
        if verdict.problems:
            problems = (static_error.problems if static_error is not None and not runtime.available
                        else verdict.problems)
            module.fail_json(msg="\n".join(verdict.problems), problems=problems,
                             package_dir=package_dir, changed=False)
    argv = verdict.argv or []
    config = table.get("config") if table is not None else None
    module.exit_json(
        changed=False,
        package_dir=package_dir,
        version=table.version if table is not None else sglang_version(Path(package_dir)),
        argv=argv,
        command_line=shlex.join(argv),
        notes=(resolution.notes if resolution else []) + verdict.notes,
        env_flags=env_flags,
        config_flag=f"--{config.name}" if config is not None and not config.is_switch else "",
        flag_count=len(table) if table is not None else 0,
        runtime_parser=("not asked" if runtime is None else "not available" if not runtime.available
                        else "decided" if table is None else "agrees"),
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            LOCATE_ARGUMENT_SPEC,
            flags=dict(type="dict", default={}),
            env_flags=dict(type="dict", default={}),
            runtime_check=dict(type="bool", default=True),
        ),
        required_one_of=LOCATE_REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    run(module)


if __name__ == "__main__":
    main()
