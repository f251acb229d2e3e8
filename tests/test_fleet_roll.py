"""End to end: the real smg gateway in front of three stand-in SGLang replicas, rolled.

Run by hand, not yet in CI (issue 15 is open: cold, it deploys in 163 s, more than CI's
20 minutes have room for): `python -m pytest tests/by_hand/fleet_roll.py -p
no:cacheprovider` with tests/ on the import path (`PYTHONPATH=tests`).

Four systemd Docker containers this test creates on its own Docker network
(link-local 169.254.77.0/24): the gateway (sglang_router role, real smg 1.13.0
from PyPI) and three replicas (sglang, sglang_autotune, sglang_server roles on
real SGLang wheels, slimmed to what the roles read, whose launch_server.py is
the stand-in of molecule/sglang_service/standin). One module-scoped fleet serves both tests:
deployed on 0.5.18 (playbooks/fleet.yml), then rolled to 0.5.23 with fleet-r1
made to fail its upgrade (the roll stops there, the others serve), then rolled
again once the cause is gone (the re-run converges, fleet-r1's autotune cache
pushed to fleet-r2 and fleet-r3). A bounded request loop runs through the
gateway during both rolls; a monitor counts the healthy workers it lists.

The deployed fleet is kept as Docker images (local/i15-fleet-<name>:<key>, the
controller's fleet cache next to the wheels) keyed by the digest of the roles,
the playbooks, the stand-in, this file and the base image: a later run with
the same key starts from them instead of deploying again. FLEET_REDEPLOY=1
deploys anyway; FLEET_KEEP=1 leaves the containers running.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
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
URLS = {name: f"http://{ip}:30000" for name, ip in REPLICAS.items()}
GATEWAY = "fleet-gw"
IMAGE = os.environ.get("MOLECULE_IMAGE", "local/debian12-systemd:latest")
OLD, NEW = "0.5.18", "0.5.23"          # FlashInfer 0.6.17 and 0.7.2 (their pins)
AUTOTUNE_SECONDS = 2                  # the stand-in's tuning time; a tenth with a usable cache
FAILING = "fleet-r1"                  # its wheels are taken away: its upgrade fails
SMG_WHEELS = ("smg-1.13.0-", "setproctitle-", "grpcio-", "grpcio_health_checking-", "pyyaml-", "protobuf-",
              "typing_extensions-", "uv-0.13.9-")

pytestmark = pytest.mark.skipif(shutil.which("docker") is None or subprocess.run(
    ["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0,
    reason="needs the Docker engine and the systemd base image (scripts/dev.sh setup)")


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def start(name: str, ip: str, image: str = IMAGE) -> None:
    docker("run", "-d", "--name", name, "--hostname", name, "--network", NET, "--ip", ip,
           "--cap-add", "SYS_ADMIN", "--security-opt", "seccomp=unconfined", "--cgroupns=host",
           "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--tmpfs", "/run", "--tmpfs", "/run/lock",
           "--stop-signal", "SIGRTMIN+3", image, "/lib/systemd/systemd")


def deployed_key() -> str:
    """What the deployed fleet depends on: a change to any of it deploys again."""
    digest = hashlib.sha256(docker("image", "inspect", IMAGE, "--format", "{{.Id}}").stdout.encode())
    files = [Path(__file__), *sorted((REPO / "molecule/sglang_service/standin").glob("*"))]
    for folder in ("roles", "playbooks"):
        files += sorted(p for p in (REPO / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    for version in (OLD, NEW):
        digest.update(sglang_wheel(version).name.encode())
    return digest.hexdigest()[:16]


def image_of(name: str, key: str) -> str:
    return f"local/i15-fleet-{name}:{key}"


def deploy_cache(key: str) -> Path:
    return wheel_cache().parent / "fleet-test" / key


def teardown() -> None:
    docker("rm", "-f", GATEWAY, *REPLICAS, check=False)
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
            # TP 2: the hand-in must carry every rank's file (SGLang discards a set that disagrees).
            "sglang_server_tp_size": 2, "sglang_server_autotune_cache": "fleet", "sglang_server_gpu_sm": "sm120",
            "sglang_server_fleet_cache_dir": str(tmp / "fleet-cache"),
            "sglang_server_environment": {"SGLANG_STANDIN": "1", "SGLANG_CACHE_DIR": "/var/cache/sglang",
                                          "STANDIN_AUTOTUNE_SECONDS": str(AUTOTUNE_SECONDS),
                                          "STANDIN_REQUEST_SECONDS": "0.05"}}},
        "sglang_gateway": {"hosts": {GATEWAY: {**common, "ansible_host": GATEWAY}}, "vars": {
            "sglang_router_pip_extra_args": "--no-index --find-links /opt/smg-wheels",
            "sglang_router_health_check_interval_secs": 1, "sglang_router_health_failure_threshold": 1,
            "sglang_router_health_success_threshold": 1, "sglang_router_policy": "round_robin"}},
    }}}
    path = tmp / "inventory.json"
    path.write_text(json.dumps(data))
    return path


def play(tmp: Path, playbook: str, *extra: str, log: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0"}
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp / "inventory.json"),
                           str(REPO / "playbooks" / playbook), *extra],
                          capture_output=True, text=True, env=env, cwd=REPO)
    (tmp / f"{log}.log").write_text(done.stdout + done.stderr)
    return done, time.monotonic() - started


def workers() -> list[dict]:
    with urllib.request.urlopen(f"http://{GATEWAY_IP}:30000/workers", timeout=5) as answer:
        return json.load(answer)["workers"]


def healthy_urls() -> set[str]:
    return {w["url"] for w in workers() if w["is_healthy"]}


class Traffic:
    """A bounded request loop through the gateway, and a watch on its healthy workers."""

    def __init__(self) -> None:
        self.served = self.failed = 0
        self.errors: list[str] = []
        self.min_healthy = len(REPLICAS)
        self.out_seconds = {url: 0.0 for url in URLS.values()}   # time each was not healthy in the gateway
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.requests, args=(route,), daemon=True)
                        for route in ("/v1/completions", "/v1/chat/completions")]
        self.threads.append(threading.Thread(target=self.monitor, daemon=True))

    def requests(self, route: str) -> None:
        body = {"model": "glm-5", "max_tokens": 4}
        body.update({"messages": [{"role": "user", "content": "hi"}]} if "chat" in route else {"prompt": "hi"})
        while not self.stop.wait(0.05):   # a bounded rate: the controller has two cores to share
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
        last = time.monotonic()
        while not self.stop.is_set():
            healthy = healthy_urls()
            now = time.monotonic()
            for url in self.out_seconds:
                if url not in healthy:
                    self.out_seconds[url] += now - last
            last = now
            self.min_healthy = min(self.min_healthy, len(healthy))
            time.sleep(0.2)

    def __enter__(self) -> "Traffic":
        for thread in self.threads:
            thread.start()
        time.sleep(0.5)
        return self

    def __exit__(self, *_: object) -> None:
        time.sleep(0.5)
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=15)


def current_version(name: str) -> str:
    out = docker("exec", name, "cat", "/opt/sglang/current/sglang-manifest.json").stdout
    return json.loads(out)["resolved"]["sglang"]


def last_start(name: str) -> str:
    """The journal of the unit's latest start."""
    text = docker("exec", name, "journalctl", "-u", "sglang", "--no-pager", "-o", "cat").stdout
    return text.split("stand-in launch_server: SGLang ")[-1]


