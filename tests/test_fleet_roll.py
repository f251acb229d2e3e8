"""End to end: the real smg gateway in front of three stand-in SGLang replicas, rolled.

Part of the suite (`scripts/dev.sh test`); it needs the Docker engine and the systemd base
image (`scripts/dev.sh setup` starts and builds both) and is skipped without them. Alone:
`python -m pytest tests/test_fleet_roll.py -p no:cacheprovider`.

Four systemd Docker containers this test creates on its own Docker network
(link-local 169.254.77.0/24): the gateway (sglang_router role, real smg from
PyPI) and three replicas (sglang, sglang_autotune, sglang_server roles on real
SGLang wheels, slimmed to what the roles read, whose launch_server.py is the
stand-in of molecule/sglang_server/standin). One module-scoped fleet serves
every test, in order:
  1. deployed on 0.5.18 (playbooks/fleet.yml);
  2. rolled to 0.5.23 with fleet-r1 made to fail its upgrade: the roll stops
     there, fleet-r1 goes back into the gateway on its previous install, the
     run fails naming it, the others serve;
  3. rolled again, the cause gone, and the controller (ansible-playbook's
     whole process group) killed with SIGKILL as soon as fleet-r1's new
     install is in place: fleet-r1 is out of the gateway, switched to 0.5.23
     on disk and still serving 0.5.18;
  4. rolled again: it converges (fleet-r1 first, restarted because its
     install changed under it; fleet-r1's autotune cache pushed to fleet-r2
     and fleet-r3), the request loop running through 3 and 4 without a gap;
  5. a take-out that a killed controller left draining in smg: the next
     take-out waits for it, and the replica put back stays in;
  6. a replica left out of the gateway (as a killed roll leaves it):
     playbooks/fleet.yml puts it back;
  7. canaries (-e sglang_canary=true, candidate 0.5.18 against the fleet's
     0.5.23, each release's speed set in the stand-in's speed file): one
     three times slower at concurrency 4 only, refused and rolled back (its
     baseline benchmark and answer reference taken first); one whose fresh
     autotune drifts its answers, refused; one twice as fast, the controller
     killed in its benchmark and the command run again: promoted, the rest
     follow. The promotion log holds each decision.
A bounded request loop runs through the gateway during every roll; a monitor
counts the healthy workers it lists (tests/fleet_harness.py holds these and the
containers). The figures the README's Fleet section quotes are printed as
"FLEET FIGURES" (run with -s) and recorded as the test's property.

The wheels come from PyPI once, into the wheel cache (tests/conftest.py's, the
one scripts/dev.sh fleet uses). FLEET_IMAGES=1 keeps the deployed fleet as
Docker images (local/i15-fleet-<name>:<key>, the controller's fleet cache next
to the wheels) keyed by the digest of the roles, the playbooks, the stand-in,
this file, its harness and the base image, and a later run with FLEET_IMAGES=1 and the same
key starts from them instead of deploying (FLEET_REDEPLOY=1 deploys anyway).
FLEET_KEEP=1 leaves the containers running.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, sglang_wheel, wheel_cache
from fleet_harness import (PLAY_ENV, BASE_SPEED, BENCH_PYTHON, BENCH_WRAPPER, FAILING, GATEWAY, GATEWAY_IP, IMAGE, NET, NEW, OLD, R1, R2, R3, REPLICAS, SMG,
                           SMG_DRAIN_SECONDS, SUBNET, URLS, UV, Traffic, cpu_seconds, current_version, docker,
                           downloaded, healthy_urls, host_lines, inventory, last_start, play, play_killed,
                           ready_seconds, rolled_order, serving_version, set_speed, start, teardown, workers)

pytestmark = pytest.mark.skipif(shutil.which("docker") is None or subprocess.run(
    ["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0,
    reason="needs the Docker engine and the systemd base image (scripts/dev.sh setup)")


def deployed_key() -> str:
    """What the deployed fleet depends on: a change to any of it deploys again."""
    digest = hashlib.sha256(docker("image", "inspect", IMAGE, "--format", "{{.Id}}").stdout.encode())
    files = [Path(__file__), Path(__file__).with_name("fleet_harness.py"),
             *sorted((REPO / "molecule/sglang_server/standin").glob("*"))]
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


def deploy(tmp: Path, key: str) -> float:
    """Containers from the base image, wheels copied in, playbooks/fleet.yml (kept as images with FLEET_IMAGES=1)."""
    for name, ip in {GATEWAY: GATEWAY_IP, **REPLICAS}.items():
        start(name, ip)
    wheels = tmp / "wheels"
    for version in (OLD, NEW):
        subprocess.run([sys.executable, str(REPO / "molecule/sglang_server/standin/make_wheel.py"),
                        str(sglang_wheel(version)), str(wheels), "--slim"], check=True, capture_output=True)
    uv = downloaded(f"uv=={UV}", wheel_cache(), f"uv-{UV}-*.whl", deps=False)[-1]
    shutil.copy(uv, wheels)
    smg = tmp / "smg-wheels"
    shutil.copytree(downloaded(f"smg=={SMG}", wheel_cache() / f"smg-{SMG}", f"smg-{SMG}-*.whl", deps=True)[0].parent,
                    smg)
    shutil.copy(uv, smg)
    for name in REPLICAS:
        docker("cp", str(wheels), f"{name}:/opt/sglang-wheels")
        docker("exec", "-i", name, "sh", "-c", f"cat > {BENCH_PYTHON} && chmod 755 {BENCH_PYTHON}", input=BENCH_WRAPPER)
        set_speed(name, BASE_SPEED)
        # The stand-in answers the answer check's prompts (sglang_standin_answers.py).
        docker("cp", str(REPO / "roles/sglang_answers/files/prompts.json"), f"{name}:/etc/sglang-standin/prompts.json")
    docker("cp", str(smg), f"{GATEWAY}:/opt/smg-wheels")
    done, seconds = play(tmp, "fleet.yml", log="deploy")
    assert done.returncode == 0, done.stdout[-4000:]
    assert healthy_urls() == set(URLS.values())
    if os.environ.get("FLEET_IMAGES"):
        for name in [GATEWAY, *REPLICAS]:   # this fleet's images only (FLEET_PREFIX keeps fleets apart)
            for old in docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", image_of(name, "*")).stdout.split():
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
    roll = done.stdout.split("PLAY [Roll the replicas, one at a time]")[-1]
    assert f"[{R2}" not in roll and f"[{R3}" not in roll   # never started
    assert traffic.failed == 0, traffic.errors[:5]
    assert traffic.served > 20
    assert traffic.min_healthy >= len(REPLICAS) - 1
    assert state["versions"] == {name: OLD for name in REPLICAS}
    # The failed replica is back in the gateway on its previous install, and the run names it.
    assert f"{FAILING} is back in the gateway ({URLS[FAILING]}) on pypi-{OLD}-" in " ".join(done.stdout.split())
    assert state["healthy"] == state["listed"] == set(URLS.values())
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
    assert state["healthy"] == state["listed"] == {URLS[R2], URLS[R3]}
    assert state["others"] == {R2: OLD, R3: OLD}


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
    assert rolled_order(done.stdout) == [R1, R2, R3]
    why = host_lines(done.stdout, R1, "Say why the server started or restarted")
    restart = re.search(r"restarted once: ([^\"]*) changed after it started", why)
    assert restart and "/opt/sglang/current" in restart.group(1).split(", "), why or done.stdout[-3000:]
    assert not re.search(rf"changed: \[{R1}\]", host_lines(done.stdout, R1, "Ensure SGLang is installed"))
    # fleet-r1 tuned FlashInfer 0.7.2 (0.5.23's pin) from scratch although the fleet held 0.5.18's
    # FlashInfer 0.6.17 cache: never pushed across a FlashInfer version. It handed every rank's file in.
    cache = fleet["tmp"] / "fleet-cache"
    assert list(cache.glob("0.6.17/sm120/*/rank_tp*_pp0_dp0.json"))
    first = host_lines(done.stdout, R1, "Say what the fleet's cache")
    assert "FlashInfer 0.7.2" in first and "the fleet has no proven cache for this pair yet" in first, first
    assert "autotune tuned and wrote the cache" in last_start(R1)
    assert sorted(p.name for p in cache.glob("0.7.2/sm120/*/*.json")) == ["proof.json", "rank_tp0_pp0_dp0.json",
                                                                          "rank_tp1_pp0_dp0.json"]
    # It passed its answer check, and the set carries that proof.
    (proof,) = cache.glob("0.7.2/sm120/*/proof.json")
    assert json.loads(proof.read_text())["answers"]["passed"] is True
    # ... which was pushed to fleet-r2 and fleet-r3, owned by the service user, and used there.
    for name in (R2, R3):
        assert "pushing" in host_lines(done.stdout, name, "Say what the fleet's cache")
        journal = last_start(name)
        assert "Running FlashInfer autotune with cache: /var/cache/sglang/flashinfer/autotune/0.7.2/sm120/" in journal
        assert "autotune reused the cache" in journal, journal[-2000:]
        owner = docker("exec", name, "sh", "-c", "stat -c %U /var/cache/sglang/flashinfer/autotune/0.7.2/sm120/*/*.json")
        assert set(owner.stdout.split()) == {"sglang"}
    without = ready_seconds(R1)
    with_cache = {name: ready_seconds(name) for name in (R2, R3)}
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
  tasks:
    - name: Take it out
      ansible.builtin.include_role: {{name: sglang_router, tasks_from: workers}}
      vars: {{sglang_router_worker_state: absent, sglang_router_effective_url: "http://127.0.0.1:30000"}}
    - name: Put it back
      ansible.builtin.include_role: {{name: sglang_router, tasks_from: workers}}
      vars: {{sglang_router_worker_state: present, sglang_router_effective_url: "http://127.0.0.1:30000"}}
"""


