"""A service's account: made where it is missing, proved, and never reshaped where it exists.

A missing account is made as a system user (and its group, where that is missing too)
with no login shell, the home the unit module names and the supplementary groups it
needs (the server's: ``video``, the group of the GPUs' device nodes). An existing account
may be someone else's (``root``, an admin's): its home and shell are left alone, and it is
only added to a supplementary group it is not in. One whose primary group is not the
group asked is refused before anything changes: the unit runs with that group, and an
existing account's primary group is not ours to change. Plain functions the unit modules
call (sglang_server, sglang_router_unit); pytest calls them with made-up account tables.
"""

from __future__ import annotations

import grp
import pwd
import re
from dataclasses import dataclass
from typing import Callable, Optional

SHELL = "/usr/sbin/nologin"
# A plain user or group name (what useradd and groupadd take as it is; never an option).
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,30}[$]?")
ACCOUNT_COMMANDS = ("groupadd", "useradd", "usermod")

Runner = Callable[..., tuple[int, str, str]]


class AccountError(Exception):
    """The account cannot be what the service needs; ``ran`` lists the commands that had run."""

    def __init__(self, message: str, ran: Optional[list[list[str]]] = None) -> None:
        super().__init__(message)
        self.ran = ran or []


@dataclass(frozen=True)
class Account:
    """The account a unit runs as, and the role variables that name it (for messages)."""

    user: str
    group: str
    home: str
    create_home: bool = True
    groups: tuple[str, ...] = ()
    user_variable: str = "user"
    group_variable: str = "group"


@dataclass(frozen=True)
class Found:
    """The account as the host's databases hold it: the primary group ids (None: there is none), and
    for each supplementary group asked, its id and members (None: no such group)."""

    user_gid: Optional[int]
    group_gid: Optional[int]
    groups: tuple[tuple[str, Optional[int], tuple[str, ...]], ...] = ()


def name_problem(variable: str, value: object) -> Optional[str]:
    """A user or group name useradd would misread (an option, a path) or refuse."""
    if value is not None and NAME_RE.fullmatch(str(value)):
        return None
    return f"{variable} must be a plain user or group name (letters, digits, '_', '.', '-'), got {value!r}"


def read_account(account: Account) -> Found:
    """What the host has for the account and its groups, read from its databases (NSS)."""

    def group_entry(name: str) -> tuple[Optional[int], tuple[str, ...]]:
        try:
            entry = grp.getgrnam(name)
        except KeyError:
            return None, ()
        return entry.gr_gid, tuple(entry.gr_mem)

    try:
        user_gid: Optional[int] = pwd.getpwnam(account.user).pw_gid
    except KeyError:
        user_gid = None
    return Found(user_gid, group_entry(account.group)[0],
                 tuple((name, *group_entry(name)) for name in account.groups))


def account_commands(account: Account, found: Found) -> list[list[str]]:
    """The commands that make the account what the unit needs ([] when it is); AccountError when it cannot be."""
    user, group = account.user, account.group
    unchanged = "the account and the service's files were not changed."
    problems = [p for p in (name_problem(account.user_variable, user), name_problem(account.group_variable, group))
                if p]
    if problems:
        raise AccountError(f"{'; '.join(dict.fromkeys(problems))}. Fix the value; {unchanged}")
    missing = [name for name, gid, _ in found.groups if gid is None]
    if missing:
        raise AccountError(
            f"the group {', '.join(missing)} does not exist on this host: {user} must be in it (the GPUs' "
            f"device nodes belong to video). Create it (groupadd --system {missing[0]}) and re-run; {unchanged}")
    if found.user_gid is not None and found.user_gid != found.group_gid:
        has = "does not exist" if found.group_gid is None else f"is another group (id {found.group_gid})"
        raise AccountError(
            f"{account.user_variable}={user} exists with primary group id {found.user_gid}, and "
            f"{account.group_variable}={group} {has}: the service runs as {user}:{group}, and an existing "
            f"account's primary group is not changed here. Set {account.group_variable} to that account's "
            f"primary group, or choose a user name that does not exist yet (the role makes it); {unchanged}")
    commands = []
    if found.group_gid is None:
        commands.append(["groupadd", "--system", group])
    if found.user_gid is None:
        commands.append(["useradd", "--system", "--gid", group]
                        + (["--groups", ",".join(account.groups)] if account.groups else [])
                        + ["--home-dir", account.home, "--create-home" if account.create_home else "--no-create-home",
                           "--shell", SHELL, user])
        return commands
    lacking = [name for name, gid, members in found.groups if user not in members and gid != found.user_gid]
    if lacking:
        commands.append(["usermod", "--append", "--groups", ",".join(lacking), user])
    return commands


def converge_account(account: Account, run: Runner, check_mode: bool,
                     read: Optional[Callable[[Account], Found]] = None) -> list[list[str]]:
    """Make the account, then prove it from the databases; the commands run (or that would, in check mode)."""
    read = read or read_account
    commands = account_commands(account, read(account))
    if check_mode or not commands:
        return commands
    ran: list[list[str]] = []
    for argv in commands:
        rc, _out, err = run(argv)
        if rc != 0:
            raise AccountError(f"{' '.join(argv)} failed (rc {rc}): {err.strip()}. The service's files were "
                               "not changed; fix the account and re-run.", ran)
        ran.append(argv)
    if account_commands(account, read(account)):
        raise AccountError(f"{account.user}:{account.group} is still not the account the service needs after "
                           f"{'; '.join(' '.join(argv) for argv in ran)} (is the user database managed "
                           "elsewhere, e.g. LDAP?). The service's files were not changed.", ran)
    return ran


def account_diff(account: Account, commands: list[list[str]]) -> dict[str, str]:
    """--diff's entry for the account: the commands that change it."""
    header = f"account {account.user}:{account.group}"
    return {"before_header": header, "after_header": header, "before": "",
            "after": "".join(" ".join(argv) + "\n" for argv in commands)}
