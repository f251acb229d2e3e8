"""Decisions about kept SGLang virtualenvs: matching, rollback, pruning."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "roles" / "sglang" / "module_utils"))

import sglang_venvs as sv  # noqa: E402

REQUEST = {"source": "pypi", "version": "0.5.23", "git": "", "torch": "", "flashinfer": "", "heavy_dependencies": False}


def make(root: Path, name: str, installed_at: str | None, request: dict | None = None) -> Path:
    venv = root / "venvs" / name
    (venv / "bin").mkdir(parents=True)
    if installed_at is not None:
        manifest = {"name": name, "installed_at": installed_at, "request": request or REQUEST,
                    "resolved": {"sglang": name.split("-")[1]}}
        (venv / sv.MANIFEST).write_text(json.dumps(manifest))
    return venv


def point(root: Path, name: str) -> None:
    link = root / "current"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(root / "venvs" / name)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    make(tmp_path, "pypi-0.5.12-aaaa", "2026-11-01T00:00:00Z", dict(REQUEST, version="0.5.12"))
    make(tmp_path, "pypi-0.5.14-bbbb", "2026-11-10T00:00:00Z", dict(REQUEST, version="0.5.14"))
    make(tmp_path, "pypi-0.5.23-cccc", "2026-11-20T00:00:00Z")
    make(tmp_path, "pypi-0.5.24-dead", None)  # an install that never finished
    point(tmp_path, "pypi-0.5.23-cccc")
    return tmp_path


def test_scan_orders_by_install_time_and_reads_current(root):
    venvs, current = sv.scan(root)
    assert [v.name for v in venvs if v.complete] == ["pypi-0.5.12-aaaa", "pypi-0.5.14-bbbb", "pypi-0.5.23-cccc"]
    assert current == "pypi-0.5.23-cccc"
    assert not next(v for v in venvs if v.name == "pypi-0.5.24-dead").complete


def test_matching_request(root):
    venvs, _ = sv.scan(root)
    assert sv.find_matching(venvs, REQUEST).name == "pypi-0.5.23-cccc"
    assert sv.find_matching(venvs, dict(REQUEST, version="0.5.12")).name == "pypi-0.5.12-aaaa"
    assert sv.find_matching(venvs, dict(REQUEST, version="9.9.9")) is None


def test_rollback_goes_to_the_install_before_current(root):
    venvs, current = sv.scan(root)
    assert sv.rollback_target(venvs, current).name == "pypi-0.5.14-bbbb"
    assert sv.rollback_target(venvs, current, to="pypi-0.5.12-aaaa").name == "pypi-0.5.12-aaaa"


def test_rollback_refusals_name_the_kept_installs(root):
    venvs, _ = sv.scan(root)
    with pytest.raises(sv.VenvError, match=r"oldest kept install\. Kept installs: pypi-0.5.12-aaaa \(0.5.12\)"):
        sv.rollback_target(venvs, "pypi-0.5.12-aaaa")
    with pytest.raises(sv.VenvError, match="no complete SGLang install named 'pypi-0.5.24-dead'"):
        sv.rollback_target(venvs, "pypi-0.5.23-cccc", to="pypi-0.5.24-dead")
    with pytest.raises(sv.VenvError, match="current points at None"):
        sv.rollback_target(venvs, None)


def test_plan_for_each_situation(root):
    venvs, current = sv.scan(root)
    assert sv.plan_install(venvs, current, REQUEST) == ("none", "pypi-0.5.23-cccc")
    assert sv.plan_install(venvs, current, dict(REQUEST, version="0.5.12")) == ("reuse", "pypi-0.5.12-aaaa")
    assert sv.plan_install(venvs, current, dict(REQUEST, version="9.9.9")) == ("install", "")
    assert sv.plan_install(venvs, current, REQUEST, upgrade=True) == ("install", "")
    assert sv.plan_install(venvs, current, REQUEST, rollback=True) == ("rollback", "pypi-0.5.14-bbbb")
    assert sv.plan_install(venvs, current, REQUEST, rollback_to="pypi-0.5.12-aaaa") == ("rollback", "pypi-0.5.12-aaaa")


def test_rolled_back_nightly_stays(tmp_path):
    nightly = dict(REQUEST, source="nightly", version="")
    make(tmp_path, "nightly-latest-1111", "2026-11-01T00:00:00Z", nightly)
    make(tmp_path, "nightly-latest-1111-20261120", "2026-11-20T00:00:00Z", nightly)
    point(tmp_path, "nightly-latest-1111")
    venvs, current = sv.scan(tmp_path)
    assert sv.plan_install(venvs, current, nightly) == ("none", "nightly-latest-1111")


def test_prune_keeps_current_and_its_predecessor(root):
    venvs, current = sv.scan(root)
    pruned = {Path(p).name for p in sv.prune_list(venvs, current, keep=1)}
    assert pruned == {"pypi-0.5.12-aaaa", "pypi-0.5.24-dead"}
    pruned = {Path(p).name for p in sv.prune_list(venvs, current, keep=3)}
    assert pruned == {"pypi-0.5.24-dead"}


def test_prune_after_rollback_keeps_the_newer_install(root):
    point(root, "pypi-0.5.14-bbbb")
    venvs, current = sv.scan(root)
    pruned = {Path(p).name for p in sv.prune_list(venvs, current, keep=2)}
    assert pruned == {"pypi-0.5.24-dead"}


def test_empty_root(tmp_path):
    venvs, current = sv.scan(tmp_path)
    assert (venvs, current) == ([], None)
    assert sv.prune_list(venvs, current, keep=2) == []


def test_unreadable_manifest_is_an_unfinished_install(tmp_path):
    venv = make(tmp_path, "pypi-0.5.23-eeee", None)
    (venv / sv.MANIFEST).write_text("{truncated")
    venvs, _ = sv.scan(tmp_path)
    assert not venvs[0].complete
