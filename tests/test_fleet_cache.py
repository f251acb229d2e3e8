"""The fleet's autotune cache: a replica's rank files handed in whole, pushed only for the same
FlashInfer version and SM. The logic as plain functions, and the role's tasks on this machine."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import run_playbook, tree_digest
from ansible.module_utils.sglang_cache_copy import read_sets, write_sets
from ansible.module_utils.sglang_cache_fleet import complete_set_problem, hand_in

KEY = "b0003c265ec6a9ef"
TACTICS = json.dumps({"stand-in": True, "tactics": {"gemm1": 3}}) + "\n"
PASSED = {"sglang": "0.5.23", "flashinfer": "0.7.2", "sm": "sm120", "key": KEY, "replica": "r1",
          "answers": {"passed": True, "samples": 96, "classes": {}}}


def rank_files(where: Path, ranks: range, content=lambda rank: TACTICS) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    for rank in ranks:
        (where / f"rank_tp{rank}_pp0_dp0.json").write_text(content(rank))
    return where


@pytest.mark.parametrize("files, tp, expected", [
    ({"rank_tp0_pp0_dp0.json": TACTICS, "rank_tp1_pp0_dp0.json": TACTICS}, 2, ""),
    ({"rank_tp0_pp0_dp0.json": TACTICS}, 2, "no file for TP rank(s) [1] of 2"),
    ({"rank_tp0_pp0_dp0.json": TACTICS, "rank_tp2_pp0_dp0.json": TACTICS}, 3, "no file for TP rank(s) [1] of 3"),
    ({"rank_tp0_pp0_dp0.json": TACTICS, "rank_tp1_pp0_dp0.json": "{}"}, 2, "the ranks' files differ"),
    ({"rank_tp0_pp0_dp0.json": "not json"}, 1, "rank_tp0_pp0_dp0.json is not JSON"),
    ({"rank_tp0_pp0_dp0.json": "[1]"}, 1, "is not a JSON object"),
    ({"rank_tp0_pp0_dp0.json": TACTICS, "notes.txt": TACTICS}, 1, "notes.txt is not a rank file"),
])
def test_a_set_is_complete_only_with_every_rank_the_same(files, tp, expected):
    problem = complete_set_problem({k: v.encode() for k, v in files.items()}, tp)
    assert (problem == "") if not expected else expected in problem


def test_hand_in_moves_a_complete_set_in_one_rename(tmp_path):
    staging = rank_files(tmp_path / ".incoming" / "r1", range(2))
    dest = tmp_path / "0.7.2" / "sm120" / KEY
    result = hand_in(staging, dest, 2, proof=PASSED)
    assert result["handed_in"] and result["changed"]
    assert sorted(p.name for p in dest.iterdir()) == ["proof.json", "rank_tp0_pp0_dp0.json", "rank_tp1_pp0_dp0.json"]
    assert json.loads((dest / "proof.json").read_text()) == PASSED
    assert not staging.exists()


@pytest.mark.parametrize("case", ["missing_rank", "ranks_differ", "dest_exists", "nothing_fetched", "answers_failed",
                                  "no_proof", "a_link"])
def test_hand_in_refuses_or_keeps_and_never_mixes(tmp_path, case):
    staging = tmp_path / ".incoming" / "r2"
    dest = tmp_path / "0.7.2" / "sm120" / KEY
    if case == "missing_rank":
        rank_files(staging, range(1))
    elif case == "ranks_differ":
        rank_files(staging, range(2), content=lambda rank: json.dumps({"rank": rank}))
    elif case == "dest_exists":
        rank_files(staging, range(2), content=lambda rank: "{}")
        rank_files(dest, range(2))
    elif case in ("answers_failed", "no_proof"):
        rank_files(staging, range(2))
    elif case == "a_link":
        rank_files(staging, range(1))
        secret = tmp_path / "secret.json"
        secret.write_text(TACTICS)
        secret.chmod(0o600)
        (staging / "rank_tp1_pp0_dp0.json").symlink_to(secret)
    proof = {"answers_failed": {**PASSED, "answers": {"passed": False}}, "no_proof": None}.get(case, PASSED)
    before = tree_digest(dest)
    result = hand_in(staging, dest, 2, proof=proof)
    assert not result["handed_in"]
    assert {"missing_rank": "no file for TP rank(s) [1]", "ranks_differ": "the ranks' files differ",
            "dest_exists": "the fleet already has", "nothing_fetched": "nothing fetched",
            "answers_failed": "its replica's answers did not pass the check",
            "no_proof": "it carries no answer check",
            "a_link": "rank_tp1_pp0_dp0.json in"}[case] in result["msg"]
    assert tree_digest(dest) == before   # the fleet's copy: untouched, never mixed
    assert not staging.exists()


def test_hand_in_in_check_mode_changes_nothing(tmp_path):
    staging = rank_files(tmp_path / ".incoming" / "r1", range(2))
    before = tree_digest(tmp_path)
    result = hand_in(staging, tmp_path / "0.7.2" / "sm120" / KEY, 2, check=True, proof=PASSED)
    assert result["handed_in"] and result["changed"]
    assert tree_digest(tmp_path) == before


def play(tmp_path: Path, tasks_from: str, variables: dict) -> tuple:
    book = tmp_path / f"{tasks_from}.yml"
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "vars": {
        "ansible_python_interpreter": "{{ ansible_playbook_python }}", **variables},
        "tasks": [{"ansible.builtin.include_role": {"name": "sglang_server", "tasks_from": tasks_from}}]}]))
    (tmp_path / "runner").mkdir(exist_ok=True)
    return run_playbook(tmp_path / "runner", str(book), [])


@pytest.mark.parametrize("tp, ranks, handed_in, passed", [(2, 2, True, True), (8, 8, True, True), (4, 2, False, True),
                                                     (2, 2, False, False)])
def test_fetch_hands_in_every_rank_of_the_start(tmp_path, tp, ranks, handed_in, passed):
    """The role's cache_fetch tasks: every rank file of this start reaches the fleet, or none."""
    cache = tmp_path / "replica-cache"
    tuned = rank_files(cache / "flashinfer" / "autotune" / "0.7.2" / "sm120" / KEY, range(ranks))
    fleet = tmp_path / "fleet"
    journal = "\n".join(f"[x TP{r}] Running FlashInfer autotune with cache: {tuned}/rank_tp{r}_pp0_dp0.json"
                        for r in range(ranks))
    variables = {"sglang_server_journal": {"stdout": journal}, "sglang_server_autotune_cache_dir": str(cache),
                 "sglang_server_fleet_cache_dir": str(fleet),
                 "sglang_server_validated": {"version": "0.5.23", "effective": {"tp_size": tp}},
                 "sglang_server_answers_due": True,
                 "sglang_answers_result": {"passed": passed, "samples": 96, "classes": {}, "seconds": 3.5}}
    done = play(tmp_path, "cache_fetch", variables)
    assert done.rc == 0, done.stdout[-3000:]
    if not passed:   # a corrupt tactic never reaches the fleet, even through the hand-in tasks alone
        assert "answers did not pass the check" in " ".join(done.stdout.split()), done.stdout[-2500:]
    dest = fleet / "0.7.2" / "sm120" / KEY
    assert (sorted(p.name for p in dest.iterdir()) if dest.is_dir() else []) == (
        ["proof.json", *(f"rank_tp{r}_pp0_dp0.json" for r in range(ranks))] if handed_in else [])
    if handed_in:
        proof = json.loads((dest / "proof.json").read_text())
        assert proof["answers"] == {"passed": True, "samples": 96, "classes": {}, "seconds": 3.5}
        assert (proof["sglang"], proof["flashinfer"], proof["sm"], proof["key"]) == ("0.5.23", "0.7.2", "sm120", KEY)
    assert not (fleet / ".incoming" / "localhost").exists()
    if handed_in:   # a second replica's start: the fleet keeps the first set
        before = tree_digest(fleet)
        rank_files(tuned, range(ranks), content=lambda rank: "{}")
        again = play(tmp_path, "cache_fetch", variables)
        assert again.rc == 0 and tree_digest(fleet) == before


