"""A unit's files on the target: compared, verified and replaced whole.

The unit modules (sglang_server, sglang_router_unit) decide the text of
each file; this file compares it with what is there, proves a unit with systemd before it
can replace the installed one, and writes each file through a temporary file
in the same directory that already has its final owner and mode, renamed over
the old one: a reader sees the old file or the new one, and a secret file is
never readable by others, not even for a moment. Standard library only.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ansible.module_utils.service_account import Account, account_diff, converge_account

# (argv) -> (rc, stdout, stderr), as AnsibleModule.run_command returns.
Runner = Callable[[list[str]], tuple[int, str, str]]

# Where systemd finds a service besides the file we write: the admin's, runtime units, local
# installs and packages. A name already there is another unit, which ours would override.
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
             "/usr/lib/systemd/system", "/lib/systemd/system")
# The first line of what a role of this project writes (sglang_unit.HEADER, sglang_router_text.HEADER,
# gpu_host's modules-load file): the mark of a file we wrote, where it begins what we write now.
MARK_RE = re.compile(r"# (Written|Managed) by the [a-z_]+ role\b")


@dataclass(frozen=True)
class Wanted:
    """One file as it should be: ``text`` None means absent."""

    path: str
    text: Optional[str]
    mode: int = 0o644
    owner: str = "root"
    group: str = "root"
    secret: bool = False


def read_text(path: str) -> Optional[str]:
    """The file's text, or None where there is none (a directory or a device is an error)."""
    target = Path(path)
    if not target.exists() and not target.is_symlink():
        return None
    if target.is_symlink() or not target.is_file():
        raise OSError(f"{path} is not a regular file; move it away so that the role can write it")
    return target.read_text(encoding="utf-8", errors="surrogateescape")


def ids(owner: str, group: str) -> Optional[tuple[int, int]]:
    """(uid, gid), or None where the account does not exist (yet: check mode before a first run)."""
    try:
        return pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid
    except KeyError:
        return None


def differences(wanted: Wanted) -> list[str]:
    """What differs between the file and ``wanted``: 'content', 'mode', 'owner'; [] when equal."""
    current = read_text(wanted.path)
    if wanted.text is None:
        return ["content"] if current is not None else []
    if current != wanted.text:
        return ["content"]
    found = os.stat(wanted.path)
    reasons = []
    if found.st_mode & 0o7777 != wanted.mode:
        reasons.append("mode")
    if ids(wanted.owner, wanted.group) != (found.st_uid, found.st_gid):
        reasons.append("owner")
    return reasons


