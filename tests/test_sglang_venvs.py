"""Decisions about kept SGLang virtualenvs: matching, rollback, pruning."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest


import ansible.module_utils.sglang_venv_inspect as svi  # noqa: E402
import ansible.module_utils.sglang_venvs as sv  # noqa: E402

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
    make(tmp_path, "pypi-0.5.24-deadbeef", None)  # an install that never finished
    point(tmp_path, "pypi-0.5.23-cccc")
    return tmp_path


def test_scan_orders_by_install_time_and_reads_current(root):
    venvs, current = sv.scan(root)
    assert [v.name for v in venvs if v.complete] == ["pypi-0.5.12-aaaa", "pypi-0.5.14-bbbb", "pypi-0.5.23-cccc"]
    assert current == "pypi-0.5.23-cccc"
    assert not next(v for v in venvs if v.name == "pypi-0.5.24-deadbeef").complete


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
    with pytest.raises(sv.VenvError, match="no complete SGLang install named 'pypi-0.5.24-deadbeef'"):
        sv.rollback_target(venvs, "pypi-0.5.23-cccc", to="pypi-0.5.24-deadbeef")
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
    assert pruned == {"pypi-0.5.12-aaaa", "pypi-0.5.24-deadbeef"}
    pruned = {Path(p).name for p in sv.prune_list(venvs, current, keep=3)}
    assert pruned == {"pypi-0.5.24-deadbeef"}


def test_prune_after_rollback_keeps_the_newer_install(root):
    point(root, "pypi-0.5.14-bbbb")
    venvs, current = sv.scan(root)
    pruned = {Path(p).name for p in sv.prune_list(venvs, current, keep=2)}
    assert pruned == {"pypi-0.5.24-deadbeef"}


def test_only_directories_named_as_installs_are_removed_as_unfinished(root):
    """venvs/ of a root given by mistake: someone's folders without a manifest are not unfinished installs."""
    for name in ["photos", "pypi-notes", "pypi-0.5.24-DEADBEEF", "pypi-0.5.24-deadbee", "nightly-latest-1234abcd-2026"]:
        (root / "venvs" / name).mkdir()
    make(root, "nightly-latest-1234abcd-20261201100000", None)  # an upgrade's name, never finished
    make(root, "git-fix-moe-gate-0123abcd", None)
    venvs, current = sv.scan(root)
    pruned = {Path(p).name for p in sv.prune_list(venvs, current, keep=3)}
    assert pruned == {"pypi-0.5.24-deadbeef", "nightly-latest-1234abcd-20261201100000", "git-fix-moe-gate-0123abcd"}
    now = time.struct_time((2026, 12, 1, 10, 0, 0, 1, 335, 0))
    for request in [REQUEST, dict(REQUEST, source="nightly", version=""),
                    dict(REQUEST, source="git", git="https://example.invalid/sglang.git@v0.5.23+fix/a b")]:
        for upgrade in (False, True):
            assert sv.VENV_NAME.fullmatch(sv.venv_name(request, upgrade, now)), (request, upgrade)


def test_empty_root(tmp_path):
    venvs, current = sv.scan(tmp_path)
    assert (venvs, current) == ([], None)
    assert sv.prune_list(venvs, current, keep=2) == []


def test_unreadable_manifest_is_an_unfinished_install(tmp_path):
    venv = make(tmp_path, "pypi-0.5.23-eeee", None)
    (venv / sv.MANIFEST).write_text("{truncated")
    venvs, _ = sv.scan(tmp_path)
    assert not venvs[0].complete


# The request as the role builds it (roles/sglang/tasks/main.yml).
NIGHTLY = {
    "source": "nightly", "version": "", "git": "", "torch": "", "flashinfer": "0.7.2", "heavy_dependencies": True,
    "indexes": {"nightly": "https://docs.sglang.io/whl/cu130/", "torch": "https://download.pytorch.org/whl/cu130",
                "flashinfer": "https://flashinfer.ai/whl/cu130", "flashinfer_nightly": ""},
    "extra_args": "--index-url https://mirror.example/simple", "python": "/usr/bin/python3", "installer": "uv",
}
DEMO = {
    "source": "pypi", "version": "0.5.12", "git": "", "torch": "", "flashinfer": "", "heavy_dependencies": False,
    "indexes": {"nightly": "", "torch": "", "flashinfer": "", "flashinfer_nightly": ""},
    "extra_args": "--no-index --find-links /opt/sglang-wheels", "python": "/usr/bin/python3", "installer": "uv",
}


def test_uv_nightly_steps_use_sglang_documented_flags():
    torch, sglang, flashinfer = sv.install_steps(NIGHTLY)
    assert torch["packages"] == ["torch"]
    assert torch["args"] == ["--index-url", "https://download.pytorch.org/whl/cu130",
                             "--index-url", "https://mirror.example/simple"]
    assert sglang["packages"] == ["sglang"]
    assert sglang["args"] == [
        "--prerelease=allow", "--extra-index-url", "https://docs.sglang.io/whl/cu130/",
        "--extra-index-url", "https://download.pytorch.org/whl/cu130", "--index-strategy", "unsafe-best-match",
        "--index-url", "https://mirror.example/simple"]
    assert flashinfer["packages"] == ["flashinfer-python==0.7.2", "flashinfer-cubin==0.7.2",
                                      "flashinfer-jit-cache==0.7.2"]
    assert flashinfer["args"][:3] == ["--no-deps", "--extra-index-url", "https://flashinfer.ai/whl/cu130"]
    assert "--index-strategy" in flashinfer["args"]


