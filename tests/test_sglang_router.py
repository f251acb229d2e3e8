"""sglang_router's logic: replicas from the inventory, settings and flags checked, bad input refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible.module_utils import service_account
from ansible.module_utils import sglang_router_settings as gateway
from ansible.module_utils import sglang_router_text as unit
from ansible.module_utils import systemd_files, systemd_text
from conftest import REPO, load_file, tree_digest, wheel_cache
from fleet_harness import downloaded

ROLE = REPO / "roles" / "sglang_router"


router = load_file(ROLE / "filter_plugins" / "sglang_router.py")
flags_mod = load_file(ROLE / "module_utils" / "sglang_router_flags.py")
journal = load_file(REPO / "roles" / "sglang_server" / "filter_plugins" / "sglang_journal.py")
target = load_file(REPO / "roles" / "sglang_server" / "module_utils" / "sglang_cache_fleet.py")


def rep(name, address="169.254.1.1", port=30000):
    return {"name": name, "address": address, "port": port}


@pytest.mark.parametrize("replicas, expected", [
    ([rep("a", "")], "replica a has no address: set sglang_router_worker_address"),
    ([rep("a"), rep("b")], "replicas a and b are the same worker 169.254.1.1:30000"),
    ([rep("a", "HOST.example"), rep("b", "host.example")], "replicas a and b are the same worker"),
    ([rep("a"), rep("a", "169.254.1.2")], "replica a is listed twice"),
    ([rep("a", port=0)], "replica a's port 0 is out of range (expected 1-65535)"),
    ([rep("a", port=65536)], "replica a's port 65536 is out of range"),
    ([rep("a", port=-1)], "replica a's port -1 is out of range"),
    ([rep("a", port="http")], "replica a's port 'http' is not a number"),
    ([rep("a", "http://x")], "replica a's address 'http://x' is not an IP address or a host name"),
    ([], "no replicas"),
])
def test_bad_replicas_are_named(replicas, expected):
    problems = gateway.replica_problems(replicas)
    assert any(expected in p for p in problems), problems


def test_good_replicas_give_worker_urls():
    replicas = [rep("a"), rep("b", "169.254.1.2", 30001), rep("c", "fe80::1", 30000), rep("d", "node4")]
    assert gateway.replica_problems(replicas) == []
    assert [gateway.worker_url(r) for r in replicas] == [
        "http://169.254.1.1:30000", "http://169.254.1.2:30001", "http://[fe80::1]:30000", "http://node4:30000"]


def decided(host="0.0.0.0", port=30000, node_rank=0):
    """What the sglang_server role registers: sglang_server_validated.effective."""
    return {"sglang_server_validated": {"effective": {"host": host, "port": port, "node_rank": node_rank}}}


@pytest.mark.parametrize("hostvars, expected", [
    ({"sglang_router_worker_address": "169.254.9.9", **decided(port=31000)}, ("169.254.9.9", 31000)),
    (decided("169.254.3.3", 30002), ("169.254.3.3", 30002)),
    ({**decided(), "ansible_host": "n1"}, ("n1", 30000)),
    ({**decided("::"), "ansible_host": "n2"}, ("n2", 30000)),
])
def test_replica_address_and_port_come_from_what_the_server_decided(hostvars, expected):
    (found,) = router.replicas_from(["r"], {"r": hostvars})
    assert (found["address"], found["port"]) == expected
    assert gateway.replica_problems([found]) == []


@pytest.mark.parametrize("hostvars", [
    # the role's variables alone: the gateway no longer guesses the port from them (nor 30000)
    {"ansible_host": "n2", "sglang_server_port": 31000},
    {"ansible_host": "n2"},
    # the result of a run that stopped before the flag check, or an older result without the rank
    {"ansible_host": "n2", "sglang_server_validated": {"failed": True, "msg": "x"}},
    {"ansible_host": "n2", "sglang_server_validated": {"effective": {"host": "0.0.0.0", "port": 30000}}},
])
def test_a_replica_whose_server_decided_nothing_is_refused_by_name(hostvars):
    (found,) = router.replicas_from(["r2"], {"r2": hostvars})
    assert found["port"] is None and found["undecided"]
    (problem,) = gateway.replica_problems([found])
    assert problem.startswith("replica r2: this run has not decided where its server listens"), problem
    assert "tasks_from: settings" in problem and "playbooks/fleet.yml" in problem


@pytest.mark.parametrize("ranks, workers", [
    ({"a": 1, "b": 0, "c": 0}, ["b", "c"]),
    ({"a": 0, "b": 1, "c": 0}, ["a", "c"]),
])
def test_a_multi_node_replica_is_one_worker_its_rank_0(ranks, workers):
    hostvars = {h: {"ansible_host": h, **decided(node_rank=rank)} for h, rank in ranks.items()}
    found = router.replicas_from(["a", "b", "c"], hostvars)
    assert [r["name"] for r in found] == workers


def settings(**over):
    """The smg_flags module's options, the role's defaults."""
    base = {"replicas": [rep("a")], "host": "0.0.0.0", "port": 30000, "policy": "cache_aware",
            "metrics_host": "127.0.0.1", "metrics_port": 29000, "health_check_endpoint": "/health",
            "health_check_interval_secs": 10, "health_check_timeout_secs": 5, "health_failure_threshold": 3,
            "health_success_threshold": 2, "extra_flags": {}, "api_key": "",
            "unit_name": "sglang-router"}
    base.update(over)
    return base


@pytest.mark.parametrize("over, expected", [
    ({"port": 70000}, "sglang_router_port is 70000: expected a port 1-65535"),
    ({"port": 0}, "sglang_router_port is 0: expected a port 1-65535"),
    ({"metrics_port": 30000}, "the metrics need their own port"),
    ({"host": "http://x"}, "sglang_router_host is 'http://x': expected one address or host name"),
    ({"health_check_endpoint": "health"}, "expected a path starting with /"),
    ({"extra_flags": {"api-key": "x"}}, "use sglang_router_api_key"),
    ({"extra_flags": {"worker-urls": ["x"]}}, "use the inventory"),
    ({"extra_flags": {"log-dir": "a\nb"}}, "contains a control character"),
    ({"unit_name": "sglang-router.socket"}, "sglang_router_unit_name must be a unit name systemd accepts, without "
     "'.service' or another unit type's suffix: 'sglang-router.socket' ends in '.socket'"),
    ({"unit_name": "../../etc/x"}, "sglang_router_unit_name must be a unit name systemd accepts, without '.service' "
     "(ASCII letters, digits, ':', '_', '.', '-'; not starting with '-' or '.'; no '@'; at most 247 characters), "
     "got '../../etc/x'"),
    ({"unit_name": "a/b"}, "got 'a/b'"),
    ({"unit_name": "gw\nExecStartPre=/bin/sh"}, "sglang_router_unit_name must be a unit name systemd accepts"),
])
def test_bad_settings_are_named(over, expected):
    problems = gateway.settings_problems(settings(**over))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("host, expected", [
    ("0.0.0.0", "http://127.0.0.1:30000"), ("", "http://127.0.0.1:30000"), ("::", "http://[::1]:30000"),
    ("[::]", "http://[::1]:30000"), ("169.254.1.9", "http://169.254.1.9:30000"),
    ("fd00::9", "http://[fd00::9]:30000"), ("gw.example", "http://gw.example:30000"),
])
def test_the_gateway_reaches_itself_by_its_loopback_when_it_listens_everywhere(host, expected):
    assert gateway.decided(settings(host=host))["url"] == expected


def test_the_settings_decide_flags_workers_and_hosts_once():
    found = gateway.decided(settings(replicas=[rep("a"), rep("b", "fd00::2", 31000)], extra_flags={"--log-level": "debug"}))
    assert found["workers"] == ["http://169.254.1.1:30000", "http://[fd00::2]:31000"]
    assert found["by_host"] == {"a": "http://169.254.1.1:30000", "b": "http://[fd00::2]:31000"}
    assert list(found["flags"])[:4] == ["host", "port", "worker-urls", "policy"]   # the unit's order, unchanged
    assert found["flags"]["worker-urls"] == found["workers"] and found["flags"]["log-level"] == "debug"


def test_unit_words_are_quoted_for_systemd():
    line = unit.exec_start("/opt/sglang-router/current/bin/smg",
                           ["launch", "--log-dir", "/x/100%$HOME", "--api-key", "${SGLANG_ROUTER_API_KEY}"])
    assert line == ('/opt/sglang-router/current/bin/smg "launch" "--log-dir" "/x/100%%$$HOME" "--api-key" '
                    "${SGLANG_ROUTER_API_KEY}")
    text = unit.env_file_text("sglang-router", {"K": 'a"$b\\`'})
    assert text.splitlines()[-1] == 'K="a\\"\\$b\\\\\\`"'


@pytest.mark.parametrize("over, expected", [
    ({"user": "gw\nExecStartPre=/bin/sh"}, "sglang_router_user contains the control character"),
    ({"program": "smg"}, "the gateway's smg must be an absolute path"),
    ({"argv": ["--log-dir", "a\rb"]}, "argument contains the control character"),
    ({"name": "sglang-router.socket"}, "sglang_router_unit_name must be a unit name systemd accepts"),
])
def test_unit_values_systemd_cannot_take_are_refused(over, expected):
    args = {"name": "sglang-router", "version": "1.13.0", "user": "sglang-router",
            "program": "/opt/sglang-router/current/bin/smg", "argv": ["--port", "30000"], **over}
    with pytest.raises(systemd_text.UnitError, match=expected):
        unit.unit_text(**args)


def test_the_gateway_unit_is_accepted_by_systemd():
    text = unit.unit_text("sglang-router", "1.13.0", "root", sys.executable, ["--port", "30000"])
    run = lambda argv: (lambda d: (d.returncode, d.stdout, d.stderr))(
        subprocess.run(argv, capture_output=True, text=True, check=False))
    assert systemd_files.unit_problem(run, "sglang-router", text) is None


@pytest.fixture(scope="module")
def smg_python(tmp_path_factory) -> Path:
    """smg 1.13.0 from PyPI (once, into the wheel cache, as the fleet test fetches it) in a fresh
    uv venv (the installer the role uses)."""
    smg = downloaded("smg==1.13.0", wheel_cache() / "smg-1.13.0", "smg-1.13.0-*.whl", deps=True)[0].parent
    uv = downloaded("uv==0.13.9", wheel_cache(), "uv-0.13.9-*.whl", deps=False)[-1]
    tmp = tmp_path_factory.mktemp("smg")
    subprocess.run([sys.executable, "-m", "venv", tmp / "uv"], check=True)
    subprocess.run([tmp / "uv/bin/pip", "install", "-q", "--no-index", "--find-links", uv.parent, "uv==0.13.9"],
                   check=True)
    subprocess.run([tmp / "uv/bin/uv", "venv", "-q", tmp / "smg"], check=True)
    subprocess.run([tmp / "uv/bin/uv", "pip", "install", "-q", "--python", tmp / "smg/bin/python", "--no-index",
                    "--find-links", smg, "smg==1.13.0"], check=True)
    return tmp / "smg/bin/python"


def smg_spec(python: Path, argv: list[str] | None = None) -> dict:
    out = subprocess.run([python, "-c", flags_mod.SPEC_SCRIPT], input=json.dumps(argv or []),
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_flags_resolve_against_the_installed_smg(smg_python):
    spec = smg_spec(smg_python)
    assert spec["version"] == "1.13.0"
    flags = gateway.gateway_flags(settings(replicas=[rep("a"), rep("b", "169.254.1.2")]))
    argv, problems = flags_mod.check_flags(spec, flags, {"api-key": "SGLANG_ROUTER_API_KEY"})
    assert problems == []
    assert argv[argv.index("--worker-urls") + 1:argv.index("--worker-urls") + 3] == [
        "http://169.254.1.1:30000", "http://169.254.1.2:30000"]
    assert argv[-2:] == ["--api-key", "${SGLANG_ROUTER_API_KEY}"]
    assert smg_spec(smg_python, [a if not a.startswith("${") else "k" for a in argv])["error"] == ""


@pytest.mark.parametrize("flags, expected", [
    ({"policy": "fastest"}, "--policy 'fastest' is not one of smg 1.13.0's choices: random, round_robin"),
    ({"helth-check-endpoint": "/h"}, "did you mean --health-check-endpoint"),
    ({"disable-retries": "yes"}, "--disable-retries is a switch in smg 1.13.0"),
    ({"port": True}, "--port needs a value"),
    ({"port": [1, 2]}, "--port takes one value"),
])
def test_bad_flags_are_named(smg_python, flags, expected):
    _, problems = flags_mod.check_flags(smg_spec(smg_python), flags, {})
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("key", ["api-key sk-LEAK7", "api-key=sk-LEAK7", "api-key\tsk-LEAK7", "api-key:sk-LEAK7"])
def test_a_key_with_a_value_in_it_is_refused_without_showing_the_value(smg_python, key):
    spec = smg_spec(smg_python)
    _, problems = flags_mod.check_flags(spec, {key: True}, {})
    assert problems == [f"the key {'--api-key' + key[7] + '...'!r} is not a flag name: it has {key[7]!r} (what "
                        "follows it is not shown); a flag name has letters, digits, '-' and '_' only. Give a value "
                        "as the key's value, e.g. {'policy': 'round_robin'}, and the API key through "
                        "sglang_router_api_key"], problems
    assert "leak7" not in repr(problems).lower()
    assert flags_mod.hidden_parts({key: True, "port": 1}) == {"sk-LEAK7"}


def test_smgs_own_parser_judges_values(smg_python):
    assert "invalid int value: 'abc'" in smg_spec(smg_python, ["--port", "abc"])["error"]


def run_role(tmp_path: Path, hostvars: dict, gateway_vars: dict, *args: str) -> subprocess.CompletedProcess:
    """The replicas' settings check (sglang_server, tasks_from: settings), then the gateway role."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    gateway = {**local, "sglang_router_root": str(tmp_path / "root"), **gateway_vars}
    inv = {"all": {"children": {"sglang_gateway": {"hosts": {"gw": gateway}},
                                "sglang_containers": {"hosts": {h: {**local, **v} for h, v in hostvars.items()}}}}}
    (tmp_path / "inv.json").write_text(json.dumps(inv))
    book = tmp_path / "play.yml"
    book.write_text("- hosts: sglang_containers\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.include_role: {name: sglang_server, tasks_from: settings}\n"
                    "- hosts: sglang_gateway\n  gather_facts: false\n  roles: [sglang_router]\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(REPO / "roles")}
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inv.json"),
                           str(book), *args], capture_output=True, text=True, env=env)


