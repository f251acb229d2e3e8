"""End to end: the real smg gateway in front of three stand-in SGLang replicas, rolled.

Part of the suite (`scripts/dev.sh test`); it needs the Docker engine and the systemd base
image (`scripts/dev.sh setup` starts and builds both) and is skipped without them. Alone:
`python -m pytest tests/test_fleet_roll.py -p no:cacheprovider`.

Four systemd Docker containers this test creates on its own Docker network
(link-local 169.254.77.0/24): the gateway (sglang_router role, real smg from
PyPI) and three replicas (sglang, sglang_autotune, sglang_server roles on real
SGLang wheels, slimmed to what the roles read, whose launch_server.py is the
stand-in of molecule/sglang_service/standin). One module-scoped fleet serves
every test, in order:
  1. deployed on 0.5.18 (playbooks/fleet.yml);
  2. rolled to 0.5.23 with fleet-r1 made to fail its upgrade: the roll stops
     there, fleet-r1 stays out on its previous install, the others serve;
  3. rolled again, the cause gone, and the controller (ansible-playbook's
     whole process group) killed with SIGKILL as soon as fleet-r1's new
     install is in place: fleet-r1 is out of the gateway, switched to 0.5.23
     on disk and still serving 0.5.18;
  4. rolled again: it converges (fleet-r1 first, restarted because its
     install changed under it; fleet-r1's autotune cache pushed to fleet-r2
     and fleet-r3), the request loop running through 3 and 4 without a gap;
  5. a take-out that a killed controller left draining in smg: the next
     take-out waits for it, and the replica put back stays in.
A bounded request loop runs through the gateway during every roll; a monitor
counts the healthy workers it lists.

The wheels come from PyPI once, into the wheel cache (tests/conftest.py's, the
one scripts/dev.sh fleet uses). FLEET_IMAGES=1 keeps the deployed fleet as
Docker images (local/i15-fleet-<name>:<key>, the controller's fleet cache next
to the wheels) keyed by the digest of the roles, the playbooks, the stand-in,
this file and the base image, and a later run with FLEET_IMAGES=1 and the same
key starts from them instead of deploying (FLEET_REDEPLOY=1 deploys anyway).
FLEET_KEEP=1 leaves the containers running.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

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
SMG_DRAIN_SECONDS = 5                 # smg 1.13.0 drains a removed worker this long ("Draining ... for 5s")
SMG = yaml.safe_load((REPO / "roles/sglang_router/defaults/main.yml").read_text())["sglang_router_version"]
UV = yaml.safe_load((REPO / "roles/sglang/defaults/main.yml").read_text())["sglang_uv_version"]

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


def downloaded(spec: str, dest: Path, pattern: str, deps: bool) -> list[Path]:
    """The wheels of spec in dest, from PyPI once: downloaded aside, then moved in whole."""
    if not sorted(dest.glob(pattern)):
        scratch = Path(tempfile.mkdtemp(dir=wheel_cache().parent, prefix=".download-"))
        try:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", *([] if deps else ["--no-deps"]),
                            "--dest", str(scratch), spec], check=True)
            if dest == wheel_cache():
                for wheel in scratch.iterdir():
                    os.replace(wheel, dest / wheel.name)
            elif not dest.exists():
                scratch.rename(dest)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    found = sorted(dest.glob(pattern))
    assert found, f"pip download {spec} gave no {pattern} in {dest}"
    return found


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


def playbook_argv(tmp: Path, playbook: str, *extra: str) -> list[str]:
    path = playbook if Path(playbook).is_absolute() else str(REPO / "playbooks" / playbook)
    return [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp / "inventory.json"), path, *extra]


PLAY_ENV = {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0", "PYTHONUNBUFFERED": "1"}


def play(tmp: Path, playbook: str, *extra: str, log: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run(playbook_argv(tmp, playbook, *extra), capture_output=True, text=True,
                          env={**os.environ, **PLAY_ENV}, cwd=REPO)
    (tmp / f"{log}.log").write_text(done.stdout + done.stderr)
    return done, time.monotonic() - started


def living_members(group: int) -> list[int]:
    """Processes of a process group that still run (zombies waiting for their reaper do not)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            found.append(int(stat.parent.name))
    return found


def play_killed(tmp: Path, playbook: str, *extra: str, log: str, host: str, task: str) -> dict:
    """Run a playbook in a process group of its own and SIGKILL the whole group the moment it
    prints host's result of the task named task (the controller's own point, not a sleep)."""
    started = time.monotonic()
    proc = subprocess.Popen(playbook_argv(tmp, playbook, *extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, **PLAY_ENV}, cwd=REPO, start_new_session=True)
    lines, current, killed = [], "", False
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("TASK ["):
            current = line
        elif task in current and re.match(rf"(ok|changed): \[{re.escape(host)}\]", line):
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
    rc = proc.wait()
    lines.append(proc.stdout.read())
    deadline = time.monotonic() + 10
    while living_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    (tmp / f"{log}.log").write_text("".join(lines))
    return {"killed": killed, "rc": rc, "stdout": "".join(lines), "survivors": living_members(proc.pid),
            "seconds": time.monotonic() - started}


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
        time.sleep(0.2)
        return self

    def __exit__(self, *_: object) -> None:
        time.sleep(0.2)
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=15)


