"""The fleet test's harness (tests/test_fleet_roll.py): four systemd Docker containers on a
network of their own, the inventory that deploys them, ansible-playbook run whole or killed at a
point it prints, a bounded request loop through the gateway, and what the replicas say."""

from __future__ import annotations

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

import yaml

from conftest import REPO, wheel_cache

# FLEET_PREFIX and FLEET_SUBNET (the third octet) let two fleets run on one Docker engine.
PREFIX = os.environ.get("FLEET_PREFIX", "")
OCTET = int(os.environ.get("FLEET_SUBNET", "77"))
NET = f"{PREFIX}i15-fleet-test"
SUBNET = f"169.254.{OCTET}.0/24"
GATEWAY_IP = f"169.254.{OCTET}.10"
REPLICAS = {f"{PREFIX}fleet-r{i}": f"169.254.{OCTET}.{10 + i}" for i in (1, 2, 3)}
R1, R2, R3 = REPLICAS
URLS = {name: f"http://{ip}:30000" for name, ip in REPLICAS.items()}
GATEWAY = f"{PREFIX}fleet-gw"
IMAGE = os.environ.get("MOLECULE_IMAGE", "local/debian12-systemd:latest")
OLD, NEW = "0.5.18", "0.5.23"          # FlashInfer 0.6.17 and 0.7.2 (their pins)
AUTOTUNE_SECONDS = 1                  # the stand-in's tuning time; a tenth with a usable cache
FAILING = R1                         # its wheels are taken away: its upgrade fails
SMG_DRAIN_SECONDS = 5                 # smg 1.13.0 drains a removed worker this long ("Draining ... for 5s")
SMG = yaml.safe_load((REPO / "roles/sglang_router/defaults/main.yml").read_text())["sglang_router_version"]
UV = yaml.safe_load((REPO / "roles/sglang/defaults/main.yml").read_text())["sglang_uv_version"]

# The stand-in server reads how fast each release is from this file at start (release_speed in
# launch_server.py). The fleet's release 0.5.23 answers in 0.2 s, so that the canary's timings are
# far above the controller's jitter; a candidate's entry is written before each canary.
SPEED_FILE = "/etc/sglang-standin/speed.json"
BASE_SPEED = {NEW: {"request_seconds": 0.2}}
CANARY_LEVELS = (1, 4)
# SGLANG_STANDIN lets `python -m sglang.benchmark.serving` import the slim install's package.
BENCH_PYTHON = "/usr/local/bin/standin-bench-python"
BENCH_WRAPPER = '#!/bin/sh\nSGLANG_STANDIN=1 exec /opt/sglang/current/bin/python "$@"\n'


def set_speed(name: str, speeds: dict) -> None:
    docker("exec", "-i", name, "sh", "-c", f"mkdir -p /etc/sglang-standin && cat > {SPEED_FILE}.new "
           f"&& mv {SPEED_FILE}.new {SPEED_FILE}", input=json.dumps(speeds))


def docker(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, input=input)


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
            "sglang_server_start": True, "sglang_server_ready_timeout": 60, "sglang_server_model_check": False, "sglang_server_host": "0.0.0.0",
            # TP 2: the hand-in must carry every rank's file (SGLang discards a set that disagrees).
            "sglang_server_tp_size": 2, "sglang_server_autotune_cache": "fleet", "sglang_server_gpu_sm": "sm120",
            "sglang_server_fleet_cache_dir": str(tmp / "fleet-cache"),
            "sglang_server_answers_reference_dir": str(tmp / "answer-references"),
            "sglang_server_environment": {"SGLANG_STANDIN": "1", "SGLANG_CACHE_DIR": "/var/cache/sglang",
                                          "STANDIN_AUTOTUNE_SECONDS": str(AUTOTUNE_SECONDS),
                                          "STANDIN_REQUEST_SECONDS": "0.05"},
            # The canary's benchmark: the stand-in benchmark of the slim wheel (BENCH_PYTHON), small.
            "sglang_bench_python": BENCH_PYTHON, "sglang_bench_concurrencies": list(CANARY_LEVELS),
            "sglang_bench_prompts_multiplier": 4, "sglang_bench_input_len": 64, "sglang_bench_output_len": 64,
            "sglang_bench_power": "false",
            # p99 of 4 to 16 requests on two shared cores jitters by tens to hundreds of ms while
            # Molecule runs beside (+129% once in CI): the TTFT check is tried in
            # tests/test_sglang_canary.py; here a regression is in throughput.
            "sglang_canary_ttft_tolerance": 1000.0}},
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
    return list(dict.fromkeys(re.findall(rf"\[({re.escape(PREFIX)}fleet-r\d)[\] ]", roll)))


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
