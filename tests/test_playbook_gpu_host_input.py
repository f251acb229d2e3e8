"""playbooks/gpu_host.yml refuses a node that does not match before it changes anything.

This machine plays the Proxmox node with a fake root built from a GPU fixture; the files the
role would write are pointed into tmp_path, and the test proves none of them appears.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ansible.module_utils import systemd_files
from conftest import REPO, as_host_vars, run_cases, run_playbook, tree_digest

sys.path.insert(0, str(REPO / "tests"))
from fake_nvidia_root import build  # noqa: E402
from ro_mount import read_only  # noqa: E402

GPU_FIXTURES = REPO / "tests" / "fixtures" / "gpu"
INVENTORY = "[proxmox_hosts]\nlocalhost ansible_connection=local\n"


REFUSALS = [
        ("h200-1gpu", [],
         ["Found 1 GPU(s) (nvidia-smi: 00000000:00:06.0), expected 8 (gpu_host_expected_gpus)", "nvidia-smi -L"]),
        ("synthetic-7-of-8-gpus", [], ["Found 7 GPU(s)", "expected 8"]),
        ("synthetic-blackwell-proprietary", [],
         ["580.105.08 is proprietary; expected the open module", "nvidia-open"]),
        ("synthetic-8gpu-imex-after-caps", ["-e", "gpu_host_min_driver=590.1"],
         ["The loaded NVIDIA driver is 580.105.08; expected 590.1 or later"]),
        ("synthetic-8gpu-imex-after-caps", ["-e", "gpu_host_expected_gpus=0"],
         ["Invalid gpu_host input: expected_gpus=0 (expected 1-64)"]),
        ("synthetic-8gpu-imex-after-caps", ["-e", "gpu_host_expected_gpus=eight"],
         ["gpu_host_expected_gpus", "eight", "int"]),
        ("synthetic-8gpu-imex-after-caps", ["-e", "gpu_host_unit_name=nvidia.socket"],
         ["gpu_host_unit_name must be a unit name systemd accepts, without '.service' or another unit type's "
          "suffix: 'nvidia.socket' ends in '.socket'", "Give the name without it, e.g. 'nvidia'", "Nothing was changed"]),
        ("synthetic-8gpu-imex-after-caps", ["-e", "gpu_host_unit_name=../../etc/x"],
         ["gpu_host_unit_name must be a unit name systemd accepts", "got '../../etc/x'"]),
]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """Every case of REFUSALS in one run of gpu_host.yml: each a proxmox_hosts member of its own (a
    local-connection alias of this machine) with its own fake root; one folder stands for /etc and
    is systemd's whole unit search path (SYSTEMD_UNIT_PATH, the same for the whole run)."""
    tmp = tmp_path_factory.mktemp("gpu-host-refusals")
    etc = tmp / "etc"
    etc.mkdir()
    cases, roots = {}, {}
    for index, (fixture, extra, _) in enumerate(REFUSALS):
        name = f"case{index}"
        roots[name] = tmp / name / "root"
        build(GPU_FIXTURES / fixture, roots[name])
        cases[name] = {"gpu_host_root": str(roots[name]),
                       "gpu_host_nvidia_smi_csv": str(GPU_FIXTURES / fixture / "query-gpu.csv"),
                       "gpu_host_skip_proxmox_check_for_tests": "true",
                       "gpu_host_modules_load_file": f"{etc}/{name}-modules-load.conf", "gpu_host_unit_dir": str(etc),
                       **as_host_vars(extra)}
    before = {name: tree_digest(root) for name, root in roots.items()}
    runs = run_cases(tmp / "runner", "gpu_host.yml", cases, [], group="proxmox_hosts",
                     envvars={"SYSTEMD_UNIT_PATH": str(etc)})
    return {name: (run, before[name], tree_digest(roots[name])) for name, run in runs.items()}, etc


@pytest.mark.parametrize(("index", "needles"), [(i, needles) for i, (_, _, needles) in enumerate(REFUSALS)],
                         ids=[f"{fixture}-{' '.join(extra)}" for fixture, extra, _ in REFUSALS])
