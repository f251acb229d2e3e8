#!/usr/bin/env python3
# Over 400 lines on purpose: a by-hand script with no package to install; its four comparisons share
# one Runner, one alternation and one table, and a second file could not import this hyphenated one.
"""Deploy benchmark: install, re-run, rollbacks and fleet, side by side (run by hand, not in CI).

Each comparison runs its two sides alternately (A B A B ...) against the same
target and prints medians and ratios in one table. The default target is the
README's demo: the LXC container sglang-demo (inventory/local), reached by ssh
over its host-only link with ControlPersist and pipelining.

  install    a new virtualenv through the sglang role (-e sglang_upgrade=true):
             pip against uv, cold caches and warm cache. SGLang alone (--no-deps,
             from the target's wheel directory) unless --full, which installs the
             whole dependency set from PyPI (network-heavy: minutes, ~10 GB a venv).
  noop       a converged re-run of site.yml against the floor (a one-task playbook
             on the same target, same connection), with the tasks whose module ran on
             each host; beside it, as many ansible.builtin.ping calls on the same
             hosts: what that many module calls cost with nothing to do
  rollback   the file-only rollback (playbooks/autotune.yml -e autotune=false)
             against the floor, and the rollback that restarts the server
             (site.yml -e autotune=false) against the floor plus the server's
             restart (the restart task's own seconds; none where the server does
             not run, as on the demo without a GPU). Each timed run starts from
             autotune on (put back untimed).
  fleet      N LXC containers (sglang-bench-1..N, made by the lxc_container role
             like the target, on the same bridge) converged by one site.yml
             against one: wall(N)/wall(1) of the no-op re-run. Made once, removed
             afterwards.

  scripts/bench-deploy.py                                  # the demo target, all of it
  scripts/bench-deploy.py --only noop,rollback,fleet --repeat 3 --fleet 1,4
  scripts/bench-deploy.py -i inventory/lxc --target ct101 --prepare '' --only noop,rollback

Run it from the project's virtualenv: .venv/bin/python scripts/bench-deploy.py
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
    "ansible.builtin.add_host", "add_host", "ansible.builtin.group_by", "group_by",
}
FLEET_PREFIX = "sglang-bench-"
# Ratios the project holds converged runs to (issue 14).
WITHIN = 3.0
# The sglang role's tasks that create the virtualenv and run the installer.
INSTALL_TASKS = ("Create the virtualenv", "Install with pip", "Install with uv")


def log(message: str) -> None:
    print(f"--- {message}", file=sys.stderr, flush=True)


class Runner:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.playbook = shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook")
        self.fleet_known_hosts = ""
        self.fleet_bridge_address = ""
        self.lxc_vars: dict = {}
        self.target_vars: dict = {}
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

    def lxc_hosts(self) -> list[str]:
        out = subprocess.run(["ansible-inventory", "-i", self.args.inventory, "--list"], cwd=REPO, env=self.env,
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out).get("lxc_hosts", {}).get("hosts", [])

    def pings_playbook(self, calls: dict[str, int]) -> Path:
        """As many ansible.builtin.ping tasks on each host as the no-op ran modules there."""
        path = self.workdir / "pings.yml"
        plays = [f"""- name: {count} module calls on {host}
  hosts: {host}
  gather_facts: false
  tasks:
