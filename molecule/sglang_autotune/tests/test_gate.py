"""The gate file in each container, compared with what pip recorded at install.

pip's RECORD holds the sha256 of every file as shipped, so it is an independent
witness of "original bytes" that this project never wrote.
"""

from __future__ import annotations

import base64
import json

import pytest

FIND = (
    "/opt/sglang/current/bin/python -c "
    "\"import importlib.util as u, os; print(os.path.realpath(u.find_spec('sglang').submodule_search_locations[0]))\""
)
GATE = {
    "autotune-old": "srt/model_executor/model_runner.py",
    "autotune-new": "srt/model_executor/runner/flashinfer_autotune.py",
}
ENTRY_ACTIVE = '            "flashinfer_cutlass",'
ENTRY_COMMENTED = '            # "flashinfer_cutlass",'


def package_dir(host) -> str:
    return host.check_output(FIND)


def shipped_sha256(host, package: str, rel: str) -> str:
    site = package.rsplit("/", 1)[0]
    record = host.check_output(f"cat {site}/sglang-*.dist-info/RECORD")
    for row in record.splitlines():
        path, digest, _ = row.rsplit(",", 2)
        if path == f"sglang/{rel}":
            b64 = digest.split("=", 1)[1]
            return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
    raise AssertionError(f"sglang/{rel} not in RECORD")


def rolled_back(host) -> bool:
    return host.file("/var/lib/sglang_autotune_rolled_back").exists


@pytest.fixture
def gate(host):
    name = host.backend.get_hostname()
    package = package_dir(host)
    rel = GATE[name]
    path = f"{package}/{rel}"
    return {
        "name": name,
        "path": path,
        "sha256": host.check_output(f"sha256sum {path}").split()[0],
        "shipped": shipped_sha256(host, package, rel),
        "lines": host.file(path).content_string.splitlines(),
    }


def test_file_still_compiles(host, gate):
    host.run_expect([0], f"/opt/sglang/current/bin/python -m py_compile {gate['path']}")


def test_old_release_patched_then_restored(host, gate):
    if gate["name"] != "autotune-old":
        pytest.skip("0.5.10 only")
    records = host.run("cat /var/lib/sglang_autotune/*.json")
    if rolled_back(host):
        assert gate["sha256"] == gate["shipped"]
        assert gate["lines"].count(ENTRY_COMMENTED) == 1
        assert ENTRY_ACTIVE not in gate["lines"]
        assert records.rc != 0, "no log of a patch the file no longer carries"
    else:
        assert gate["sha256"] != gate["shipped"]
        assert gate["lines"].count(ENTRY_ACTIVE) == 1
        assert ENTRY_COMMENTED not in gate["lines"]
        record = json.loads(records.stdout)
        assert record["original_sha256"] == gate["shipped"]
        assert record["patched_sha256"] == gate["sha256"]
        assert record["version"] == "0.5.10"
        assert record["file"] == gate["path"]


def test_upstream_release_never_edited(host, gate):
    if gate["name"] != "autotune-new":
        pytest.skip("0.5.23 only")
    assert gate["sha256"] == gate["shipped"]
    assert host.run("ls /var/lib/sglang_autotune/*.json").rc != 0
