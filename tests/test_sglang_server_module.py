"""The sglang_server module: one call checks the settings and flags, writes the files, starts or restarts.

Its plain functions are tested directly; its run() is driven with a small
stand-in for AnsibleModule (params, check mode, run_command: the real
systemd-analyze, and a stand-in systemctl that keeps the unit's state in a dict)
against a real SGLang 0.5.23 package's flag sources, its directories pointed
into tmp_path. The real systemd is Molecule's (molecule/sglang_server).
"""

from __future__ import annotations

import getpass
import grp
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible.module_utils import service_account as account
from ansible.module_utils import sglang_server_files as server_files
from ansible.module_utils import systemd_files
from ansible.module_utils import systemd_state as st
from ansible.module_utils.sglang_start_tuning import Tuning
from conftest import REPO, load_file, tree_digest
from test_playbook_validate import unpack_flag_sources

SECRET = "sk-module-0123456789"
USER = getpass.getuser()
GROUP = grp.getgrgid(os.getgid()).gr_name


SERVER = load_file(REPO / "roles" / "sglang_server" / "library" / "sglang_server.py", "sglang_server_module")


class Exit(Exception):
    def __init__(self, failed: bool, result: dict) -> None:
        super().__init__(result.get("msg", ""))
        self.failed, self.result = failed, result


class Systemd:
    """A stand-in systemctl (the unit's state in a dict); every other command runs for real."""

    def __init__(self) -> None:
        self.active, self.started, self.enabled, self.calls = "inactive", 0.0, False, []

    def __call__(self, argv):
        assert argv[0] not in account.ACCOUNT_COMMANDS, f"a test must never change this machine's accounts: {argv}"
        if argv[0] != "systemctl":
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            return done.returncode, done.stdout, done.stderr
        self.calls.append(argv[1:])
        verb = argv[1]
        if verb == "show":
            started = int((time.monotonic() - (time.time() - self.started)) * 1e6) if self.started else 0
            return 0, (f"LoadState=loaded\nActiveState={self.active}\nSubState=running\nInvocationID=inv{len(self.calls)}\n"
                       f"ExecMainStartTimestampMonotonic={started}\nUnitFileState="
                       f"{'enabled' if self.enabled else 'disabled'}\nFragmentPath=\n"), ""
        if verb in ("start", "restart"):
            self.active, self.started = "active", time.time() + 0.01
        if verb == "enable":
            self.enabled = True
        return 0, "", ""


class StandinModule:
    """The parts of AnsibleModule the module uses (a stand-in, for pytest only)."""

    def __init__(self, params: dict, systemd: Systemd, check_mode: bool = False) -> None:
        self.params, self.check_mode, self.no_log_values, self.warnings = params, check_mode, set(), []
        self.run_command = systemd

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    def fail_json(self, **result):
        raise Exit(True, result)

    def exit_json(self, **result):
        raise Exit(False, result)


def params(package: Path, tmp_path: Path, **overrides) -> dict:
    base = {option: None for option in SERVER.SETTING_VARIABLES}
    base.update({
        "state": "deployed", "name": "sglang", "python": str(venv_python(tmp_path)), "package_dir": str(package),
        "user": USER, "group": GROUP, "profile": {"model-path": "/m", "tp-size": 8, "host": "127.0.0.1",
                                                   "port": 30000}, "extra_flags": {}, "model_path": "/m",
        "tp_size": 8, "host": "127.0.0.1", "port": 30000, "ready_path": "/health_generate", "start": True,
        "environment": {}, "environment_public": [], "node_group": "", "api_key": SECRET, "hf_token": "",
        "autotune_cache": "local", "autotune_cache_dir": str(tmp_path / "cache"), "autotune": None,
        "autotune_required": False, "answers_record": "", "fallback_args": {}, "fallback": "",
        "runtime_check": False, "model_check": False, "service": True, "restart": False, "pending": False,
        "verify": True})
    base.update(overrides)
    return base


def venv_python(tmp_path: Path) -> Path:
    """A virtualenv's interpreter of its own (its folder is watched for changes: the install)."""
    python = tmp_path / "venv" / "bin" / "python"
    if not python.exists():
        python.parent.mkdir(parents=True)
        python.symlink_to(sys.executable)
    return python


READ_ACCOUNT = account.read_account


