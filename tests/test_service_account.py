"""A service's account (systemd_files' module_utils/service_account.py): made where missing, never reshaped where it exists.

Plain functions with made-up account tables and a recording runner: nothing here
touches this machine's accounts (Molecule's sglang_server scenario makes the real one).
"""

from __future__ import annotations

import pytest

from ansible.module_utils.service_account import (
    Account,
    AccountError,
    Found,
    account_commands,
    account_diff,
    converge_account,
    read_account,
)

SERVER = Account("sglang", "sglang", "/var/lib/sglang", True, ("video",), "sglang_server_user", "sglang_server_group")
ROUTER = Account("sglang-router", "sglang-router", "/nonexistent", False, (), "sglang_router_user", "sglang_router_user")
USERADD = ["useradd", "--system", "--gid", "sglang", "--groups", "video", "--home-dir", "/var/lib/sglang",
           "--create-home", "--shell", "/usr/sbin/nologin", "sglang"]


def video(*members: str, gid: int = 44) -> tuple:
    return (("video", gid, members),)


@pytest.mark.parametrize(("found", "commands"), [
    (Found(None, None, video()), [["groupadd", "--system", "sglang"], USERADD]),
    (Found(None, 990, video()), [USERADD]),
    (Found(990, 990, video("sglang")), []),
    (Found(990, 990, video()), [["usermod", "--append", "--groups", "video", "sglang"]]),
])
def test_the_server_account_follows_from_what_exists(found, commands):
    assert account_commands(SERVER, found) == commands


def test_video_as_the_primary_group_counts():
    account = Account("sglang", "video", "/var/lib/sglang", True, ("video",))
    assert account_commands(account, Found(44, 44, video())) == []


def test_the_router_account_has_no_home_and_no_supplementary_group():
    assert account_commands(ROUTER, Found(None, None)) == [
        ["groupadd", "--system", "sglang-router"],
        ["useradd", "--system", "--gid", "sglang-router", "--home-dir", "/nonexistent", "--no-create-home",
         "--shell", "/usr/sbin/nologin", "sglang-router"]]
    assert account_commands(ROUTER, Found(998, 998)) == []


@pytest.mark.parametrize(("account", "found", "words"), [
    (SERVER, Found(None, None, (("video", None, ()),)),
     ["the group video does not exist on this host", "groupadd --system video"]),
    (SERVER, Found(0, 990, video()), ["sglang_server_user=sglang exists with primary group id 0",
                                      "sglang_server_group=sglang is another group (id 990)",
                                      "Set sglang_server_group to that account's primary group"]),
    (SERVER, Found(0, None, video()), ["sglang_server_group=sglang does not exist", "is not changed here"]),
    (ROUTER, Found(0, None), ["sglang_router_user=sglang-router exists with primary group id 0"]),
])
def test_what_cannot_be_made_right_is_refused_naming_it(account, found, words):
    with pytest.raises(AccountError) as info:
        account_commands(account, found)
    assert all(word in str(info.value) for word in words), str(info.value)
    assert "were not changed" in str(info.value)


class Runner:
    def __init__(self, rc: int = 0, fix: bool = True) -> None:
        self.rc, self.fix, self.calls = rc, fix, []

    def __call__(self, argv):
        self.calls.append(argv)
        return self.rc, "", "useradd: cannot lock /etc/passwd" if self.rc else ""

    def read(self, account: Account) -> Found:
        return Found(990, 990, video("sglang")) if self.calls and self.fix else Found(None, None, video())


def test_check_mode_runs_nothing_and_a_real_run_proves_the_account():
    runner = Runner()
    assert converge_account(SERVER, runner, True, runner.read) == [["groupadd", "--system", "sglang"], USERADD]
    assert runner.calls == []
    assert converge_account(SERVER, runner, False, runner.read) == runner.calls
    assert converge_account(SERVER, runner, False, runner.read) == []


def test_a_failed_command_says_what_ran_and_stops():
    runner = Runner(rc=1)
    with pytest.raises(AccountError) as info:
        converge_account(SERVER, runner, False, runner.read)
    assert "groupadd --system sglang failed (rc 1): useradd: cannot lock /etc/passwd" in str(info.value)
    assert info.value.ran == [] and runner.calls == [["groupadd", "--system", "sglang"]]


def test_an_account_still_wrong_after_the_commands_is_an_error():
    runner = Runner(fix=False)
    with pytest.raises(AccountError) as info:
        converge_account(SERVER, runner, False, runner.read)
    assert "is still not the account the service needs" in str(info.value) and len(info.value.ran) == 2


def test_read_account_reads_this_machines_databases():
    found = read_account(Account("root", "root", "/root", False, ("root",)))
    assert (found.user_gid, found.group_gid, found.groups[0][:2]) == (0, 0, ("root", 0))
    missing = read_account(Account("no-such-user-here", "no-such-group-here", "/x", False, ("no-such-group-here",)))
    assert (missing.user_gid, missing.group_gid, missing.groups) == (None, None, (("no-such-group-here", None, ()),))


def test_the_diff_lists_the_commands():
    assert account_diff(SERVER, [["groupadd", "--system", "sglang"]])["after"] == "groupadd --system sglang\n"


@pytest.mark.parametrize("name", ["-rf", "../etc", "a b", "", "root\n", "x" * 40])
def test_a_name_useradd_would_misread_is_refused_before_any_command(name):
    account = Account(name, "sglang", "/var/lib/x", True, (), "sglang_router_user", "sglang_router_user")
    runner = Runner()
    with pytest.raises(AccountError) as info:
        converge_account(account, runner, False, runner.read)
    assert f"sglang_router_user must be a plain user or group name (letters, digits, '_', '.', '-'), got {name!r}" \
        in str(info.value)
    assert runner.calls == []