def test_pip_steps_keep_pip_spellings():
    _, sglang, flashinfer = sv.install_steps(dict(NIGHTLY, installer="pip"))
    assert sglang["args"][:3] == ["--pre", "--extra-index-url", "https://docs.sglang.io/whl/cu130/"]
    assert not any(a.startswith(("--prerelease", "--index-strategy")) for a in sglang["args"] + flashinfer["args"])


def test_demo_steps_install_sglang_alone_and_upgrade_refreshes_uv():
    (step,) = sv.install_steps(DEMO)
    assert step["packages"] == ["sglang==0.5.12"]
    assert step["args"] == ["--no-deps", "--no-index", "--find-links", "/opt/sglang-wheels"]
    (step,) = sv.install_steps(DEMO, upgrade=True)
    assert step["args"][:4] == ["--no-deps", "--upgrade", "--refresh-package", "sglang"]
    (step,) = sv.install_steps(dict(DEMO, installer="pip"), upgrade=True)
    assert "--refresh-package" not in step["args"]


def test_git_source_installs_the_python_subdirectory():
    (step,) = sv.install_steps(dict(DEMO, source="git", version="", git="https://github.com/sgl-project/sglang.git@main"))
    assert step["packages"] == ["git+https://github.com/sgl-project/sglang.git@main#subdirectory=python"]


@pytest.mark.parametrize("change", [
    {"installer": "pip"}, {"python": "/usr/bin/python3.12"}, {"extra_args": "--index-url https://other/simple"},
    {"indexes": dict(NIGHTLY["indexes"], torch="https://mirror.example/cu130")},
])
def test_changing_installer_interpreter_or_indexes_builds_a_new_venv(tmp_path, change):
    make(tmp_path, "nightly-latest-1111", "2026-11-01T00:00:00Z", NIGHTLY)
    point(tmp_path, "nightly-latest-1111")
    venvs, current = sv.scan(tmp_path)
    assert sv.plan_install(venvs, current, NIGHTLY) == ("none", "nightly-latest-1111")
    assert sv.plan_install(venvs, current, dict(NIGHTLY, **change)) == ("install", "")


def test_after_plan_describes_the_state_after_a_rollback(root):
    venvs, current = sv.scan(root)
    after = sv.after_plan(venvs, current, "rollback", "pypi-0.5.14-bbbb", keep=1)
    assert after["current"] == "pypi-0.5.14-bbbb"
    assert after["current_manifest"]["resolved"] == {"sglang": "0.5.14"}
    # The new current (0.5.14), its predecessor and the newest install stay.
    assert {Path(p).name for p in after["prune"]} == {"pypi-0.5.24-deadbeef"}
    assert after["kept"] == ["pypi-0.5.12-aaaa", "pypi-0.5.14-bbbb", "pypi-0.5.23-cccc"]
    none = sv.after_plan(venvs, current, "none", current, keep=1)
    assert none["current"] == current and none["kept"] == ["pypi-0.5.14-bbbb", "pypi-0.5.23-cccc"]


def test_prune_never_leaves_venvs(root):
    (root / "cache" / "uv").mkdir(parents=True)
    (root / "tools" / "uv").mkdir(parents=True)
    venvs, current = sv.scan(root)
    for path in sv.prune_list(venvs, current, keep=1):
        assert Path(path).parent == root / "venvs"


def test_tool_versions_and_check_output():
    assert svi.tool_version("uv 0.13.9 (x86_64-unknown-linux-gnu)\n") == "0.13.9"
    assert svi.tool_version("pip 23.0.1 from /opt/sglang/venvs/x/lib/python3.11/site-packages/pip (python 3.11)") \
        == "23.0.1"
    assert svi.tool_version("garbage") == ""
    uv_output = ("Using Python 3.11.2 environment at: /opt/sglang/venvs/x\nChecked 1 package in 0.24ms\n"
                 "Found 2 incompatibilities\nThe package `sglang` requires `aiohttp`, but it's not installed\n")
    assert svi.check_problems(uv_output) == "The package `sglang` requires `aiohttp`, but it's not installed"


def test_the_versions_program_runs_in_a_python_and_reads_its_distributions():
    import subprocess

    argv = svi.inspect_argv(str(Path(sys.executable).parent.parent))["versions"]
    argv[0] = sys.executable
    out = subprocess.run([*argv, "pytest", "no-such-distribution"], check=True, capture_output=True, text=True).stdout
    data = json.loads(out)
    assert data["packages"]["pytest"] and "no-such-distribution" not in data["packages"]
    assert data["python"] == sys.version.split()[0]
    parsed = svi.parse_inspection({"versions": (0, out, ""), "freeze": (0, "a==1\n", ""),
                                   "check": (1, "x requires y\n", ""), "version": (0, "uv 0.13.9\n", "")})
    assert parsed["installer_version"] == "0.13.9" and parsed["pip_check"] == {"ok": False, "output": "x requires y"}