def write(wanted: Wanted) -> None:
    """Replace (or remove) the file; the temporary file has its final owner and mode first."""
    if wanted.text is None:
        if read_text(wanted.path) is not None:
            os.unlink(wanted.path)
        return
    account = ids(wanted.owner, wanted.group)
    if account is None:
        raise OSError(f"cannot give {wanted.path} to {wanted.owner}:{wanted.group}: no such user or "
                      "group (the account must exist before its files are written)")
    directory = os.path.dirname(wanted.path)
    fd, temporary = tempfile.mkstemp(prefix=".sglang-", dir=directory)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
            os.fchown(handle.fileno(), *account)
            os.fchmod(handle.fileno(), wanted.mode)
            handle.write(wanted.text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, wanted.path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def unit_problem(run: Runner, name: str, text: str) -> Optional[str]:
    """What ``systemd-analyze verify`` says against the unit, or None when systemd accepts it.

    It reads the unit under its own name, so the candidate is written as
    ``NAME.service`` into a temporary directory and verified there. Warnings
    about other units (the host's own) are not the candidate's problem; a line
    naming the candidate is.
    """
    with tempfile.TemporaryDirectory(suffix=".sglang-unit") as scratch:
        candidate = Path(scratch) / f"{name}.service"
        candidate.write_text(text, encoding="utf-8")
        rc, _out, err = run(["systemd-analyze", "verify", str(candidate)])
    mine = [line for line in err.splitlines() if f"{name}.service" in line]
    if rc != 0 or mine:
        return "\n".join(mine) or err.strip() or f"systemd-analyze verify exited {rc}"
    return None


def diff_entry(wanted: Wanted, before: Optional[str]) -> dict[str, str]:
    """One --diff entry; a secret file shows that it changes, never what it holds."""
    if wanted.secret:
        hidden = "(secret: {} bytes, not shown)\n"
        return {"before_header": wanted.path, "after_header": wanted.path,
                "before": "" if before is None else hidden.format(len(before)),
                "after": "" if wanted.text is None else hidden.format(len(wanted.text))}
    return {"before_header": wanted.path, "after_header": wanted.path,
            "before": before or "", "after": wanted.text or ""}


def mask_env(text: Optional[str], secret_names: set[str], shown_names: Optional[set[str]] = None) -> str:
    """An EnvironmentFile's text with the values of ``secret_names`` replaced by ********.

    With ``shown_names``, every value except theirs is replaced (the old file's too).
    """
    lines = []
    for line in (text or "").splitlines(keepends=True):
        key = line.split("=", 1)[0]
        hidden = key not in shown_names if shown_names is not None else key in secret_names
        lines.append(f'{key}="********"\n' if "=" in line and hidden else line)
    return "".join(lines)


def unwritable(path: str) -> Optional[str]:
    """The directory (or file) that keeps ``path`` from being written here, or None."""
    probe = path if os.path.lexists(path) else os.path.dirname(path)
    while not os.path.lexists(probe) and probe != os.path.dirname(probe):
        probe = os.path.dirname(probe)
    directory = probe if os.path.isdir(probe) else os.path.dirname(probe)
    for candidate in dict.fromkeys([directory, probe]):
        if not os.access(candidate, os.W_OK):
            return candidate
    return None


def first_line(text: str) -> str:
    return text.split("\n", 1)[0]


def directive(text: str, key: str) -> Optional[str]:
    """The value of the first ``KEY=`` line (a unit's ``Description=``), or None."""
    return next((line[len(key) + 1:].strip() for line in text.splitlines() if line.startswith(f"{key}=")), None)


def exec_program(text: str) -> Optional[str]:
    """The program of a unit's first ``ExecStart=``, or None."""
    words = (directive(text, "ExecStart") or "").split()
    return words[0] if words else None


def ours(found: str, wanted: str) -> bool:
    """Whether ``found`` is a file this project wrote, where ``wanted`` is what it writes there now.

    Our mark is the first line of ``wanted`` where that is a role's header (MARK_RE): a file that
    begins with it was written by the same role, one with another role's header by that role. A
    unit without a header (gpu_host's, and the server's and gateway's before 2026-12-01, begin
    with '# Ansible managed', which any playbook writes) is ours only where it has our
    ``Description=`` and runs our program.
    """
    mark, theirs = first_line(wanted), first_line(found)
    if MARK_RE.match(theirs):  # written by a role of ours: the same role, or another one's file
        return theirs == mark
    description, program = directive(wanted, "Description"), exec_program(wanted)
    return (description is not None and program is not None
            and directive(found, "Description") == description and exec_program(found) == program)


def not_ours(path: str, wanted: str) -> Optional[str]:
    """Why the file at ``path`` is not ours to replace with ``wanted``, or None (absent, or ours)."""
    if os.path.islink(path):
        return f"{path} is a symbolic link to {os.readlink(path)}, which writing would replace with a file"
    if not os.path.lexists(path):
        return None
    if not os.path.isfile(path):
        return f"{path} is not a regular file"
    found = read_text(path) or ""
    if ours(found, wanted):
        return None
    theirs, mark = first_line(found)[:120], first_line(wanted)
    if MARK_RE.match(theirs):
        return f"{path} was written by another role of this project (it begins {theirs!r}, not {mark!r})"
    why = [f"it begins {theirs!r}"] + ([f"not {mark!r}"] if MARK_RE.match(mark) else [])
    if directive(wanted, "Description") is not None:
        why.append("and its Description= and ExecStart= program are not ours")
    return f"{path} exists and this project did not write it ({', '.join(why)})"


def unit_owner_problem(name: str, path: str, wanted: str, option: str,
                       unit_dirs: Optional[list[str]] = None) -> Optional[str]:
    """A refusal when ``NAME.service`` at ``path`` would replace or override a unit this project did
    not write: a file there that is not ours, or a unit of that name in another of ``unit_dirs``
    (UNIT_DIRS; systemd's search path where the caller has it). None when the unit is ours to write.

    Files only, no systemctl: a converged unit (``path`` already holds ``wanted``) costs one read.
    """
    if os.path.isfile(path) and not os.path.islink(path) and read_text(path) == wanted:
        return None
    reasons = [reason for reason in [not_ours(path, wanted)] if reason]
    here = os.path.realpath(os.path.dirname(path))
    for directory in dict.fromkeys(os.path.realpath(d) for d in (unit_dirs or UNIT_DIRS)):
        other = os.path.join(directory, f"{name}.service")
        if directory != here and os.path.lexists(other) and not_ours(other, wanted):
            reasons.append(f"systemd already has {name}.service from {other}")
    if not reasons:
        return None
    return (f"refusing to write {path}: {'; '.join(reasons)}. {option}={name!r} names a unit that is not this "
            f"project's: ours would override it, and the role would then start or restart it. Set {option} to a "
            "name of its own (its default), or, if that file is a leftover of this project, move it away and "
            "re-run. Nothing was changed.")


def file_owner_problem(path: str, wanted: str, option: str) -> Optional[str]:
    """A refusal when the file at ``path`` (not a unit: a modules-load file) is a link or a file
    this project did not write, naming ``option``; None when it is absent or ours."""
    reason = not_ours(path, wanted)
    if reason is None:
        return None
    return (f"refusing to write {path}: {reason}. {option}={path!r} names a file that is not this project's: "
            f"writing ours would replace it. Set {option} to a file of its own (its default), or, if that file is "
            "a leftover of this project, move it away and re-run. Nothing was changed.")


class FilesError(Exception):
    """The files could not be read, the unit was rejected, or a write failed; ``written`` lists
    the paths that were due when it happened (empty before any write)."""

    def __init__(self, message: str, written: Optional[list[str]] = None) -> None:
        super().__init__(message)
        self.written = written or []


def converge(files: list[Wanted], unit: Wanted, name: str, run: Runner, check_mode: bool,
             verify: bool = True, env: Optional[Wanted] = None,
             secret_names: frozenset[str] = frozenset(),
             shown_names: Optional[frozenset[str]] = None,
             name_option: str = "the unit's name",
             account: Optional[Account] = None) -> tuple[list[str], list[dict[str, str]], list[list[str]]]:
    """Make ``files`` (``unit`` and ``env`` among them) what they should be: (changed paths, --diff,
    the commands that made ``account``).

    A ``unit`` this project did not write (a file there without our mark, or a unit of ``name``
    elsewhere in systemd's directories: unit_owner_problem, naming ``name_option``) is refused
    first. What differs is found next; a changed ``unit`` is verified with systemd before anything is
    written, so a rejected unit writes nothing. ``env``'s diff hides the values of
    ``secret_names`` (with ``shown_names``: of every name but those). In check mode nothing is
    written, but a file that could not be written fails as the real run would. FilesError says
    what went wrong. The unit's ``account`` is made (service_account; AccountError) once every
    check passed, before the files that belong to it are written.
    """
    try:
        foreign = unit_owner_problem(name, unit.path, unit.text, name_option) if unit.text is not None else None
        if foreign:
            raise FilesError(foreign)
        due = [wanted for wanted in files if differences(wanted)]
        befores = {wanted.path: read_text(wanted.path) for wanted in due}
    except OSError as exc:  # read before any write
        raise FilesError(f"{exc}. Nothing was changed.") from None
    if unit in due and verify:
        problem = unit_problem(run, name, unit.text or "")
        if problem:
            raise FilesError(f"systemd-analyze verify rejected the new {name}.service; no file was "
                             f"written and the installed unit is unchanged: {problem}")
    blocked = [(wanted.path, where) for wanted in due for where in [unwritable(wanted.path)] if where]
    if blocked:
        raise FilesError(f"the files of {name}.service cannot be written here: "
                         + "; ".join(f"{path} ({where} is not writable: a read-only file system or its "
                                     "permissions)" for path, where in blocked)
                         + ". No file was written. Make the directory writable and re-run.")
    made = converge_account(account, run, check_mode) if account is not None else []
    diff = [account_diff(account, made)] if account is not None and made else []
    shown = set(shown_names) if shown_names is not None else None
    for wanted in due:
        entry = diff_entry(wanted, befores[wanted.path])
        if wanted is env:
            entry.update(before=mask_env(entry["before"], set(secret_names), shown),
                         after=mask_env(entry["after"], set(secret_names), shown))
        diff.append(entry)
    if due and not check_mode:
        try:
            for wanted in due:
                os.makedirs(os.path.dirname(wanted.path), mode=0o755, exist_ok=True)
                write(wanted)
        except OSError as exc:
            raise FilesError(f"writing the files of {name}.service failed: {exc}", [w.path for w in due]) from None
    return [wanted.path for wanted in due], diff, made
