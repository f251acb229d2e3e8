"""sglang_install under faults: a half-built tools/uv, a full disk, a changed uv cache, odd paths.

Each case asserts the message and that nothing else changed (tree_digest before/after), through
the module as a task calls it (real wheels, real uv, real virtualenvs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible.module_utils.sglang_venvs import venv_name
from conftest import sglang_wheel, tree_digest, wheel_cache
from fleet_harness import downloaded
from fs_faults import full_disk, readonly_mount
from test_sglang_install import install, request

UV = "0.13.9"


@pytest.fixture(autouse=True)
def wheels():
    sglang_wheel("0.5.12")
    downloaded(f"uv=={UV}", wheel_cache(), f"uv-{UV}-*.whl", deps=False)


def uv_answers(root: Path) -> str:
    done = subprocess.run([str(root / "tools/uv/bin/uv"), "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def but_the_lock(digest: dict[str, str]) -> dict[str, str]:
    return {path: value for path, value in digest.items() if not path.endswith("/.install.lock")}


@pytest.mark.parametrize("damage", ["no pip", "uv not executable", "uv truncated", "a file"])
def test_a_half_built_uv_is_replaced_whole(tmp_path, damage):
    root = tmp_path / "opt-sglang"
    tool = root / "tools" / "uv"
    if damage == "a file":
        tool.parent.mkdir(parents=True)
        tool.write_text("not a tool\n")
    else:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tool)], check=True)
        if damage != "no pip":
            (tool / "bin" / "uv").write_bytes(b"\x7fELF" + b"\0" * 1000)
            (tool / "bin" / "uv").chmod(0o644 if damage == "uv not executable" else 0o755)
    result = install(root, request=request("0.5.12"))
    assert result["decision"] == "install" and not result.get("failed"), result
    assert uv_answers(root).startswith(f"uv {UV}")
    assert sorted(p.name for p in (root / "tools").iterdir()) == ["uv"]  # no .uv.building or .uv.old left


def test_a_full_disk_during_the_uv_bootstrap_says_so_and_leaves_no_half_tool(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    root = disk / "opt-sglang"  # the root holds only what the module makes: the filler sits beside it
    with full_disk(disk):
        os.truncate(disk / ".fill", (disk / ".fill").stat().st_size - 8192)  # room for the lock, no more
        root.mkdir()
        before = but_the_lock(tree_digest(root))
        refused = install(root, request=request("0.5.12"))
        after = but_the_lock(tree_digest(root))
        left = sorted(p.name for p in (root / "tools").iterdir()) if (root / "tools").is_dir() else []
    assert refused.get("failed"), refused
    assert "Preparing the installer failed at \"Create the virtualenv that holds uv\"" in refused["msg"]
    # ensurepip hides the ENOSPC ("returned non-zero exit status 1"): the free space tells
    assert f"The disk holding {root} has only 0 MiB free, too little for the install" in refused["msg"]
    assert "nothing half-built was kept; free space" in refused["msg"]
    assert "current still points at nothing; no virtualenv was made" in refused["msg"]
    assert not left  # the empty folder venv made; no .uv.building, no tools/uv
    # venvs/ is the module's own directory, made (root's, 0755) before anything else.
    assert {k: v for k, v in after.items() if k not in (str(root / "tools"), str(root / "venvs"))} == before


def test_a_file_changed_in_the_uv_cache_is_refused_before_current_moves(tmp_path):
    root = tmp_path / "opt-sglang"
    first = install(root, request=request("0.5.12"))
    assert first["decision"] == "install", first
    gates = sorted((root / "cache" / "uv").glob("archive-v0/*/sglang/srt/model_executor/model_runner.py"))
    assert len(gates) == 1
    with gates[0].open("a") as gate:  # hardlinked: the current install changes too, as on a real target
        gate.write("# changed in the cache\n")
    before = tree_digest(root / "venvs", root / "current")
    other = dict(request("0.5.12"), python=str(Path(sys.executable).resolve()))  # a new request: a new venv
    refused = install(root, request=other)
    assert refused.get("failed"), refused
    assert "failed at \"Check SGLang's files against the wheel's RECORD\"" in refused["msg"]
    assert "1 of " in refused["msg"]
    assert "sglang/srt/model_executor/model_runner.py (sha256 differs from RECORD)" in refused["msg"]
    assert f"{root}/cache/uv: remove it" in refused["msg"]
    assert f"current still points at {first['current']}" in refused["msg"]
    assert tree_digest(root / "venvs", root / "current") == before


@pytest.mark.parametrize("check", [False, True])
def test_a_file_where_the_new_venv_goes_is_refused(tmp_path, check):
    root = tmp_path / "opt-sglang"
    (root / "venvs").mkdir(parents=True)
    wanted = request("0.5.12")
    venv = root / "venvs" / venv_name(wanted, False, time.gmtime())
    venv.write_text("someone's notes\n")
    before = but_the_lock(tree_digest(root))  # a real run takes ROOT/.install.lock before it decides
    refused = install(root, check=check, request=wanted)
    assert refused.get("failed"), refused
    assert refused["msg"] == (f"{venv} is a file, not a virtualenv: the new install goes there and only installs "
                              f"belong under {root / 'venvs'}. Nothing was changed. Move {venv} away and re-run.")
    assert but_the_lock(tree_digest(root)) == before


@pytest.mark.parametrize("check", [False, True])
def test_a_read_only_root_fails_in_check_mode_too(tmp_path, check):
    root = tmp_path / "opt-sglang"
    root.mkdir()
    with readonly_mount(root):
        before = tree_digest(root)
        refused = install(root, check=check, request=request("0.5.12"))
        assert tree_digest(root) == before
    assert refused.get("failed"), refused
    assert f"sglang_root={root}: {root} is not writable here (a read-only file system" in refused["msg"]
    assert "Nothing was changed" in refused["msg"]


@pytest.mark.parametrize("check", [False, True])
def test_a_root_that_is_a_symlink_to_a_system_directory_is_refused(tmp_path, check):
    link = tmp_path / "sgl-link"
    link.symlink_to("/usr/local")
    before = tree_digest(Path("/usr/local"))
    refused = install(link, check=check, request=request("0.5.12"))
    assert refused.get("failed"), refused
    assert refused["msg"].startswith(f"sglang_root={link} (which resolves to /usr/local here) is a system directory")
    assert tree_digest(Path("/usr/local")) == before


def test_the_root_check_follows_links_of_its_own_directories(tmp_path):
    from ansible.module_utils.sglang_install_root import root_problem
    root = tmp_path / "root"
    root.mkdir()
    elsewhere = tmp_path / "disk2-venvs"
    elsewhere.mkdir()
    (root / "venvs").symlink_to(elsewhere)          # another folder of its own: fine
    assert root_problem(str(root)) is None
    (root / "cache").symlink_to("/usr")              # a system directory: what is under it would be pruned
    assert root_problem(str(root)) == (f"sglang_root={root}: {root / 'cache'} leads to /usr, a system directory; "
                                       "the installs write (and venvs/ prunes) under it. Nothing was changed. "
                                       "Point it at a directory of its own.")
    (root / "cache").unlink()
    (root / "tools").write_text("")
    assert root_problem(str(root)).startswith(f"sglang_root={root}: {root / 'tools'} is not a directory (found a file)")
    below = tmp_path / "afile"
    below.write_text("")
    assert root_problem(str(below / "sglang")).startswith(f"sglang_root={below / 'sglang'}: {below} is a file")
