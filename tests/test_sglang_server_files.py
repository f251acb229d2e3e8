"""The server's files (module_utils/sglang_server_files.py): the environment file, the key file and the unit.

The sglang_server module writes them through converge_files; it is driven here
with the real systemd-analyze and its directories pointed into tmp_path, so
that every path it takes is exercised: first write, no-op, check mode, a
rejected unit, a refused value, a failed write. ``call`` turns its outcome into
what the module returns (its failure prefix, changed_files, diff, unit). The
installed unit on a real systemd is proved by Molecule (molecule/sglang_server).
"""

from __future__ import annotations

import getpass
import grp
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible.module_utils import service_account as account
from ansible.module_utils import systemd_files as files
from ansible.module_utils import sglang_server_files as server_files
from ansible.module_utils import sglang_router_text as router_text
from ansible.module_utils import sglang_unit as su
from ansible.module_utils.systemd_text import UnitError
from conftest import REPO, tree_digest

SECRET = "sk-unit-0123456789"
TOKEN = "hf_unit_0123456789"
USER = getpass.getuser()
GROUP = grp.getgrgid(os.getgid()).gr_name
# systemd-analyze verify wants the program to exist.
PYTHON = sys.executable


def load_module():
    return server_files


class Exit(Exception):
    def __init__(self, failed: bool, result: dict) -> None:
        super().__init__(result.get("msg", ""))
        self.failed, self.result = failed, result


def run_command(argv):
    assert argv[0] not in account.ACCOUNT_COMMANDS, f"a test must never change this machine's accounts: {argv}"
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout, done.stderr


def params(**overrides) -> dict:
    base = {"name": "sglang", "version": "0.5.23", "user": USER, "group": GROUP,
            "python": PYTHON,
            "argv": ["--model-path", "/m", "--port", "30000", "--config", "/etc/sglang/sglang.secrets.yaml"],
            "env_flags": [], "environment": {"NCCL_IB_DISABLE": "1", "MY_TOKEN": "tok-secret-99"},
            "autotune_cache": "local", "hf_token": TOKEN, "api_key": SECRET, "api_key_way": "config",
            "api_key_name": "api-key", "verify": True, "environment_public": ["NCCL_IB_DISABLE"]}
    return {**base, **overrides}


READ_ACCOUNT = account.read_account


def account_in_place(wanted: account.Account) -> account.Found:
    """This machine's account as the server needs it (its account is never changed by a test)."""
    found = READ_ACCOUNT(wanted)
    return account.Found(found.user_gid, found.group_gid, (("video", 44, (wanted.user,)),))


@pytest.fixture
def target(tmp_path, monkeypatch):
    monkeypatch.setattr(account, "read_account", account_in_place)
    module = load_module()
    monkeypatch.setattr(module, "CONFIG_DIR", str(tmp_path / "etc-sglang"))
    monkeypatch.setattr(module, "UNIT_DIR", str(tmp_path / "units"))
    (tmp_path / "units").mkdir()
    # systemd's other unit directories: a package's units go in "vendor" (the host's are not read).
    (tmp_path / "vendor").mkdir()
    monkeypatch.setattr(files, "UNIT_DIRS", (str(tmp_path / "units"), str(tmp_path / "vendor")))
    return module, tmp_path


def call(module, p: dict, check_mode: bool = False) -> Exit:
    """converge_files, as the sglang_server module reports it."""
    spec = module.UnitFiles(**{k: v for k, v in p.items() if k != "verify"})
    try:
        environment = module.environment_of(spec)
        hidden = {str(v) for k, v in environment.items() if k in module.secrets_of(environment) and str(v)}
        changed, diff, unit, _ = module.converge_files(spec, run_command, check_mode, p["verify"])
    except UnitError as exc:
        return Exit(True, {"msg": "refusing to render the unit: " + "; ".join(exc.problems),
                           "changed_files": [], "no_log_values": set()})
    except files.FilesError as exc:
        return Exit(True, {"msg": str(exc), "changed_files": exc.written, "no_log_values": set()})
    return Exit(False, {"changed": bool(changed), "changed_files": changed, "diff": diff, "unit": unit,
                        "no_log_values": hidden})