def ready_seconds(name: str) -> float:
    return float(re.search(r"stand-in: ready ([\d.]+) s after start", last_start(name)).group(1))


def host_lines(stdout: str, host: str, task: str) -> str:
    """What the play printed for one host under the task named task."""
    found = re.findall(rf"TASK \[[^\]]*{re.escape(task)}[^\]]*\][^\n]*\n(.*?)(?=\nTASK |\nPLAY )", stdout, re.S)
    return " ".join(" ".join(block for block in found if f"[{host}]" in block).split())


def deploy(tmp: Path, key: str) -> float:
    """Containers from the base image, wheels copied in, playbooks/fleet.yml; then kept as images."""
    for name, ip in {GATEWAY: GATEWAY_IP, **REPLICAS}.items():
        start(name, ip)
    wheels = tmp / "wheels"
    for version in (OLD, NEW):
        subprocess.run([sys.executable, str(REPO / "molecule/sglang_service/standin/make_wheel.py"),
                        str(sglang_wheel(version)), str(wheels), "--slim"], check=True, capture_output=True)
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
    done, seconds = play(tmp, "fleet.yml", log="deploy")
    assert done.returncode == 0, done.stdout[-4000:]
    assert healthy_urls() == set(URLS.values())
    for old in docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "local/i15-fleet-*").stdout.split():
        docker("rmi", old, check=False)
    for name in [GATEWAY, *REPLICAS]:
        docker("commit", name, image_of(name, key))
    shutil.rmtree(deploy_cache(key).parent, ignore_errors=True)
    shutil.copytree(tmp / "fleet-cache", deploy_cache(key) / "fleet-cache")
    return seconds


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("fleet")
    teardown()
    docker("network", "create", "--subnet", SUBNET, NET)
    key = deployed_key()
    inventory(tmp)
    try:
        kept = all(docker("image", "inspect", image_of(n, key), check=False).returncode == 0
                   for n in [GATEWAY, *REPLICAS]) and (deploy_cache(key) / "fleet-cache").is_dir()
        if kept and not os.environ.get("FLEET_REDEPLOY"):
            started = time.monotonic()
            shutil.copytree(deploy_cache(key) / "fleet-cache", tmp / "fleet-cache")
            for name, ip in {**REPLICAS, GATEWAY: GATEWAY_IP}.items():
                start(name, ip, image_of(name, key))
            while time.monotonic() - started < 90:   # systemd starts the enabled units at boot
                try:
                    if healthy_urls() == set(URLS.values()):
                        break
                except OSError:
                    pass
                time.sleep(0.5)
            assert healthy_urls() == set(URLS.values())
            seconds, how = time.monotonic() - started, "kept images"
        else:
            seconds, how = deploy(tmp, key), "playbooks/fleet.yml"
        yield {"tmp": tmp, "deploy_seconds": seconds, "deployed_by": how}
    finally:
        if not os.environ.get("FLEET_KEEP"):
            teardown()