def test_a_take_out_left_draining_by_a_killed_controller_is_waited_for(killed_and_rerun, fleet):
    """A controller killed right after its DELETE leaves smg draining that worker for 5 s; a second
    DELETE would drop it at once, and the first removal, when its drain ends, would take out the
    worker put back meanwhile. The next take-out sends no second DELETE and waits instead."""
    tmp, url = fleet["tmp"], URLS[R3]
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


def test_the_deploy_puts_back_a_replica_that_a_roll_left_out(killed_and_rerun, fleet):
    """A roll killed after its take-out leaves a healthy replica out of the gateway: the deploy
    (playbooks/fleet.yml) puts it back instead of waiting for it and failing."""
    url = URLS[R2]
    worker = next(w for w in workers() if w["url"] == url)
    request = urllib.request.Request(f"http://{GATEWAY_IP}:30000/workers/{worker['id']}", method="DELETE")
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.status == 202
    deadline = time.monotonic() + SMG_DRAIN_SECONDS + 10
    while url in {w["url"] for w in workers()} and time.monotonic() < deadline:
        time.sleep(0.5)
    assert url not in {w["url"] for w in workers()}
    with Traffic() as traffic:
        done, seconds = play(fleet["tmp"], "fleet.yml", "-e", f"sglang_version={NEW}", log="deploy-converge")
    assert done.returncode == 0, done.stdout[-3000:]
    assert re.search(rf"TASK \[sglang_router : Put back into the gateway {re.escape(url)}\][^\n]*\n"
                     rf"changed: \[{GATEWAY}\]", done.stdout), done.stdout[-3000:]
    assert healthy_urls() == {w["url"] for w in workers()} == set(URLS.values())
    assert traffic.failed == 0, traffic.errors[:5]
    assert traffic.min_healthy >= len(REPLICAS) - 1
    print("FLEET FIGURES", json.dumps({"deploy_converge_seconds": round(seconds, 1)}))