def shown(result: dict) -> str:
    """What Ansible would print: the result with no_log values masked, as exit_json does."""
    text = repr({k: v for k, v in result.items() if k != "no_log_values"})
    for value in result["no_log_values"] | {SECRET, TOKEN}:
        text = text.replace(value, "********")
    return text


def test_first_write_then_no_op_with_modes_owners_and_no_secret_shown(target):
    module, tmp = target
    first = call(module, params())
    assert not first.failed and first.result["changed"]
    env, key, unit = (tmp / "etc-sglang" / "sglang.env", tmp / "etc-sglang" / "sglang.secrets.yaml",
                      tmp / "units" / "sglang.service")
    assert sorted(first.result["changed_files"]) == sorted(map(str, (env, key, unit)))
    assert (env.stat().st_mode & 0o777, key.stat().st_mode & 0o777, unit.stat().st_mode & 0o777) == (0o600, 0o600, 0o644)
    assert f'HF_TOKEN="{TOKEN}"' in env.read_text() and 'MY_TOKEN="tok-secret-99"' in env.read_text()
    assert key.read_text() == '{"api-key": "' + SECRET + '"}\n'
    assert '"--config" "/etc/sglang/sglang.secrets.yaml"' in unit.read_text()
    assert first.result["unit"] == unit.read_text()
    # Secrets: hidden in the diff by the module itself, and masked in the rest by no_log.
    assert "tok-secret-99" in first.result["no_log_values"]
    diff = repr(first.result["diff"])
    assert SECRET not in diff and TOKEN not in diff and "tok-secret-99" not in diff
    assert 'NCCL_IB_DISABLE="1"' in diff and "(secret: " in diff
    assert "tok-secret-99" not in shown(first.result)
    again = call(module, params())
    assert (again.failed, again.result["changed"], again.result["changed_files"], again.result["diff"]) == (
        False, False, [], [])


def test_check_mode_reports_every_change_and_writes_nothing(target):
    module, tmp = target
    call(module, params())
    before = tree_digest(tmp)
    check = call(module, params(argv=["--model-path", "/m2"], api_key_way="none"), check_mode=True)
    assert check.result["changed"] and not check.failed
    assert {Path(p).name for p in check.result["changed_files"]} == {"sglang.secrets.yaml", "sglang.service"}
    assert tree_digest(tmp) == before


def test_a_unit_systemd_rejects_replaces_nothing(target, monkeypatch):
    module, tmp = target
    call(module, params())
    before = tree_digest(tmp)
    # A unit systemd refuses: a relative program path in ExecStart= (rendered as asked).
    monkeypatch.setattr(module, "unit_text", lambda *a: su.unit_text(*a).replace(
        f"ExecStart={PYTHON}", "ExecStart=python"))
    failed = call(module, params(argv=["--model-path", "/other"], hf_token="hf_new_token"))
    assert failed.failed
    assert "systemd-analyze verify rejected the new sglang.service" in failed.result["msg"]
    assert "no file was written and the installed unit is unchanged" in failed.result["msg"]
    assert "sglang.service" in failed.result["msg"].split(": ", 1)[1]
    assert tree_digest(tmp) == before


@pytest.mark.parametrize("bad, named", [
    ({"environment": {"X": "a\nExecStartPre=/bin/sh"}}, "sglang_server_environment['X'] contains the control character '\\n'"),
    ({"environment": {"9X": "1"}}, "'9X' is not an environment variable name"),
    ({"argv": ["--served-model-name", "a\rb"]}, "argument contains the control character '\\r'"),
    ({"python": "/opt/my venv/bin/python"}, "the server's Python must be an absolute path"),
    ({"api_key": SECRET + "\u2028"}, "which YAML would not read back unchanged"),
])
def test_a_value_systemd_cannot_take_is_refused_naming_it_and_nothing_written(target, bad, named):
    module, tmp = target
    call(module, params())
    before = tree_digest(tmp)
    failed = call(module, params(**bad))
    assert failed.failed and failed.result["msg"].startswith("refusing to render the unit: ")
    assert named in failed.result["msg"], failed.result["msg"]
    assert SECRET not in failed.result["msg"]
    assert tree_digest(tmp) == before


