"""Shared fixtures: real SGLang wheels from PyPI, cached outside the repository."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import resource
import shlex
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import ansible.module_utils
import ansible_runner
import pytest
from ansible.parsing.splitter import parse_kv

REPO = Path(__file__).resolve().parent.parent

# What Ansible does for a module: `ansible.module_utils.NAME` is found in the
# role's module_utils/ or in a dependency role's (shared code: nvidia_discovery,
# sglang_locate). Tests import the project's module_utils by the same names as
# the modules do.
ansible.module_utils.__path__.extend(str(path) for path in sorted(REPO.glob("roles/*/module_utils")))

# Where each release's gate is and the state it ships in (0.5.7: read from its wheel), checked by the
# tests against the real wheels.
EXPECTED_STATE = {
    "0.5.6": ("absent", "srt/model_executor/model_runner.py"),
    "0.5.7": ("commented", "srt/model_executor/model_runner.py"),
    "0.5.8": ("commented", "srt/model_executor/model_runner.py"),
    "0.5.10": ("commented", "srt/model_executor/model_runner.py"),
    "0.5.12": ("commented", "srt/model_executor/model_runner.py"),
    "0.5.13": ("enabled", "srt/model_executor/model_runner.py"),
    "0.5.14": ("enabled", "srt/model_executor/runner/base_runner.py"),
    "0.5.18": ("enabled", "srt/model_executor/runner/flashinfer_autotune.py"),
    "0.5.23": ("enabled", "srt/model_executor/runner/flashinfer_autotune.py"),
}
VERSIONS = list(EXPECTED_STATE)
COMMENTED = [v for v, (state, _) in EXPECTED_STATE.items() if state == "commented"]
UPSTREAM = [v for v, (state, _) in EXPECTED_STATE.items() if state == "enabled"]


def load_file(path: Path, name: str = ""):
    """A module, plugin or module_utils file loaded from its path (as Ansible runs it), under its own name."""
    spec = importlib.util.spec_from_file_location(name or f"{path.stem}_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wheel_cache() -> Path:
    default = Path.home() / ".cache" / "sglang-deploy" / "wheels"
    path = Path(os.environ.get("SGLANG_WHEEL_CACHE", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


# Each Python the tests start (ansible-playbook, ansible-runner's, a module on the local connection)
# keeps the compiled code of AnsiballZ's sources, the YAML Ansible parses out of its own files and
# what AnsiballZ's import scan reads in each source: tests/run_caches/ (zipimport_code_cache.py,
# ansible_yaml_cache.py, ansiballz_scan_cache.py) says why, how and where. ZIPIMPORT_CODE_CACHE=,
# ANSIBLE_YAML_CACHE= and ANSIBALLZ_SCAN_CACHE= (empty) turn each off.
RUN_CACHE_HOOK = str(REPO / "tests" / "run_caches")
if RUN_CACHE_HOOK not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [RUN_CACHE_HOOK, os.environ.get("PYTHONPATH")]))


def python_says(code: str, *args: str, **variables: str | None) -> str:
    """The stripped output of `python -c code args` started as the tests start a Python (PYTHONPATH
    above), with each of variables set to its value, or unset where it is None."""
    env = {name: value for name, value in os.environ.items() if name not in variables}
    env.update({name: value for name, value in variables.items() if value is not None})
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def sglang_wheel(version: str) -> Path:
    """The real wheel from PyPI, downloaded once (no dependencies)."""
    cache = wheel_cache()
    found = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--dest", str(cache), f"sglang=={version}"],
            check=True,
        )
        found = sorted(cache.glob(f"sglang-{version}-*.whl"))
    assert found, f"pip downloaded no wheel for sglang=={version}"
    return found[0]


def wheel_member(version: str, member: str) -> bytes:
    """A file's bytes as shipped in the wheel: the ground truth for 'original'."""
    with zipfile.ZipFile(sglang_wheel(version)) as wheel:
        return wheel.read(member)