GOOD = {"r1": {"sglang_router_worker_address": "169.254.1.1"}}


@pytest.mark.parametrize("replicas, gateway_vars, args, expected", [
    # listening on every address, with no ansible_host: nothing says where the gateway reaches it
    ({"r1": {"sglang_server_host": "0.0.0.0"}}, {}, [], "replica r1 has no address"),
    ({**GOOD, "r2": {"sglang_router_worker_address": "169.254.1.1"}},
     {}, [], "replicas r1 and r2 are the same worker 169.254.1.1:30000"),
    # a port the server's settings give is the server's to refuse, before the gateway is read
    ({"r1": {"sglang_router_worker_address": "169.254.1.1", "sglang_server_port": 99999}}, {}, [],
     "sglang_server_port"),
    (GOOD, {"sglang_router_replicas": [{"name": "r1", "address": "169.254.1.1", "port": 99999}]}, [],
     "replica r1's port 99999 is out of range"),
    (GOOD, {"sglang_router_policy": "fastest"}, [], "value of sglang_router_policy must be one of"),
    (GOOD, {"sglang_router_metrics_port": 30000}, [], "the metrics need their own port"),
    (GOOD, {"sglang_router_unit_name": "ssh.socket"}, [], "sglang_router_unit_name must be a unit name systemd "
     "accepts, without '.service' or another unit type's suffix: 'ssh.socket' ends in '.socket'"),
    # the gateway alone: where r1 listens is not guessed from sglang_server_port or 30000
    ({"r1": {"sglang_router_worker_address": "169.254.1.1", "sglang_server_port": 31000}}, {}, ["--limit", "gw"],
     "replica r1: this run has not decided where its server listens"),
])
def test_bad_input_is_refused_before_any_change(tmp_path, replicas, gateway_vars, args, expected):
    watched = [tmp_path / "root", Path("/etc/sglang"), Path("/etc/systemd/system/sglang-router.service")]
    before = tree_digest(*watched)
    done = run_role(tmp_path, replicas, gateway_vars, *args)
    assert done.returncode != 0
    assert expected in done.stdout, done.stdout[-3000:]
    assert tree_digest(*watched) == before