def gateway_rule(tmp: Path, *check: str) -> dict:
    """The one restart rule (systemd_current) on the gateway, called as the role calls it."""
    args = json.dumps({"name": "sglang-router", "paths": ["/etc/sglang/sglang-router.env",
                                                          "/opt/sglang-router/current"]})
    done = subprocess.run([str(Path(sys.executable).parent / "ansible"), "-i", str(tmp / "inventory.json"),
                           GATEWAY, "--playbook-dir", str(REPO / "roles/systemd_files"), "-m", "systemd_current",
                           "-a", args, "-o", *check], capture_output=True, text=True,
                          env={**os.environ, **PLAY_ENV}, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.split("=>", 1)[1])


def test_a_gateway_whose_file_changed_after_it_started_restarts_once(killed_and_rerun, fleet):
    """A run killed between writing the gateway's environment file and restarting it leaves the
    file newer than the real smg process: the next call restarts it once, from that alone, and the
    call after that leaves it alone. Check mode says so and does nothing."""
    assert gateway_rule(fleet["tmp"])["action"] == "none"
    docker("exec", GATEWAY, "touch", "/etc/sglang/sglang-router.env")
    would = gateway_rule(fleet["tmp"], "--check")
    assert (would["action"], would["stale"]) == ("restart", ["/etc/sglang/sglang-router.env"]), would
    done = gateway_rule(fleet["tmp"])
    assert (done["action"], done["changed"]) == ("restart", True), done
    assert done["invocation_id"] != would["invocation_id"]
    assert done["reason"] == "/etc/sglang/sglang-router.env changed after it started"
    again = gateway_rule(fleet["tmp"])
    assert (again["action"], again["changed"], again["invocation_id"]) == ("none", False, done["invocation_id"])
    deadline = time.monotonic() + 60
    while healthy_urls() != set(URLS.values()) and time.monotonic() < deadline:
        time.sleep(1)
    assert healthy_urls() == set(URLS.values())


