"""playbooks/nvidia_userspace.yml on this machine, with stand-ins for what needs a GPU.

No GPU here: the host's version comes from a fake root built from a fixture, and two small
scripts written by the tests stand in for NVIDIA's tools (clearly STAND-IN, never shipped):
- an installer named like NVIDIA's .run that records its options and writes
  libnvidia-ml.so.<version> / libcuda.so.<version> into a library directory under tmp_path;
- an nvidia-smi that lists the fixture's GPUs only when that library carries the host's
  version, and otherwise prints NVML's real "Driver/library version mismatch" error.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_playbook

sys.path.insert(0, str(REPO / "tests"))
from fake_nvidia_root import build  # noqa: E402

GPU_FIXTURES = REPO / "tests" / "fixtures" / "gpu"
FIXTURE = "synthetic-8gpu-imex-after-caps"
HOST_VERSION = "580.105.08"
INVENTORY = "[sglang_containers]\nlocalhost ansible_connection=local\n"


def fixture_uuids() -> list[str]:
    with open(GPU_FIXTURES / FIXTURE / "query-gpu.csv", encoding="utf-8") as handle:
        return [row["uuid"] for row in csv.DictReader(handle, skipinitialspace=True)]


class Container:
    """The paths of one simulated container under tmp_path."""

    def __init__(self, tmp_path: Path, fixture: str = FIXTURE, installs: str | None = HOST_VERSION):
        self.tmp = tmp_path
        self.root = tmp_path / "root"
        build(GPU_FIXTURES / fixture, self.root)
        self.lib = tmp_path / "lib"
        self.lib.mkdir()
        self.cache = tmp_path / "cache"
        self.log = tmp_path / "installer.log"
        self.installer = tmp_path / f"NVIDIA-Linux-x86_64-{HOST_VERSION}.run"
        writes = (f'rm -f {self.lib}/libnvidia-ml.so.* {self.lib}/libcuda.so.*\n'
                  f'touch {self.lib}/libnvidia-ml.so.{installs} {self.lib}/libcuda.so.{installs}\n') if installs else ""
        self.installer.write_text(f'#!/bin/sh\n# STAND-IN for NVIDIA\'s .run installer\necho "$*" >> {self.log}\n{writes}')
        self.smi = tmp_path / "nvidia-smi"
        rows = "\\n".join(f"{uuid}, {HOST_VERSION}" for uuid in fixture_uuids())
        self.smi.write_text(
            "#!/bin/sh\n# STAND-IN for nvidia-smi: works only when the library matches the host\n"
            f'if [ -e {self.lib}/libnvidia-ml.so.{HOST_VERSION} ]; then printf "{rows}\\n"; exit 0; fi\n'
            'echo "Failed to initialize NVML: Driver/library version mismatch"\n'
            f"echo 'NVML library version: {HOST_VERSION[:3]}.95'\nexit 18\n")
        self.smi.chmod(0o755)

    def run(self, *extra: str, check: bool = False):
        private = self.tmp / f"runner{len(list(self.tmp.glob('runner*')))}"
        private.mkdir()
        args = ["-e", f"nvidia_userspace_root={self.root}", "-e", f"nvidia_userspace_cache_dir={self.cache}",
                "-e", f'{{"nvidia_userspace_lib_dirs": ["{self.lib}"]}}',
                "-e", f"nvidia_userspace_nvidia_smi={self.smi}",
                "-e", f"nvidia_userspace_runfile_src={self.installer}", *extra]
        if check:
            args.append("--check")
        return run_playbook(private, "nvidia_userspace.yml", args, inventory=INVENTORY)

    def installer_calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


def test_no_driver_is_skipped_with_a_message(tmp_path):
    box = Container(tmp_path, fixture="synthetic-no-driver")
    run = box.run()
    assert run.status == "successful", run.stdout
    assert run.changed == 0
    assert "Skipped: no NVIDIA driver on the host" in run.stdout
    assert not box.cache.exists() and box.installer_calls() == []


def test_install_once_then_never_again(tmp_path):
    box = Container(tmp_path)
    uuids = '{"nvidia_userspace_expected_uuids": ' + str(fixture_uuids()).replace("'", '"') + "}"
    dry = box.run("-e", uuids, check=True)
    assert dry.status == "successful", dry.stdout
    assert "A real run would install the userspace driver 580.105.08" in dry.stdout
    assert box.installer_calls() == [] and not box.cache.exists()

    first = box.run("-e", uuids)
    assert first.status == "successful", first.stdout
    assert first.changed >= 1
    assert box.installer_calls() == ["--silent --no-kernel-modules --no-nouveau-check --no-x-check"]
    assert "nvidia-smi lists 8 GPU(s) at driver 580.105.08" in first.stdout
    assert (box.cache / box.installer.name).exists()

    second = box.run("-e", uuids)
    assert second.status == "successful", second.stdout
    assert second.changed == 0
    assert len(box.installer_calls()) == 1  # versions equal: the installer is not run again


def test_version_mismatch_names_both_versions(tmp_path):
    box = Container(tmp_path, installs=None)  # an installer that leaves the old libraries in place
    for name in ("libnvidia-ml.so.580.95.05", "libcuda.so.580.95.05"):
        (box.lib / name).touch()
    run = box.run()
    assert run.status == "failed", run.stdout
    message = " ".join(run.failures)
    assert "the host's kernel module is 580.105.08" in message, message
    assert "userspace libraries are 580.95.05" in message, message


def test_missing_gpu_fails_by_uuid(tmp_path):
    box = Container(tmp_path)
    expected = fixture_uuids() + ["GPU-00000000-0000-0000-0000-000000000009"]
    run = box.run("-e", '{"nvidia_userspace_expected_uuids": ' + str(expected).replace("'", '"') + "}")
    assert run.status == "failed", run.stdout
    message = " ".join(run.failures)
    assert "nvidia-smi in the container lists 8 GPU(s)" in message, message
    assert 'Missing: ["GPU-00000000-0000-0000-0000-000000000009"]' in message, message


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["-e", "nvidia_userspace_method=dkms"], ["nvidia_userspace_method", "dkms", "runfile, packages"]),
        (["-e", "nvidia_userspace_expected_gpus=0"], ["Invalid nvidia_userspace input: expected_gpus=0 (expected 1-64)"]),
    ],
)
def test_bad_input_changes_nothing(tmp_path, extra, needles):
    box = Container(tmp_path)
    run = box.run(*extra)
    assert run.status == "failed", run.stdout
    assert run.changed == 0
    message = " ".join(run.failures)
    for needle in needles:
        assert needle in message, message
    assert not box.cache.exists() and box.installer_calls() == [] and list(box.lib.iterdir()) == []