@pytest.mark.parametrize("line, cache_dir, expected", [
    ("[x TP0] Running FlashInfer autotune with cache: /var/cache/sglang/flashinfer/autotune/0.7.2/sm120/ab12/rank_tp0_pp0_dp0.json",
     "/var/cache/sglang", ("0.7.2", "sm120", "ab12")),
    ("Running FlashInfer autotune with cache: /elsewhere/flashinfer/autotune/0.7.2/sm120/ab12/r.json",
     "/var/cache/sglang", ("", "", "")),
    ("Running FlashInfer autotune with cache: /c/flashinfer/autotune/0.7.2/../ab12/r.json", "/c", ("", "", "")),
    ("Running FlashInfer autotune...", "/c", ("", "", "")),
])
def test_cache_path_gives_flashinfer_version_sm_and_key(line, cache_dir, expected):
    found = journal.autotune_cache_source(line, cache_dir)
    assert (found["flashinfer"], found["sm"], found["key"]) == expected


def test_target_flashinfer_version_and_sm(tmp_path):
    dist = tmp_path / "sglang-0.5.23.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Requires-Dist: flashinfer_python[cu13]==0.7.2\n")
    assert target.flashinfer_version(tmp_path) == ("0.7.2", "pinned by sglang-0.5.23")
    (tmp_path / "flashinfer_python-0.7.3.dist-info").mkdir()
    assert target.flashinfer_version(tmp_path)[0] == "0.7.3"
    assert target.sm_name(["12.0", "12.0"]) == ("sm120", "nvidia-smi")
    assert target.sm_name(["12.0", "9.0"])[0] == ""   # two GPU kinds: no cache pushed
    assert target.sm_name([])[0] == ""