# The canary: the fleet is on NEW; the candidate is OLD, made faster or slower by the stand-in's
# speed file (the canary does not care which way the versions go). One refused canary, then one
# killed in its benchmark and re-run, which promotes.
CANARY_ARGS = ["-e", f"sglang_version={OLD}", "-e", "sglang_canary=true"]
AUTOTUNE_CACHE = "/var/cache/sglang/flashinfer/autotune"


def server_starts(name: str) -> int:
    text = docker("exec", name, "journalctl", "-u", "sglang", "--no-pager", "-o", "cat").stdout
    return text.count("stand-in launch_server: SGLang ")


def promotions(tmp: Path) -> list[dict]:
    return json.loads((tmp / "bench-runs" / "promotions.json").read_text())["entries"]


@pytest.fixture(scope="module")
def refused_canary(fleet, killed_and_rerun):
    """The candidate as fast as the fleet's release at concurrency 1, three times slower at 4."""
    tmp = fleet["tmp"]
    set_speed(R1, {**BASE_SPEED, OLD: {"request_seconds": 0.1, "crowded": {"inflight": 2, "request_seconds": 0.6}}})
    starts = server_starts(R1)
    with Traffic() as traffic:
        done, seconds = play(tmp, "rolling_upgrade.yml", *CANARY_ARGS, "-e", f"bench_runs_dir={tmp / 'bench-runs'}",
                             log="canary-refused")
    return {"done": done, "seconds": seconds, "traffic": traffic, "restarts": server_starts(R1) - starts,
            "versions": {n: (current_version(n), serving_version(n)) for n in REPLICAS}}


def test_a_candidate_slower_at_one_concurrency_is_refused_and_rolled_back(refused_canary, fleet):
    done, traffic = refused_canary["done"], refused_canary["traffic"]
    text = " ".join(done.stdout.split())
    assert done.returncode != 0
    assert f"SGLang {OLD} refused on canary {R1} (compared with {NEW} on the same replica): concurrency 4: " \
           "total throughput" in text, done.stdout[-3000:]
    assert "concurrency 1: total" not in text
    assert f"{R1} is back in the gateway ({URLS[R1]}) on pypi-{NEW}-" in text
    # Back on the release it had, with one restart for the candidate and one back; the rest untouched.
    assert refused_canary["versions"] == {n: (NEW, NEW) for n in REPLICAS}
    assert refused_canary["restarts"] == 2
    assert f"[{R2}" not in done.stdout.split("PLAY [Roll the replicas, one at a time]")[-1]
    assert healthy_urls() == {w["url"] for w in workers()} == set(URLS.values())
    assert traffic.failed == 0, traffic.errors[:5]
    assert traffic.min_healthy >= len(REPLICAS) - 1
    entry = promotions(fleet["tmp"])[-1]
    assert (entry["decision"], entry["release"], entry["previous"], entry["canary"]) == ("refused", OLD, NEW, R1)
    ratios = {v["concurrency"]: v["throughput_ratio"] for v in entry["verdicts"]}
    assert ratios[4] < 0.97 <= ratios[1], ratios
    assert entry["answers"]["passed"] and "canary-baseline-" in entry["baseline_run"]
    assert (fleet["tmp"] / "bench-runs" / "answers" / f"{R1}-{NEW}.json").is_file()   # the reference


def forget_tactics(tmp: Path, flashinfer: str) -> None:
    """No tuned tactics for this FlashInfer on the canary nor in the fleet's cache: it tunes anew."""
    docker("exec", R1, "rm", "-rf", f"{AUTOTUNE_CACHE}/{flashinfer}", "/etc/sglang-standin/autotune.json")
    shutil.rmtree(tmp / "fleet-cache" / flashinfer, ignore_errors=True)


@pytest.fixture(scope="module")
def drifting_canary(fleet, refused_canary):
    """A faster candidate whose fresh tune picks a tactic that makes every answer drift."""
    tmp = fleet["tmp"]
    set_speed(R1, {**BASE_SPEED, OLD: {"request_seconds": 0.1}})
    forget_tactics(tmp, "0.6.17")
    docker("exec", "-i", R1, "sh", "-c", "cat > /etc/sglang-standin/autotune.json", input='{"tactic": "drift"}')
    try:
        with Traffic() as traffic:
            done, seconds = play(tmp, "rolling_upgrade.yml", *CANARY_ARGS, "-e", f"bench_runs_dir={tmp / 'bench-runs'}",
                                 log="canary-drift")
        versions = {n: (current_version(n), serving_version(n)) for n in REPLICAS}
    finally:
        forget_tactics(tmp, "0.6.17")
    return {"done": done, "seconds": seconds, "traffic": traffic, "versions": versions}


