"""The fleet's autotune cache: a replica's rank files handed in whole, pushed only for the same
FlashInfer version and SM. The logic as plain functions, and the role's tasks on this machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_playbook, tree_digest
from ansible.module_utils.sglang_cache_target import complete_set_problem, hand_in

KEY = "b0003c265ec6a9ef"
TACTICS = json.dumps({"stand-in": True, "tactics": {"gemm1": 3}}) + "\n"


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
    result = hand_in(staging, dest, 2)
    assert result["handed_in"] and result["changed"]
    assert sorted(p.name for p in dest.iterdir()) == ["rank_tp0_pp0_dp0.json", "rank_tp1_pp0_dp0.json"]
    assert not staging.exists()


@pytest.mark.parametrize("case", ["missing_rank", "ranks_differ", "dest_exists", "nothing_fetched"])
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
    before = tree_digest(dest)
    result = hand_in(staging, dest, 2)
    assert not result["handed_in"]
    assert {"missing_rank": "no file for TP rank(s) [1]", "ranks_differ": "the ranks' files differ",
            "dest_exists": "the fleet already has", "nothing_fetched": "nothing fetched"}[case] in result["msg"]
    assert tree_digest(dest) == before   # the fleet's copy: untouched, never mixed
    assert not staging.exists()


def test_hand_in_in_check_mode_changes_nothing(tmp_path):
    staging = rank_files(tmp_path / ".incoming" / "r1", range(2))
    before = tree_digest(tmp_path)
    result = hand_in(staging, tmp_path / "0.7.2" / "sm120" / KEY, 2, check=True)
    assert result["handed_in"] and result["changed"]
    assert tree_digest(tmp_path) == before


def play(tmp_path: Path, tasks_from: str, variables: dict) -> tuple:
    book = tmp_path / f"{tasks_from}.yml"
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "vars": {
        "ansible_python_interpreter": "{{ ansible_playbook_python }}", **variables},
        "tasks": [{"ansible.builtin.include_role": {"name": "sglang_server", "tasks_from": tasks_from}}]}]))
    (tmp_path / "runner").mkdir(exist_ok=True)
    return run_playbook(tmp_path / "runner", str(book), [])


@pytest.mark.parametrize("tp, ranks, handed_in", [(2, 2, True), (8, 8, True), (4, 2, False)])
def test_fetch_hands_in_every_rank_of_the_start(tmp_path, tp, ranks, handed_in):
    """The role's cache_fetch tasks: every rank file of this start reaches the fleet, or none."""
    cache = tmp_path / "replica-cache"
    tuned = rank_files(cache / "flashinfer" / "autotune" / "0.7.2" / "sm120" / KEY, range(ranks))
    fleet = tmp_path / "fleet"
    journal = "\n".join(f"[x TP{r}] Running FlashInfer autotune with cache: {tuned}/rank_tp{r}_pp0_dp0.json"
                        for r in range(ranks))
    variables = {"sglang_server_journal": {"stdout": journal}, "sglang_server_autotune_cache_dir": str(cache),
                 "sglang_server_fleet_cache_dir": str(fleet), "sglang_server_effective": {"tp_size": tp}}
    done = play(tmp_path, "cache_fetch", variables)
    assert done.rc == 0, done.stdout[-3000:]
    dest = fleet / "0.7.2" / "sm120" / KEY
    assert (sorted(p.name for p in dest.iterdir()) if dest.is_dir() else []) == (
        [f"rank_tp{r}_pp0_dp0.json" for r in range(ranks)] if handed_in else [])
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
        rank_files(fleet / pair / KEY, range(2))
    cache = tmp_path / "replica-cache"
    variables = {"sglang_server_python": str(tmp_path / "venv" / "bin" / "python"), "sglang_server_gpu_sm": "sm120",
                 "sglang_server_fleet_cache_dir": str(fleet), "sglang_server_autotune_cache_dir": str(cache),
                 "sglang_server_user": "root", "sglang_server_group": "root"}
    done = play(tmp_path, "cache_push", variables)
    assert done.rc == 0, done.stdout[-3000:]
    found = sorted(str(p.relative_to(cache)) for p in cache.rglob("*.json")) if cache.is_dir() else []
    assert found == ([f"flashinfer/autotune/0.7.2/sm120/{KEY}/rank_tp{r}_pp0_dp0.json" for r in range(2)]
                     if pushed else [])
