#!/usr/bin/env python3
"""Deploy benchmark: install, re-run, rollback and fleet, side by side (run by hand, not in CI).

Each comparison runs its two sides alternately (A B A B ...) against the same
target and prints medians and ratios in one table:

  install   a new virtualenv through the sglang role (-e sglang_upgrade=true):
            pip against uv, cold caches and warm cache. SGLang alone (--no-deps,
            from the target's wheel directory) unless --full, which installs the
            whole dependency set from PyPI (network-heavy: minutes, ~10 GB a venv).
  noop      a converged re-run of site.yml against the floor (a one-task playbook
            on the same target), with the number of tasks that reached the target
  rollback  the README's rollback command (site.yml -e autotune=false) against the floor
  fleet     N Docker demo targets (sglang-bench-1..N) converged from scratch by one
            site.yml: wall(N)/wall(1). The containers are removed afterwards.

  scripts/bench-deploy.py                                  # the demo target (LXC sglang-demo), quick
  scripts/bench-deploy.py --repeat 5 --fleet 1,2,4,8 --full
  scripts/bench-deploy.py -i inventory/lxc --target ct101 --prepare ''   # another target

The figures in the README were measured on the Docker demo target of the time (the demo moved to
a real LXC container later). Run it from the project's virtualenv, under the shared lock when
others use Docker here:
  flock /tmp/molecule.lock .venv/bin/python scripts/bench-deploy.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Actions that run on the controller: they never reach the target.
LOCAL_ACTIONS = {
    "ansible.builtin.set_fact", "set_fact", "ansible.builtin.debug", "debug",
    "ansible.builtin.assert", "assert", "ansible.builtin.fail", "fail",
    "ansible.builtin.include_tasks", "include_tasks", "ansible.builtin.include_role", "include_role",
    "ansible.builtin.validate_argument_spec", "validate_argument_spec", "ansible.builtin.meta", "meta",
}
FLEET_PREFIX = "sglang-bench-"
# The sglang role's tasks that create the virtualenv and run the installer.
INSTALL_TASKS = ("Create the virtualenv", "Install with pip", "Install with uv")


def log(message: str) -> None:
    print(f"--- {message}", file=sys.stderr, flush=True)


class Runner:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.playbook = shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook")
        self.env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_RETRY_FILES_ENABLED="0")

    def play(self, playbook: str | Path, *extra: str, inventory: str | None = None,
             limit: str | None = None) -> tuple[float, dict]:
        """Run a playbook; return (wall seconds, parsed json callback output). Fails loudly."""
        argv = [self.playbook, "-i", inventory or self.args.inventory, str(playbook), *extra]
        if limit:
            argv += ["--limit", limit]
        started = time.monotonic()
        done = subprocess.run(argv, cwd=REPO, env=self.env, capture_output=True, text=True)
        wall = time.monotonic() - started
        try:
            report = json.loads(done.stdout[done.stdout.index("{"):])
        except ValueError:
            report = {}
        if done.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed (rc {done.returncode}):\n{failures(report) or done.stdout[-3000:]}\n"
                     f"{done.stderr[-2000:]}")
        return wall, report

    def floor_playbook(self) -> Path:
        path = self.workdir / "floor.yml"
        path.write_text(f"""---
- name: One task on the target
  hosts: {self.args.target}
  gather_facts: false
  tasks:
    - name: Reach the target once
      ansible.builtin.ping:
""")
        return path

    def role_playbook(self) -> Path:
        path = self.workdir / "install.yml"
        path.write_text(f"""---
- name: Install SGLang alone
  hosts: {self.args.target}
  gather_facts: false
  roles:
    - role: sglang