def test_refusal_changes_nothing(refusals, index, needles):
    runs, etc = refusals
    run, before, after = runs[f"case{index}"]
    assert run.status == "failed", run.stdout
    assert run.changed == 0
    message = " ".join(run.failures)
    for needle in needles:
        assert needle in message, message
    assert list(etc.iterdir()) == []  # no modules-load file, no unit
    assert after == before


def where_the_files_go(tmp_path: Path, *extra: str, search: Path | str, ro: Path | None = None) -> tuple[str, Path]:
    """gpu_host.yml on a host that passes every check but where its two files go; returns the failure."""
    fixture = "synthetic-8gpu-imex-after-caps"
    root = tmp_path / "root"
    build(GPU_FIXTURES / fixture, root)
    etc = tmp_path / "etc"
    before = tree_digest(root, etc)
    private = tmp_path / "runner"
    private.mkdir()
    args = ["-e", f"gpu_host_root={root}", "-e", f"gpu_host_nvidia_smi_csv={GPU_FIXTURES / fixture / 'query-gpu.csv'}",
            "-e", "gpu_host_skip_proxmox_check_for_tests=true", "-e", "gpu_host_persistenced=false", *extra]
    run = run_playbook(private, "gpu_host.yml", args, inventory=INVENTORY, envvars={"SYSTEMD_UNIT_PATH": str(search)})
    assert run.status == "failed", run.stdout
    assert run.changed == 0
    assert tree_digest(root, etc) == before
    return " ".join(" ".join(run.failures).split()), etc


@pytest.mark.parametrize("mode", [[], ["--check"]], ids=["real", "check"])
def test_a_unit_dir_systemd_does_not_read_is_refused_before_any_write(tmp_path, mode):
    (tmp_path / "etc" / "units").mkdir(parents=True)
    (tmp_path / "etc" / "modules-load.d").mkdir()
    message, etc = where_the_files_go(
        tmp_path, "-e", f"gpu_host_unit_dir={tmp_path / 'etc' / 'units'}",
        "-e", f"gpu_host_modules_load_file={tmp_path / 'etc' / 'modules-load.d' / 'nvidia.conf'}", *mode,
        search=tmp_path / "etc" / "system")
    for needle in (f"gpu_host_unit_dir=\"{tmp_path / 'etc' / 'units'}\" is not a directory systemd loads units from",
                   f"it reads {tmp_path / 'etc' / 'system'}", "Nothing was changed"):
        assert needle in message, message


@pytest.mark.parametrize("mode", [[], ["--check"]], ids=["real", "check"])
@pytest.mark.parametrize("which", ["modules-load.d", "system"])
def test_a_read_only_target_is_refused_in_check_mode_as_in_the_real_run(tmp_path, mode, which):
    for name in ("modules-load.d", "system"):
        (tmp_path / "etc" / name).mkdir(parents=True)
    with read_only(tmp_path / "etc" / which):
        message, _ = where_the_files_go(
            tmp_path, "-e", f"gpu_host_unit_dir={tmp_path / 'etc' / 'system'}",
            "-e", f"gpu_host_modules_load_file={tmp_path / 'etc' / 'modules-load.d' / 'nvidia.conf'}", *mode,
            search=tmp_path / "etc" / "system")
    for needle in (f"gpu_host cannot write {tmp_path / 'etc' / which}", "read-only file system", "Nothing was changed"):
        assert needle in message, message


SSHD = "[Unit]\nDescription=OpenBSD Secure Shell server\n\n[Service]\nExecStart=/usr/sbin/sshd -D $SSHD_OPTS\n"
REFUSE_UNIT = ("names a unit that is not this project's: ours would override it, and the role would then start or "
               "restart it. Set gpu_host_unit_name to a name of its own (its default), or, if that file is a "
               "leftover of this project, move it away and re-run. Nothing was changed.")


