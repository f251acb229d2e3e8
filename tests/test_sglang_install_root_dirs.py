"""The install module owns its root: the root and venvs/ made, or put right, as root's 0755 (module_utils/sglang_install_root.py)."""

from __future__ import annotations

import os
import stat

from ansible.module_utils.sglang_install_root import directory_changes, ensure_directories


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