""")
        return path


def failures(report: dict) -> str:
    lines = []
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            for host, res in task.get("hosts", {}).items():
                if res.get("failed"):
                    lines.append(f"{host}: {task['task']['name']}: {res.get('msg', '')}")
    return "\n".join(lines)


def reached(report: dict, host: str) -> list[str]:
    """Tasks whose module ran on host (not skipped, not a controller-only action)."""
    names = []
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            res = task.get("hosts", {}).get(host)
            if not res or res.get("skipped") or res.get("action") in LOCAL_ACTIONS:
                continue
            if res.get("results") and all(r.get("skipped") for r in res["results"]):
                continue
            names.append(task["task"]["name"])
    return names


def task_seconds(report: dict, names: tuple[str, ...]) -> float:
    """Seconds spent in the tasks so named (the json callback's start and end times)."""
    from datetime import datetime

    total = 0.0
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            if task["task"]["name"].split(" : ")[-1] in names:
                span = task["task"].get("duration", {})
                if span.get("start") and span.get("end"):
                    total += (datetime.fromisoformat(span["end"].replace("Z", "+00:00"))
                              - datetime.fromisoformat(span["start"].replace("Z", "+00:00"))).total_seconds()
    return total


def changed(report: dict) -> int:
    return sum(s.get("changed", 0) for s in report.get("stats", {}).values())


def alternate(rounds: int, sides: dict, before=None) -> dict[str, list[float]]:
    """Run each side once per round, in turn (A B A B ...); before(side) runs untimed first."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    for n in range(rounds):
        for name, run in sides.items():
            if before:
                before(name)
            wall = run()
            times[name].append(wall)
            log(f"round {n + 1}: {name} {wall:.2f} s")
    return times


def bench_install(r: Runner, rows: list) -> None:
    playbook = r.role_playbook()
    extra = ["-e", "sglang_upgrade=true"]
    if r.args.full:
        # The whole set from PyPI; the target gets the controller's CA bundle for TLS.
        ca = "/usr/local/share/sglang-bench-ca.pem"
        subprocess.run(["ansible", "-i", r.args.inventory, r.args.target, "-m", "ansible.builtin.copy",
                        "-a", f"src={r.args.ca_bundle} dest={ca} mode=0644"], cwd=REPO, env=r.env,
                       check=True, capture_output=True)
        env = {"SSL_CERT_FILE": ca, "PIP_CERT": ca}
        extra += ["-e", json.dumps({"sglang_install_heavy_dependencies": True, "sglang_pip_extra_args": "",
                                    "sglang_torch_index_url": r.args.torch_index, "sglang_install_cuda_toolkit": False,
                                    "sglang_install_environment": env})]

    def clear_caches(_: str) -> None:
        subprocess.run(["ansible", "-i", r.args.inventory, r.args.target, "-m", "ansible.builtin.shell",
                        "-a", "rm -rf /opt/sglang/cache /root/.cache/pip"], cwd=REPO, env=r.env,
                       check=True, capture_output=True)

    steps: dict[str, list[float]] = {}

    def side(installer: str):
        def run() -> float:
            wall, report = r.play(playbook, *extra, "-e", f"sglang_installer={installer}")
            steps.setdefault(installer, []).append(task_seconds(report, INSTALL_TASKS))
            return wall
        return run

    what = "whole dependency set" if r.args.full else "SGLang alone, --no-deps"
    for cache, before in (("cold caches", clear_caches), ("warm cache", None)):
        if cache == "warm cache":
            r.play(playbook, *extra, "-e", "sglang_installer=pip")  # fill both caches once
            r.play(playbook, *extra, "-e", "sglang_installer=uv")
        steps.clear()
        times = alternate(r.args.repeat, {"pip": side("pip"), "uv": side("uv")}, before)
        rows.append((f"new venv ({what}), {cache}: the sglang role", "pip", times["pip"], "uv", times["uv"], ""))
        rows.append((f"new venv ({what}), {cache}: its venv and install tasks alone", "pip", steps["pip"],
                     "uv", steps["uv"], ""))
    r.play(REPO / "site.yml")  # back to a converged target on the default installer


def bench_noop(r: Runner, rows: list) -> None:
    floor = r.floor_playbook()
    r.play(REPO / "site.yml")
    counts: list[list[str]] = []

    def noop() -> float:
        wall, report = r.play(REPO / "site.yml")
        if changed(report):
            sys.exit(f"the re-run of site.yml changed {changed(report)} task(s): not converged")
        counts.append(reached(report, r.args.target))
        return wall

    times = alternate(r.args.repeat, {"floor": lambda: r.play(floor)[0], "noop": noop})
    rows.append(("no-op re-run of site.yml", "floor", times["floor"], "site.yml", times["noop"],
                 f"{len(counts[-1])} tasks reached the target"))
    r.reached_noop = counts[-1]


def bench_rollback(r: Runner, rows: list) -> None:
    floor = r.floor_playbook()

    def reset(side: str) -> None:
        if side == "rollback":
            r.play(REPO / "site.yml", "-e", "autotune=true")

    times = alternate(r.args.repeat, {
        "floor": lambda: r.play(floor)[0],
        "rollback": lambda: r.play(REPO / "site.yml", "-e", "autotune=false")[0],
    }, reset)
    r.play(REPO / "site.yml")
    rows.append(("rollback (site.yml -e autotune=false)", "floor", times["floor"], "rollback", times["rollback"], ""))


def docker(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, check=check)


def remove_fleet() -> None:
    names = docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    mine = [n for n in names if n.startswith(FLEET_PREFIX)]
    if mine:
        docker("rm", "-f", *mine)


def start_fleet(image: str, count: int) -> list[str]:
    remove_fleet()
    names = [f"{FLEET_PREFIX}{i}" for i in range(1, count + 1)]
    for name in names:
        # The options the demo target uses: systemd as PID 1 without --privileged.
        docker("run", "-d", "--name", name, "--cap-add", "SYS_ADMIN", "--security-opt", "seccomp=unconfined",
               "--cgroupns=host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--tmpfs", "/run", "--tmpfs",
               "/run/lock", "--stop-signal", "SIGRTMIN+3", image, "/lib/systemd/systemd")
    for name in names:
        docker("exec", name, "systemctl", "is-system-running", "--wait", check=False)
    return names


def fleet_inventory(r: Runner, names: list[str]) -> Path:
    """The fleet with the target's own variables (versions, wheel directory, toggles)."""
    out = subprocess.run(["ansible-inventory", "-i", r.args.inventory, "--host", r.args.target],
                         cwd=REPO, env=r.env, capture_output=True, text=True, check=True).stdout
    host_vars = {k: v for k, v in json.loads(out).items()
                 if not k.startswith(("ansible_connection", "ansible_host", "ansible_user", "ansible_port",
                                      "ansible_ssh", "ansible_docker", "ansible_python_interpreter"))}
    host_vars.update(ansible_connection="community.docker.docker", ansible_python_interpreter="/usr/bin/python3")
    inventory = {"all": {"children": {"sglang_containers": {"hosts": {n: {} for n in names}}},
                         "vars": host_vars}}
    path = r.workdir / f"fleet-{len(names)}.json"
    path.write_text(json.dumps(inventory))
    return path


def bench_fleet(r: Runner, rows: list) -> None:
    sizes = [int(n) for n in r.args.fleet.split(",") if n]
    times: dict[int, list[float]] = {n: [] for n in sizes}
    try:
        for round_ in range(r.args.repeat):
            for size in sizes:
                names = start_fleet(r.args.fleet_image, size)
                inventory = str(fleet_inventory(r, names))
                r.play(REPO / "playbooks" / "demo_wheels.yml", inventory=inventory)
                wall, _ = r.play(REPO / "site.yml", inventory=inventory)
                times[size].append(wall)
                log(f"round {round_ + 1}: fleet of {size}: {wall:.2f} s")
    finally:
        remove_fleet()
    one = statistics.median(times[sizes[0]])
    for size in sizes[1:]:
        rows.append((f"fleet: site.yml from scratch, {size} targets against {sizes[0]}", f"N={sizes[0]}",
                     times[sizes[0]], f"N={size}", times[size], ""))
    if len(sizes) == 1:
        rows.append((f"fleet: site.yml from scratch, {sizes[0]} target", f"N={sizes[0]}", times[sizes[0]],
                     "", [], f"median {one:.2f} s"))


def table(rows: list) -> str:
    lines = ["| comparison | A | median A (s) | B | median B (s) | B/A | runs | note |",
             "|---|---|---|---|---|---|---|---|"]
    for what, a, ta, b, tb, note in rows:
        ma = statistics.median(ta)
        mb = statistics.median(tb) if tb else float("nan")
        ratio = f"{mb / ma:.2f}" if tb else ""
        lines.append(f"| {what} | {a} | {ma:.2f} | {b} | {mb:.2f} | {ratio} | {len(ta)} | {note} |"
                     .replace("| nan |", "| |"))
    return "\n".join(lines)


def machine() -> str:
    cpus = os.cpu_count()
    mem = ""
    try:
        kib = int(next(line for line in Path("/proc/meminfo").read_text().splitlines()
                       if line.startswith("MemTotal")).split()[1])
        mem = f", {kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        pass
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{platform.system()} {platform.release()}, {cpus} CPUs ({model}){mem}, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-i", "--inventory", default="inventory/local", help="inventory of the target")
    parser.add_argument("--target", default="sglang-demo", help="the one target host (in sglang_containers)")
    parser.add_argument("--prepare", default="playbooks/demo_target.yml",
                        help="playbook run first to stand the target up ('' to skip)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side (median)")
    parser.add_argument("--only", default="install,noop,rollback,fleet", help="comparisons to run")
    parser.add_argument("--full", action="store_true", help="install the whole dependency set from PyPI")
    parser.add_argument("--torch-index", default="https://pypi.org/simple",
                        help="torch's index for --full (PyTorch's own index where reachable)")
    parser.add_argument("--ca-bundle", default="/etc/ssl/certs/ca-certificates.crt",
                        help="controller CA bundle copied to the target for --full")
    parser.add_argument("--fleet", default="1,2,4,8", help="fleet sizes; the first is the base")
    parser.add_argument("--fleet-image", default="local/debian12-systemd:latest", help="image of the fleet")
    args = parser.parse_args()
    only = set(args.only.split(","))

    with tempfile.TemporaryDirectory(prefix="bench-deploy-") as tmp:
        r = Runner(args, Path(tmp))
        if args.prepare:
            r.play(REPO / args.prepare)
        rows: list = []
        started = time.monotonic()
        if "install" in only:
            bench_install(r, rows)
        if "noop" in only:
            bench_noop(r, rows)
        if "rollback" in only:
            bench_rollback(r, rows)
        if "fleet" in only and args.fleet:
            bench_fleet(r, rows)
        print(f"Machine: {machine()}")
        print(f"Command: {' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}; "
              f"{args.repeat} runs a side, alternating; {time.monotonic() - started:.0f} s in all\n")
        print(table(rows))
        if getattr(r, "reached_noop", None):
            print("\nTasks that reached the target on the no-op re-run:")
            for name in r.reached_noop:
                print(f"  - {name}")


if __name__ == "__main__":
    main()