@pytest.fixture(scope="module")
def failed_roll(fleet):
    """Roll to NEW with the first replica's wheels gone: its install fails, the roll stops there."""
    docker("exec", FAILING, "mv", "/opt/sglang-wheels", "/opt/sglang-wheels.away")
    try:
        with Traffic() as traffic:
            done, seconds = play(fleet["tmp"], "rolling_upgrade.yml", "-e", f"sglang_version={NEW}", log="roll-failed")
        state = {"versions": {name: current_version(name) for name in REPLICAS}, "healthy": healthy_urls(),
                 "listed": {w["url"] for w in workers()}}
        with urllib.request.urlopen(f"{URLS[FAILING]}/health", timeout=5) as answer:
            state["failed_serves_directly"] = answer.status == 200
    finally:
        docker("exec", FAILING, "mv", "/opt/sglang-wheels.away", "/opt/sglang-wheels")
    return {"done": done, "seconds": seconds, "traffic": traffic, "state": state}


@pytest.fixture(scope="module")
def rerun(fleet, failed_roll):
    """The same roll again, the cause fixed: it converges."""
    with Traffic() as traffic:
        done, seconds = play(fleet["tmp"], "rolling_upgrade.yml", "-e", f"sglang_version={NEW}", log="roll-rerun")
    return {"done": done, "seconds": seconds, "traffic": traffic}