def account_in_place(wanted: account.Account) -> account.Found:
    """This machine's account as the server needs it (the module never changes the account of the user running pytest)."""
    found = READ_ACCOUNT(wanted)
    return account.Found(found.user_gid, found.group_gid, (("video", 44, (wanted.user,)),))


@pytest.fixture
def box(tmp_path, monkeypatch):
    monkeypatch.setattr(account, "read_account", account_in_place)
    monkeypatch.setattr(server_files, "CONFIG_DIR", str(tmp_path / "etc-sglang"))
    monkeypatch.setattr(server_files, "UNIT_DIR", str(tmp_path / "units"))
    (tmp_path / "units").mkdir()
    return unpack_flag_sources("0.5.23", tmp_path / "tree"), tmp_path, Systemd()


def call(p: dict, systemd: Systemd, check_mode: bool = False) -> Exit:
    with pytest.raises(Exit) as info:
        SERVER.Server(StandinModule(p, systemd, check_mode)).run()
    return info.value


def test_each_option_is_the_role_variable_it_names_in_messages():
    p = {option: None for option in SERVER.SETTING_VARIABLES}
    p.update(port=31000, name="sglang", api_key="k", hf_token="")
    settings = SERVER.settings_of(p, Tuning("", {}, "none", True, {"disable-flashinfer-autotune": True}))
    assert settings == {"sglang_server_port": 31000, "sglang_server_unit_name": "sglang", "sglang_server_api_key": "k",
                        "sglang_server_hf_token": "", "sglang_autotune_result.server_args":
                        {"disable-flashinfer-autotune": True}}


@pytest.mark.parametrize("key", ["api-key=sk-LEAK7", "api-key sk-LEAK7", "api-key\tsk-LEAK7", "token:sk-LEAK7",
                                 "auth/sk-LEAK7"])
def test_values_never_shown(key):
    settings = {"sglang_server_environment": {"WANDB_API_KEY": "wk-123", "PLAIN": "shown"},
                "sglang_server_extra_flags": {key: True, "port": 1, "tp-size=8": True}}
    assert SERVER.hidden_values(settings) == {"wk-123", "sk-LEAK7"}
    assert SERVER.hidden_values({"sglang_server_profile": {"api-key  sk-LEAK7": True}}) == {" sk-LEAK7", "sk-LEAK7"}


def test_an_untuned_start_clears_the_tactic_cache_in_a_real_run_only(tmp_path):
    tactics = tmp_path / "flashinfer" / "autotune"
    tactics.mkdir(parents=True)
    (tactics / "rank_tp0_pp0_dp0.json").write_text("{}")
    assert SERVER.clear_tactics(str(tmp_path), check_mode=True) == [str(tactics)] and tactics.exists()
    assert SERVER.clear_tactics(str(tmp_path), check_mode=False) == [str(tactics)] and not tactics.exists()
    assert SERVER.clear_tactics(str(tmp_path), check_mode=False) == []
    assert SERVER.clear_tactics("", check_mode=False) == []


def test_first_run_writes_and_starts_then_a_rerun_changes_nothing(box):
    package, tmp, systemd = box
    first = call(params(package, tmp), systemd)
    assert not first.failed, first.result
    assert first.result["changed"] and first.result["service"]["action"] == "start"
    assert {Path(p).name for p in first.result["changed_files"]} == {"sglang.env", "sglang.secrets.yaml",
                                                                    "sglang.service"}
    assert first.result["effective"]["ready_url"] == "http://127.0.0.1:30000/health_generate"
    assert first.result["command"]["api_key_way"] == "config" and SECRET not in repr(first.result["unit"])
    assert ["start", "sglang.service"] in systemd.calls and ["enable", "sglang.service"] in systemd.calls
    again = call(params(package, tmp), systemd)
    assert (again.failed, again.result["changed"], again.result["service"]["action"]) == (False, False, "none")


