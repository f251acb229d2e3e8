"""sglang_server's unit and environment file: systemd escaping, refusals, ranges.

Run through systemd's own reader where this machine has one (systemd-analyze
in the Molecule container proves the installed unit; here the escaping is
checked against a small model of systemd's word splitting that follows
systemd.service(5) "Command lines").
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "roles" / "sglang_server" / "module_utils"))
import sglang_unit as su  # noqa: E402

ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", ";": ";"}


def systemd_words(line: str, environment: dict[str, str]) -> list[str]:
    """systemd's ExecStart= reading: specifiers, $-expansion, quotes, C escapes."""
    words: list[str] = []
    i = 0
    while i < len(line):
        while i < len(line) and line[i] in " \t":
            i += 1
        if i >= len(line):
            break
        word = ""
        quote = None
        while i < len(line):
            c = line[i]
            if quote is None and c in " \t":
                break
            if c == "\\":
                word += ESCAPES[line[i + 1]]
                i += 2
                continue
            if c in "\"'" and (quote is None or quote == c):
                quote = None if quote == c else c
            elif c == "%":
                assert line[i + 1] == "%", f"specifier %{line[i + 1]} would be expanded"
                word += "%"
                i += 1
            elif c == "$":
                if line[i + 1] == "$":
                    word += "$"
                    i += 1
                else:
                    assert line[i + 1] == "{", "only ${VAR} is used"
                    end = line.index("}", i)
                    word += environment[line[i + 2:end]]
                    i = end
            else:
                word += c
            i += 1
        assert quote is None, f"unbalanced quote in {line!r}"
        words.append(word)
    return words


def unit_argv(program: str, argv: list[str], env_flags=None, environment=None) -> list[str]:
    text = su.exec_start(program, argv, env_flags or [])
    # Continuation lines: a trailing backslash joins the next line.
    return systemd_words(text.replace(" \\\n", " "), environment or {})


NASTY = ["100%", "%n", "$HOME", "${HOME}", "$$", 'say "hi"', "it's", "a\\b", "two words", ";",
         "--flag=-1", "", "ünïcödé", "%%", "\\n"]


@pytest.mark.parametrize("value", NASTY)
def test_each_value_reaches_the_program_verbatim(value):
    words = unit_argv("/opt/sglang/current/bin/python", ["--served-model-name", value])
    assert words == ["/opt/sglang/current/bin/python", "-m", "sglang.launch_server",
                     "--served-model-name", value]


def test_percent_and_dollar_doubled_and_quotes_escaped():
    assert su.exec_arg('100% $X "q" a\\b') == '"100%% $$X \\"q\\" a\\\\b"'


def test_api_key_comes_from_the_environment_not_the_unit():
    text = su.exec_start("/venv/bin/python", ["--port", "30000"], [["--api-key", "SGLANG_SERVER_API_KEY"]])
    assert '"--api-key" ${SGLANG_SERVER_API_KEY}' in text
    words = systemd_words(text.replace(" \\\n", " "), {"SGLANG_SERVER_API_KEY": "s3cret"})
    assert words[-2:] == ["--api-key", "s3cret"]


@pytest.mark.parametrize("char", ["\n", "\r", "\x00", "\x1b", "\t"])
def test_control_characters_refused(char):
    with pytest.raises(su.UnitError, match="control character"):
        su.exec_start("/venv/bin/python", ["--served-model-name", f"glm{char}5"])


@pytest.mark.parametrize("program", ["python", "/opt/my venv/bin/python", "/opt/%h/python", "/opt/$X/python"])
def test_program_must_be_a_plain_absolute_path(program):
    with pytest.raises(su.UnitError, match="absolute path"):
        su.exec_start(program, [])


def env_parse(line: str) -> tuple[str, str]:
    """systemd's EnvironmentFile= reading of one KEY="value" line."""
    key, _, raw = line.partition("=")
    assert raw[0] == raw[-1] == '"'
    out, i, body = "", 0, raw[1:-1]
    while i < len(body):
        if body[i] == "\\" and body[i + 1] in '"\\`$':
            out += body[i + 1]
            i += 2
        else:
            assert body[i] != '"', "unescaped quote"
            out += body[i]
            i += 1
    return key, out


@pytest.mark.parametrize("value", ["plain", 'sk-$ecret%h"q', "a\\b", "`cmd`", "x y", "#not a comment", ""])
def test_environment_file_values_round_trip(value):
    (line,) = su.env_lines({"SGLANG_SERVER_API_KEY": value})
    assert env_parse(line) == ("SGLANG_SERVER_API_KEY", value)


def test_environment_file_sorted_and_numbers_and_bools():
    assert su.env_lines({"B": 1, "A": True}) == ['A="1"', 'B="1"']


@pytest.mark.parametrize(("env", "message"), [
    ({"HF_TOKEN": "abc\n"}, "sglang_server_environment['HF_TOKEN'] contains the control character '\\n'"),
    ({"BAD NAME": "x"}, "'BAD NAME' is not an environment variable name"),
    ({"X=Y": "x"}, "is not an environment variable name"),
    ({"X": {"a": 1}}, "must be a string or a number"),
])
def test_environment_file_refusals_name_the_variable(env, message):
    with pytest.raises(su.UnitError) as exc:
        su.env_lines(env)
    assert message in str(exc.value)


GOOD = {
    "sglang_server_port": 30000, "sglang_server_tp_size": 8, "sglang_server_host": "127.0.0.1",
    "sglang_server_user": "sglang", "sglang_server_group": "sglang", "sglang_server_unit_name": "sglang",
    "sglang_server_flags": {"tp-size": 8, "served-model-name": "glm-5"},
    "sglang_server_environment": {"NCCL_IB_DISABLE": "1"}, "sglang_server_api_key": "k",
}


def test_good_settings_pass():
    assert su.server_problems(GOOD) == []


@pytest.mark.parametrize(("change", "message"), [
    ({"sglang_server_port": -1}, "sglang_server_port must be a port number 1-65535, got -1"),
    ({"sglang_server_port": 70000}, "got 70000"),
    ({"sglang_server_port": "http"}, "got 'http'"),
    ({"sglang_server_tp_size": 0}, "sglang_server_tp_size must be an integer >= 1, got 0"),
    ({"sglang_server_host": "127.0.0.1 10.0.0.1"}, "sglang_server_host must be one IP address or host name"),
    ({"sglang_server_host": "http://x"}, "sglang_server_host"),
    ({"sglang_server_user": "sglang\nExecStartPre=/bin/sh"}, "sglang_server_user contains the control character"),
    ({"sglang_server_user": "root user"}, "sglang_server_user must be a plain user or group name"),
    ({"sglang_server_api_key": "k\n"}, "sglang_server_api_key contains the control character '\\n'"),
    ({"sglang_server_flags": {"api-key": "k"}}, "--api-key (from sglang_server_extra_flags or sglang_server_profile)"),
    ({"sglang_server_flags": {"admin-api-key": "k"}}, "sglang_server_api_key (Ansible Vault)"),
    ({"sglang_server_flags": {"served-model-name": "glm\n"}},
     "sglang_server_flags['served-model-name'] contains the control character"),
])
def test_bad_settings_are_named(change, message):
    problems = su.server_problems({**GOOD, **change})
    assert any(message in p for p in problems), problems


def test_secret_value_never_in_the_message():
    problems = su.server_problems({**GOOD, "sglang_server_api_key": "sk-very-secret\n"})
    assert problems and not any("sk-very-secret" in p for p in problems)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "::1", "fe80::1", "gpu-node.example.org", "localhost"])
def test_single_hosts_accepted(host):
    assert su.host_ok(host)