def unpack_sglang(version: str, dest: Path) -> Path:
    """Unpack what the gate needs (package markers, gate files, METADATA and RECORD) into dest."""
    wanted_prefixes = ("sglang/srt/model_executor/",)
    wanted = {"sglang/__init__.py", "sglang/version.py", "sglang/_version.py"}
    with zipfile.ZipFile(sglang_wheel(version)) as wheel:
        for name in wheel.namelist():
            if (
                name in wanted
                or name.startswith(wanted_prefixes) and name.endswith(".py")
                or name in (f"sglang-{version}.dist-info/METADATA", f"sglang-{version}.dist-info/RECORD")
            ):
                wheel.extract(name, dest)
    return dest / "sglang"


@pytest.fixture
def sglang_tree(tmp_path: Path):
    """Factory: unpack a real SGLang release into a fresh directory."""

    def make(version: str) -> Path:
        return unpack_sglang(version, tmp_path / f"sglang-{version}")

    return make



# What the static flag reader reads of a wheel: the package markers, srt/server_args.py,
# srt/arg_groups/, the CUDA graph Backend constants (0.5.14+) and the dist-info METADATA.
FLAG_SOURCES = {"sglang/__init__.py", "sglang/version.py", "sglang/_version.py",
                "sglang/srt/__init__.py", "sglang/srt/server_args.py",
                "sglang/srt/model_executor/cuda_graph_config.py"}


@pytest.fixture(scope="module")
def flag_sources(tmp_path_factory):
    """Factory: version -> the sglang package dir of what the flag reader reads (once per module)."""
    made: dict[str, Path] = {}

    def make(version: str) -> Path:
        if version not in made:
            dest = tmp_path_factory.mktemp(f"sglang-{version}")
            with zipfile.ZipFile(sglang_wheel(version)) as wheel:
                for name in wheel.namelist():
                    if (name in FLAG_SOURCES
                            or name.startswith("sglang/srt/arg_groups/") and name.endswith(".py")
                            or name == f"sglang-{version}.dist-info/METADATA"):
                        wheel.extract(name, dest)
            made[version] = dest / "sglang"
        return made[version]

    return make


@pytest.fixture(scope="module")
def flags_of(flag_sources):
    """Factory: version -> the static reader's flag table of that release (once per module)."""
    from ansible.module_utils.sglang_argparse_reader import extract_flags

    cache: dict = {}

    def get(version: str):
        if version not in cache:
            cache[version] = extract_flags(flag_sources(version))
        return cache[version]

    return get