@pytest.mark.parametrize("fleet_has, pushed", [
    (["0.7.2/sm120"], True),
    (["0.6.17/sm120"], False),             # another FlashInfer: never pushed
    (["0.7.2/sm100"], False),              # another GPU: never pushed
    (["0.6.17/sm120", "0.7.2/sm100"], False),
    ([], False),
])
def test_push_only_for_the_installed_flashinfer_and_this_sm(tmp_path, fleet_has, pushed):
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "sglang-0.5.23.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Name: sglang\nRequires-Dist: flashinfer_python[cu13]==0.7.2\n")
    fleet = tmp_path / "fleet"
    for pair in fleet_has:
        (rank_files(fleet / pair / KEY, range(2)) / "proof.json").write_text(json.dumps(PASSED))
    cache = tmp_path / "replica-cache"
    variables = {"sglang_server_python": str(tmp_path / "venv" / "bin" / "python"), "sglang_server_gpu_sm": "sm120",
                 "sglang_server_fleet_cache_dir": str(fleet), "sglang_server_autotune_cache_dir": str(cache),
                 "sglang_server_user": "root", "sglang_server_group": "root", "sglang_server_validated": {"effective": {"tp_size": 2}}}
    done = play(tmp_path, "cache_push", variables)
    assert done.rc == 0, done.stdout[-3000:]
    found = sorted(str(p.relative_to(cache)) for p in cache.rglob("*.json")) if cache.is_dir() else []
    assert found == ([f"flashinfer/autotune/0.7.2/sm120/{KEY}/rank_tp{r}_pp0_dp0.json" for r in range(2)]
                     if pushed else [])


def fleet_set(fleet: Path, key: str = KEY, ranks: range = range(2), proof: dict | None = PASSED) -> Path:
    where = rank_files(fleet / "0.7.2" / "sm120" / key, ranks)
    if proof is not None:
        (where / "proof.json").write_text(json.dumps(proof))
    return where