@pytest.mark.parametrize("mode", [[], ["--check"]], ids=["real", "check"])
@pytest.mark.parametrize("where", ["system", "vendor"])
def test_a_unit_this_role_did_not_write_is_refused_before_any_write(tmp_path, mode, where):
    # gpu_host_unit_name=ssh: the admin's unit in the unit directory, or the package's in another one.
    etc = tmp_path / "etc"
    for name in ("modules-load.d", "system", "vendor"):
        (etc / name).mkdir(parents=True)
    (etc / where / "ssh.service").write_text(SSHD)
    message, _ = where_the_files_go(
        tmp_path, "-e", "gpu_host_unit_name=ssh", "-e", f"gpu_host_unit_dir={etc / 'system'}",
        "-e", f"gpu_host_modules_load_file={etc / 'modules-load.d' / 'nvidia.conf'}", *mode,
        search=f"{etc / 'system'}:{etc / 'vendor'}")
    unit = etc / "system" / "ssh.service"
    reason = (f"{unit} exists and this project did not write it (it begins '[Unit]', and its Description= and "
              "ExecStart= program are not ours)" if where == "system"
              else f"systemd already has ssh.service from {etc / 'vendor' / 'ssh.service'}")
    assert f"refusing to write {unit}: {reason}. gpu_host_unit_name='ssh' {REFUSE_UNIT}" in message, message


@pytest.mark.parametrize(("what", "mode"), [("link", []), ("link", ["--check"]), ("foreign", [])])
def test_a_modules_load_file_that_is_a_link_or_not_ours_is_refused_before_any_write(tmp_path, what, mode):
    # gpu_host_modules_load_file=/etc/modules-load.d/modules.conf: on Debian a link to /etc/modules.
    etc = tmp_path / "etc"
    for name in ("modules-load.d", "system"):
        (etc / name).mkdir(parents=True)
    (etc / "modules").write_text("# /etc/modules: kernel modules to load at boot time.\nloop\n")
    conf = etc / "modules-load.d" / "modules.conf"
    if what == "link":
        conf.symlink_to("../modules")
    else:
        conf.write_text("loop\n")
    message, _ = where_the_files_go(
        tmp_path, "-e", f"gpu_host_unit_dir={etc / 'system'}", "-e", f"gpu_host_modules_load_file={conf}", *mode,
        search=etc / "system")
    reason = (f"{conf} is a symbolic link to ../modules, which writing would replace with a file" if what == "link"
              else f"{conf} exists and this project did not write it (it begins 'loop', not '# Managed by the "
                   "gpu_host role: NVIDIA modules loaded at boot, before any container starts.')")
    assert (f"refusing to write {conf}: {reason}. gpu_host_modules_load_file='{conf}' names a file that is not this "
            "project's: writing ours would replace it. Set gpu_host_modules_load_file to a file of its own (its "
            "default), or, if that file is a leftover of this project, move it away and re-run. Nothing was "
            "changed.") in message, message
    assert list((etc / "system").iterdir()) == []


def test_the_files_an_existing_node_has_are_ours():
    # A deployed unit has no header of ours ('# Ansible managed'): our Description= and program make it ours,
    # whatever else changed (another GPU count). The modules-load file begins with the role's header.
    deployed = ("# Ansible managed\n# /dev/nvidia-uvm...\n[Unit]\nDescription=Create every NVIDIA device node before "
                "Proxmox starts guests\n[Service]\nExecStart=/usr/bin/nvidia-modprobe -u -c=0\n")
    wanted = deployed.replace("-u -c=0", "-u -c=0\nExecStart=/usr/bin/nvidia-modprobe -c=1")
    assert systemd_files.ours(deployed, wanted)
    assert not systemd_files.ours(deployed.replace("/usr/bin/nvidia-modprobe", "/bin/true"), wanted)
    header = "# Managed by the gpu_host role: NVIDIA modules loaded at boot, before any container starts.\n"
    assert systemd_files.ours(header + "nvidia\n", header + "nvidia\nnvidia_uvm\n")
