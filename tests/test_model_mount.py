"""The model store mounted read-only into the container: mpN through fakepve, lxc.mount.entry raw."""

from __future__ import annotations

import pytest
from ansible.module_utils.model_mount import mp_options, plan_mp, plan_raw_mount
from conftest import REPO, load_file
from pve_fake import NODE, TOKEN_ID, TOKEN_SECRET, config_of
from test_proxmox_backend import VMID, Node, writes

WANT = "{},mp=/models,ro=1,backup=0"


@pytest.fixture
def node(tmp_path):
    made = Node(tmp_path)
    yield made
    made.stop()


def mounts(config: dict) -> dict:
    return {key: value for key, value in config.items() if key.startswith("mp") and key[2:].isdigit()}


@pytest.mark.parametrize("password", [True, False], ids=["password-api", "pct-on-node"])
def test_mpn_entry_read_only_then_nothing_on_the_second_run(node, tmp_path, password):
    store = tmp_path / "models"
    store.mkdir()
    first = node.play("-e", f"lxc_container_model_dir={store}", password=password, pct=True)
    assert first.status == "successful", first.stdout[-3000:]
    entries = {key: mp_options(value) for key, value in mounts(config_of(node.pve, VMID)).items()}
    assert entries == {"mp0": (str(store), {"mp": "/models", "ro": "1", "backup": "0"})}
    second = node.play("-e", f"lxc_container_model_dir={store}", password=password, pct=True)
    assert second.changed == 0, second.stdout[-3000:]
    assert writes(second) == []


def test_a_root_token_alone_is_refused_before_any_change_with_both_ways_out(node, tmp_path):
    store = tmp_path / "models"
    store.mkdir()
    before = node.digest()
    run = node.play("-e", f"lxc_container_model_dir={store}", password=False, pct=False)
    message = " ".join(run.failures)
    assert run.status == "failed"
    for needle in ("only root@pam", "mount point type bind", "lxc_container_api_password", "pct",
                   "Nothing was changed"):
        assert needle in message, message
    assert writes(run) == [] and node.digest() == before


def test_raw_style_writes_an_lxc_mount_entry_with_ro(node, tmp_path):
    store = tmp_path / "models"
    store.mkdir()
    run = node.play("-e", f"lxc_container_model_dir={store}", "-e", "lxc_container_passthrough=raw")
    assert run.status == "successful", run.stdout[-3000:]
    conf = (node.confdir / f"{VMID}.conf").read_text()
    assert f"lxc.mount.entry: {store} models none bind,ro,create=dir 0 0" in conf
    assert mounts(config_of(node.pve, VMID)) == {}


def test_raw_style_a_run_killed_before_the_restart_mounts_the_store_on_the_next(node, tmp_path):
    """Raw style: a run killed between writing the lxc.mount.entry line and the restart leaves the
    line in the conf file and the container running from its last start without the store. PVE
    lists no pending change for raw lines and the line is already there, so the next run changes
    nothing in the file: it sees the store missing inside and restarts once; the run after, none."""
    shutdowns = lambda run: [path for method, path, _ in run.requests if path.endswith("/status/shutdown")]
    store = tmp_path / "models"
    store.mkdir()
    raw = ["-e", "lxc_container_passthrough=raw"]
    first = node.play(*raw)
    assert first.status == "successful", first.stdout[-3000:]
    conf = node.confdir / f"{VMID}.conf"
    conf.write_text(conf.read_text() + f"lxc.mount.entry: {store} models none bind,ro,create=dir 0 0\n")  # the killed run's
    run = node.play("-e", f"lxc_container_model_dir={store}", *raw)
    assert run.status == "successful", run.stdout[-3000:]
    assert len(shutdowns(run)) == 1, run.requests
    assert "/models mounted read-only" in " ".join(run.stdout.split())
    again = node.play("-e", f"lxc_container_model_dir={store}", *raw)
    assert again.status == "successful" and again.changed == 0, again.stdout[-3000:]
    assert shutdowns(again) == [] and writes(again) == []