def test_the_workers_entry_point_asks_for_the_gateways_url(tmp_path):
    """The roll calls tasks_from: workers on the replicas' play, where no smg_flags ran: the gateway's
    URL comes in by name (sglang_router_effective_url), or the call is refused before any request."""
    book = tmp_path / "out.yml"
    book.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.include_role: {name: sglang_router, tasks_from: workers}\n"
                    "      vars: {sglang_router_worker_url: 'http://169.254.1.1:30000', sglang_router_worker_state: absent}\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(REPO / "roles")}
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(book)], capture_output=True, text=True, env=env)
    assert done.returncode != 0
    assert "missing required arguments: sglang_router_effective_url" in done.stdout, done.stdout[-2000:]
    assert "sglang_router : Take out of the gateway" not in done.stdout


class UnitModule:
    """A stand-in AnsibleModule for sglang_router_unit's run(): params, check mode, the real systemd-analyze."""

    def __init__(self, params: dict, check_mode: bool = False) -> None:
        self.params, self.check_mode = params, check_mode

    def run_command(self, argv):
        assert argv[0] not in service_account.ACCOUNT_COMMANDS, f"a test must never change this machine's accounts: {argv}"
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr

    def fail_json(self, **result):
        raise UnitExit(True, result)

    def exit_json(self, **result):
        raise UnitExit(False, result)