def current_version(name: str) -> str:
    out = docker("exec", name, "cat", "/opt/sglang/current/sglang-manifest.json").stdout
    return json.loads(out)["resolved"]["sglang"]


def serving_version(name: str) -> str:
    """The version the running server was started from (the stand-in's /server_info)."""
    with urllib.request.urlopen(f"{URLS[name]}/server_info", timeout=5) as answer:
        return json.load(answer)["version"]


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


def rolled_order(stdout: str) -> list[str]:
    """The replicas in the order the roll play took them."""
    roll = stdout.split("PLAY [Roll the replicas, one at a time]", 1)[-1]
    return list(dict.fromkeys(re.findall(r"\[(fleet-r\d)[\] ]", roll)))


def cpu_seconds() -> float:
    """CPU time of this test's containers (their cgroups) and of the controller's processes."""
    total = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = total.ru_utime + total.ru_stime
    for name in [GATEWAY, *REPLICAS]:
        cid = docker("inspect", "-f", "{{.Id}}", name, check=False).stdout.strip()
        usage = Path(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage")
        if cid and usage.is_file():
            seconds += int(usage.read_text()) / 1e9
    return seconds


def deploy(tmp: Path, key: str) -> float:
    """Containers from the base image, wheels copied in, playbooks/fleet.yml (kept as images with FLEET_IMAGES=1)."""
    for name, ip in {GATEWAY: GATEWAY_IP, **REPLICAS}.items():
        start(name, ip)
    wheels = tmp / "wheels"
    for version in (OLD, NEW):
        subprocess.run([sys.executable, str(REPO / "molecule/sglang_service/standin/make_wheel.py"),
                        str(sglang_wheel(version)), str(wheels), "--slim"], check=True, capture_output=True)
    uv = downloaded(f"uv=={UV}", wheel_cache(), f"uv-{UV}-*.whl", deps=False)[-1]
    shutil.copy(uv, wheels)
    smg = tmp / "smg-wheels"
    shutil.copytree(downloaded(f"smg=={SMG}", wheel_cache() / f"smg-{SMG}", f"smg-{SMG}-*.whl", deps=True)[0].parent,
                    smg)
    shutil.copy(uv, smg)
    for name in REPLICAS:
        docker("cp", str(wheels), f"{name}:/opt/sglang-wheels")
    docker("cp", str(smg), f"{GATEWAY}:/opt/smg-wheels")
    done, seconds = play(tmp, "fleet.yml", log="deploy")
    assert done.returncode == 0, done.stdout[-4000:]
    assert healthy_urls() == set(URLS.values())
    if os.environ.get("FLEET_IMAGES"):
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
    began = time.monotonic()
    key = deployed_key() if os.environ.get("FLEET_IMAGES") else ""
    inventory(tmp)
    try:
        kept = key and all(docker("image", "inspect", image_of(n, key), check=False).returncode == 0
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
        yield {"tmp": tmp, "deploy_seconds": seconds, "deployed_by": how, "began": began}
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
def killed_and_rerun(fleet, failed_roll):
    """The roll again, the controller killed once fleet-r1's new install is in place; then the
    same command again. One request loop runs through both runs and the gap between them."""
    with Traffic() as traffic:
        killed = play_killed(fleet["tmp"], "rolling_upgrade.yml", "-e", f"sglang_version={NEW}", log="roll-killed",
                             host=FAILING, task="sglang : Ensure SGLang is installed")
        killed["state"] = {"healthy": healthy_urls(), "listed": {w["url"] for w in workers()},
                           "installed": current_version(FAILING), "serving": serving_version(FAILING),
                           "others": {name: current_version(name) for name in REPLICAS if name != FAILING}}
        done, seconds = play(fleet["tmp"], "rolling_upgrade.yml", "-e", f"sglang_version={NEW}", log="roll-rerun")
    return {"killed": killed, "done": done, "seconds": seconds, "traffic": traffic}


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


def test_a_killed_controller_leaves_one_replica_out_mid_upgrade(killed_and_rerun):
    killed = killed_and_rerun["killed"]
    assert killed["killed"], killed["stdout"][-3000:]
    assert killed["rc"] == -signal.SIGKILL
    assert killed["survivors"] == []          # the whole controller went: its workers too
    assert "PLAY RECAP" not in killed["stdout"]
    # Killed mid-upgrade: fleet-r1 is switched to the new install on disk, still serving the old one, out
    # of the gateway; the others untouched and serving.
    state = killed["state"]
    assert (state["installed"], state["serving"]) == (NEW, OLD)
    assert state["healthy"] == state["listed"] == {URLS["fleet-r2"], URLS["fleet-r3"]}
    assert state["others"] == {"fleet-r2": OLD, "fleet-r3": OLD}


def test_the_run_after_the_kill_converges_and_shares_the_cache(killed_and_rerun, failed_roll, fleet,
                                                                record_property):
    done, traffic = killed_and_rerun["done"], killed_and_rerun["traffic"]
    assert done.returncode == 0, done.stdout[-4000:]
    # The request loop ran through the killed run, the gap and the re-run.
    assert traffic.failed == 0, traffic.errors[:5]
    assert traffic.served > 50
    assert traffic.min_healthy >= len(REPLICAS) - 1
    assert {name: current_version(name) for name in REPLICAS} == {name: NEW for name in REPLICAS}
    assert {name: serving_version(name) for name in REPLICAS} == {name: NEW for name in REPLICAS}
    assert healthy_urls() == {w["url"] for w in workers()} == set(URLS.values())
    # The replica left out goes first; its install is reused, and its server, started before the switch,
    # restarts once because the install under it changed.
    assert rolled_order(done.stdout) == ["fleet-r1", "fleet-r2", "fleet-r3"]
    restart = re.search(r"TASK \[sglang_server : Restart the server once, because ([^\]]*)\][^\n]*\nchanged: \[fleet-r1\]",
                        done.stdout)
    assert restart and "/opt/sglang/current" in restart.group(1).split(", "), done.stdout[-3000:]
    assert not re.search(r"changed: \[fleet-r1\]", host_lines(done.stdout, "fleet-r1", "Ensure SGLang is installed"))
    # fleet-r1 tuned FlashInfer 0.7.2 (0.5.23's pin) from scratch although the fleet held 0.5.18's
    # FlashInfer 0.6.17 cache: never pushed across a FlashInfer version. It handed every rank's file in.
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
    killed = killed_and_rerun["killed"]
    figures = {"fleet_by": fleet["deployed_by"], "fleet_seconds": round(fleet["deploy_seconds"], 1),
               "failed_roll_seconds": round(failed_roll["seconds"], 1),
               "killed_roll_seconds": round(killed["seconds"], 1),
               "rerun_seconds": round(killed_and_rerun["seconds"], 1),
               "rerun_per_replica": round(killed_and_rerun["seconds"] / 3, 1),
               "served": traffic.served + failed_roll["traffic"].served,
               "failed": traffic.failed + failed_roll["traffic"].failed,
               "min_healthy": min(traffic.min_healthy, failed_roll["traffic"].min_healthy),
               "out_of_gateway_seconds_killed_and_rerun": {u.split("//")[1]: round(s, 1)
                                                           for u, s in traffic.out_seconds.items()},
               "ready_seconds_without_cache": without, "ready_seconds_with_cache": with_cache,
               "wall_seconds_so_far": round(time.monotonic() - fleet["began"], 1),
               "cpu_seconds_so_far": round(cpu_seconds(), 1), "load_average": os.getloadavg()[0]}
    print("FLEET FIGURES", json.dumps(figures))
    record_property("fleet", figures)


OUT_AND_BACK = """\
- name: Take a replica out of the gateway and put it back, as the roll does
  hosts: {gateway}
  gather_facts: false
  vars:
    sglang_router_worker_url: {url}
    sglang_router_effective_url: http://127.0.0.1:30000
  tasks:
    - name: Take it out
      ansible.builtin.include_role: {{name: sglang_router, tasks_from: workers}}
      vars: {{sglang_router_worker_state: absent}}
    - name: Put it back
      ansible.builtin.include_role: {{name: sglang_router, tasks_from: workers}}
      vars: {{sglang_router_worker_state: present}}
"""


def test_a_take_out_left_draining_by_a_killed_controller_is_waited_for(killed_and_rerun, fleet):
    """A controller killed right after its DELETE leaves smg draining that worker for 5 s; a second
    DELETE would drop it at once, and the first removal, when its drain ends, would take out the
    worker put back meanwhile. The next take-out sends no second DELETE and waits instead."""
    tmp, url = fleet["tmp"], URLS["fleet-r3"]
    playbook = tmp / "out-and-back.yml"
    playbook.write_text(OUT_AND_BACK.format(gateway=GATEWAY, url=url))
    worker = next(w for w in workers() if w["url"] == url)
    with Traffic() as traffic:
        sent = time.monotonic()
        request = urllib.request.Request(f"http://{GATEWAY_IP}:30000/workers/{worker['id']}", method="DELETE")
        with urllib.request.urlopen(request, timeout=5) as answer:
            assert answer.status == 202
        done, _ = play(tmp, str(playbook), log="out-and-back")
        time.sleep(max(0.0, sent + SMG_DRAIN_SECONDS + 1.5 - time.monotonic()))   # past the first removal
        after = {w["url"]: w["is_healthy"] for w in workers()}
    assert done.returncode == 0, done.stdout[-3000:]
    journal = docker("exec", GATEWAY, "journalctl", "-u", "sglang-router", "--no-pager", "-o", "cat").stdout
    deletes = [line for line in journal.splitlines()
               if f"/workers/{worker['id']}" in line and "DELETE" in line and "finished processing" in line]
    assert len(deletes) == 1, deletes   # the test's own, no second one from the role
    assert after == {u: True for u in URLS.values()}
    assert traffic.failed == 0, traffic.errors[:5]
    assert traffic.min_healthy >= len(REPLICAS) - 1
