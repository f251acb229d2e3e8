"""The files a server unit runs from, made what they should be: the environment file, the key file, the unit.

- ``/etc/sglang/NAME.env`` (root, 0600): the user's environment, the role's
  NCCL/Gloo/CUDA variables, ``HF_TOKEN`` and, where the release has no
  ``--config``, the API key;
- ``/etc/sglang/NAME.secrets.yaml`` (the service user's, 0600): the API key
  SGLang reads with ``--config``; removed when the key goes another way;
- ``/etc/systemd/system/NAME.service`` (root, 0644), proved with
  ``systemd-analyze verify`` before it replaces the installed one.

Plain functions the sglang_server module calls; systemd_files does the
writing (verified, owner and mode before the rename, honest check mode).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ansible.module_utils.service_account import Account
from ansible.module_utils.sglang_settings import secret_env_names
from ansible.module_utils.sglang_unit import config_file_text, env_file_text, unit_text
from ansible.module_utils.systemd_files import Runner, Wanted, converge
from ansible.module_utils.systemd_text import UnitError

CONFIG_DIR = "/etc/sglang"
UNIT_DIR = "/etc/systemd/system"

# Set from the module's own options: their values are secrets whatever environment_public says.
SECRET_VARIABLES = frozenset({"HF_TOKEN", "SGLANG_SERVER_API_KEY"})


@dataclass
class UnitFiles:
    """What the files hold: the checked command and the settings that go into the files."""

    name: str
    version: str
    user: str
    group: str
    python: str
    argv: list[str]
    env_flags: list[list[str]] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    environment_public: list[str] = field(default_factory=list)
    autotune_cache: str = "local"
    hf_token: str = ""
    api_key: str = ""
    api_key_way: str = "none"
    api_key_name: str = "api-key"

    def env_path(self) -> str:
        return f"{CONFIG_DIR}/{self.name}.env"

    def key_path(self) -> str:
        return f"{CONFIG_DIR}/{self.name}.secrets.yaml"

    def unit_path(self) -> str:
        return f"{UNIT_DIR}/{self.name}.service"


def environment_of(spec: UnitFiles) -> dict[str, Any]:
    """Everything the environment file holds, secrets included; UnitError when a setting is given twice."""
    environment = dict(spec.environment or {})
    twice = [f"environment sets {name}; set {option} instead (one variable per setting)"
             for name, option, value in (("HF_TOKEN", "hf_token", spec.hf_token),
                                         ("SGLANG_SERVER_API_KEY", "api_key", spec.api_key))
             if name in environment and value]
    if twice:
        raise UnitError(twice)
    if spec.autotune_cache == "off":
        environment["SGLANG_FLASHINFER_AUTOTUNE_CACHE"] = "0"
    if spec.hf_token:
        environment["HF_TOKEN"] = spec.hf_token
    if spec.api_key_way == "environment":
        environment["SGLANG_SERVER_API_KEY"] = spec.api_key
    return environment


def secrets_of(environment: dict[str, Any]) -> frozenset[str]:
    """The names in the environment file whose values are never shown."""
    return frozenset(secret_env_names(environment)) | (SECRET_VARIABLES & set(environment))


def unit_of(spec: UnitFiles) -> str:
    """The unit's text (it holds no secret); UnitError names a value systemd cannot take."""
    return unit_text(spec.name, spec.version, spec.user, spec.group, spec.python, spec.argv, spec.env_flags)


def wanted_files(spec: UnitFiles, environment: dict[str, Any]) -> tuple[Wanted, Wanted, Wanted]:
    """(environment file, key file, unit) as they should be; UnitError names a refused value."""
    env = Wanted(spec.env_path(), env_file_text(spec.name, environment), 0o600)
    key_text: Optional[str] = None
    if spec.api_key_way == "config":
        key_text = config_file_text(spec.api_key_name, spec.api_key)
    key = Wanted(spec.key_path(), key_text, 0o600, spec.user, spec.group, secret=True)
    unit = Wanted(spec.unit_path(), unit_of(spec))
    return env, key, unit


def account_of(spec: UnitFiles) -> Account:
    """The server's account: its home under /var/lib, in video (the GPUs' device nodes)."""
    return Account(spec.user, spec.group, f"/var/lib/{spec.user}", True, ("video",),
                   "sglang_server_user", "sglang_server_group")


def converge_files(spec: UnitFiles, run: Runner, check_mode: bool,
                   verify: bool = True) -> tuple[list[str], list[dict[str, str]], str, list[list[str]]]:
    """Make the account and the three files what they should be: (changed paths, --diff, the unit's
    text, the commands that made the account).

    UnitError names a value that cannot go into them (nothing written); FilesError
    a rejected unit or a failed write; AccountError an account that cannot be made
    right (after every other check, before any write). ``--diff`` shows only the
    values of ``environment_public``; every other value of the environment file is masked.
    """
    environment = environment_of(spec)
    secrets = secrets_of(environment)
    shown = frozenset(spec.environment_public) - secrets
    env, key, unit = wanted_files(spec, environment)
    changed, diff, made = converge([env, key, unit], unit, spec.name, run, check_mode, verify, env, secrets, shown,
                                   name_option="sglang_server_unit_name", account=account_of(spec))
    return changed, diff, unit.text or "", made