def test_the_key_file_goes_when_the_key_goes_another_way(target):
    module, tmp = target
    call(module, params())
    moved = call(module, params(api_key_way="environment", env_flags=[["--api-key", "SGLANG_SERVER_API_KEY"]],
                                argv=["--model-path", "/m"]))
    assert not (tmp / "etc-sglang" / "sglang.secrets.yaml").exists()
    assert f'SGLANG_SERVER_API_KEY="{SECRET}"' in (tmp / "etc-sglang" / "sglang.env").read_text()
    assert '"--api-key" ${SGLANG_SERVER_API_KEY}' in (tmp / "units" / "sglang.service").read_text()
    assert SECRET not in (tmp / "units" / "sglang.service").read_text()
    assert SECRET not in repr(moved.result["diff"])


def test_autotune_cache_off_is_in_the_environment(target):
    module, tmp = target
    call(module, params(autotune_cache="off"))
    assert 'SGLANG_FLASHINFER_AUTOTUNE_CACHE="0"' in (tmp / "etc-sglang" / "sglang.env").read_text()


def test_a_write_that_fails_leaves_the_old_file_whole_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "sglang.env"
    path.write_text("old\n")
    os.chmod(path, 0o600)

    def fail(fd):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        files.write(files.Wanted(str(path), "new\n", 0o600, USER, GROUP))
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sglang.env"]


def test_a_secret_file_is_never_readable_by_others_while_written(tmp_path, monkeypatch):
    modes = []
    real_replace = os.replace

    def replace(src, dst):
        modes.append(os.stat(src).st_mode & 0o777)
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", replace)
    files.write(files.Wanted(str(tmp_path / "k.yaml"), "secret\n", 0o600, USER, GROUP, secret=True))
    assert modes == [0o600]


@pytest.mark.parametrize("make", ["directory", "symlink"])
def test_a_path_that_is_not_a_regular_file_is_named(tmp_path, make):
    path = tmp_path / "sglang.env"
    if make == "directory":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="is not a regular file; move it away"):
        files.differences(files.Wanted(str(path), "x\n", 0o600))


def test_mode_and_owner_differences_are_found():
    wanted_text = "x\n"
    import tempfile
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "f"
        path.write_text(wanted_text)
        os.chmod(path, 0o644)
        assert files.differences(files.Wanted(str(path), wanted_text, 0o600, USER, GROUP)) == ["mode"]
        os.chmod(path, 0o600)
        assert files.differences(files.Wanted(str(path), wanted_text, 0o600, USER, GROUP)) == []
        assert files.differences(files.Wanted(str(path), "y\n", 0o600, USER, GROUP)) == ["content"]
        assert files.differences(files.Wanted(str(path), wanted_text, 0o600, "no-such-user-x", GROUP)) == ["owner"]
        assert files.differences(files.Wanted(str(Path(scratch) / "absent"), None)) == []


def test_the_unit_systemd_reads_is_accepted_by_systemd(tmp_path):
    text = su.unit_text("sglang", "0.5.23", "root", "root", "/usr/bin/python3",
                        ["--model-path", "/m", "--served-model-name", "glm 100% $HOME"], [])
    problem = files.unit_problem(run_command, "sglang", text)
    assert problem is None
    assert '"glm 100%% $$HOME"' in text


