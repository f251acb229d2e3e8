"""The server's service account (module_utils/sglang_account.py): made where missing, never reshaped where it exists.

Plain functions with made-up account tables and a recording runner: nothing here
touches this machine's accounts (Molecule's sglang_server scenario makes the real one).
"""

from __future__ import annotations

import pytest

from ansible.module_utils.sglang_account import (
    AccountError,
    Found,
    account_commands,
    account_diff,
    converge_account,
    read_account,
)

USERADD = ["useradd", "--system", "--gid", "sglang", "--groups", "video", "--home-dir", "/var/lib/sglang",
           "--create-home", "--shell", "/usr/sbin/nologin", "sglang"]


@pytest.mark.parametrize(("found", "commands"), [
    (Found(None, None, 44), [["groupadd", "--system", "sglang"], USERADD]),
    (Found(None, 990, 44), [USERADD]),
    (Found(990, 990, 44, ("sglang",)), []),
    (Found(990, 990, 44, ()), [["usermod", "--append", "--groups", "video", "sglang"]]),
    (Found(44, 44, 44, ()), []),  # video is its primary group
])
def test_the_commands_follow_from_what_exists(found, commands):
    group = "video" if found.user_gid == 44 else "sglang"
    assert account_commands("sglang", group, found) == commands


@pytest.mark.parametrize(("found", "words"), [
    (Found(None, None, None), ["the group video does not exist on this host", "groupadd --system video"]),
    (Found(0, 990, 44), ["sglang_server_user=sglang exists with primary group id 0",
                         "sglang_server_group=sglang is another group (id 990)"]),
    (Found(0, None, 44), ["sglang_server_group=sglang does not exist", "is not changed here"]),
])
def test_what_cannot_be_made_right_is_refused_naming_it(found, words):
    with pytest.raises(AccountError) as info:
        account_commands("sglang", "sglang", found)
    assert all(word in str(info.value) for word in words), str(info.value)
    assert "were not changed" in str(info.value)


class Runner:
    def __init__(self, rc: int = 0, fix: bool = True) -> None:
        self.rc, self.fix, self.calls = rc, fix, []

    def __call__(self, argv):
        self.calls.append(argv)
        return self.rc, "", "useradd: cannot lock /etc/passwd" if self.rc else ""

    def read(self, user: str, group: str) -> Found:
        return Found(990, 990, 44, ("sglang",)) if self.calls and self.fix else Found(None, None, 44)


def test_check_mode_runs_nothing_and_a_real_run_proves_the_account():
    runner = Runner()
    assert converge_account("sglang", "sglang", runner, True, runner.read) == [["groupadd", "--system", "sglang"],
                                                                              USERADD]
    assert runner.calls == []
    assert converge_account("sglang", "sglang", runner, False, runner.read) == runner.calls
    assert converge_account("sglang", "sglang", runner, False, runner.read) == []


def test_a_failed_command_says_what_ran_and_stops():
    runner = Runner(rc=1)
    with pytest.raises(AccountError) as info:
        converge_account("sglang", "sglang", runner, False, runner.read)
    assert "groupadd --system sglang failed (rc 1): useradd: cannot lock /etc/passwd" in str(info.value)
    assert info.value.ran == [] and runner.calls == [["groupadd", "--system", "sglang"]]


def test_an_account_still_wrong_after_the_commands_is_an_error():
    runner = Runner(fix=False)
    with pytest.raises(AccountError) as info:
        converge_account("sglang", "sglang", runner, False, runner.read)
    assert "is still not the account the server needs" in str(info.value) and len(info.value.ran) == 2


def test_read_account_reads_this_machines_databases():
    found = read_account("root", "root")
    assert (found.user_gid, found.group_gid) == (0, 0)
    missing = read_account("no-such-user-here", "no-such-group-here")
    assert (missing.user_gid, missing.group_gid) == (None, None)


def test_the_diff_lists_the_commands():
    assert account_diff("sglang", "sglang", [["groupadd", "--system", "sglang"]])["after"] == "groupadd --system sglang\n"
