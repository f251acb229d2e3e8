#!/usr/bin/python
"""Ansible module: the SGLang server, converged in one call - settings, flags, files, restart."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_server
short_description: Check the server's settings and flags, write its files verified, start or restart it once
description:
  - Owns the SGLang server on this host end to end, in the manner of C(systemd_service). In order,
    and nothing is changed until every check passed
  - >-
    1. The settings are checked once on every way in (each option and the three flag sources:
    I(profile), the autotune role's C(server_args), I(extra_flags)); messages name the sglang_server
    role's variable of each option (I(port) is C(sglang_server_port)), never a secret's value.
  - 2. This start's tuning is decided from the autotune role's result (I(autotune)) and the replica's
    last answer verdict (I(answers_record)); an untuned start clears the tuned-tactic cache.
  - 3. The effective flags are checked against the installed SGLang's source, and against SGLang's
    own parser where the virtualenv can import it (I(runtime_check)); known renames are translated.
  - 4. How the API key reaches SGLang is decided once - a 0600 YAML file read with C(--config)
    where the release has it, else the 0600 environment file - never the command line.
  - 5. The model directory is checked (I(model_check)).
  - 6. C(/etc/sglang/NAME.env), the key file and C(/etc/systemd/system/NAME.service) are written, a
    changed unit proved with C(systemd-analyze verify) first. Once every check passed and before
    the first write, the service account is made where it is missing (a system user and group, no
    login shell, home C(/var/lib/USER), in C(video)) and proved; an existing one is only added to
    C(video), and one whose primary group is not I(group) is refused.
  - 7. The unit is enabled, started where the server runs here, or restarted once when a file it runs
    on changed after its process started (systemd's start time against the files, so a run killed
    between the write and the restart still restarts). A multi-node replica's nodes start together,
    so there (and with I(service) false) the module only reports what the service would need.
  - I(state) C(checked) stops after 5 (no file, no service; the unit's text is returned for review),
    C(settings) after 2 (no install read). Check mode is honest; C(--diff) masks every environment
    value not declared public.
options:
  state:
    description:
      - C(deployed) - everything; C(checked) - settings, tuning, flags against the install and the
        model, nothing written; C(settings) - the settings and tuning alone, no install read (a
        rolling upgrade's check before the release the flags are meant for is installed).
    type: str
    choices: [deployed, checked, settings]
    default: deployed
  name:
    description: The unit's name without C(.service) (C(sglang_server_unit_name)).
    type: raw
    required: true
  python:
    description: The virtualenv's interpreter the unit runs, taken literally (C(sglang_server_python)).
    type: raw
    required: true
  package_dir:
    description: An SGLang package directory to check the flags against instead of I(python)'s (C(checked) only).
    type: str
  user:
    description: The service account (C(sglang_server_user)), made where missing; required for C(deployed).
    type: raw
  group:
    description: Its group (C(sglang_server_group)); required for C(deployed).
    type: raw
  profile:
    description: The tuned flags, flag name without dashes -> value (C(sglang_server_profile)).
    type: raw
  extra_flags:
    description: Overrides on top (C(sglang_server_extra_flags)); C(false) or C(null) drops a profile flag.
    type: raw
  model_path:
    description: The model directory or Hugging Face id (C(sglang_server_model_path)).
    type: raw
  tp_size:
    description: Tensor parallel size (C(sglang_server_tp_size)).
    type: raw
  host:
    description: The one address the server listens on (C(sglang_server_host)).
    type: raw
  port:
    description: Its port (C(sglang_server_port)).
    type: raw
  served_model_name:
    description: C(sglang_server_served_model_name).
    type: raw
  ready_path:
    description: The readiness URL's path (C(sglang_server_ready_path)).
    type: raw
  ready_timeout:
    description: Seconds the role waits for readiness (C(sglang_server_ready_timeout)); checked here.
    type: raw
  start:
    description: Whether the server runs here - C(auto) (where C(/dev/nvidiactl) exists), true or false (C(sglang_server_start)).
    type: raw
    default: auto
  environment:
    description: The user's variables for the environment file (C(sglang_server_environment)).
    type: raw
  environment_public:
    description: Names in I(environment) whose values C(--diff) may show.
    type: list
    elements: str
    default: []
  nnodes:
    description: Nodes of one replica (C(sglang_server_nnodes)).
    type: raw
  node_rank:
    description: This node's rank (C(sglang_server_node_rank)).
    type: raw
  dist_init_addr:
    description: C(sglang_server_dist_init_addr).
    type: raw
  nccl_socket_ifname:
    description: C(sglang_server_nccl_socket_ifname).
    type: raw
  gloo_socket_ifname:
    description: C(sglang_server_gloo_socket_ifname).
    type: raw
  nccl_ib_disable:
    description: C(sglang_server_nccl_ib_disable).
    type: raw
  nccl_p2p_level:
    description: C(sglang_server_nccl_p2p_level).
    type: raw
  node_group:
    description:
      - The inventory group of this multi-node replica's nodes (C(sglang_server_node_group)). Its nodes
        start and restart together, so with more than one node the module leaves the start to the role.
    type: str
    default: ""
  api_key:
    description: The server's API key (checked, never shown).
    type: str
    default: ""
  hf_token:
    description: The Hugging Face token, as C(HF_TOKEN) in the environment file (never shown).
    type: str
    default: ""
  autotune_cache:
    description: C(off) sets C(SGLANG_FLASHINFER_AUTOTUNE_CACHE=0); C(local) and C(fleet) keep SGLang's cache.
    type: str
    choices: [fleet, local, "off"]
    default: local
  autotune_cache_dir:
    description: C(SGLANG_CACHE_DIR) on the replica; its C(flashinfer/autotune) is removed before an untuned start.
    type: str
    default: ""
  autotune:
    description:
      - The sglang_autotune role's published result (C(sglang_autotune_result)), or C(null) where that
        role did not run. Its C(server_args), with the flags of this start's answer-check fallback,
        are the second flag source; its C(enabled), less an C(untuned) fallback, decides C(tuning).
    type: raw
  autotune_required:
    description: Fail before any change unless I(autotune) holds the role's boolean C(enabled) (the journal proof needs it).
    type: bool
    default: false
  answers_record:
    description: The replica's last answer verdict (JSON), whose C(fallback) this start takes on the install it names.
    type: str
    default: ""
  fallback_args:
    description: The server flags of each answer-check fallback (C(none), C(skip_ops), C(untuned)).
    type: dict
    default: {}
  fallback:
    description: The fallback this start takes whatever the verdict says (after failed answers, the one just taken).
    type: str
    default: ""
  runtime_check:
    description: Also ask SGLang's own parser, run by I(python), where it can be imported (read-only).
    type: bool
    default: true
  model_check:
    description: Check that the model directory holds C(config.json) and every indexed shard at its size (a Hub id is left to SGLang).
    type: bool
    default: true
  service:
    description: Start or restart the unit here; false leaves that to the caller (the fleet's cache push comes first).
    type: bool
    default: true
  restart:
    description: Restart once even when nothing it runs on changed (the fallback after failed answers).
    type: bool
    default: false
  pending:
    description: In check mode, whether an earlier task of this run changes what the server runs on (a new install).
    type: bool
    default: false
  verify:
    description: Prove a changed unit with C(systemd-analyze verify) before it replaces the installed one.
    type: bool
    default: true
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Converge the server (register it - its effective, command and tuning are what the role reads)
  sglang_server:
    name: sglang
    python: /opt/sglang/current/bin/python
    user: sglang
    group: sglang
    profile: {model-path: /models/GLM-5-NVFP4, tp-size: 8, moe-runner-backend: flashinfer_cutlass}
    port: 30000
    api_key: "{{ vault_sglang_api_key }}"
    autotune: "{{ ansible_facts.sglang_autotune_result | default(omit) }}"
  register: sglang_server_validated

- name: The same settings checked against an unpacked release, nothing written
  sglang_server:
    state: checked
    name: sglang
    python: /opt/sglang/current/bin/python
    package_dir: /tmp/sglang-0.5.23/sglang
    profile: {model-path: /models/GLM-5-NVFP4, tp-size: 8}
  check_mode: true
"""