def test_a_write_that_fails_is_named_with_the_files_that_were_due(target, monkeypatch):
    module, tmp = target
    call(module, params())

    def fail(wanted):
        raise OSError(f"disk full writing {wanted.path}")

    monkeypatch.setattr(files, "write", fail)
    failed = call(module, params(argv=["--model-path", "/other"]))
    assert failed.failed
    assert failed.result["msg"].startswith("writing the files of sglang.service failed: disk full writing ")
    assert failed.result["changed_files"] == [str(tmp / "units" / "sglang.service")]
    assert SECRET not in failed.result["msg"]


HIDDEN_NAMES = {"AUTH": "VAL-AUTH-888", "OPENAI_APIKEY": "VAL-OA-1", "HFTOKEN": "VAL-HF-2", "GITHUB_PAT": "VAL-GH-3",
                "BEARER": "VAL-BE-4", "SESSION_COOKIE": "VAL-SC-5"}


@pytest.mark.parametrize("check_mode", [False, True])
def test_the_diff_masks_every_value_not_declared_public(target, check_mode):
    module, tmp = target
    call(module, params())
    environment = {**HIDDEN_NAMES, "NCCL_IB_DISABLE": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    # HF_TOKEN is declared public by mistake: the token is masked all the same.
    changed = call(module, params(environment=environment, environment_public=[
        "NCCL_IB_DISABLE", "CUDA_DEVICE_ORDER", "HF_TOKEN"]), check_mode)
    assert not changed.failed, changed.result
    (entry,) = [e for e in changed.result["diff"] if e["after_header"].endswith("sglang.env")]
    diff = entry["before"] + entry["after"]
    for name, value in HIDDEN_NAMES.items():
        assert f'{name}="********"\n' in entry["after"] and value not in diff, diff
    assert 'MY_TOKEN="********"\n' in entry["before"] and "tok-secret-99" not in diff  # the old file's too
    assert 'CUDA_DEVICE_ORDER="PCI_BUS_ID"\n' in entry["after"] and TOKEN not in diff


@pytest.mark.parametrize(("name", "option"), [("HF_TOKEN", "hf_token"), ("SGLANG_SERVER_API_KEY", "api_key")])
def test_a_setting_given_twice_is_refused_and_nothing_written(target, name, option):
    module, tmp = target
    call(module, params())
    before = tree_digest(tmp)
    failed = call(module, params(environment={name: "hf_dup_value"}))
    assert failed.failed
    assert failed.result["msg"] == (f"refusing to render the unit: environment sets {name}; set {option} "
                                    "instead (one variable per setting)")
    assert tree_digest(tmp) == before


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_read_only_config_directory_fails_in_check_mode_too(target, check_mode):
    from fs_faults import readonly_mount
    module, tmp = target
    call(module, params())
    conf = tmp / "etc-sglang"
    with readonly_mount(conf):
        before = tree_digest(tmp)
        failed = call(module, params(environment={"NCCL_IB_DISABLE": "0"}), check_mode)
        assert tree_digest(tmp) == before
    assert failed.failed, failed.result
    assert failed.result["msg"] == (
        f"the files of sglang.service cannot be written here: {conf}/sglang.env ({conf} is not writable: "
        "a read-only file system or its permissions). No file was written. Make the directory writable "
        "and re-run.")


SSHD = ("[Unit]\nDescription=OpenBSD Secure Shell server\n\n[Service]\nExecStart=/usr/sbin/sshd -D $SSHD_OPTS\n"
        "Restart=on-failure\n\n[Install]\nWantedBy=multi-user.target\n")


@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
@pytest.mark.parametrize("where", ["units", "vendor"])
def test_a_unit_this_project_did_not_write_is_refused_and_nothing_changes(target, where, check_mode):
    # sglang_server_unit_name=ssh: the admin's /etc/systemd/system/ssh.service, or the package's one.
    module, tmp = target
    (tmp / where / "ssh.service").write_text(SSHD)
    before = tree_digest(tmp)
    failed = call(module, params(name="ssh"), check_mode=check_mode)
    assert failed.failed and failed.result["changed_files"] == []
    unit = tmp / "units" / "ssh.service"
    reason = (f"{unit} exists and this project did not write it (it begins '[Unit]', not '{su.HEADER}', and "
              "its Description= and ExecStart= program are not ours)" if where == "units"
              else f"systemd already has ssh.service from {tmp / 'vendor' / 'ssh.service'}")
    assert failed.result["msg"] == (
        f"refusing to write {unit}: {reason}. sglang_server_unit_name='ssh' names a unit that is not this "
        "project's: ours would override it, and the role would then start or restart it. Set "
        "sglang_server_unit_name to a name of its own (its default), or, if that file is a leftover of this "
        "project, move it away and re-run. Nothing was changed.")
    assert tree_digest(tmp) == before


def test_a_link_at_the_units_path_is_refused_naming_its_target(target):
    module, tmp = target
    (tmp / "vendor" / "ssh.service").write_text(SSHD)
    (tmp / "units" / "sshd.service").symlink_to(tmp / "vendor" / "ssh.service")
    before = tree_digest(tmp)
    failed = call(module, params(name="sshd"))
    assert failed.failed
    assert failed.result["msg"].startswith(
        f"refusing to write {tmp / 'units' / 'sshd.service'}: {tmp / 'units' / 'sshd.service'} is a symbolic link "
        f"to {tmp / 'vendor' / 'ssh.service'}, which writing would replace with a file. "
        "sglang_server_unit_name='sshd' names a unit")
    assert failed.result["msg"].endswith("Nothing was changed.")
    assert tree_digest(tmp) == before


def test_the_gateways_unit_is_not_the_servers_to_replace(target):
    # Our mark is the header of the role that writes the file: another role's unit is refused too.
    module, tmp = target
    (tmp / "units" / "sglang.service").write_text(router_text.unit_text("sglang", "1.13.0", USER, PYTHON, []))
    before = tree_digest(tmp)
    failed = call(module, params())
    assert failed.failed and f"{tmp / 'units' / 'sglang.service'} was written by another role of this project " \
        "(it begins '# Written by the sglang_router role" in failed.result["msg"], failed.result["msg"]
    assert tree_digest(tmp) == before


def test_a_unit_of_ours_from_before_the_header_converges_without_a_refusal(target):
    # The templates before 2026-12-01 began '# Ansible managed': ours where Description= and the program match.
    module, tmp = target
    old = ("# Ansible managed\n# SGLang 0.5.6; flags checked against its source by the sglang_flags module.\n"
           "[Unit]\nDescription=SGLang server\n\n[Service]\n"
           f"ExecStart={PYTHON} -m sglang.launch_server \\\n    \"--model-path\" \"/m\"\n")
    (tmp / "units" / "sglang.service").write_text(old)
    (tmp / "vendor" / "sglang.service").write_text(old)  # an old copy elsewhere is ours too
    done = call(module, params())
    assert not done.failed, done.result["msg"]
    assert (tmp / "units" / "sglang.service").read_text() == done.result["unit"]
    assert call(module, params()).result["changed"] is False
    # Another program under our Description is not ours.
    (tmp / "units" / "sglang.service").write_text(old.replace(f"ExecStart={PYTHON}", "ExecStart=/usr/bin/python3"))
    (tmp / "vendor" / "sglang.service").unlink()
    assert "exists and this project did not write it" in call(module, params()).result["msg"]


def test_an_environment_path_that_is_a_directory_is_refused_before_any_write(target):
    module, tmp = target
    (tmp / "etc-sglang" / "sglang.env").mkdir(parents=True)
    before = tree_digest(tmp)
    refused = call(module, params())
    assert refused.failed and refused.result["changed_files"] == []
    assert refused.result["msg"] == (f"{tmp / 'etc-sglang' / 'sglang.env'} is not a regular file; move it away so "
                                     "that the role can write it. Nothing was changed.")
    assert tree_digest(tmp) == before