def test_a_unit_name_of_a_packaged_unit_is_refused_before_any_write_or_restart(box, monkeypatch):
    # sglang_server_unit_name=ssh: writing /etc/systemd/system/ssh.service would override the package's
    # sshd unit, and the restart rule would then restart it.
    package, tmp, systemd = box
    (tmp / "vendor").mkdir()
    (tmp / "vendor" / "ssh.service").write_text("[Unit]\nDescription=OpenBSD Secure Shell server\n[Service]\n"
                                                "ExecStart=/usr/sbin/sshd -D\n")
    monkeypatch.setattr(systemd_files, "UNIT_DIRS", (str(tmp / "units"), str(tmp / "vendor")))
    ssh = params(package, tmp, name="ssh")
    before = tree_digest(tmp)
    failed = call(ssh, systemd)
    assert failed.failed and failed.result["changed"] is False
    assert failed.result["msg"].startswith(
        f"refusing to write {tmp / 'units' / 'ssh.service'}: systemd already has ssh.service from "
        f"{tmp / 'vendor' / 'ssh.service'}. sglang_server_unit_name='ssh' names a unit that is not this project's")
    assert failed.result["msg"].endswith("Nothing was changed.")
    assert [argv for argv in systemd.calls if argv[0] in ("enable", "start", "restart", "daemon-reload")] == []
    assert tree_digest(tmp) == before


def test_a_file_changed_after_the_start_restarts_once_even_after_a_killed_run(box):
    package, tmp, systemd = box
    call(params(package, tmp), systemd)
    env = tmp / "etc-sglang" / "sglang.env"
    time.sleep(0.05)
    after = systemd.started + 0.02  # written after the start, as a run killed before its restart leaves it
    os.utime(env, (after, after))
    once = call(params(package, tmp), systemd)
    assert once.result["service"]["action"] == "restart" and once.result["service"]["stale"] == [str(env)]
    assert not once.result["changed_files"]
    assert call(params(package, tmp), systemd).result["service"]["action"] == "none"


def test_check_mode_says_what_would_happen_and_changes_nothing(box):
    package, tmp, systemd = box
    call(params(package, tmp), systemd)
    before, calls = tree_digest(tmp), len(systemd.calls)
    check = call(params(package, tmp, extra_flags={"port": 31000}), systemd, check_mode=True)
    assert not check.failed and check.result["changed"]
    assert check.result["service"]["action"] == "restart" and check.result["pending"]
    assert tree_digest(tmp) == before
    assert [c[0] for c in systemd.calls[calls:]] == ["show"]


@pytest.mark.parametrize("key", ["api-key=sk-LEAK7", "api-key sk-LEAK7", "api-key:sk-LEAK7"])
def test_bad_settings_are_refused_before_anything_changes(box, key):
    package, tmp, systemd = box
    call(params(package, tmp), systemd)
    before, calls = tree_digest(tmp), len(systemd.calls)
    failed = call(params(package, tmp, port=99999, extra_flags={key: True}), systemd)
    assert failed.failed
    assert "sglang_server_port" in failed.result["msg"] and "99999" in failed.result["msg"]
    assert f"key {key[:8] + '...'!r} is not a flag name" in failed.result["msg"]
    assert "leak7" not in repr(failed.result).lower()
    assert tree_digest(tmp) == before and len(systemd.calls) == calls


def test_an_incomplete_model_is_refused_before_anything_changes(box):
    package, tmp, systemd = box
    model = tmp / "model"
    model.mkdir()
    failed = call(params(package, tmp, extra_flags={"model-path": str(model)}, model_check=True), systemd)
    assert failed.failed and failed.result["msg"].startswith(f"The model at {model} cannot be loaded: ")
    assert not (tmp / "etc-sglang").exists() and systemd.calls == []
    # A Hub id is left to SGLang.
    assert call(params(package, tmp, extra_flags={"model-path": "nvidia/GLM-5-NVFP4"}, model_check=True,
                       state="checked"), systemd).result["effective"]["model_path"] == "nvidia/GLM-5-NVFP4"


def test_state_checked_writes_nothing_and_returns_the_unit(box):
    package, tmp, systemd = box
    checked = call(params(package, tmp, state="checked"), systemd)
    assert not checked.failed and not checked.result["changed"]
    assert checked.result["unit"].startswith("# Written by the sglang_server role")
    assert not (tmp / "etc-sglang").exists() and systemd.calls == []


def test_state_settings_reads_no_install(box):
    package, tmp, systemd = box
    settings = call(params(package, tmp, state="settings", package_dir=None, python="/nonexistent/bin/python"),
                    systemd)
    assert not settings.failed and settings.result["settings_only"] and "command" not in settings.result


