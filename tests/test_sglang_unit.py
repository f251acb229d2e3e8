"""sglang_server's unit and environment file: systemd escaping, refusals, ranges.

Run through systemd's own reader where this machine has one (systemd-analyze
in the Molecule container proves the installed unit; here the escaping is
checked against a small model of systemd's word splitting that follows
systemd.service(5) "Command lines").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible.module_utils import sglang_unit as su
from ansible.module_utils import systemd_text as st

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
    assert st.exec_arg('100% $X "q" a\\b') == '"100%% $$X \\"q\\" a\\\\b"'


def test_api_key_comes_from_the_environment_not_the_unit():
    text = su.exec_start("/venv/bin/python", ["--port", "30000"], [["--api-key", "SGLANG_SERVER_API_KEY"]])
    assert '"--api-key" ${SGLANG_SERVER_API_KEY}' in text
    words = systemd_words(text.replace(" \\\n", " "), {"SGLANG_SERVER_API_KEY": "s3cret"})
    assert words[-2:] == ["--api-key", "s3cret"]


@pytest.mark.parametrize("char", ["\n", "\r", "\x00", "\x1b", "\t"])
def test_control_characters_refused(char):
    with pytest.raises(st.UnitError, match="control character"):
        su.exec_start("/venv/bin/python", ["--served-model-name", f"glm{char}5"])


@pytest.mark.parametrize("program", ["python", "/opt/my venv/bin/python", "/opt/%h/python", "/opt/$X/python"])
def test_program_must_be_a_plain_absolute_path(program):
    with pytest.raises(st.UnitError, match="absolute path"):
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
    (line,) = st.env_lines({"SGLANG_SERVER_API_KEY": value})
    assert env_parse(line) == ("SGLANG_SERVER_API_KEY", value)


def test_environment_file_sorted_and_numbers_and_bools():
    assert st.env_lines({"B": 1, "A": True}) == ['A="1"', 'B="1"']


@pytest.mark.parametrize(("env", "message"), [
    ({"HF_TOKEN": "abc\n"}, "sglang_server_environment['HF_TOKEN'] contains the control character '\\n'"),
    ({"BAD NAME": "x"}, "'BAD NAME' is not an environment variable name"),
    ({"X=Y": "x"}, "is not an environment variable name"),
    ({"X": {"a": 1}}, "must be a string or a number"),
])
def test_environment_file_refusals_name_the_variable(env, message):
    with pytest.raises(st.UnitError) as exc:
        st.env_lines(env)
    assert message in str(exc.value)


# --------------------------------------------------------------------------
# The API key file SGLang reads with --config (issue 17, item 11)
# --------------------------------------------------------------------------

CONFIG_RELEASES = [f"0.5.{n}" for n in range(7, 24)]
NASTY_KEYS = ['sk-$ecret%h"q', "a\\b", "two words", "#not-a-comment", "it's", "é😀", "{[,]}: x",
              "null", "true", "123", "0x1f", "~", "${HOME}", "  padded  "]


def real_config_merger(version: str, tmp_path: Path):
    """SGLang's own ConfigArgumentMerger, from the release's wheel (it needs only PyYAML)."""
    import importlib.util
    import zipfile

    from conftest import sglang_wheel

    with zipfile.ZipFile(sglang_wheel(version)) as wheel:
        names = [n for n in wheel.namelist() if n.endswith("/server_args_config_parser.py")
                 and "multimodal" not in n]
        assert len(names) == 1, names
        source = tmp_path / f"config_parser_{version.replace('.', '_')}.py"
        source.write_bytes(wheel.read(names[0]))
        server_args = wheel.read("sglang/srt/server_args.py").decode()
        launch = wheel.read("sglang/launch_server.py").decode()
    spec = importlib.util.spec_from_file_location(source.stem, source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ConfigArgumentMerger, server_args, launch


@pytest.mark.parametrize("version", CONFIG_RELEASES)
def test_every_release_reads_the_key_file_verbatim(tmp_path, version):
    merger, server_args, launch = real_config_merger(version, tmp_path)
    # python -m sglang.launch_server hands its argv to prepare_server_args, which merges --config.
    assert "prepare_server_args(sys.argv[1:])" in launch
    assert 'if "--config" in argv:' in server_args
    for index, key in enumerate(NASTY_KEYS):
        path = tmp_path / f"key{index}.secrets.yaml"
        path.write_text(su.config_file_text("api-key", key), encoding="utf-8")
        argv = merger(boolean_actions=[]).merge_config_with_args(
            ["--model-path", "/m", "--config", str(path), "--port", "30000"])
        assert argv == ["--api-key", key, "--model-path", "/m", "--port", "30000"], (version, key)


@pytest.mark.parametrize("char", ["\u00a0", "\u2028", "\x85", "\ufeff", "\n", "\x00", "\ud800"])
def test_key_file_refuses_what_yaml_would_change(char):
    with pytest.raises(st.UnitError, match=f"U\\+{ord(char):04X}, which YAML would not read back") as info:
        su.config_file_text("api-key", f"sk-secret{char}x")
    assert "sk-secret" not in str(info.value)


def test_config_argv_in_the_unit_carries_no_key():
    text = su.exec_start("/venv/bin/python", ["--port", "30000", "--config", "/etc/sglang/sglang.secrets.yaml"])
    assert text.endswith('"--port" "30000" \\\n    "--config" "/etc/sglang/sglang.secrets.yaml"')
    assert "api-key" not in text and "${" not in text
