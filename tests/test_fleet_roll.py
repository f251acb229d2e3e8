"""End to end: the real smg gateway in front of three stand-in SGLang replicas, rolled.

Four systemd Docker containers this test creates on its own Docker network
(link-local 169.254.77.0/24): the gateway (sglang_router role, real smg 1.13.0
from PyPI) and three replicas (sglang, sglang_autotune, sglang_server roles on
real SGLang wheels whose launch_server.py is the stand-in of
molecule/sglang_service/standin). A request loop runs through the gateway during
the roll; a monitor counts the healthy workers the gateway lists.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, sglang_wheel, wheel_cache

NET = "i15-fleet-test"
SUBNET = "169.254.77.0/24"
GATEWAY_IP = "169.254.77.10"
REPLICAS = {f"fleet-r{i}": f"169.254.77.{10 + i}" for i in (1, 2, 3)}
GATEWAY = "fleet-gw"
IMAGE = os.environ.get("MOLECULE_IMAGE", "local/debian12-systemd:latest")
OLD, NEW = "0.5.18", "0.5.23"
SMG_WHEELS = ("smg-1.13.0-", "setproctitle-", "grpcio-", "grpcio_health_checking-", "pyyaml-", "protobuf-",
              "typing_extensions-", "uv-0.13.9-")

pytestmark = pytest.mark.skipif(shutil.which("docker") is None or subprocess.run(
    ["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0,
    reason="needs the Docker engine and the systemd base image (scripts/dev.sh setup)")


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def start(name: str, ip: str) -> None:
    docker("run", "-d", "--name", name, "--hostname", name, "--network", NET, "--ip", ip,
           "--cap-add", "SYS_ADMIN", "--security-opt", "seccomp=unconfined", "--cgroupns=host",
           "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--tmpfs", "/run", "--tmpfs", "/run/lock",
           "--stop-signal", "SIGRTMIN+3", IMAGE, "/lib/systemd/systemd")


def teardown() -> None:
    for name in [GATEWAY, *REPLICAS]:
        docker("rm", "-f", name, check=False)
    docker("network", "rm", NET, check=False)


def inventory(tmp: Path) -> Path:
    common = {"ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}
    replicas = {name: {**common, "ansible_host": name, "sglang_router_worker_address": ip}
                for name, ip in REPLICAS.items()}
    data = {"all": {"children": {
        "sglang_containers": {"hosts": replicas, "vars": {
            "sglang_source": "pypi", "sglang_version": OLD,
            "sglang_pip_extra_args": "--no-index --find-links /opt/sglang-wheels",
            "sglang_install_heavy_dependencies": False, "sglang_install_cuda_toolkit": False,
            "sglang_server_start": True, "sglang_server_ready_timeout": 60, "sglang_server_host": "0.0.0.0",
            "sglang_server_tp_size": 2, "sglang_server_autotune_cache": "fleet", "sglang_server_gpu_sm": "sm120",
            "sglang_server_fleet_cache_dir": str(tmp / "fleet-cache"),
            "sglang_server_environment": {"SGLANG_STANDIN": "1", "SGLANG_CACHE_DIR": "/var/cache/sglang",
                                          "STANDIN_AUTOTUNE_SECONDS": "4", "STANDIN_REQUEST_SECONDS": "0.05"}}},
        "sglang_gateway": {"hosts": {GATEWAY: {**common, "ansible_host": GATEWAY}}, "vars": {
            "sglang_router_pip_extra_args": "--no-index --find-links /opt/smg-wheels",
            "sglang_router_health_check_interval_secs": 1, "sglang_router_health_failure_threshold": 1,
            "sglang_router_health_success_threshold": 1, "sglang_router_policy": "round_robin"}},
    }}}
    path = tmp / "inventory.json"
    path.write_text(json.dumps(data))
    return path


def play(inv: Path, playbook: str, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0"}
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv),
                           str(REPO / "playbooks" / playbook), *extra],
                          capture_output=True, text=True, env=env, cwd=REPO)
    return done, time.monotonic() - started


class Traffic:
    """A bounded request loop through the gateway, and a count of its healthy workers."""

    def __init__(self) -> None:
        self.served = self.failed = 0
        self.errors: list[str] = []
        self.min_healthy = 99
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.requests, args=(route,), daemon=True)
                        for route in ("/v1/completions", "/v1/chat/completions")]
        self.threads.append(threading.Thread(target=self.monitor, daemon=True))

    def requests(self, route: str) -> None:
        body = {"model": "glm-5", "max_tokens": 4}
        body.update({"messages": [{"role": "user", "content": "hi"}]} if "chat" in route else {"prompt": "hi"})
        while not self.stop.is_set():
            request = urllib.request.Request(f"http://{GATEWAY_IP}:30000{route}", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    assert "stand-in completion" in answer.read().decode()
                self.served += 1
            except Exception as exc:  # noqa: BLE001 - every failure counts
                self.failed += 1
                self.errors.append(f"{route}: {exc}")

    def monitor(self) -> None:
        while not self.stop.is_set():
            with urllib.request.urlopen(f"http://{GATEWAY_IP}:30000/workers", timeout=5) as answer:
                workers = json.load(answer)["workers"]
            self.min_healthy = min(self.min_healthy, sum(1 for w in workers if w["is_healthy"]))
            time.sleep(0.2)

    def __enter__(self) -> "Traffic":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=15)


def healthy_urls() -> set[str]:
    with urllib.request.urlopen(f"http://{GATEWAY_IP}:30000/workers", timeout=5) as answer:
        return {w["url"] for w in json.load(answer)["workers"] if w["is_healthy"]}


def current_version(name: str) -> str:
    out = docker("exec", name, "cat", "/opt/sglang/current/sglang-manifest.json").stdout
    return json.loads(out)["resolved"]["sglang"]


def journal(name: str) -> str:
    return docker("exec", name, "journalctl", "-u", "sglang", "--no-pager", "-o", "cat").stdout


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("fleet")
    teardown()
    docker("network", "create", "--subnet", SUBNET, NET)
    try:
        start(GATEWAY, GATEWAY_IP)
        for name, ip in REPLICAS.items():
            start(name, ip)
        wheels = tmp / "wheels"
        for version in (OLD, NEW):
            subprocess.run([sys.executable, str(REPO / "molecule/sglang_service/standin/make_wheel.py"),
                            str(sglang_wheel(version)), str(wheels)], check=True, capture_output=True)
        shutil.copy(next(wheel_cache().glob("uv-0.13.9-*.whl")), wheels)
        smg = tmp / "smg-wheels"
        smg.mkdir()
        for prefix in SMG_WHEELS:
            found = sorted(wheel_cache().glob(prefix + "*.whl"))
            assert found, f"{prefix}*.whl missing in {wheel_cache()}: pip download --dest it smg==1.13.0"
            shutil.copy(found[-1], smg)
        for name in REPLICAS:
            docker("cp", str(wheels), f"{name}:/opt/sglang-wheels")
        docker("cp", str(smg), f"{GATEWAY}:/opt/smg-wheels")
        inv = inventory(tmp)
        done, seconds = play(inv, "fleet.yml")
        assert done.returncode == 0, done.stdout[-4000:]
        yield {"inv": inv, "tmp": tmp, "deploy_seconds": seconds, "wheels": wheels}
    finally:
        teardown()


def test_roll_serves_every_request_and_shares_the_cache(fleet, record_property):
    assert healthy_urls() == {f"http://{ip}:30000" for ip in REPLICAS.values()}
    with Traffic() as traffic:
        time.sleep(1)
        done, seconds = play(fleet["inv"], "rolling_upgrade.yml", "-e", f"sglang_version={NEW}")
        time.sleep(1)
    assert done.returncode == 0, done.stdout[-4000:]
    figures = {"roll_seconds": round(seconds, 1), "per_replica": round(seconds / 3, 1),
               "served": traffic.served, "failed": traffic.failed, "min_healthy": traffic.min_healthy}
    print("FLEET FIGURES", json.dumps(figures))
    record_property("fleet", figures)
    assert traffic.failed == 0, traffic.errors[:5]
    assert traffic.served > 50
    assert traffic.min_healthy >= len(REPLICAS) - 1
    assert {name: current_version(name) for name in REPLICAS} == {name: NEW for name in REPLICAS}
    assert healthy_urls() == {f"http://{ip}:30000" for ip in REPLICAS.values()}
    # The first replica tuned FlashInfer 0.7.2 (0.5.23's pin) and handed it in; the others reused it.
    cache = fleet["tmp"] / "fleet-cache"
    assert sorted(p.relative_to(cache).parts[:2] for p in cache.rglob("*.json"))[-1] == ("0.7.2", "sm120")
    assert "autotune tuned and wrote the cache" in journal("fleet-r1").split("SGLang 0.5.23 starting")[-1]
    for name in ("fleet-r2", "fleet-r3"):
        last = journal(name).split("SGLang 0.5.23 starting")[-1]
        assert "autotune reused the cache" in last, last[-2000:]
        owner = docker("exec", name, "sh", "-c", "stat -c %U /var/cache/sglang/flashinfer/autotune/0.7.2/sm120/*/*.json")
        assert set(owner.stdout.split()) == {"sglang"}
    # Never across a FlashInfer version: 0.5.18's 0.6.17 cache was tuned per replica, not pushed.
    assert not list(cache.glob("0.6.17/*/*/*.json")) or all(
        "autotune tuned" in journal(n).split("SGLang 0.5.23 starting")[0] for n in REPLICAS)


def test_failed_upgrade_stops_the_roll_and_a_rerun_converges(fleet):
    docker("exec", "fleet-r2", "mv", "/opt/sglang-wheels", "/opt/sglang-wheels.away")
    with Traffic() as traffic:
        done, _ = play(fleet["inv"], "rolling_upgrade.yml", "-e", f"sglang_version={OLD}")
        time.sleep(1)
    assert done.returncode != 0
    assert "The roll stopped at fleet-r2" in done.stdout, done.stdout[-3000:]
    assert traffic.failed == 0, traffic.errors[:5]
    assert current_version("fleet-r1") == OLD
    assert current_version("fleet-r2") == NEW   # its previous install, still serving it
    assert current_version("fleet-r3") == NEW   # never touched
    assert healthy_urls() == {f"http://{REPLICAS['fleet-r1']}:30000", f"http://{REPLICAS['fleet-r3']}:30000"}
    docker("exec", "fleet-r2", "mv", "/opt/sglang-wheels.away", "/opt/sglang-wheels")
    done, _ = play(fleet["inv"], "rolling_upgrade.yml", "-e", f"sglang_version={OLD}")
    assert done.returncode == 0, done.stdout[-4000:]
    assert {name: current_version(name) for name in REPLICAS} == {name: OLD for name in REPLICAS}
    assert healthy_urls() == {f"http://{ip}:30000" for ip in REPLICAS.values()}