class UnitExit(Exception):
    def __init__(self, failed: bool, result: dict) -> None:
        super().__init__(result.get("msg", ""))
        self.failed, self.result = failed, result


@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
def test_the_gateway_refuses_a_unit_it_did_not_write_and_changes_nothing(tmp_path, monkeypatch, check_mode):
    # sglang_router_unit_name=ssh on a host whose sshd unit the package installed.
    module = load_file(ROLE / "library" / "sglang_router_unit.py")
    for directory in ("units", "vendor", "etc-sglang"):
        (tmp_path / directory).mkdir()
    monkeypatch.setattr(module, "UNIT_DIR", str(tmp_path / "units"))
    monkeypatch.setattr(module, "CONFIG_DIR", str(tmp_path / "etc-sglang"))
    monkeypatch.setattr(systemd_files, "UNIT_DIRS", (str(tmp_path / "units"), str(tmp_path / "vendor")))
    (tmp_path / "vendor" / "ssh.service").write_text("[Unit]\nDescription=OpenBSD Secure Shell server\n"
                                                     "[Service]\nExecStart=/usr/sbin/sshd -D\n")
    before = tree_digest(tmp_path)
    params = {"name": "ssh", "version": "1.13.0", "user": "root", "program": sys.executable,
              "argv": ["--port", "30000"], "api_key": "sk-gw"}
    with pytest.raises(UnitExit) as done:
        module.run(UnitModule(params, check_mode))
    assert done.value.failed and done.value.result["changed_files"] == []
    assert done.value.result["msg"] == (
        f"refusing to write {tmp_path / 'units' / 'ssh.service'}: systemd already has ssh.service from "
        f"{tmp_path / 'vendor' / 'ssh.service'}. sglang_router_unit_name='ssh' names a unit that is not this "
        "project's: ours would override it, and the role would then start or restart it. Set "
        "sglang_router_unit_name to a name of its own (its default), or, if that file is a leftover of this "
        "project, move it away and re-run. Nothing was changed.")
    assert tree_digest(tmp_path) == before