def test_a_store_that_a_restart_does_not_mount_fails_naming_it(node, tmp_path):
    """The store's line is not in the conf file the container starts from (someone else's edit took
    it out between our write and the start, here: the stand-in's start never saw it): one restart,
    then the run fails naming what the container lacks, instead of serving without weights."""
    store = tmp_path / "models"
    store.mkdir()
    node.fake.run(lambda pve: setattr(pve, "_start_steps", _forgetting(pve._start_steps, node, store)))
    run = node.play("-e", f"lxc_container_model_dir={store}", "-e", "lxc_container_passthrough=raw")
    assert run.status == "failed"
    message = " ".join(" ".join(run.failures).split())
    assert "does not see what the host passed, after one restart" in message, message
    assert "/models mounted read-only" in message and "/models not mounted" in message, message


def _forgetting(steps, node, store):
    """A start after which the kept conf (what LXC read) lacks the store's line."""
    async def start(ct, user, skiplock=False):
        await steps(ct, user, skiplock)
        kept = node.started / f"{ct.vmid}.conf"
        kept.write_text("".join(line for line in kept.read_text().splitlines(keepends=True) if str(store) not in line))
    return start


def test_pve_itself_refuses_the_bind_mount_to_a_root_token(node):
    """What the role's check stands in front of: fakepve applies PVE's own rule."""
    node.fake.run(lambda pve: pve.add_ct(VMID, "sglang1", node=NODE, config={"hostname": "sglang1"}))
    import proxmoxer

    api = proxmoxer.ProxmoxAPI(node.pve.host, port=node.pve.port, user="root@pam", token_name=TOKEN_ID,
                               token_value=TOKEN_SECRET, verify_ssl=node.fake.certfile)
    with pytest.raises(proxmoxer.ResourceException, match="mount point type bind is only allowed for root@pam"):
        api.nodes(NODE).lxc(VMID).config.put(mp0="/var/lib/sglang-models,mp=/models,ro=1")


def test_a_missing_store_is_refused_before_any_change(node, tmp_path):
    before = node.digest()
    run = node.play("-e", f"lxc_container_model_dir={tmp_path / 'absent'}")
    assert run.status == "failed"
    assert "is not a directory" in " ".join(run.failures) and "playbooks/model.yml" in " ".join(run.failures)
    assert writes(run) == [] and node.digest() == before


def test_plans_keep_the_users_entries_and_our_index():
    assert plan_mp({"mp0": "/data,mp=/data"}, "/s", "/models") == ("mp1", WANT.format("/s"))
    assert plan_mp({"mp3": WANT.format("/s")}, "/s", "/models") == (None, WANT.format("/s"))
    assert plan_mp({"mp3": "/old,mp=/models"}, "/s", "/models") == ("mp3", WANT.format("/s"))
    text = "a = 1\nlxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
    once = plan_raw_mount(text, "/s", "/models", " = ")
    assert "lxc.mount.entry = /s models none bind,ro,create=dir 0 0" in once and "dev/nvidia0" in once
    assert plan_raw_mount(once, "/s", "/models", " = ") == once
    proxmox = plan_raw_mount("arch: amd64\n[snap1]\narch: amd64\n", "/s", "/models", ": ")
    assert proxmox.index("lxc.mount.entry: /s models") < proxmox.index("[snap1]")


@pytest.mark.parametrize("check_mode", [True, False], ids=["check", "real"])
def test_raw_style_a_read_only_config_is_named_in_check_mode_as_in_the_real_run(tmp_path, check_mode):
    from types import SimpleNamespace

    from ansible.module_utils.pve_api import PveFault
    from ro_mount import read_only

    folder = tmp_path / "ct"
    folder.mkdir()
    config = folder / "config"
    config.write_text("hostname: ct\n")
    before = config.read_bytes()
    module = SimpleNamespace(check_mode=check_mode, params={
        "config_path": str(config), "host_dir": str(tmp_path), "mount": "/models"})
    with read_only(folder), pytest.raises(PveFault) as info:
        load_file(REPO / "roles" / "lxc_container" / "library" / "lxc_model_mount.py").run_raw(module)
    message = str(info.value)
    assert f"cannot write {config}: its file system is read-only" in message and "Nothing was written" in message, message
    assert config.read_bytes() == before
