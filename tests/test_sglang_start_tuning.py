"""This start's tuning, decided once in the flag check (module_utils/sglang_start_tuning.py).

The autotune role's published result and the replica's last answer verdict go
in; whether the start is tuned, with which fallback, on which install, and the
second flag source come out. The server role reads only that.
"""

from __future__ import annotations

import json
import os

import pytest

from ansible.module_utils.sglang_start_tuning import install_of, read_verdict, server_runs, start_tuning

FALLBACK_ARGS = {
    "none": {},
    "skip_ops": {"flashinfer-autotune-skip-ops": ["trtllm::fused_moe::gemm1", "trtllm::fused_moe::gemm2"]},
    "untuned": {"disable-flashinfer-autotune": True},
}
TUNED = {"enabled": True, "server_args": {}, "file": "/opt/sglang/venvs/a/gate.py", "action": "none"}
UNTUNED_UPSTREAM = {"enabled": False, "server_args": {"disable-flashinfer-autotune": True},
                    "file": "/opt/sglang/venvs/a/gate.py", "action": "disable"}


@pytest.fixture
def install(tmp_path):
    """/opt/sglang/current -> venvs/a, as the sglang role lays it out."""
    venv = tmp_path / "venvs" / "a"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (tmp_path / "current").symlink_to(venv)
    return tmp_path / "current" / "bin" / "python", venv


def verdict_file(tmp_path, **verdict):
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(verdict))
    return str(path)


def test_the_install_is_the_virtualenv_a_link_resolved(install, tmp_path):
    python, venv = install
    assert install_of(str(python)) == str(venv)
    assert install_of(str(venv / "bin" / "python")) == str(venv)
    assert install_of(str(tmp_path / "gone" / "bin" / "python")) == ""


def test_a_fallback_is_taken_for_the_install_it_was_measured_on(install, tmp_path):
    python, venv = install
    record = verdict_file(tmp_path, venv=str(venv), fallback="skip_ops", passed=True)
    tuning = start_tuning(str(python), record, FALLBACK_ARGS, TUNED, True)
    assert (tuning.fallback, tuning.tuned, tuning.venv) == ("skip_ops", True, str(venv))
    assert tuning.server_args == FALLBACK_ARGS["skip_ops"]
    assert tuning.verdict["passed"] is True
    assert (tuning.gate_file, tuning.gate_edited) == (TUNED["file"], False)


def test_an_untuned_fallback_turns_the_start_untuned(install, tmp_path):
    python, venv = install
    record = verdict_file(tmp_path, venv=str(venv), fallback="untuned")
    tuning = start_tuning(str(python), record, FALLBACK_ARGS, TUNED, True)
    assert (tuning.fallback, tuning.tuned) == ("untuned", False)
    assert tuning.server_args == {"disable-flashinfer-autotune": True}


@pytest.mark.parametrize("verdict", [
    {"venv": "/opt/sglang/venvs/older", "fallback": "skip_ops"},  # an upgrade tunes afresh
    {"fallback": "skip_ops"},
    {"venv": "VENV", "fallback": "sometimes"},  # not a fallback
    {"venv": "VENV", "fallback": ["untuned"]},
])
def test_a_fallback_of_another_install_or_unknown_is_none(install, tmp_path, verdict):
    python, venv = install
    verdict = {k: (str(venv) if v == "VENV" else v) for k, v in verdict.items()}
    tuning = start_tuning(str(python), verdict_file(tmp_path, **verdict), FALLBACK_ARGS, TUNED, True)
    assert (tuning.fallback, tuning.tuned, tuning.server_args) == ("none", True, {})


def test_the_autotune_roles_flags_and_the_fallbacks_are_one_source(install, tmp_path):
    python, venv = install
    record = verdict_file(tmp_path, venv=str(venv), fallback="skip_ops")
    tuning = start_tuning(str(python), record, FALLBACK_ARGS, UNTUNED_UPSTREAM, True)
    assert tuning.tuned is False and tuning.gate_edited is True
    assert tuning.server_args == {"disable-flashinfer-autotune": True, **FALLBACK_ARGS["skip_ops"]}


def test_without_the_autotune_role_the_start_may_be_tuned(install, tmp_path):
    python, _ = install
    tuning = start_tuning(str(python), str(tmp_path / "none.json"), FALLBACK_ARGS, None, False)
    assert (tuning.tuned, tuning.fallback, tuning.verdict, tuning.server_args) == (True, "none", {}, {})
    assert (tuning.gate_file, tuning.gate_edited, tuning.warning) == ("", False, "")