def test_the_gateway_account_is_made_by_its_unit_module_after_the_checks_shown_in_check_mode(tmp_path, monkeypatch):
    module = load_file(ROLE / "library" / "sglang_router_unit.py")
    for directory in ("units", "etc-sglang"):
        (tmp_path / directory).mkdir()
    monkeypatch.setattr(module, "UNIT_DIR", str(tmp_path / "units"))
    monkeypatch.setattr(module, "CONFIG_DIR", str(tmp_path / "etc-sglang"))
    monkeypatch.setattr(systemd_files, "UNIT_DIRS", (str(tmp_path / "units"),))
    monkeypatch.setattr(service_account, "read_account", lambda account: service_account.Found(None, None))
    params = {"name": "sglang-router", "version": "1.13.0", "user": "sglang-router", "program": sys.executable,
              "argv": ["--port", "30000"], "api_key": ""}
    before = tree_digest(tmp_path)
    with pytest.raises(UnitExit) as done:
        module.run(UnitModule(params, check_mode=True))
    assert not done.value.failed and done.value.result["changed"], done.value.result
    assert done.value.result["account"] == [
        ["groupadd", "--system", "sglang-router"],
        ["useradd", "--system", "--gid", "sglang-router", "--home-dir", "/nonexistent", "--no-create-home",
         "--shell", "/usr/sbin/nologin", "sglang-router"]]
    assert done.value.result["diff"][0]["before_header"] == "account sglang-router:sglang-router"
    assert tree_digest(tmp_path) == before
    # A unit systemd rejects is refused before the account would be made.
    params["program"] = "relative/smg"
    with pytest.raises(UnitExit) as refused:
        module.run(UnitModule(params, check_mode=False))
    assert refused.value.failed and refused.value.result.get("account") in (None, []), refused.value.result