def test_venv_names_say_what_and_for_which_request():
    now = (2026, 12, 1, 10, 0, 0, 1, 335, 0)
    name = sv.venv_name(REQUEST, False, time.struct_time(now))
    assert name.startswith("pypi-0.5.23-") and len(name) == len("pypi-0.5.23-") + 8
    assert sv.venv_name(REQUEST, True, time.struct_time(now)) == name + "-20261201100000"
    git = dict(REQUEST, source="git", git="https://example.invalid/sglang.git@fix/moe gate")
    assert sv.venv_name(git, False, time.struct_time(now)).startswith("git-fix-moe-gate-")
    assert sv.venv_name(dict(REQUEST, python="/usr/bin/python3.12"), False, time.struct_time(now)) != name


def uv_binary(dest: Path) -> Path:
    """The pinned uv (roles/sglang/defaults) from its real PyPI wheel, cached like the SGLang wheels."""
    import subprocess
    import zipfile

    import yaml
    from conftest import wheel_cache

    defaults = Path(__file__).resolve().parent.parent / "roles" / "sglang" / "defaults" / "main.yml"
    version = yaml.safe_load(defaults.read_text())["sglang_uv_version"]
    cache = wheel_cache()
    found = sorted(cache.glob(f"uv-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(cache),
                        f"uv=={version}"], check=True)
        found = sorted(cache.glob(f"uv-{version}-*.whl"))
    with zipfile.ZipFile(found[0]) as wheel:
        binary = dest / "uv"
        binary.write_bytes(wheel.read(f"uv-{version}.data/scripts/uv"))
    binary.chmod(0o755)
    return binary


def test_pruning_a_venv_keeps_the_shared_uv_cache_and_the_other_venv(tmp_path):
    """Two installs hardlinked from one cache (the role's uv command line); prune one; the rest still works."""
    import shutil
    import subprocess

    from conftest import sglang_wheel

    uv = uv_binary(tmp_path)
    wheels = sglang_wheel("0.5.12").parent
    root = tmp_path / "opt-sglang"

    def install(name: str, *extra: str) -> Path:
        venv = root / "venvs" / name
        subprocess.run([str(uv), "venv", "--python", sys.executable, "--no-python-downloads", str(venv)],
                       check=True, capture_output=True)
        argv = [str(uv), *sv.uv_argv(str(root))[1:], "--python", f"{venv}/bin/python"]
        argv.remove("--compile-bytecode")  # seconds of CPU; not what this test is about
        done = subprocess.run([*argv, "--no-deps", "--no-index", "--find-links", str(wheels), *extra,
                               "sglang==0.5.12"], check=True, capture_output=True, text=True)
        assert " + sglang==0.5.12" in done.stderr
        (venv / sv.MANIFEST).write_text(json.dumps({"name": name, "installed_at": name, "request": DEMO}))
        return venv

    member = Path("lib") / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "sglang" \
        / "version.py"
    old = install("a-2026")
    new = install("b-2026")
    assert (old / member).stat().st_ino == (new / member).stat().st_ino  # hardlinked, not copied
    point(root, "b-2026")
    install("c-2026")
    point(root, "c-2026")
    venvs, current = sv.scan(root)
    pruned = sv.prune_list(venvs, current, keep=1)
    assert pruned == [str(old)]
    for path in pruned:
        shutil.rmtree(path)
    assert (new / member).stat().st_nlink >= 2
    compile((new / member).read_text(), str(member), "exec")
    # The cache still serves the next install: nothing unpacked again, the same files linked.
    venv = root / "venvs" / "d-2026"
    subprocess.run([str(uv), "venv", "--python", sys.executable, str(venv)], check=True, capture_output=True)
    argv = [str(uv), *sv.uv_argv(str(root))[1:], "--python", f"{venv}/bin/python"]
    argv.remove("--compile-bytecode")
    done = subprocess.run([*argv, "--no-deps", "--no-index", "--find-links", str(wheels), "sglang==0.5.12"],
                          capture_output=True, text=True, check=True)
    assert "Prepared" not in done.stderr, done.stderr
    assert (venv / member).stat().st_ino == (new / member).stat().st_ino


def test_missing_debs_reads_dpkg_query_output():
    out = ("python3 install ok installed\npython3-venv deinstall ok config-files\n"
           "python3-packaging:all install ok installed\n")
    assert sv.missing_debs(out, ["python3", "python3-venv", "python3-packaging"]) == ["python3-venv"]
    assert sv.missing_debs("", ["python3"]) == ["python3"]


def test_uv_command_uses_the_roots_cache_hardlinks_and_compiles():
    assert sv.uv_argv("/opt/sglang") == [
        "/opt/sglang/tools/uv/bin/uv", "pip", "install", "--cache-dir", "/opt/sglang/cache/uv",
        "--link-mode", "hardlink", "--compile-bytecode"]