@pytest.mark.parametrize("autotune, found", [
    (None, "not set"), ({}, "not set"), ({"enabled": "false"}, '"false"'), ({"enabled": 1}, "1"), ("yes", "not set"),
])
def test_the_journal_proof_refuses_a_missing_or_non_boolean_choice(install, tmp_path, autotune, found):
    python, _ = install
    with pytest.raises(ValueError) as exc:
        start_tuning(str(python), "", FALLBACK_ARGS, autotune, True)
    assert str(exc.value) == (
        "sglang_server_check_autotune=true proves autotune from the journal against sglang_autotune_result.enabled, "
        f"which is {found} (expected true or false, published by the sglang_autotune role). Run that role before "
        "this one (playbooks/sglang.yml does), or set sglang_server_check_autotune=false.")
    # Not required (sglang_server_check_autotune false, or the settings check): the start may be tuned.
    assert start_tuning(str(python), "", FALLBACK_ARGS, autotune, False).fallback == "none"


@pytest.mark.parametrize("content, why", [
    ("{not json", "cannot be read (JSONDecodeError"),
    ('["untuned"]', "holds a list, not a JSON object"),
    (b"\xff\xfe", "cannot be read (UnicodeDecodeError"),
])
def test_a_verdict_that_is_not_a_json_object_is_no_verdict_with_a_warning(install, tmp_path, content, why):
    python, _ = install
    path = tmp_path / "answers.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    verdict, warning = read_verdict(str(path))
    assert verdict == {} and why in warning and str(path) in warning
    tuning = start_tuning(str(python), str(path), FALLBACK_ARGS, TUNED, True)
    assert (tuning.fallback, tuning.tuned, tuning.warning) == ("none", True, warning)
    assert "its answers are checked again" in warning


@pytest.mark.parametrize("make", [os.mkdir, os.mkfifo])
def test_a_verdict_that_is_not_a_regular_file_is_no_verdict_and_is_never_opened(install, tmp_path, make):
    python, _ = install
    make(tmp_path / "answers.json")  # a FIFO with no writer would block an open() forever
    tuning = start_tuning(str(python), str(tmp_path / "answers.json"), FALLBACK_ARGS, TUNED, True)
    assert tuning.fallback == "none" and tuning.verdict == {}
    assert tuning.warning == (f"{tmp_path / 'answers.json'} (the answer check's last verdict) is not a regular file: "
                              "this start runs with no fallback, and its answers are checked again.")


def test_server_args_that_are_not_a_dict_go_to_the_settings_check_as_given(install):
    python, _ = install
    tuning = start_tuning(str(python), "", FALLBACK_ARGS, dict(TUNED, server_args=["x"]), True)
    assert tuning.server_args == ["x"]


@pytest.mark.parametrize("start, device, runs", [
    ("auto", True, True), ("auto", False, False), ("AUTO", True, True),
    (True, False, True), ("yes", False, True), ("on", False, True), ("1", False, True),
    (False, True, False), ("no", True, False), ("off", True, False), ("0", True, False),
])
def test_the_server_runs_where_sglang_server_start_says_auto_asking_the_device_node(tmp_path, start, device, runs):
    node = tmp_path / "nvidiactl"
    if device:
        node.symlink_to(tmp_path / "a character device here")  # a dangling link counts, as stat's exists does
    assert server_runs(start, str(node)) is runs


def test_the_fallback_just_taken_wins_over_the_verdict(install, tmp_path):
    """After failed answers the restart runs with the fallback taken, even when the verdict could not name it."""
    python, venv = install
    stale = verdict_file(tmp_path, venv="/opt/sglang/venvs/older", fallback="none")
    tuning = start_tuning(str(python), stale, FALLBACK_ARGS, TUNED, True, taken="untuned")
    assert (tuning.fallback, tuning.tuned, tuning.server_args) == ("untuned", False, FALLBACK_ARGS["untuned"])
    assert start_tuning(str(python), stale, FALLBACK_ARGS, TUNED, True, taken="skip_ops").fallback == "skip_ops"


@pytest.mark.parametrize("taken", ["fail", "sometimes", "untuned"])
def test_a_fallback_taken_without_flags_is_refused(install, taken):
    python, _ = install
    with pytest.raises(ValueError) as exc:
        start_tuning(str(python), "", {"none": {}, "skip_ops": {}}, TUNED, True, taken=taken)
    assert str(exc.value) == (f"the answer-check fallback {taken!r} has no flags here: expected one of none, "
                              "skip_ops. Nothing was changed.")


def test_only_a_missing_verdict_directory_is_named_for_the_role_to_make(install, tmp_path, monkeypatch):
    """tasks/answers.yml makes record_dir (0755) and nothing else: /root or a home keeps its mode and owner."""
    python, _ = install
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    for record, expected in [(str(home / "verdict.json"), ""), ("~/verdict.json", ""),
                             (str(home / "new" / "deeper" / "verdict.json"), str(home / "new" / "deeper")),
                             ("~/new/verdict.json", str(home / "new")), ("verdict.json", ""), ("", "")]:
        assert start_tuning(str(python), record, FALLBACK_ARGS, TUNED, True).record_dir == expected, record
    assert not (home / "new").exists() and (home.stat().st_mode & 0o777) == 0o700