RETURN = r"""
effective:
  description: What the settings come to - flags, host, port, TP size, model path, readiness URL, node rank, nnodes.
  returned: success
  type: dict
tuning:
  description: >-
    This start's tuning - C(venv), C(verdict), C(fallback), C(tuned), C(server_args), C(gate_file), C(gate_edited),
    and C(record_dir), the directory of I(answers_record) where it is missing (else empty): the role makes only that one.
  returned: success
  type: dict
run:
  description: Whether the server runs here.
  returned: success
  type: bool
command:
  description: The argv, and how the API key reaches the server (C(api_key_way), C(api_key_name), C(api_key_file), C(env_flags)).
  returned: success, with SGLang installed and I(state) other than C(settings)
  type: dict
version:
  description: The SGLang release the flags were checked against.
  returned: success, with I(state) other than C(settings)
  type: str
notes:
  description: Renames applied, deprecated flags used, choices that could not be checked.
  returned: success, with I(state) other than C(settings)
  type: list
  elements: str
unit:
  description: The unit's text (it holds no secret).
  returned: success, with SGLang installed and I(state) other than C(settings)
  type: str
account:
  description: The commands that made the service account what it needs (or would, in check mode); [] when it was.
  returned: with I(state) deployed
  type: list
  elements: list
changed_files:
  description: The files written or removed (or that would be, in check mode).
  returned: with I(state) deployed
  type: list
  elements: str
service:
  description: The restart rule's result - C(action) (start, restart, none), C(reason), C(stale), C(reloaded), C(enabled_now), C(invocation_id).
  returned: with I(state) deployed
  type: dict
runs_on:
  description: The files the process runs on besides its unit (environment file, key file, install, gate file).
  returned: with I(state) deployed
  type: list
  elements: str
service_deferred:
  description: The service was left to the caller (a multi-node replica, or I(service) false); C(service) says what it needs.
  returned: with I(state) deployed
  type: bool
pending:
  description: This run changes a file the server runs on (for the caller's service step in check mode).
  returned: with I(state) deployed
  type: bool
not_installed:
  description: SGLang is not installed yet (check mode before the install) - nothing else was done.
  returned: when so
  type: bool
settings_only:
  description: I(state) was C(settings).
  returned: when so
  type: bool
problems:
  description: Every problem found, one per entry.
  returned: failure
  type: list
  elements: str
"""