def test_the_fleet_and_a_multi_node_replica_leave_the_start_to_the_role(box):
    package, tmp, systemd = box
    fleet = call(params(package, tmp, service=False), systemd)
    assert fleet.result["service_deferred"] and fleet.result["service"] == {}
    assert not [c for c in systemd.calls if c[0] != "show"]
    assert fleet.result["runs_on"][0].endswith("sglang.env")
    pair = call(params(package, tmp, nnodes=2, node_rank=0, dist_init_addr="10.0.0.1:5000",
                       nccl_socket_ifname="eth0", node_group="pair"), systemd)
    assert not pair.failed, pair.result
    assert pair.result["service_deferred"] and pair.result["service"]["action"] == "start"
    assert not [c for c in systemd.calls if c[0] != "show"]  # what it needs, said; nothing done


def test_the_restart_rule_in_check_mode_calls_nothing_but_show():
    systemd = Systemd()
    done = st.converge_service(systemd, "sglang", [], True, False, True, check_mode=True)
    assert (done.action, systemd.calls) == ("start", [["show", "sglang.service", *[
        f"--property={p}" for p in st.SHOW_PROPERTIES]]])


class Accounts(Systemd):
    """The stand-in systemctl, and a stand-in user database the account commands change (nothing real is touched)."""

    def __init__(self, users: dict, groups: dict) -> None:
        super().__init__()
        self.users, self.groups, self.account_calls = users, groups, []

    def read(self, wanted: account.Account) -> account.Found:
        video = self.groups.get("video")
        return account.Found(self.users.get(wanted.user), self.groups.get(wanted.group) and self.groups[wanted.group][0],
                             (("video", video[0], tuple(video[1])) if video else ("video", None, ()),))

    def __call__(self, argv):
        if argv[0] not in account.ACCOUNT_COMMANDS:
            return super().__call__(argv)
        self.account_calls.append(argv)
        name = argv[-1]
        if argv[0] == "groupadd":
            self.groups[name] = (990, [])
        elif argv[0] == "useradd":
            self.users[name] = self.groups[argv[argv.index("--gid") + 1]][0]
            self.groups["video"][1].append(name)
        else:
            self.groups["video"][1].append(name)
        return 0, "", ""


def account_box(box, monkeypatch, users: dict, groups: dict):
    package, tmp, _ = box
    accounts = Accounts(users, groups)
    monkeypatch.setattr(account, "read_account", accounts.read)
    return package, tmp, accounts


def test_a_missing_account_is_made_once_shown_in_check_mode_first(box, monkeypatch):
    # The stand-in database lacks this machine's own account, so that the files can be given to it once "made".
    package, tmp, accounts = account_box(box, monkeypatch, {}, {"video": (44, [])})
    p = params(package, tmp)
    dry = call(p, accounts, check_mode=True)
    assert not dry.failed and dry.result["changed"] and accounts.account_calls == [], dry.result
    made = [["groupadd", "--system", GROUP],
            ["useradd", "--system", "--gid", GROUP, "--groups", "video", "--home-dir", f"/var/lib/{USER}",
             "--create-home", "--shell", "/usr/sbin/nologin", USER]]
    assert dry.result["account"] == made and dry.result["diff"][0]["before_header"] == f"account {USER}:{GROUP}"
    assert not (tmp / "etc-sglang").exists()
    first = call(p, accounts)
    assert not first.failed and first.result["account"] == made == accounts.account_calls, first.result
    again = call(p, accounts)
    assert (again.failed, again.result["changed"], again.result["account"]) == (False, False, [])
    assert accounts.account_calls == made


def test_an_existing_account_is_only_added_to_video(box, monkeypatch):
    package, tmp, accounts = account_box(box, monkeypatch, {"root": 0}, {"root": (0, []), "video": (44, [])})
    done = call(params(package, tmp, user="root", group="root"), accounts)
    assert not done.failed, done.result
    assert accounts.account_calls == [["usermod", "--append", "--groups", "video", "root"]]


def test_an_existing_account_with_another_primary_group_is_refused_before_anything_changes(box, monkeypatch):
    package, tmp, accounts = account_box(box, monkeypatch, {"root": 0}, {"root": (0, []), "video": (44, [])})
    done = call(params(package, tmp, user="root", group="sglang"), accounts)
    assert done.failed and not done.result["changed"] and accounts.account_calls == []
    assert "sglang_server_user=root exists with primary group id 0" in done.result["msg"]
    assert "Set sglang_server_group to that account's primary group" in done.result["msg"]
    assert not (tmp / "etc-sglang").exists() and not list((tmp / "units").iterdir())