def run_module(module: str, args: dict, roles: tuple[str, ...], *flags: str) -> tuple[dict, int]:
    """`ansible localhost -m MODULE -a JSON [FLAGS]` with these roles' library/ and module_utils/ on the
    search path (what a play of the role and its dependencies gives): the module's result and the rc."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
           "ANSIBLE_STDOUT_CALLBACK": "json",
           "ANSIBLE_LIBRARY": ":".join(str(REPO / "roles" / role / "library") for role in roles),
           "ANSIBLE_MODULE_UTILS": ":".join(str(REPO / "roles" / role / "module_utils") for role in roles)}
    proc = subprocess.run(["ansible", "localhost", "-m", module, "-a", json.dumps(args), *flags],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"], proc.returncode


def tree_digest(*roots: Path) -> dict[str, str]:
    """Each root and everything under it: sha256 of files, the kind of the rest, absent roots too.

    Tests compare it before and after a refused run: nothing may appear, go or change.
    """
    out: dict[str, str] = {}
    for root in roots:
        for path in [root, *sorted(root.rglob("*"))] if root.is_dir() else [root]:
            if path.is_symlink():
                out[str(path)] = "link:" + os.readlink(path)
            elif path.is_file():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            elif path.is_dir():
                out[str(path)] = "dir"
            else:
                out[str(path)] = "special" if path.exists() else "absent"
    return out

@dataclass
class Run:
    """What a playbook run did, in the terms the tests assert on."""

    status: str
    rc: int
    changed: int
    failed: int
    failures: list[str]
    facts: dict
    stdout: str
    # The module (task action) of each task that ran on a host, in order: skipped ones left out.
    actions: list[str]
    # What each task that succeeded returned, with its module: (action, result), in order.
    results: list[tuple[str, dict]]
    # Each task that reached a host, skipped ones too, named as its TASK line names it ("role : name").
    tasks: list[str]

    def returned(self, action: str) -> dict:
        """The last successful result of module `action` (its registered value)."""
        found = [res for name, res in self.results if name == action]
        assert found, f"no {action} task succeeded: {self.actions}"
        return found[-1]


@dataclass
class _Finished:
    """An ansible-runner run, its events read once: ansible-runner's `events` reads and parses every
    event file again each time it is iterated, and its `stats` iterates them, so reading them per
    case host cost hosts times events file reads (17 hosts of 10 tasks: some 5800 instead of 340)."""

    status: str
    rc: int
    events: list[dict]
    stats: dict
    stdout: str


def _runner(private: Path, playbook: str, cmdline: list[str], inventory: str | dict,
            envvars: dict[str, str] | None) -> _Finished:
    private.mkdir(parents=True, exist_ok=True)
    # ansible-runner keeps the last cmdline in env/cmdline and replays it when given none.
    (private / "env" / "cmdline").unlink(missing_ok=True)
    runner = ansible_runner.run(
        private_data_dir=str(private),
        project_dir=str(REPO),
        playbook=str(REPO / "playbooks" / playbook),
        inventory=inventory,
        cmdline=shlex.join(cmdline),
        quiet=True,
        envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", **(envvars or {})},
    )
    stdout = runner.stdout.read()
    # Both controllers (ansible-core 2.19 on Python 3.11, 2.21 on 3.12+) run the project with no
    # deprecation warning: what a later ansible-core removes shows here first.
    assert "[DEPRECATION WARNING]" not in stdout, stdout[stdout.index("[DEPRECATION WARNING]"):][:2000]
    events = list(runner.events)
    stats = next((event["event_data"] for event in events if event.get("event") == "playbook_on_stats"), {})
    return _Finished(status=runner.status, rc=runner.rc, events=events, stats=stats, stdout=stdout)


def _run_of(finished: _Finished, hosts: set[str] | None = None) -> Run:
    """The run as the tests read it: of every host, or of `hosts` only (status, counts, events)."""
    stats, stdout = finished.stats, finished.stdout
    events = [event for event in finished.events
              if hosts is None or event.get("event_data", {}).get("host") in hosts]
    facts: dict = {}
    for event in events:
        res = event.get("event_data", {}).get("res", {})
        if event.get("event") == "runner_on_ok" and "ansible_facts" in res:
            facts.update(res["ansible_facts"])

    def count(key: str) -> int:
        return sum(n for host, n in stats.get(key, {}).items() if hosts is None or host in hosts)

    status = finished.status
    if hosts is not None:   # a host the run never reached (it failed before any play) failed too
        reached = hosts <= set(stats.get("processed", {}))
        status = "failed" if count("failures") or count("dark") or (finished.rc != 0 and not reached) else "successful"
    return Run(
        status=status,
        rc=finished.rc,
        changed=count("changed"),
        failed=count("failures"),
        failures=[str(event["event_data"]["res"].get("msg", ""))
                  for event in events if event.get("event") == "runner_on_failed"],
        facts=facts,
        stdout=stdout,
        actions=[event["event_data"].get("task_action", "")
                 for event in events
                 if event.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable")],
        results=[(event["event_data"].get("task_action", ""), event["event_data"].get("res", {}))
                 for event in events if event.get("event") == "runner_on_ok"],
        tasks=[" : ".join(filter(None, (event["event_data"].get("role"), event["event_data"].get("task"))))
               for event in events if event.get("event") in
               ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")],
    )


def run_playbook(private: Path, playbook: str, cmdline: list[str], inventory: str = "localhost,",
                 envvars: dict[str, str] | None = None) -> Run:
    """Run playbooks/<playbook> as an operator would: `-i localhost, -c local ...`."""
    return _run_of(_runner(private, playbook, ["-c", "local", *cmdline], inventory, envvars))


def as_host_vars(args: list[str]) -> dict:
    """What `-e` makes of args (JSON typed, key=value as Ansible's own parse_kv reads it), as host variables."""
    found: dict = {}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        assert flag == "-e", args
        found.update(json.loads(value) if value.startswith("{") else parse_kv(value))
    assert "_raw_params" not in found, f"{args}: give a value with spaces as -e JSON"
    return found


def run_cases(private: Path, playbook: str, cases: dict[str, dict], cmdline: list[str], group: str = "",
              envvars: dict[str, str] | None = None) -> dict[str, Run]:
    """Many cases in one run of playbooks/<playbook>: each case an inventory host of its own.

    Each host is a local-connection alias of this machine whose host variables are the case's
    (typed, as `-e` JSON gives them), in `group` or ungrouped. A refusal fails its own host and
    the others go on, so each case's Run has its own status, failures, actions and changed count;
    its stdout is the whole run's. One ansible-playbook process instead of one per case: for
    refusals that end before the first change, about half the CPU or less (docs/testing.md: the
    30 bad settings of validate.yml, 14.7 CPU-s against 36.5).
    """
    hosts = {name: {"ansible_connection": "local", **variables} for name, variables in cases.items()}
    inventory = {"all": {"children": {group: {"hosts": hosts}}}} if group else {"all": {"hosts": hosts}}
    finished = _runner(private, playbook, cmdline, inventory, envvars)
    return {name: _run_of(finished, {name}) for name in cases}


# The files that cost most go first, largest first, so that no pytest-xdist worker is left with one
# at the end while the other has nothing to do: with --no-loadscope-reorder (scripts/dev.sh test)
# xdist hands files out in this order. The fleet (minutes of wall time, much of it waiting on its
# containers) leads; the others are in the order of their CPU-s as this summary printed them in CI
# (2026-12-07). The rest follow as xdist's own reorder would put them, the most tests first; a file of
# one costly test goes in this list, or it comes last (the parser's virtualenv, about 60 CPU-s on a
# fresh machine, left one worker alone for the last minute of CI: vmstat showed a core idle).
RUN_FIRST = ("test_fleet_roll.py", "test_proxmox_backend.py", "test_playbook_autotune_input.py",
             "test_playbook_bench.py", "test_playbook_autotune.py", "test_model_fetch.py",
             "test_sglang_install.py", "test_sglang_install_faults.py", "test_sglang_flags_real_parser.py",
             "test_model_mount.py", "test_proxmox_refusals.py", "test_autotune_kill.py", "test_playbook_validate.py",
             "test_playbook_bench_answers.py", "test_playbook_bench_key.py")


def pytest_collection_modifyitems(items: list) -> None:
    tests_in = {}
    for item in items:
        tests_in[item.path] = tests_in.get(item.path, 0) + 1
    first = {name: rank for rank, name in enumerate(RUN_FIRST)}
    items.sort(key=lambda item: (first.get(item.path.name, len(first)), -tests_in[item.path]))


def _cpu_seconds() -> float:
    """CPU of this process and of the children it waited for (ansible-playbook, its local modules)."""
    usages = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(usage.ru_utime + usage.ru_stime for usage in usages)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_CPU_AT_START] = _cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # Each test's CPU (its fixtures' too; not what runs in Docker) rides on its teardown report, which
    # pytest-xdist carries to the controller: the summary sums them per file.
    if call.when == "teardown" and _CPU_AT_START in item.stash:
        item.user_properties.append(("cpu_s", _cpu_seconds() - item.stash[_CPU_AT_START]))
    yield


_CPU_AT_START = pytest.StashKey[float]()


def pytest_terminal_summary(terminalreporter) -> None:
    """Print the CPU each file cost (the top 12) and the whole test command's wall time (set by
    scripts/dev.sh) before pytest's last line: where CI's time goes, in every run."""
    per_file: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            for key, value in getattr(report, "user_properties", ()):
                if key == "cpu_s" and getattr(report, "when", "") == "teardown":
                    name = report.nodeid.split("::")[0]
                    per_file[name] = per_file.get(name, 0.0) + value
    if per_file:
        total = sum(per_file.values())
        terminalreporter.write_line(f"CPU-s per test file (pytest and the local processes it waited for), "
                                    f"{total:.0f} in all:")
        for name, seconds in sorted(per_file.items(), key=lambda kv: -kv[1])[:12]:
            terminalreporter.write_line(f"  {seconds:7.1f}  {name}")
    started = os.environ.get("CI_STARTED_AT")
    if started and started.isdigit():
        import time

        elapsed = int(time.time()) - int(started)
        terminalreporter.write_line(f"test command wall time: {elapsed // 60} min {elapsed % 60} s")