import os
import shutil
from typing import Any, Optional

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.flag_key import split_key
from ansible.module_utils.service_account import AccountError
from ansible.module_utils.sglang_flag_table import FlagError
from ansible.module_utils.sglang_locate import locate_package
from ansible.module_utils.sglang_model_files import is_hub_id, model_dir_problems
from ansible.module_utils.sglang_runtime_args import check_flags, parser_asker
from ansible.module_utils.sglang_server_files import UnitFiles, converge_files, unit_of
from ansible.module_utils.sglang_settings import (
    FLAG_SOURCES,
    effective,
    secret_env_names,
    server_command,
    server_problems,
)
from ansible.module_utils.sglang_start_tuning import Tuning, server_runs, start_tuning
from ansible.module_utils.systemd_files import FilesError
from ansible.module_utils.systemd_state import ServiceError, converge_service
from ansible.module_utils.systemd_text import UnitError

SETTINGS_FAILED = "The sglang_server settings cannot make a unit systemd accepts:"

# Each setting option and the role variable it is (messages name the variable a user sets).
SETTING_VARIABLES = {option: f"sglang_server_{option}" for option in (
    "profile", "extra_flags", "model_path", "tp_size", "host", "port", "served_model_name", "user", "group",
    "python", "ready_path", "ready_timeout", "start", "environment", "nnodes", "node_rank", "dist_init_addr",
    "nccl_socket_ifname", "gloo_socket_ifname", "nccl_ib_disable", "nccl_p2p_level")}
SETTING_VARIABLES["name"] = "sglang_server_unit_name"


def settings_of(params: dict[str, Any], tuning: Tuning) -> dict[str, Any]:
    """The options given, keyed by the role variable each is, with the secrets and the second flag source."""
    settings = {variable: params[option] for option, variable in SETTING_VARIABLES.items()
                if params[option] is not None}
    settings.update(sglang_server_api_key=params["api_key"], sglang_server_hf_token=params["hf_token"])
    settings[FLAG_SOURCES[1]] = tuning.server_args
    return settings


def hidden_values(settings: dict[str, Any]) -> set[str]:
    """Values never shown: the user's variables that look like secrets, and what follows the separator of
    a refused flag key ('api-key=VALUE', 'api-key VALUE', 'token:VALUE'; split_key), whatever its name."""
    hidden: set[str] = set()
    environment = settings.get("sglang_server_environment")
    hidden.update(str(environment[name]) for name in secret_env_names(environment) if str(environment[name]))
    for source in FLAG_SOURCES:
        flags = settings.get(source)
        if isinstance(flags, dict):
            for key in flags:
                after = split_key(key)[1] if isinstance(key, str) else ""
                # Shorter ones (the 8 of 'tp-size=8') would mask every such string in the output.
                hidden.update(value for value in (after, after.strip()) if len(value) >= 3)
    return hidden