def test_a_failed_upgrade_stops_the_roll_and_the_rest_serve(failed_roll):
    done, traffic, state = failed_roll["done"], failed_roll["traffic"], failed_roll["state"]
    assert done.returncode != 0
    assert f"The roll stopped at {FAILING}" in done.stdout, done.stdout[-3000:]
    assert "[fleet-r2" not in done.stdout and "[fleet-r3" not in done.stdout   # never started
    assert traffic.failed == 0, traffic.errors[:5]
    assert traffic.served > 20
    assert traffic.min_healthy >= len(REPLICAS) - 1
    assert state["versions"] == {name: OLD for name in REPLICAS}
    # The failed replica stays out of the gateway, on its previous install, still up; the others serve.
    assert state["healthy"] == state["listed"] == {URLS["fleet-r2"], URLS["fleet-r3"]}
    assert state["failed_serves_directly"]


def test_a_rerun_converges_and_shares_the_cache(rerun, failed_roll, fleet, record_property):
    done, traffic = rerun["done"], rerun["traffic"]
    assert done.returncode == 0, done.stdout[-4000:]
    assert traffic.failed == 0, traffic.errors[:5]
    assert traffic.served > 50
    assert traffic.min_healthy >= len(REPLICAS) - 1
    assert {name: current_version(name) for name in REPLICAS} == {name: NEW for name in REPLICAS}
    assert healthy_urls() == {w["url"] for w in workers()} == set(URLS.values())
    # fleet-r1 went first (it was out of the gateway) and tuned FlashInfer 0.7.2 (0.5.23's pin)
    # from scratch although the fleet held 0.5.18's FlashInfer 0.6.17 cache: never pushed
    # across a FlashInfer version. It handed every rank's file in.
    cache = fleet["tmp"] / "fleet-cache"
    assert list(cache.glob("0.6.17/sm120/*/rank_tp*_pp0_dp0.json"))
    first = host_lines(done.stdout, "fleet-r1", "Say what the fleet's cache")
    assert "FlashInfer 0.7.2" in first and "the fleet has no cache for this pair yet" in first, first
    assert "autotune tuned and wrote the cache" in last_start("fleet-r1")
    assert sorted(p.name for p in cache.glob("0.7.2/sm120/*/*.json")) == ["rank_tp0_pp0_dp0.json",
                                                                          "rank_tp1_pp0_dp0.json"]
    # ... which was pushed to fleet-r2 and fleet-r3, owned by the service user, and used there.
    for name in ("fleet-r2", "fleet-r3"):
        assert "pushing" in host_lines(done.stdout, name, "Say what the fleet's cache")
        journal = last_start(name)
        assert "Running FlashInfer autotune with cache: /var/cache/sglang/flashinfer/autotune/0.7.2/sm120/" in journal
        assert "autotune reused the cache" in journal, journal[-2000:]
        owner = docker("exec", name, "sh", "-c", "stat -c %U /var/cache/sglang/flashinfer/autotune/0.7.2/sm120/*/*.json")
        assert set(owner.stdout.split()) == {"sglang"}
    without = ready_seconds("fleet-r1")
    with_cache = {name: ready_seconds(name) for name in ("fleet-r2", "fleet-r3")}
    assert all(seconds < without for seconds in with_cache.values()), (without, with_cache)
    figures = {"fleet_by": fleet["deployed_by"], "fleet_seconds": round(fleet["deploy_seconds"], 1),
               "failed_roll_seconds": round(failed_roll["seconds"], 1),
               "rerun_seconds": round(rerun["seconds"], 1), "rerun_per_replica": round(rerun["seconds"] / 3, 1),
               "served": traffic.served + failed_roll["traffic"].served,
               "failed": traffic.failed + failed_roll["traffic"].failed,
               "min_healthy": min(traffic.min_healthy, failed_roll["traffic"].min_healthy),
               "out_of_gateway_seconds_rerun": {u.split("//")[1]: round(s, 1) for u, s in traffic.out_seconds.items()},
               "ready_seconds_without_cache": without, "ready_seconds_with_cache": with_cache,
               "load_average": os.getloadavg()[0]}
    print("FLEET FIGURES", json.dumps(figures))
    record_property("fleet", figures)
