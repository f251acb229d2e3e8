"""The install module owns its root: the root and venvs/ made, or put right, as root's 0755 (module_utils/sglang_install_root.py).

A root that holds anything else (someone's home given by mistake) is refused before any of that.
"""

from __future__ import annotations

import os
import stat

import pytest
from ansible.module_utils.sglang_install_root import directory_changes, ensure_directories, root_problem
from conftest import tree_digest
from test_sglang_install import install, request


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_missing_root_is_made_with_its_venvs_and_check_mode_makes_nothing(tmp_path):
    root = tmp_path / "opt" / "sglang"
    planned = ensure_directories(root, check=True)
    assert [d["before_header"] for d in planned] == [str(root), str(root / "venvs")]
    assert all(d["before"] == "absent\n" and d["after"] == "directory root:root 0755\n" for d in planned)
    assert not (tmp_path / "opt").exists()
    assert ensure_directories(root, check=False) == planned
    assert mode(root) == mode(root / "venvs") == 0o755
    assert (root.stat().st_uid, root.stat().st_gid) == (0, 0)
    assert ensure_directories(root, check=False) == []  # converged


def test_a_wrong_mode_or_owner_is_put_right_and_named(tmp_path):
    root = tmp_path / "sglang"
    (root / "venvs").mkdir(parents=True)
    os.chmod(root, 0o777)
    os.chown(root / "venvs", 1234, 1234)
    os.chmod(root / "venvs", 0o755)
    assert directory_changes(root) == ["mode 0777"]
    assert directory_changes(root / "venvs") == ["owner 1234:1234"]
    diffs = ensure_directories(root, check=True)
    assert [d["before"] for d in diffs] == ["mode 0777\n", "owner 1234:1234\n"]
    assert mode(root) == 0o777  # check mode changed nothing
    ensure_directories(root, check=False)
    assert directory_changes(root) == directory_changes(root / "venvs") == []


def test_a_root_that_is_a_link_to_a_directory_is_that_directory(tmp_path):
    real = tmp_path / "data" / "sglang"
    (real / "venvs").mkdir(parents=True)
    os.chmod(real, 0o755)
    os.chmod(real / "venvs", 0o755)
    (tmp_path / "sglang").symlink_to(real)
    assert ensure_directories(tmp_path / "sglang", check=False) == []
    assert (tmp_path / "sglang").is_symlink()


def stats(root) -> dict[str, tuple[int, int, int]]:
    """Mode, owner and group of the root and everything under it: what a chmod or chown would change."""
    return {str(path): (path.lstat().st_mode, path.lstat().st_uid, path.lstat().st_gid)
            for path in [root, *sorted(root.rglob("*"))]}


@pytest.mark.parametrize("check", [False, True])
def test_a_root_holding_someone_elses_files_is_refused_before_anything_changes(tmp_path, check):
    """sglang_root=/home/alice: not made root's 0755, nothing under venvs/ taken for an unfinished install."""
    home = tmp_path / "alice"
    for path in [home / "Documents", home / ".ssh", home / "venvs" / "project-env" / "bin"]:
        path.mkdir(parents=True)
    (home / ".bashrc").write_text("export EDITOR=vi\n")
    (home / ".ssh" / "authorized_keys").write_text("ssh-ed25519 AAAA alice\n")
    for path in [home, *home.rglob("*")]:
        os.chown(path, 1000, 1000)
    os.chmod(home, 0o700)
    before, modes = tree_digest(home), stats(home)
    refused = install(home, check=check, request=request("0.5.12"))
    assert refused.get("failed"), refused
    assert refused["msg"] == (
        f"sglang_root={home} holds '.bashrc', '.ssh', 'Documents', which the install module does not make "
        "there: expected a new or empty directory, or one holding only .current.tmp, .install.lock, cache, "
        "current, lost+found, tools, venvs from an earlier deploy; the root is made root's (0755) and old installs under "
        "it are deleted when pruned. Nothing was changed. Set sglang_root to a new or empty directory of its "
        "own, such as /opt/sglang.")
    assert tree_digest(home) == before and stats(home) == modes


def test_the_refusal_names_a_few_foreign_entries_and_counts_the_rest(tmp_path):
    root = tmp_path / "data"
    (root / "venvs").mkdir(parents=True)
    for name in ["a.txt", "b.txt", "c.txt", "d.txt", "e.txt"]:
        (root / name).write_text("")
    assert f"sglang_root={root} holds 'a.txt', 'b.txt', 'c.txt' and 2 more, which" in root_problem(str(root))


def test_an_empty_root_or_one_an_earlier_deploy_left_is_the_modules_own(tmp_path):
    root = tmp_path / "sglang"
    root.mkdir()
    assert root_problem(str(root)) is None  # empty
    (root / "lost+found").mkdir()
    assert root_problem(str(root)) is None  # a file system of its own (a dedicated disk)
    for name in ["venvs/pypi-0.5.12-7f2f402c/bin", "tools/uv/bin", "tools/.uv.old", "cache/uv"]:
        (root / name).mkdir(parents=True)
    (root / ".install.lock").write_text("pid 1 since 2026-12-01T10:00:00Z\n")
    (root / "current").symlink_to(root / "venvs" / "pypi-0.5.12-7f2f402c")
    (root / ".current.tmp").symlink_to(root / "venvs" / "pypi-0.5.12-7f2f402c")  # left by a kill
    assert root_problem(str(root)) is None
    os.chmod(root, 0o755)
    os.chmod(root / "venvs", 0o755)
    assert ensure_directories(root, check=False) == []  # converged: owner and mode left as they are