def test_only_whole_proven_regular_sets_go_out_and_each_other_is_named(tmp_path):
    fleet = tmp_path / "fleet"
    fleet_set(fleet)
    fleet_set(fleet, "partial", range(1))
    fleet_set(fleet, "unproven", proof=None)
    fleet_set(fleet, "corrupt", proof={**PASSED, "answers": {"passed": False, "classes": {"degenerate_run": 9}}})
    (fleet_set(fleet, "junk") / "notes.txt").write_text("x")
    secret = tmp_path / "secret.json"
    secret.write_text(TACTICS)
    secret.chmod(0o600)
    linked = fleet_set(fleet, "linked", range(1))
    (linked / "rank_tp1_pp0_dp0.json").symlink_to(secret)
    (fleet / "0.7.2" / "sm120" / "dirlink").symlink_to(fleet / "0.7.2" / "sm120" / KEY)
    found = read_sets(fleet, "0.7.2", "sm120", 2)
    assert sorted(found["sets"]) == [KEY]
    assert sorted(found["sets"][KEY]) == ["rank_tp0_pp0_dp0.json", "rank_tp1_pp0_dp0.json"]
    why = dict(line.split(": ", 1) for line in found["skipped"])
    assert why == {"corrupt": "its replica's answers did not pass the check",
                   "dirlink": "not a cache key directory (a link, a file or an odd name)",
                   "junk": "notes.txt is not a rank file of SGLang's cache",
                   "linked": "rank_tp1_pp0_dp0.json is not a regular file (a link or a directory)",
                   "partial": "no file for TP rank(s) [1] of 2: SGLang would discard the set and tune again",
                   "unproven": "it carries no answer check (proof.json with answers)"}


@pytest.mark.parametrize("flashinfer, sm", [("0.7.2", "../../../../etc/cron.d"), ("0.7.2", "sm120/.."),
                                            ("../..", "sm120"), ("0.7.2", ""), ("", "sm120")])
def test_a_path_part_that_is_not_a_version_or_sm_is_refused(tmp_path, flashinfer, sm):
    with pytest.raises(ValueError, match="is not"):
        read_sets(tmp_path, flashinfer, sm, 2)
    before = tree_digest(tmp_path)
    with pytest.raises(ValueError, match="is not"):
        write_sets(tmp_path, flashinfer, sm, {KEY: {"rank_tp0_pp0_dp0.json": TACTICS}}, 0, 0, False)
    assert tree_digest(tmp_path) == before


def test_the_replica_write_follows_no_link_and_uses_the_caches_modes(tmp_path):
    root = tmp_path / "cache" / "flashinfer" / "autotune"
    sets = {KEY: {f"rank_tp{r}_pp0_dp0.json": TACTICS for r in range(2)}}
    written = write_sets(root, "0.7.2", "sm120", sets, os.getuid(), os.getgid(), False)
    assert len(written) == 2
    assert {oct(p.stat().st_mode & 0o777) for p in (root / "0.7.2" / "sm120" / KEY).iterdir()} == {"0o644"}
    assert write_sets(root, "0.7.2", "sm120", sets, os.getuid(), os.getgid(), False) == []
    elsewhere = tmp_path / "etc-cron.d"
    elsewhere.mkdir()
    (root / "0.7.2" / "sm90").symlink_to(elsewhere)
    with pytest.raises(ValueError, match="is a link"):
        write_sets(root, "0.7.2", "sm90", sets, os.getuid(), os.getgid(), False)
    assert list(elsewhere.iterdir()) == []


def test_a_traversing_sm_is_refused_by_the_deploy_before_any_change(tmp_path):
    variables = {"sglang_server_gpu_sm": "../../../../../../etc/cron.d", "sglang_server_autotune_cache": "fleet"}
    before = tree_digest(tmp_path)
    done = play(tmp_path, "main", variables)
    assert done.rc != 0
    assert 'sglang_server_gpu_sm is "../../../../../../etc/cron.d": expected sm followed by' in done.failures[-1]
    assert done.actions[-1] == "ansible.builtin.assert"
    assert {k: v for k, v in tree_digest(tmp_path).items() if "/runner" not in k and not k.endswith(".yml")} == {
        k: v for k, v in before.items() if "/runner" not in k}


@pytest.mark.parametrize("old", ["sglang_user", "sglang_group"])
def test_the_accounts_old_names_are_refused_by_the_deploy_before_any_change(tmp_path, old):
    # The sglang role no longer defines them: a user's sglang_user would otherwise be ignored silently.
    before = tree_digest(tmp_path)
    done = play(tmp_path, "main", {old: "svc"})
    assert done.rc != 0
    assert ("sglang_user and sglang_group are no longer read: the service account is the sglang_server role's, "
            "made by its module where missing. Rename them to sglang_server_user and sglang_server_group. "
            "Nothing was changed.") in done.failures[-1], done.failures
    assert done.actions[-1] == "ansible.builtin.assert"
    assert {k: v for k, v in tree_digest(tmp_path).items() if "/runner" not in k and not k.endswith(".yml")} == {
        k: v for k, v in before.items() if "/runner" not in k}
