"""The server's service account: made where it is missing, proved, and never reshaped where it exists.

A missing account is made as a system group and user with no login shell, its home
``/var/lib/USER`` and a place in the group that owns the GPUs' device nodes (``video``).
An existing account may be someone else's (``root``, an admin's): its home and shell are
left alone, and it is only added to ``video`` where it is not in it. One whose primary
group is not the group asked is refused before anything changes: the server would run
with a group the files are not given to, and changing an account's primary group is not
ours to do. Plain functions the sglang_server module calls; pytest calls them with
made-up account tables.
"""

from __future__ import annotations

import grp
import pwd
from dataclasses import dataclass
from typing import Callable, Optional

GPU_GROUP = "video"
SHELL = "/usr/sbin/nologin"
ACCOUNT_COMMANDS = ("groupadd", "useradd", "usermod")

Runner = Callable[..., tuple[int, str, str]]


class AccountError(Exception):
    """The account cannot be what the server needs; ``ran`` lists the commands that had run."""

    def __init__(self, message: str, ran: Optional[list[list[str]]] = None) -> None:
        super().__init__(message)
        self.ran = ran or []


@dataclass(frozen=True)
class Found:
    """The account as the host's user and group databases hold it (None: there is none)."""

    user_gid: Optional[int]
    group_gid: Optional[int]
    gpu_gid: Optional[int]
    gpu_members: tuple[str, ...] = ()


def home_of(user: str) -> str:
    return f"/var/lib/{user}"


def read_account(user: str, group: str) -> Found:
    """What the host has for ``user``, ``group`` and the GPUs' group, read from its databases (NSS)."""

    def gid(name: str) -> Optional[int]:
        try:
            return grp.getgrnam(name).gr_gid
        except KeyError:
            return None

    try:
        user_gid: Optional[int] = pwd.getpwnam(user).pw_gid
    except KeyError:
        user_gid = None
    try:
        members = tuple(grp.getgrnam(GPU_GROUP).gr_mem)
    except KeyError:
        members = ()
    return Found(user_gid, gid(group), gid(GPU_GROUP), members)


def in_gpu_group(user: str, found: Found) -> bool:
    return user in found.gpu_members or (found.user_gid is not None and found.user_gid == found.gpu_gid)


def account_commands(user: str, group: str, found: Found) -> list[list[str]]:
    """The commands that make the account what the server needs ([] when it is); AccountError when it cannot be."""
    if found.gpu_gid is None:
        raise AccountError(
            f"the group {GPU_GROUP} does not exist on this host: the service account joins it because the "
            f"GPUs' device nodes belong to it. Create it (groupadd --system {GPU_GROUP}) and re-run; the "
            "account and the server's files were not changed.")
    if found.user_gid is not None and found.user_gid != found.group_gid:
        has = "does not exist" if found.group_gid is None else f"is another group (id {found.group_gid})"
        raise AccountError(
            f"sglang_server_user={user} exists with primary group id {found.user_gid}, and "
            f"sglang_server_group={group} {has}: the server's files go to {user}:{group}, and an "
            "existing account's primary group is not changed here. Set sglang_server_group to that "
            "account's primary group, or choose a user name that does not exist yet (the role makes it); "
            "the account and the server's files were not changed.")
    commands = []
    if found.group_gid is None:
        commands.append(["groupadd", "--system", group])
    if found.user_gid is None:
        commands.append(["useradd", "--system", "--gid", group, "--groups", GPU_GROUP, "--home-dir",
                         home_of(user), "--create-home", "--shell", SHELL, user])
    elif not in_gpu_group(user, found):
        commands.append(["usermod", "--append", "--groups", GPU_GROUP, user])
    return commands


def converge_account(user: str, group: str, run: Runner, check_mode: bool,
                     read: Optional[Callable[[str, str], Found]] = None) -> list[list[str]]:
    """Make the account, then prove it from the databases; the commands run (or that would, in check mode)."""
    read = read or read_account
    commands = account_commands(user, group, read(user, group))
    if check_mode or not commands:
        return commands
    ran: list[list[str]] = []
    for argv in commands:
        rc, _out, err = run(argv)
        if rc != 0:
            raise AccountError(f"{' '.join(argv)} failed (rc {rc}): {err.strip()}. The server's files were "
                               "not changed; fix the account and re-run.", ran)
        ran.append(argv)
    if account_commands(user, group, read(user, group)):
        raise AccountError(f"{user}:{group} is still not the account the server needs after "
                           f"{'; '.join(' '.join(argv) for argv in ran)} (is the user database managed "
                           "elsewhere, e.g. LDAP?). The server's files were not changed.", ran)
    return ran


def account_diff(user: str, group: str, commands: list[list[str]]) -> dict[str, str]:
    """--diff's entry for the account: the commands that change it."""
    return {"before_header": f"account {user}:{group}", "after_header": f"account {user}:{group}",
            "before": "", "after": "".join(" ".join(argv) + "\n" for argv in commands)}