def model_problem(path: Any) -> Optional[str]:
    """The model directory SGLang would load, when it is not whole (a Hub id is left to SGLang)."""
    if not path or is_hub_id(str(path)):
        return None
    problems = model_dir_problems(str(path))
    if not problems:
        return None
    return (f"The model at {path} cannot be loaded: {'; '.join(problems)}. The server was not (re)started. "
            "Run playbooks/model.yml on the node (it fetches and checks the files), or point "
            "sglang_server_model_path at a complete model.")


def clear_tactics(cache_dir: str, check_mode: bool) -> list[str]:
    """An untuned start starts from no tuned tactic (one that corrupted answers persists across restarts)."""
    path = os.path.join(cache_dir, "flashinfer", "autotune") if cache_dir else ""
    if not path or not os.path.lexists(path):
        return []
    if not check_mode:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    return [path]


def runs_on(spec: UnitFiles, command: dict[str, Any], tuning: Tuning) -> list[str]:
    """What the process runs on besides its unit and drop-ins: a change after it started needs a restart."""
    venv = os.path.dirname(os.path.dirname(spec.python))
    return [p for p in (spec.env_path(), command.get("api_key_file") or "", venv, tuning.gate_file) if p]


class Server:
    """One call: decide, check, write, (re)start. Each step fails the module before the next changes anything."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.params = module.params

    def fail(self, msg: str, **extra: Any) -> None:
        self.module.fail_json(msg=msg, changed=extra.pop("changed", False), **extra)

    def tuning(self) -> Tuning:
        params = self.params
        try:
            tuning = start_tuning(str(params["python"] or ""), params["answers_record"], params["fallback_args"],
                                  params["autotune"],
                                  params["autotune_required"] and params["state"] != "settings", params["fallback"])
        except ValueError as exc:
            self.fail(str(exc))
        if tuning.warning:
            self.module.warn(tuning.warning)
        return tuning

    def effective(self, tuning: Tuning) -> dict[str, Any]:
        settings = settings_of(self.params, tuning)
        self.module.no_log_values.update(hidden_values(settings))
        problems = server_problems(settings)
        if problems:
            self.fail("\n  - ".join([SETTINGS_FAILED, *problems]), problems=problems)
        return effective(settings)

    def unit_files(self, checked: Any, command: dict[str, Any], facts: dict[str, Any]) -> UnitFiles:
        params = self.params
        environment = dict(params["environment"] or {}, **facts["environment"])
        return UnitFiles(
            name=str(params["name"]), version=checked.version, user=str(params["user"] or ""),
            group=str(params["group"] or ""), python=str(params["python"]), argv=command["argv"],
            env_flags=command["env_flags"], environment=environment,
            # --diff masks every value of the user's map but those declared public; the role's own are public.
            environment_public=list(params["environment_public"]) + list(facts["environment"]),
            autotune_cache=params["autotune_cache"], hf_token=params["hf_token"], api_key=params["api_key"],
            api_key_way=command["api_key_way"], api_key_name=command["api_key_name"] or "api-key")

    def run(self) -> None:
        params, module = self.params, self.module
        tuning = self.tuning()
        facts = self.effective(tuning)
        published: dict[str, Any] = {"effective": facts, "tuning": tuning.as_dict(),
                                     "run": server_runs(params["start"])}
        if params["state"] == "settings":
            module.exit_json(changed=False, settings_only=True, **published,
                             msg="The settings are checked; the flags were not checked against an install "
                                 "(state settings).")
        package_dir = locate_package(module, params["package_dir"], str(params["python"]))
        if package_dir is None:
            module.exit_json(changed=False, not_installed=True, version="not installed", notes=[], **published,
                             msg="SGLang is not installed yet: check mode cannot validate the flags.")
        env_flags = {"api-key": "SGLANG_SERVER_API_KEY"} if params["api_key"] else {}
        try:
            ask = parser_asker(module.run_command, str(params["python"])) \
                if params["runtime_check"] and not params["package_dir"] else None
            checked = check_flags(package_dir, facts["flags"], env_flags, ask)
        except FlagError as exc:
            self.fail(str(exc), problems=exc.problems, package_dir=package_dir)
        if checked.warning:
            module.warn(checked.warning)
        command = server_command(checked.argv, checked.env_flags, checked.config_flag, bool(params["api_key"]),
                                 str(params["name"]))
        published.update(command=command, version=checked.version, notes=checked.notes, package_dir=package_dir,
                         runtime_parser=checked.runtime_parser)
        if params["model_check"]:
            problem = model_problem(facts["model_path"])
            if problem:
                self.fail(problem, **published)
        spec = self.unit_files(checked, command, facts)
        if params["state"] == "checked":
            try:
                published["unit"] = unit_of(spec)
            except UnitError as exc:
                self.fail("refusing to render the unit: " + "; ".join(exc.problems), problems=exc.problems)
            module.exit_json(changed=False, **published)
        self.deploy(spec, command, tuning, facts, published)

    def deploy(self, spec: UnitFiles, command: dict[str, Any], tuning: Tuning, facts: dict[str, Any],
               published: dict[str, Any]) -> None:
        params, module = self.params, self.module
        if not spec.user or not spec.group:
            self.fail("user and group are required with state deployed (sglang_server_user, sglang_server_group).")
        check_mode = module.check_mode
        try:
            changed = converge_files(spec, module.run_command, check_mode, params["verify"])
        except UnitError as exc:
            self.fail("refusing to render the unit: " + "; ".join(exc.problems), problems=exc.problems,
                      changed_files=[])
        except AccountError as exc:
            self.fail(str(exc), changed=bool(exc.ran), account=exc.ran, changed_files=[])
        except FilesError as exc:
            self.fail(str(exc), changed=bool(exc.written), changed_files=exc.written)
        changed_files, diff, published["unit"], account = changed
        published["account"] = account
        # What the server runs on changed in this run (check mode wrote nothing, so the files cannot tell).
        pending = bool(changed_files) or params["pending"] or tuning.gate_edited
        try:
            changed_files += [] if tuning.tuned else clear_tactics(params["autotune_cache_dir"], check_mode)
        except OSError as exc:
            self.fail(f"clearing the tuned-tactic cache of an untuned start failed: {exc}. The server was not "
                      "(re)started.", changed=bool(changed_files or account), changed_files=changed_files,
                      account=account)
        paths = runs_on(spec, command, tuning)
        done = {"changed_files": changed_files, "unit_path": spec.unit_path(), "pending": pending, "runs_on": paths}
        # A multi-node replica's nodes start and restart together, and the fleet's cache goes to the
        # replica before it starts: there the role's service step acts, and the module only says
        # what a multi-node replica's node needs (the rule in check mode), for its group decision.
        together = facts["nnodes"] > 1 and bool(params["node_group"])
        deferred = together or not params["service"]
        if deferred and not together:
            module.exit_json(changed=bool(changed_files or account), diff=diff, service={}, service_deferred=True,
                             **done, **published)
        try:
            service = converge_service(module.run_command, spec.name, paths, published["run"], params["restart"],
                                       pending and check_mode, check_mode or deferred)
        except ServiceError as exc:
            self.fail(str(exc), changed=bool(changed_files or account), **done, **published)
        if service.diff and not deferred:
            diff.append(service.diff)
        module.exit_json(changed=bool(changed_files or account) or (service.changed and not deferred), diff=diff,
                         service=service.as_dict(), service_deferred=deferred, **done, **published)


def main() -> None:
    settings = {option: dict(type="raw") for option in SETTING_VARIABLES}
    settings.update(name=dict(type="raw", required=True), python=dict(type="raw", required=True),
                    start=dict(type="raw", default="auto"))
    module = AnsibleModule(
        argument_spec=dict(
            settings,
            state=dict(type="str", choices=["deployed", "checked", "settings"], default="deployed"),
            package_dir=dict(type="str"),
            environment_public=dict(type="list", elements="str", default=[]),
            node_group=dict(type="str", default=""),
            api_key=dict(type="str", default="", no_log=True),
            hf_token=dict(type="str", default="", no_log=True),
            autotune_cache=dict(type="str", choices=["fleet", "local", "off"], default="local"),
            autotune_cache_dir=dict(type="str", default=""),
            autotune=dict(type="raw"),
            autotune_required=dict(type="bool", default=False),
            answers_record=dict(type="str", default=""),
            fallback_args=dict(type="dict", default={}),
            fallback=dict(type="str", default=""),
            runtime_check=dict(type="bool", default=True),
            model_check=dict(type="bool", default=True),
            service=dict(type="bool", default=True),
            restart=dict(type="bool", default=False),
            pending=dict(type="bool", default=False),
            verify=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    Server(module).run()


if __name__ == "__main__":
    main()
