"""The proxmox backend end to end against a PVE 9 API fake (fakepve) that checks every request.

The fake runs with ACLs on, so PVE's permission rules apply: a root@pam token is refused devN
as on a real node. The node's part (discovery on a fake root built from a real 2-GPU capture,
the conf file, pct) runs on this machine; `pct` and `pvesh` are stand-ins (tests/standin) that
act through the fake as root does on a node.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest
from conftest import REPO, as_host_vars, run_cases, run_playbook, tree_digest
from fake_nvidia_root import build
from ansible.module_utils.nvidia_discovery import discover
from ansible.module_utils.pve_container import OWNER_TAG
from pve_fake import NODE, PASSWORD, TEMPLATE, TOKEN_ID, TOKEN_SECRET, PveThread, add_template, config_of, seed

GPU = REPO / "tests" / "fixtures" / "gpu"
STANDIN = REPO / "tests" / "standin"
VMID = 120
WRITES = ("POST", "PUT", "DELETE")


class Node:
    """One test: the fake API, a fake GPU root, the conf dir, and a way to run container.yml."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.root = tmp_path / "fake-root"
        build(GPU / "h200-2gpu", self.root)
        self.confdir = tmp_path / "etc-pve-lxc"
        self.started = tmp_path / "lxc-started"   # the conf as at each start (pve_fake.keep_the_conf_at_start)
        self.fake = PveThread(tmp_path / "pve", self.confdir, self.started)
        self.fake.run(seed)
        self.standin = tmp_path / "standin.json"
        self.standin.write_text(json.dumps({
            "url": self.fake.pve.url, "password": PASSWORD, "cafile": self.fake.certfile,
            "device_root": str(self.root), "confdir": str(self.confdir), "started": str(self.started),
        }))
        self.runs = 0

    @property
    def pve(self):
        return self.fake.pve

    def args(self, password: bool = True, pct: bool = True) -> list[str]:
        """The -e arguments of every run: this node, its fake API and its stand-ins."""
        return [
            "-e", "lxc_container_backend=proxmox",
            "-e", f"lxc_container_vmid={VMID}",
            "-e", "lxc_container_name=sglang1",
            "-e", "lxc_container_connection=pct",
            "-e", f"lxc_container_api_host={self.pve.host}",
            "-e", f"lxc_container_api_port={self.pve.port}",
            "-e", f"lxc_container_api_token_id={TOKEN_ID}",
            "-e", f"lxc_container_api_token_secret={TOKEN_SECRET}",
            "-e", f"lxc_container_device_root={self.root}",
            "-e", "lxc_container_expected_gpus=2",
            "-e", f"lxc_container_pve_config_dir={self.confdir}",
            "-e", f"lxc_container_pct={STANDIN / 'pct' if pct else self.tmp / 'no-pct'}",
            "-e", f"lxc_container_pvesh={STANDIN / 'pvesh'}",
            "-e", "lxc_container_wait_timeout=9",
            *(["-e", f"lxc_container_api_password={PASSWORD}"] if password else []),
        ]

    def env(self, ca: bool = True) -> dict[str, str]:
        return {"PVE_STANDIN": str(self.standin),
                "REQUESTS_CA_BUNDLE": self.fake.certfile if ca else "/etc/ssl/certs/ca-certificates.crt"}

    def play(self, *extra: str, password: bool = True, pct: bool = True, ca: bool = True,
             verbosity: str = ""):
        self.runs += 1
        private = self.tmp / f"runner-{self.runs}"
        private.mkdir()
        inventory = (
            "[proxmox_hosts]\n"
            f"{NODE} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        )
        args = [*self.args(password, pct), *([verbosity] if verbosity else []), *extra]
        start = len(self.pve.requests)
        run = run_playbook(private, "container.yml", args, inventory=inventory, envvars=self.env(ca))
        run.requests = self.pve.requests[start:]
        return run

    def play_cases(self, cases: dict[str, dict], *extra: str) -> dict:
        """Many cases in one run of container.yml: each a proxmox_hosts member of its own (this machine
        as the node pve1), its values host variables over those every run gets (conftest.run_cases)."""
        self.runs += 1
        common = {"ansible_python_interpreter": sys.executable, "lxc_container_pve_node": NODE,
                  **as_host_vars(self.args())}
        start = len(self.pve.requests)
        runs = run_cases(self.tmp / f"runner-{self.runs}", "container.yml",
                         {name: {**common, **values} for name, values in cases.items()}, list(extra),
                         group="proxmox_hosts", envvars=self.env())
        for run in runs.values():
            run.requests = self.pve.requests[start:]   # the whole run's: the fake cannot tell the hosts apart
        return runs

    def add_ct(self, owned: bool = True, **options) -> None:
        """A container that exists before the run, with its conf file on the node; `owned`: it
        carries the tag the role gives what it creates (a run of the role made it)."""
        if owned:
            config = dict(options.get("config") or {})
            config["tags"] = ";".join(filter(None, [str(config.get("tags", "")), OWNER_TAG]))
            options["config"] = config
        self.fake.run(lambda pve: pve.add_ct(VMID, "sglang1", node=NODE, **options))
        self.confdir.mkdir(exist_ok=True)
        (self.confdir / f"{VMID}.conf").write_text("hostname: sglang1\n")

    def digest(self) -> dict:
        ct = self.pve.ct(VMID)
        return {"config": ct.digest() if ct else None, "status": ct.status if ct else None,
                "files": tree_digest(self.confdir)}

    def stop(self) -> None:
        self.fake.stop()


@pytest.fixture
def node(tmp_path):
    made = Node(tmp_path)
    yield made
    made.stop()


def writes(run) -> list[str]:
    """Requests that change something (a login ticket changes nothing)."""
    return [f"{method} {path}" for method, path, _ in run.requests
            if method in WRITES and not path.endswith("/access/ticket")]


def devices(config: dict) -> dict:
    return {key: value for key, value in config.items() if key.startswith("dev") and key[3:].isdigit()}


EXPECTED_DEVICES = {
    "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
}


def assert_converged(node: Node, run) -> None:
    assert run.status == "successful", run.stdout
    config = config_of(node.pve, VMID)
    for key, value in {"hostname": "sglang1", "cores": 32, "memory": 262144, "swap": 0, "onboot": 1,
                       "features": "nesting=1", "unprivileged": 1}.items():
        assert str(config.get(key)) == str(value), (key, config)
    assert config["rootfs"].startswith("local-lvm:vm-120-disk-0,size=200G")
    assert "bridge=vmbr0" in config["net0"] and "ip=dhcp" in config["net0"]
    assert node.pve.ct(VMID).status == "running"
    assert OWNER_TAG in str(config.get("tags", "")).split(";"), config   # ours: created or adopted with the tag
    passed = {value.split(",")[0] for value in devices(config).values()}
    assert EXPECTED_DEVICES <= passed, config
    assert all(value.endswith(",mode=0666") for value in devices(config).values())
    conf = (node.confdir / f"{VMID}.conf").read_text()
    assert "lxc.prlimit.memlock: unlimited" in conf
    assert "lxc.mount.entry" not in conf
    assert "NVIDIA node(s) in sglang1, each with the host's major:minor" in run.stdout


# The modules that decide or apply the GPU passthrough: each runs at most once per run.
GPU_MODULES = ("nvidia_devices", "nvidia_result", "lxc_gpu_passthrough", "pve_lxc_devices")


def assert_each_gpu_module_once(run, devices: bool = True, given: bool = False) -> None:
    """One discovery (read here, or the result handed in checked), one lxc_gpu_passthrough
    call, and one pve_lxc_devices call for the devN style."""
    counts = collections.Counter(action for action in run.actions if action in GPU_MODULES)
    assert counts == {"nvidia_result" if given else "nvidia_devices": 1, "lxc_gpu_passthrough": 1,
                      **({"pve_lxc_devices": 1} if devices else {})}, run.actions


def test_fresh_create_with_password_then_second_run_writes_nothing(node):
    first = node.play()
    assert_converged(node, first)
    (create,) = [body for method, path, body in first.requests if method == "POST" and path.endswith(f"/nodes/{NODE}/lxc")]
    assert f"tags={OWNER_TAG}".encode() in create.split(b"&"), create
    assert_each_gpu_module_once(first)
    put = [body for method, path, body in first.requests if method == "PUT" and path.endswith("/config")]
    assert put, "devN went through the API"
    assert any(method == "POST" and path.endswith("/access/ticket") for method, path, _ in first.requests)

    second = node.play()
    assert second.status == "successful", second.stdout
    assert second.changed == 0, second.stdout
    assert writes(second) == [], writes(second)
    assert_each_gpu_module_once(second)


def test_devn_through_pct_on_the_node_without_password(node):
    first = node.play(password=False, pct=True)
    assert_converged(node, first)
    assert_each_gpu_module_once(first)
    assert not any(path.endswith("/access/ticket") and "ansible" in path for _, path, _ in first.requests)
    second = node.play(password=False, pct=True)
    assert second.changed == 0, second.stdout
    assert writes(second) == []
    assert_each_gpu_module_once(second)


def test_root_token_alone_is_refused_devn_by_pve(node):
    """Without the role's own checks, PVE's rule is what stops a token: the fake enforces it."""
    node.fake.run(lambda pve: pve.add_ct(VMID, "sglang1", node=NODE, config={"hostname": "sglang1"}))
    import proxmoxer

    api = proxmoxer.ProxmoxAPI(node.pve.host, port=node.pve.port, user="root@pam", token_name=TOKEN_ID,
                               token_value=TOKEN_SECRET, verify_ssl=node.fake.certfile)
    with pytest.raises(proxmoxer.ResourceException, match="only allowed for root@pam"):
        api.nodes(NODE).lxc(VMID).config.put(dev0="/dev/nvidia0,mode=0666")


def test_no_password_and_no_pct_fails_before_any_change_with_both_ways_out(node):
    before = node.digest()
    run = node.play(password=False, pct=False)
    assert run.status == "failed"
    message = " ".join(run.failures)
    for needle in ("only root@pam", "lxc_container_api_password", "pct", "Nothing was changed"):
        assert needle in message, message
    assert writes(run) == []
    assert node.digest() == before
    assert node.pve.ct(VMID) is None


def test_users_own_devn_entries_are_kept_and_gpu_entries_follow_the_host(node):
    node.add_ct(status="running", config={
        "hostname": "sglang1", "dev0": "/dev/fuse", "dev1": "/dev/nvidia7,mode=0666", "cores": 32,
        "memory": 262144, "swap": 0, "onboot": 1, "features": "nesting=1", "unprivileged": 1,
        "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth",
        "rootfs": "local-lvm:vm-120-disk-0,size=200G"})
    run = node.play()
    assert run.status == "successful", run.stdout
    config = config_of(node.pve, VMID)
    assert config["dev0"] == "/dev/fuse"
    assert "/dev/nvidia7,mode=0666" not in devices(config).values()
    assert "hwaddr=BC:24:11:00:00:01" in config["net0"]
    # A running container whose GPU entries changed is restarted once, through the API.
    assert any(path.endswith("/status/shutdown") for method, path, _ in run.requests)


def test_a_run_killed_before_the_restart_leaves_pending_entries_that_the_next_run_applies(node):
    assert_converged(node, node.play())
    shutdowns = lambda run: [path for method, path, _ in run.requests if path.endswith("/status/shutdown")]

    def killed_before_the_restart(pve):
        # What a run killed between its PUT and the restart leaves: the new entry pending (the
        # config read back already shows it), the running container still on the old one.
        ct = pve.ct(VMID)
        key = next(key for key, value in devices(ct.config).items() if value.startswith("/dev/nvidia0,"))
        ct.pending[key], ct.config[key] = ct.config[key], "/dev/nvidia7,mode=0666"
    node.fake.run(killed_before_the_restart)
    assert node.pve.ct(VMID).pending

    run = node.play()
    assert_converged(node, run)
    assert len(shutdowns(run)) == 1, run.requests
    assert not node.pve.ct(VMID).pending
    assert "for its next start" in run.stdout
    again = node.play()
    assert_converged(node, again)
    assert shutdowns(again) == [] and writes(again) == []


def test_missing_template_is_fetched_or_named(node):
    node.fake.run(lambda pve: pve.storages["local"]["volumes"].clear())
    before = node.digest()
    run = node.play()
    assert run.status == "failed"
    message = " ".join(run.failures)
    for needle in (f"local:vztmpl/{TEMPLATE}", f"pveam download local {TEMPLATE}", "Nothing was changed"):
        assert needle in message, message
    assert writes(run) == []
    assert node.digest() == before
    node.fake.run(add_template)
    assert_converged(node, node.play())


def lock(node):
    node.add_ct(config={"hostname": "sglang1", "rootfs": "local-lvm:vm-120-disk-0,size=200G"}, lock="backup")


def token_without_privileges(node):
    def grant(pve):
        pve.apitokens["deploy@pve!ansible"] = TOKEN_SECRET
        pve.grant("deploy@pve!ansible", f"/vms/{VMID}", "VM.Audit")
    node.fake.run(grant)


def start_error(node):
    node.add_ct(config={"hostname": "sglang1", "unprivileged": 1, "rootfs": "local-lvm:vm-120-disk-0,size=200G"})
    node.fake.run(lambda pve: setattr(pve.ct(VMID), "start_error",
                                      "startup for container '120' failed: hook script exited 1"))


def nothing(node):
    pass


FAULTS = [
    ("unreachable", nothing, ["-e", "lxc_container_api_port=1"], {},
     ["unreachable", "lxc_container_api_port"]),
    ("tls", nothing, [], {"ca": False},
     ["TLS verification", "REQUESTS_CA_BUNDLE", "lxc_container_api_validate_certs"]),
    ("401", nothing, ["-e", "lxc_container_api_token_secret=wrong-secret"], {},
     ["401", "root@pam!ansible", "lxc_container_api_token_secret"]),
    ("403", token_without_privileges, ["-e", "lxc_container_api_user=deploy@pve"], {},
     ["deploy@pve!ansible lacks", "VM.Allocate on /vms/120", "pveum acl modify"]),
    ("locked", lock, [], {}, ["Container 120 is locked (backup)", "pct unlock 120"]),
    ("quorum", lambda node: node.fake.run(lambda pve: pve.lose_quorum()), [], {}, ["no quorum", "pvecm status"]),
    ("offline", lambda node: node.fake.run(lambda pve: pve.set_node_offline(NODE)), [], {}, ["pve1 is offline"]),
    ("task-error", start_error, [], {},
     ["Starting container 120 failed", "TASK ERROR: startup for container '120' failed: hook script exited 1"]),
]


def heal(pve):
    pve.regain_quorum()
    pve.set_node_offline(NODE, offline=False)
    ct = pve.ct(VMID)
    if ct:
        ct.start_error = None
        if ct.lock:
            pve.unlock(VMID)


@pytest.mark.parametrize(("name", "fault", "extra", "options", "needles"), FAULTS, ids=[f[0] for f in FAULTS])
def test_api_fault_is_named_nothing_half_done_and_the_next_run_converges(node, name, fault, extra, options,
                                                                            needles):
    fault(node)
    before = node.digest()
    run = node.play(*extra, **options)
    assert run.status == "failed", run.stdout
    message = " ".join(run.failures)
    for needle in needles:
        assert needle in message, message
    assert TOKEN_SECRET not in run.stdout and PASSWORD not in run.stdout
    if name == "task-error":
        # The settings and the devN entries were written; the start failed, named. The next
        # run starts it.
        assert [w for w in writes(run) if not w.endswith(("/status/start", f"/lxc/{VMID}/config"))] == []
    else:
        assert writes(run) == [], writes(run)
        assert node.digest() == before
    node.fake.run(heal)
    assert_converged(node, node.play())


def test_secrets_never_in_output_even_at_vvv_or_in_diff(node):
    run = node.play("--diff", verbosity="-vvv")
    assert run.status == "successful", run.stdout
    for secret in (TOKEN_SECRET, PASSWORD):
        assert secret not in run.stdout
    assert not any(secret in str(p) for p in node.confdir.rglob("*") for secret in (TOKEN_SECRET, PASSWORD))
    check = node.play("--check", "--diff", "-e", "lxc_container_cores=16", verbosity="-vvv")
    assert check.status == "successful", check.stdout
    assert "cores: 16" in check.stdout
    assert writes(check) == []
    for secret in (TOKEN_SECRET, PASSWORD):
        assert secret not in check.stdout


def test_raw_style_writes_the_conf_file_in_place_and_sets_no_devn(node):
    run = node.play("-e", "lxc_container_passthrough=raw", "-e", "lxc_container_cgroup=v2")
    assert run.status == "successful", run.stdout
    conf = (node.confdir / f"{VMID}.conf").read_text()
    assert "lxc.cgroup2.devices.allow: c 195:0 rwm" in conf
    assert f"lxc.mount.entry: {node.root}/dev/nvidia0 dev/nvidia0 none bind,create=file" in conf
    assert devices(config_of(node.pve, VMID)) == {}
    assert_each_gpu_module_once(run, devices=False)
    again = node.play("-e", "lxc_container_passthrough=raw", "-e", "lxc_container_cgroup=v2")
    assert again.changed == 0 and writes(again) == []
    assert_each_gpu_module_once(again, devices=False)


def handed_in(node: Node, **changes) -> list[str]:
    """-e lxc_container_nvidia=<discovery of the node's fake root>, as the gpu_host role publishes it."""
    nvidia = dict(discover(str(node.root)), **changes)
    return ["-e", json.dumps({"lxc_container_nvidia": nvidia})]


def test_discovery_handed_in_is_checked_once_and_applied_once(node):
    first = node.play(*handed_in(node))
    assert_converged(node, first)
    assert_each_gpu_module_once(first, given=True)
    second = node.play(*handed_in(node))
    assert second.changed == 0 and writes(second) == [], second.stdout
    assert_each_gpu_module_once(second, given=True)


# Wrong GPU counts (too many, too few, none) and a node the driver implies, read here or handed
# in (whose own gpu_count and missing_nodes do not count: they are decided again).
REFUSALS = [
    ("8-of-2", None, ["-e", "lxc_container_expected_gpus=8"],
     ["The host has 2 GPU(s) (counted from its /dev/nvidiaN nodes), expected 8 (lxc_container_expected_gpus)"]),
    ("1-of-2", None, ["-e", "lxc_container_expected_gpus=1"], ["The host has 2 GPU(s)", "expected 1 "]),
    ("0-of-2", None, ["-e", "lxc_container_expected_gpus=0"], ["The host has 2 GPU(s)", "expected 0 "]),
    ("no-uvm", "no-uvm", [], ["these nodes are missing: /dev/nvidia-uvm.", "nvidia-modprobe -u -c=0"]),
    ("given-8-of-2", "given", ["-e", "lxc_container_expected_gpus=8"], ["The host has 2 GPU(s)", "expected 8 "]),
    ("given-no-uvm", "given-no-uvm", [], ["these nodes are missing: /dev/nvidia-uvm."]),
]


@pytest.fixture(scope="module", params=[False, True], ids=["fresh", "existing-check"])
def gpu_refusals(request, tmp_path_factory):
    """Every case of REFUSALS in one container.yml run per mode (a real run on a node without the
    container, --check --diff on one with it), each a proxmox_hosts member of its own; the node
    without /dev/nvidia-uvm is a fake root of its own."""
    exists = request.param
    made = Node(tmp_path_factory.mktemp("existing" if exists else "fresh"))
    try:
        if exists:
            made.add_ct(status="running", config={"hostname": "sglang1", "rootfs": "local-lvm:vm-120-disk-0,size=200G"})
        no_uvm = made.tmp / "fake-root-no-uvm"
        build(GPU / "h200-2gpu", no_uvm)
        (no_uvm / "dev" / "nvidia-uvm").unlink()
        cases = {}
        for name, fault, extra, _ in REFUSALS:
            values = as_host_vars(extra)
            if fault == "given":
                values.update(as_host_vars(handed_in(made)))
            elif fault == "given-no-uvm":
                nvidia = discover(str(made.root))
                nvidia["nodes"] = [item for item in nvidia["nodes"] if item["path"] != "/dev/nvidia-uvm"]
                # What a caller claims about it is not taken: the facts are decided again.
                nvidia.update(gpu_count=2, required_nodes=[], missing_nodes=[])
                values["lxc_container_nvidia"] = nvidia
            elif fault == "no-uvm":
                values["lxc_container_device_root"] = str(no_uvm)
            cases[name] = values
        before = (made.digest(), tree_digest(made.root, no_uvm))
        runs = made.play_cases(cases, *(["--check", "--diff"] if exists else []))
        yield runs, before, (made.digest(), tree_digest(made.root, no_uvm))
    finally:
        made.stop()


@pytest.mark.parametrize(("name", "needles"), [(r[0], r[3]) for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_a_wrong_gpu_count_or_missing_node_is_refused_before_any_write(gpu_refusals, name, needles):
    runs, before, after = gpu_refusals
    run = runs[name]
    assert run.status == "failed", run.stdout
    message = " ".join(run.failures)
    for needle in [*needles, "nothing was changed"]:
        assert needle in message, message
    assert writes(run) == [], writes(run)
    assert after == before
    assert not {"pve_lxc_container", "lxc_gpu_passthrough", "pve_lxc_devices"} & set(run.actions), run.actions


@pytest.mark.parametrize("style", ["devices", "raw"])
def test_check_mode_on_a_node_without_the_container_writes_nothing_and_says_what_it_gets(node, style):
    before = node.digest()
    run = node.play("--check", "--diff", "-e", f"lxc_container_passthrough={style}")
    assert run.status == "successful", run.stdout
    assert writes(run) == [] and node.digest() == before and node.pve.ct(VMID) is None
    shown = "devN entries" if style == "devices" else "raw lxc.* keys"
    said = " ".join(run.stdout.split())  # the callback wraps long lines
    assert f"Passing 2 GPU(s) into sglang1 (driver 580.159.04, {shown}): /dev/nvidia0 /dev/nvidia1 " in said
    # devN entries need the container's API config: there is none yet to read.
    counts = collections.Counter(action for action in run.actions if action in GPU_MODULES)
    assert counts == {"nvidia_devices": 1, "lxc_gpu_passthrough": 1}, run.actions