""" + "".join(f"    - name: Call {n + 1}\n      ansible.builtin.ping:\n" for n in range(count))
                 for host, count in calls.items()]
        path.write_text("---\n" + "\n".join(plays))
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


def reached(report: dict) -> dict[str, list[str]]:
    """Per host, the tasks whose module ran on it (not skipped, not a controller-only action)."""
    names: dict[str, list[str]] = {}
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            for host, res in task.get("hosts", {}).items():
                if res.get("skipped") or res.get("action") in LOCAL_ACTIONS:
                    continue
                if res.get("results") and all(r.get("skipped") for r in res["results"]):
                    continue
                names.setdefault(host, []).append(task["task"]["name"])
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
    """The converged re-run against the floor, and beside it the same number of module calls on the
    same hosts, each the cheapest module there is (ping): what the calls alone cost."""
    floor = r.floor_playbook()

    def converged() -> tuple[float, dict[str, list[str]]]:
        wall, report = r.play(REPO / "site.yml")
        if changed(report):
            sys.exit(f"the re-run of site.yml changed {changed(report)} task(s): not converged")
        return wall, reached(report)

    r.play(REPO / "site.yml")
    calls = {host: len(names) for host, names in converged()[1].items()}
    pings = r.pings_playbook(calls)
    counts: list[dict[str, list[str]]] = []

    def noop() -> float:
        wall, names = converged()
        counts.append(names)
        return wall

    times = alternate(r.args.repeat, {"floor": lambda: r.play(floor)[0], "noop": noop,
                                      "pings": lambda: r.play(pings)[0]})
    where = ", ".join(f"{len(names)} on {host}" for host, names in counts[-1].items())
    rows.append(("no-op re-run of site.yml", "floor", times["floor"], "site.yml", times["noop"],
                 f"modules ran {where}"))
    rows.append(("as many module calls on the same hosts, each a ping", "floor", times["floor"], "pings",
                 times["pings"], ", ".join(f"{count} on {host}" for host, count in calls.items())))
    r.reached_noop = counts[-1]


def restart_seconds(report: dict) -> float:
    """Seconds the sglang_server role spent restarting the server in this run (0 when it did not)."""
    total = 0.0
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            if task["task"]["name"].split(" : ")[-1].startswith("Restart the server once"):
                res = next(iter(task.get("hosts", {}).values()), {})
                if not res.get("skipped"):
                    total += task_seconds({"plays": [{"tasks": [task]}]}, (task["task"]["name"].split(" : ")[-1],))
    return total


def bench_rollback(r: Runner, rows: list) -> None:
    floor = r.floor_playbook()
    autotune = REPO / "playbooks" / "autotune.yml"

    def reset_file(side: str) -> None:
        if side == "rollback":
            r.play(autotune, "-e", "autotune=true")

    times = alternate(r.args.repeat, {
        "floor": lambda: r.play(floor)[0],
        "rollback": lambda: r.play(autotune, "-e", "autotune=false")[0],
    }, reset_file)
    rows.append(("file-only rollback (playbooks/autotune.yml -e autotune=false)", "floor", times["floor"],
                 "rollback", times["rollback"], ""))

    def reset_site(side: str) -> None:
        if side == "rollback":
            r.play(REPO / "site.yml", "-e", "autotune=true")

    restarts: list[float] = []

    def rollback() -> float:
        wall, report = r.play(REPO / "site.yml", "-e", "autotune=false")
        restarts.append(restart_seconds(report))
        return wall

    times = alternate(r.args.repeat, {"floor": lambda: r.play(floor)[0], "rollback": rollback}, reset_site)
    restart = statistics.median(restarts)
    ran = sum(1 for seconds in restarts if seconds > 0)
    note = (f"restart {restart:.2f} s (median), in {ran} of {len(restarts)} runs" if ran else
            "the server does not run on this target (no GPU): nothing restarted, floor alone")
    rows.append(("rollback that restarts the server (site.yml -e autotune=false)", "floor + restart",
                 [t + restart for t in times["floor"]], "rollback", times["rollback"], note))
    r.play(REPO / "site.yml")


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


def fleet_names(count: int) -> list[str]:
    return [f"{FLEET_PREFIX}{i}" for i in range(1, count + 1)]


def remove_fleet(r: Runner, count: int) -> None:
    """Destroy the fleet's containers (only sglang-bench-N) and forget their host keys."""
    for i, name in enumerate(fleet_names(count), start=1):
        if Path(f"/var/lib/lxc/{name}/config").exists():
            run("lxc-destroy", "--force", f"--name={name}", check=False)
        Path(f"/etc/lxc/sglang-deploy/{name}.conf").unlink(missing_ok=True)
        if r.fleet_known_hosts and Path(r.fleet_known_hosts).exists():
            run("ssh-keygen", "-R", fleet_address(r, i), "-f", r.fleet_known_hosts, check=False)