def test_a_candidate_with_drifting_answers_is_refused(drifting_canary, fleet):
    done, traffic = drifting_canary["done"], drifting_canary["traffic"]
    text = " ".join(done.stdout.split())
    assert done.returncode != 0
    assert f"SGLang {OLD} refused on canary {R1} (compared with {NEW} on the same replica): answers failed (" \
        in text, done.stdout[-3000:]
    reasons = text.split("refused on canary")[1].split("is back in the gateway")[0]
    assert "drift" in reasons and "concurrency" not in reasons   # as fast: refused for its answers alone
    assert drifting_canary["versions"] == {n: (NEW, NEW) for n in REPLICAS}
    assert healthy_urls() == {w["url"] for w in workers()} == set(URLS.values())
    assert traffic.failed == 0, traffic.errors[:5]
    assert traffic.min_healthy >= len(REPLICAS) - 1
    entry = promotions(fleet["tmp"])[-1]
    assert (entry["decision"], entry["answers"]["passed"]) == ("refused", False)
    assert entry["answers"]["classes"]["drift"] > 0


@pytest.fixture(scope="module")
def promoted_canary(fleet, drifting_canary):
    """A candidate twice as fast; the controller killed in its benchmark, then the same command."""
    tmp = fleet["tmp"]
    set_speed(R1, {**BASE_SPEED, OLD: {"request_seconds": 0.1}})
    args = [*CANARY_ARGS, "-e", f"bench_runs_dir={tmp / 'bench-runs'}"]
    with Traffic() as traffic:
        killed = play_killed(tmp, "rolling_upgrade.yml", *args, log="canary-killed", host=R1,
                             task="sglang_bench : Benchmark at concurrency")
        killed["state"] = {"listed": {w["url"] for w in workers()}, "serving": serving_version(R1)}
        done, seconds = play(tmp, "rolling_upgrade.yml", *args, log="canary-rerun")
    return {"killed": killed, "done": done, "seconds": seconds, "traffic": traffic}


def test_a_faster_candidate_is_promoted_after_a_killed_canary(promoted_canary, refused_canary, fleet,
                                                               record_property):
    killed, done, traffic = promoted_canary["killed"], promoted_canary["done"], promoted_canary["traffic"]
    assert killed["killed"] and killed["survivors"] == [], killed["stdout"][-3000:]
    assert killed["state"] == {"listed": {URLS[R2], URLS[R3]}, "serving": OLD}   # out, on the candidate
    assert done.returncode == 0, done.stdout[-4000:]
    assert f"SGLang {OLD} promoted from canary {R1}" in done.stdout
    assert {n: (current_version(n), serving_version(n)) for n in REPLICAS} == {n: (OLD, OLD) for n in REPLICAS}
    assert rolled_order(done.stdout) == [R1, R2, R3]
    assert healthy_urls() == {w["url"] for w in workers()} == set(URLS.values())
    assert traffic.failed == 0, traffic.errors[:5]
    assert traffic.min_healthy >= len(REPLICAS) - 1
    entry = promotions(fleet["tmp"])[-1]
    assert (entry["decision"], entry["release"], entry["previous"]) == ("promoted", OLD, NEW)
    assert all(v["throughput_ratio"] > 1.2 for v in entry["verdicts"]), entry["verdicts"]
    assert entry["answers"]["passed"]
    # The baseline measured before the first canary served every later one.
    assert entry["baseline_run"] == promotions(fleet["tmp"])[0]["baseline_run"]
    refused = refused_canary["traffic"]
    figures = {"canary_refused_run_seconds": round(refused_canary["seconds"], 1),
               "canary_refused_out_of_gateway_seconds": round(refused.out_seconds[URLS[R1]], 1),
               "canary_killed_seconds": round(killed["seconds"], 1),
               "canary_rerun_seconds": round(promoted_canary["seconds"], 1),
               "canary_out_of_gateway_seconds_killed_and_rerun": round(traffic.out_seconds[URLS[R1]], 1),
               "served": traffic.served + refused.served, "failed": traffic.failed + refused.failed,
               "min_healthy": min(traffic.min_healthy, refused.min_healthy),
               "ratios": {v["concurrency"]: v["throughput_ratio"] for v in entry["verdicts"]}}
    print("CANARY FIGURES", json.dumps(figures))
    record_property("canary", figures)
