"""playbooks/model.yml against the stand-in Hub (tests/hub_standin.py): huggingface_hub 2.4.0 for real.

The contract: ansible-playbook -i localhost, -c local playbooks/model.yml -e sglang_model_repo=R
-e sglang_model_dir=D -e sglang_model_hf_endpoint=URL [-e sglang_model_hf_token=T].
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, run_playbook, tree_digest, wheel_cache
from hub_standin import Hub, make_model, standin_env

HUB_VERSION = "2.4.0"
REPO_ID = "acme/tiny-glm"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_standin_9f3c1e7a5b2d4c6e8f0a"  # the stand-in's, made up


@pytest.fixture(scope="session")
def hf_venv() -> Path:
    """A virtualenv with the pinned huggingface_hub from PyPI, made once and kept with the wheel cache."""
    venv = wheel_cache().parent / f"hf-venv-{HUB_VERSION}"
    python = venv / "bin" / "python"
    probe = [str(python), "-c", f"import huggingface_hub as h; assert h.__version__ == {HUB_VERSION!r}"]
    if not python.exists() or subprocess.run(probe, capture_output=True).returncode != 0:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"huggingface_hub=={HUB_VERSION}"],
                       check=True)
    return venv


@pytest.fixture
def hub(tmp_path: Path):
    served = Hub()
    served.add(REPO_ID, make_model(tmp_path / "source"), commit=COMMIT)
    yield served
    served.close()


def inventory(tmp_path: Path) -> str:
    path = tmp_path / "hosts"
    path.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    return str(path)


def args(hub: Hub, store: Path, venv: Path, *extra: str) -> list[str]:
    return ["-e", f"sglang_model_repo={REPO_ID}", "-e", f"sglang_model_dir={store}",
            "-e", f"sglang_model_hf_endpoint={hub.url}", "-e", f"sglang_model_venv={venv}",
            "-e", json.dumps({"sglang_model_system_packages": [], "sglang_model_poll_seconds": 1}), *extra]


def fetch(tmp_path: Path, hub: Hub, venv: Path, *extra: str, name: str = "run"):
    private = tmp_path / name
    private.mkdir(exist_ok=True)
    return run_playbook(private, "model.yml", args(hub, tmp_path / "store", venv, *extra),
                        inventory=inventory(tmp_path), envvars={"NO_PROXY": "127.0.0.1,127.0.0.2"})


def final(tmp_path: Path) -> Path:
    return tmp_path / "store" / "acme--tiny-glm" / COMMIT


def same_as_source(tmp_path: Path, hub: Hub) -> None:
    files = hub.repos[REPO_ID].files
    for name, data in files.items():
        assert (final(tmp_path) / name).read_bytes() == data, name
    assert os.readlink(tmp_path / "store" / "acme--tiny-glm" / "current") == COMMIT


def test_fresh_fetch_then_a_converged_run_downloads_nothing(tmp_path, hub, hf_venv):
    first = fetch(tmp_path, hub, hf_venv)
    assert first.rc == 0, first.stdout[-3000:]
    same_as_source(tmp_path, hub)
    assert "% of " in first.stdout or "checked;" in first.stdout  # the progress report
    manifest = json.loads((final(tmp_path) / ".sglang-model.json").read_text())
    assert manifest["commit"] == COMMIT and manifest["revision"] == "main" and manifest["complete"] is True
    assert not (tmp_path / "store" / "acme--tiny-glm" / ".partial").exists()
    # The LFS files came from the CDN side, and the token (none here) never went there.
    assert any(path.startswith("cdn:/cdn/") for _, path, _ in hub.log)

    hub.log.clear()
    again = fetch(tmp_path, hub, hf_venv, name="again")
    assert again.rc == 0 and again.changed == 0, again.stdout[-3000:]
    assert [entry for entry in hub.log if "/resolve/" in entry[1] or entry[1].startswith("cdn:")] == []

    hub.log.clear()
    pinned = fetch(tmp_path, hub, hf_venv, "-e", f"sglang_model_revision={COMMIT}", name="pinned")
    assert pinned.rc == 0 and pinned.changed == 0, pinned.stdout[-3000:]
    assert hub.log == []  # a complete pinned commit needs no Hub at all


def test_a_shard_corrupted_in_transit_is_refused_named_and_fetched_next_run(tmp_path, hub, hf_venv):
    shard = "model-00002-of-00003.safetensors"
    hub.corrupt.add(shard)
    bad = fetch(tmp_path, hub, hf_venv)
    assert bad.rc != 0
    message = " ".join(bad.failures)
    assert shard in message and "sha256" in message and "the Hub's tree says" in message, message
    assert not (final(tmp_path) / shard).exists()
    assert not (tmp_path / "store" / "acme--tiny-glm" / "current").exists()

    good = fetch(tmp_path, hub, hf_venv, name="again")
    assert good.rc == 0, good.stdout[-3000:]
    same_as_source(tmp_path, hub)


def test_full_verify_rehashes_and_replaces_a_file_changed_on_disk(tmp_path, hub, hf_venv):
    assert fetch(tmp_path, hub, hf_venv).rc == 0
    shard = final(tmp_path) / "model-00001-of-00003.safetensors"
    stat = shard.stat()
    data = bytearray(shard.read_bytes())
    data[-10] ^= 0x01
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime: cheap cannot see it

    full = fetch(tmp_path, hub, hf_venv, "-e", "sglang_model_verify=full", name="full")
    assert full.rc == 0 and full.changed >= 1, full.stdout[-3000:]
    assert "model-00001-of-00003.safetensors: sha256" in " ".join(full.stdout.split())
    same_as_source(tmp_path, hub)


def test_a_gated_repo_needs_the_token_and_no_output_shows_it(tmp_path, hub, hf_venv):
    hub.repos[REPO_ID].gated_token = TOKEN
    refused = fetch(tmp_path, hub, hf_venv)
    assert refused.rc != 0
    message = " ".join(refused.failures)
    assert "gated repo" in message and "no token was given" in message and "sglang_model_hf_token" in message
    assert not final(tmp_path).exists()

    wrong = fetch(tmp_path, hub, hf_venv, "-e", "sglang_model_hf_token=hf_wrong", name="wrong")
    assert "the token given was not accepted" in " ".join(wrong.failures)

    secrets = tmp_path / "secrets.yml"  # as a vault file would hand it in
    secrets.write_text(f"sglang_model_hf_token: {TOKEN}\n")
    started = time.time()
    given = fetch(tmp_path, hub, hf_venv, "-e", f"@{secrets}", "-vvv", "--diff", name="given")
    assert given.rc == 0, given.stdout[-3000:]
    same_as_source(tmp_path, hub)
    for run in (refused, wrong, given):
        assert TOKEN not in run.stdout
    jobs = [p for p in (Path.home() / ".ansible_async").glob("*") if p.stat().st_mtime >= started - 1]
    for path in [*tmp_path.rglob("*"), *jobs]:
        if path.is_file() and path != secrets and "source" not in path.parts and "env" not in path.parts:
            assert TOKEN.encode() not in path.read_bytes(), path
    assert not [entry for entry in hub.auth_seen if entry[0] == "cdn"]  # the token stays on the Hub


def test_too_little_space_is_refused_before_any_shard(tmp_path, hub, hf_venv):
    check = fetch(tmp_path, hub, hf_venv, "-e", "sglang_model_keep_free_gb=100000000", "--check", name="check")
    assert "Not enough space" in " ".join(check.failures)  # check mode fails where the run would
    assert not (tmp_path / "store").exists()
    run = fetch(tmp_path, hub, hf_venv, "-e", "sglang_model_keep_free_gb=100000000")
    assert run.rc != 0
    message = " ".join(run.failures)
    assert "Not enough space" in message and "still needs 12.0 MiB" in message, message
    assert not final(tmp_path).exists()
    assert not [entry for entry in hub.log if "/resolve/" in entry[1] or entry[1].startswith("cdn:")]


def test_bad_input_is_refused_and_nothing_changes(tmp_path, hub, hf_venv):
    before = tree_digest(tmp_path / "store", hf_venv / "bin")
    run = fetch(tmp_path, hub, hf_venv, "-e", "sglang_model_repo=../etc", "-e", "sglang_model_verify=fast")
    assert run.rc != 0
    message = " ".join(run.failures)
    assert "sglang_model_verify" in message or "sglang_model_repo='../etc'" in message, message
    assert tree_digest(tmp_path / "store", hf_venv / "bin") == before
    assert hub.log == []


def test_kill_9_mid_shard_then_the_rerun_resumes(tmp_path, hub, hf_venv):
    # huggingface_hub writes in 10 MiB chunks (DOWNLOAD_CHUNK_SIZE): 24 MiB shards at 8 MiB/s
    # have a part on disk for a couple of seconds.
    hub.add(REPO_ID, make_model(tmp_path / "big", shard_mb=24), commit=COMMIT)
    hub.rate = 8 * 1024 * 1024
    (tmp_path / "kill").mkdir()
    command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory(tmp_path),
               str(REPO / "playbooks" / "model.yml"), *args(hub, tmp_path / "store", hf_venv)]
    # The killed fetch never removes its module's payload directory (AnsiballZ's, in TMPDIR): it
    # stays in this test's directory, not in the machine's /tmp.
    (tmp_path / "tmp").mkdir()
    env = dict(standin_env(), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), TMPDIR=str(tmp_path / "tmp"))
    progress = tmp_path / "store" / ".progress" / "acme--tiny-glm.json"
    partial = tmp_path / "store" / "acme--tiny-glm" / ".partial" / COMMIT
    player = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    staged: list[Path] = []
    while time.monotonic() < deadline:
        staged = [p for p in partial.glob("*.incomplete") if p.stat().st_size >= 10 * 1024 * 1024] if partial.exists() else []
        if staged and progress.exists():
            break
        time.sleep(0.1)
    assert staged, "no shard was under way"
    pid = json.loads(progress.read_text())["pid"]
    os.kill(pid, signal.SIGKILL)
    player.kill()
    player.wait()
    shard = staged[0].name.removesuffix(".incomplete")
    kept = staged[0].stat().st_size
    assert not (final(tmp_path) / shard).exists()  # never a partial file under the final name

    time.sleep(1)  # the stand-in's sender of the killed download stops at its broken pipe
    hub.rate = 0
    hub.log.clear()
    sent_before = hub.bytes_sent
    resumed = fetch(tmp_path, hub, hf_venv, name="resumed")
    assert resumed.rc == 0, resumed.stdout[-3000:]
    same_as_source(tmp_path, hub)
    ranges = [rng for method, path, rng in hub.log if method == "GET" and path.endswith("/" + shard)]
    assert ranges and ranges[-1].startswith("bytes=") and int(ranges[-1][6:-1]) == kept, (shard, kept, hub.log)
    resent = hub.bytes_sent - sent_before
    total = sum(len(d) for d in hub.repos[REPO_ID].files.values())
    assert resent <= total - kept
    print(f"\nkill -9 after {kept} bytes of {shard}; the re-run fetched {resent} of {total} bytes")


def test_another_node_copies_from_the_first_nodes_store_checked_the_same_way(tmp_path, hub, hf_venv):
    assert fetch(tmp_path, hub, hf_venv).rc == 0
    first = tmp_path / "store"
    shard = final(tmp_path) / "model-00003-of-00003.safetensors"
    data = bytearray(shard.read_bytes())
    hub.log.clear()
    second = tmp_path / "second"
    copy = run_playbook(tmp_path / "run", "model.yml", args(hub, second, hf_venv, "-e", f"sglang_model_source={first}"),
                        inventory=inventory(tmp_path))
    assert copy.rc == 0, copy.stdout[-3000:]
    assert hub.log == []  # nothing from the Hub
    copied = second / "acme--tiny-glm" / COMMIT
    for name, content in hub.repos[REPO_ID].files.items():
        assert (copied / name).read_bytes() == content

    data[100] ^= 0xFF  # the first node's copy goes bad: the next node refuses it
    shard.write_bytes(bytes(data))
    third = run_playbook(tmp_path / "run", "model.yml",
                         args(hub, tmp_path / "third", hf_venv, "-e", f"sglang_model_source={first}"),
                         inventory=inventory(tmp_path))
    assert third.rc != 0
    message = " ".join(third.failures)
    assert "model-00003-of-00003.safetensors: sha256" in message and f"the store at {first}" in message, message
    assert not (tmp_path / "third" / "acme--tiny-glm" / COMMIT / "model-00003-of-00003.safetensors").exists()


# A measurement, not a check (fresh, converged and full re-hash are checked above on a small model):
# run on request with SGLANG_MEASURE=1 and -s. It hashed and served 384 MiB in every CI run.
@pytest.mark.skipif(not os.environ.get("SGLANG_MEASURE"), reason="a measurement: SGLANG_MEASURE=1 -s runs it")
def test_measure_throughput_converged_run_and_resume(tmp_path, hf_venv):
    """Figures for the closing note (printed with -s): a 3 x 128 MiB model from the stand-in."""
    served = Hub()
    try:
        served.add(REPO_ID, make_model(tmp_path / "source", shard_mb=128), commit=COMMIT)
        start = time.monotonic()
        fresh = fetch(tmp_path, served, hf_venv, "-e", f"sglang_model_revision={COMMIT}")
        fresh_s = time.monotonic() - start
        assert fresh.rc == 0, fresh.stdout[-3000:]
        start = time.monotonic()
        again = fetch(tmp_path, served, hf_venv, "-e", f"sglang_model_revision={COMMIT}", name="again")
        again_s = time.monotonic() - start
        assert again.rc == 0 and again.changed == 0
        start = time.monotonic()
        full = fetch(tmp_path, served, hf_venv, "-e", f"sglang_model_revision={COMMIT}",
                     "-e", "sglang_model_verify=full", name="full")
        full_s = time.monotonic() - start
        assert full.rc == 0 and full.changed == 0
        size = sum(len(d) for d in served.repos[REPO_ID].files.values())
        module = next(float(m) for m in re.findall(r"with the checks|in ([0-9.]+) s, with", " ".join(fresh.stdout.split())) if m)
        print(f"\nfresh: {size / 2**20:.0f} MiB in {module:.1f} s in the module ({size / 2**20 / module:.0f} MiB/s,"
              f" sha256 included), {fresh_s:.1f} s the whole play;"
              f" converged re-run {again_s:.1f} s; full re-hash {full_s:.1f} s")
    finally:
        served.close()