def inventory_vars(r: Runner, host: str) -> dict:
    out = subprocess.run(["ansible-inventory", "-i", r.args.inventory, "--host", host],
                         cwd=REPO, env=r.env, capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def rendered(r: Runner, host: str, name: str) -> str:
    """A variable of host as Ansible templates it (ansible-inventory prints the raw template)."""
    env = dict(r.env, ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    out = subprocess.run(["ansible", "-i", r.args.inventory, host, "-m", "ansible.builtin.debug", "-a", f"var={name}"],
                         cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout
    report = json.loads(out[out.index("{"):])
    return str(report["plays"][0]["tasks"][0]["hosts"][host][name])


def fleet_address(r: Runner, index: int) -> str:
    import ipaddress

    return str(ipaddress.IPv4Interface(r.fleet_bridge_address).network[10 + index])


def fleet_inventory(r: Runner, count: int) -> Path:
    """N containers like the target: the LXC host's variables per container, the target's per host."""
    lxc_hosts, containers = {}, {}
    for i, name in enumerate(fleet_names(count), start=1):
        address = fleet_address(r, i)
        lxc_hosts[f"lxc-bench-{i}"] = dict(r.lxc_vars, lxc_container_name=name, lxc_container_inventory_name=name,
                                           lxc_container_address=address)
        containers[name] = dict(r.target_vars, ansible_host=address)
    inventory = {"all": {"children": {"lxc_hosts": {"hosts": lxc_hosts},
                                      "sglang_containers": {"hosts": containers}}}}
    path = r.workdir / f"fleet-{count}.json"
    path.write_text(json.dumps(inventory))
    return path


def bench_fleet(r: Runner, rows: list) -> None:
    sizes = [int(n) for n in r.args.fleet.split(",") if n]
    largest = max(sizes)
    r.target_vars = inventory_vars(r, r.args.target)
    lxc_host = next((h for h in r.lxc_hosts() if inventory_vars(r, h).get("lxc_container_inventory_name")
                     == r.args.target), None)
    if lxc_host is None or inventory_vars(r, lxc_host).get("lxc_container_backend") != "lxc":
        sys.exit(f"the fleet needs {r.args.target} made by the lxc_container role's lxc backend in {r.args.inventory}")
    r.lxc_vars = inventory_vars(r, lxc_host)
    r.fleet_known_hosts = rendered(r, lxc_host, "lxc_container_known_hosts")
    r.fleet_bridge_address = rendered(r, lxc_host, "lxc_container_lxc_bridge_address")
    times: dict[int, list[float]] = {n: [] for n in sizes}
    try:
        # Made one at a time (apt, the template and known_hosts are shared), given the
        # wheels, then converged once; the target's prepare made the ssh key.
        whole = str(fleet_inventory(r, largest))
        log(f"making the fleet of {largest} LXC containers")
        r.play(REPO / "playbooks" / "container.yml", "--forks", "1", inventory=whole)
        r.play(REPO / "playbooks" / "demo_wheels.yml", inventory=whole)
        r.play(REPO / "site.yml", inventory=whole)
        for round_ in range(r.args.repeat):
            for size in sizes:
                inventory = str(fleet_inventory(r, size))
                wall, report = r.play(REPO / "site.yml", inventory=inventory)
                if changed(report):
                    sys.exit(f"the fleet's re-run of site.yml changed {changed(report)} task(s): not converged")
                times[size].append(wall)
                log(f"round {round_ + 1}: fleet of {size}: {wall:.2f} s")
    finally:
        remove_fleet(r, largest)
    for size in sizes[1:]:
        rows.append((f"fleet: no-op re-run of site.yml, {size} LXC containers against {sizes[0]}", f"N={sizes[0]}",
                     times[sizes[0]], f"N={size}", times[size], ""))
    if len(sizes) == 1:
        rows.append((f"fleet: no-op re-run of site.yml, {sizes[0]} LXC container(s)", f"N={sizes[0]}",
                     times[sizes[0]], "", [], f"median {statistics.median(times[sizes[0]]):.2f} s"))


def table(rows: list) -> str:
    lines = ["| comparison | A | median A (s) | B | median B (s) | B/A | within 3 | runs | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for what, a, ta, b, tb, note in rows:
        ma = statistics.median(ta)
        mb = statistics.median(tb) if tb else float("nan")
        ratio = f"{mb / ma:.2f}" if tb else ""
        # The 3x bar is for converged runs against their floor, not for installs or fleets.
        judged = a.startswith("floor")
        within = ("yes" if mb / ma <= WITHIN else "no") if tb and judged else ""
        lines.append(f"| {what} | {a} | {ma:.2f} | {b} | {mb:.2f} | {ratio} | {within} | {len(ta)} | {note} |"
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
    parser.add_argument("--fleet", default="1,4", help="fleet sizes (LXC containers); the first is the base")
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
        for host, names in getattr(r, "reached_noop", {}).items():
            print(f"\nTasks whose module ran on {host} on the no-op re-run:")
            for name in names:
                print(f"  - {name}")


if __name__ == "__main__":
    main()
