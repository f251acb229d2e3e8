"""playbooks/bench.yml and bench_report.yml through ansible-runner, without a GPU.

The SGLang tree is a real 0.5.12 wheel unpacked (gate file and benchmark
source); the server is a loopback HTTP stand-in answering /health; the
benchmark and nvidia-smi are stand-ins under tests/fixtures/bench that write
recorded lines and real captured samples.
"""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, Run, as_host_vars, run_cases, run_playbook, sglang_wheel, tree_digest, unpack_sglang, wheel_member
from test_playbook_validate import unpack_flag_sources

FIXTURES = REPO / "tests" / "fixtures" / "bench"
GATE = "srt/model_executor/model_runner.py"


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def box(tmp_path: Path):
    return make_box(tmp_path)


def make_box(tmp_path: Path) -> dict:
    """A real SGLang 0.5.12 tree, a fake python beside its config, and places for results."""
    package = unpack_sglang("0.5.12", tmp_path / "site")
    with zipfile.ZipFile(sglang_wheel("0.5.12")) as wheel:
        wheel.extract("sglang/bench_serving.py", tmp_path / "site")
    unpack_flag_sources("0.5.12", tmp_path / "site")  # the server's flag check, which bench.yml runs first
    fake = tmp_path / "venv" / "bin"
    fake.mkdir(parents=True)
    shutil.copy(FIXTURES / "fake_python.py", fake / "python")
    config = {"gate": str(package / GATE), "runs": str(FIXTURES / "runs")}
    (fake / "fake-bench.json").write_text(json.dumps(config))
    private = tmp_path / "runner"
    private.mkdir()
    return {"tmp": tmp_path, "package": package, "python": fake / "python", "config": fake / "fake-bench.json",
            "private": private, "runs": tmp_path / "bench-runs", "state": tmp_path / "state",
            "scratch": tmp_path / "scratch"}


def bench(box: dict, port: int | None, *extra: str, levels: str = "1024") -> Run:
    """bench.yml on this machine; port None leaves the benchmark's port to the server's settings."""
    return run_playbook(box["private"], "bench.yml", [*bench_args(box, port, levels), *extra])


def bench_args(box: dict, port: int | None, levels: str = "1024") -> list[str]:
    return [
        "-e", f"sglang_package_dir={box['package']}",
        "-e", f"sglang_bench_python={box['python']}",
        *(["-e", f"sglang_bench_port={port}"] if port is not None else []),
        "-e", f"sglang_bench_runs_dir={box['runs']}",
        "-e", f"sglang_bench_remote_dir={box['scratch']}",
        "-e", f"sglang_autotune_state_dir={box['state']}",
        "-e", f"sglang_bench_nvidia_smi={FIXTURES / 'fake_nvidia_smi.py'}",
        "-e", f"sglang_bench_concurrencies={levels}",
        "-e", "sglang_bench_redeploy_server=false",
        "-e", "sglang_bench_check_answers=false",  # the Health stand-in answers /health only
    ]


def flat(text: str) -> str:
    """Output with YAML's line wrapping undone."""
    return " ".join(text.split())


def samplers_running(marker: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and "fake_nvidia_smi" in cmdline:
            found.append(cmdline)
    return found


def test_syntax_of_both_playbooks():
    for playbook in ("bench.yml", "bench_report.yml"):
        result = subprocess.run(
            [str(Path(sys.executable).with_name("ansible-playbook")), "--syntax-check", "-i", "localhost,",
             str(REPO / "playbooks" / playbook)],
            capture_output=True, text=True, env={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": "/usr/bin:/bin"},
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_without_a_server_it_fails_at_once_and_writes_nothing(box):
    before = tree_digest(box["package"])
    port = free_port()
    run = bench(box, port)
    assert run.status == "failed" and run.failed == 1, run.stdout
    message = " ".join(run.failures)
    assert f"No SGLang server answers at http://127.0.0.1:{port}/health" in message
    assert "ansible-playbook site.yml" in message and "systemctl start sglang" in message
    assert run.changed == 0
    assert not box["runs"].exists() and not box["scratch"].exists()
    assert tree_digest(box["package"]) == before


def test_run_alone_it_benchmarks_the_port_the_servers_extra_flags_give(box, server):
    """No sglang_bench_port: the port is the one the server role decides, here from its extra flags."""
    flags = json.dumps({"sglang_server_extra_flags": {"port": server}})
    run = bench(box, None, "--check", "-e", flags)
    assert run.status == "successful", run.stdout
    assert f"--host 127.0.0.1 --port {server} " in flat(run.stdout)
    assert not box["runs"].exists() and not box["scratch"].exists()


def test_check_mode_shows_the_commands_and_writes_nothing(box, server):
    """The A/B path in check mode: both arms planned through the roles, nothing touched."""
    before = tree_digest(box["package"])
    run = bench(box, server, "--check", "--diff", "-e", "bench_compare=autotune", levels="64,1024")
    assert run.status == "successful", run.stdout
    assert '+            "flashinfer_cutlass",' in run.stdout  # the arm's gate edit, shown not made
    out = flat(run.stdout)
    assert "SGLang 0.5.12: sglang.bench_serving" in out
    assert f"{box['python']} -m sglang.bench_serving --backend sglang --host 127.0.0.1 --port {server}" in out
    assert "--dataset-name random-ids --random-input-len 1024 --random-output-len 1024" in out
    assert "--num-prompts 2048 --max-concurrency 1024" in out
    assert not box["runs"].exists() and not box["scratch"].exists() and not box["state"].exists()
    assert tree_digest(box["package"]) == before


def test_ab_compare_reports_and_restores(box, server):
    shipped = wheel_member("0.5.12", "sglang/" + GATE)
    run = bench(box, server, "-e", "bench_compare=autotune")
    assert run.status == "successful", run.stdout
    # Progress: one line per level as it finishes, sampled by the stand-in nvidia-smi.
    out = flat(run.stdout)
    assert "concurrency 1024: 884.0 tok/s total, p99 TTFT 88300.0 ms, mean power 78 W per GPU" in out
    assert "concurrency 1024: 3740.0 tok/s total, p99 TTFT 28900.0 ms, mean power 78 W per GPU" in out
    off = next(box["runs"].glob("autotune-off-*"))
    on = next(box["runs"].glob("autotune-on-*"))
    assert [json.loads(line)["max_concurrency"] for line in (on / "results.jsonl").read_text().splitlines()] == [1024]
    assert (on / "power-1024.csv").read_text().startswith("2026/11/30 14:50:34.069, 0, 78.12, 0, 0\n")
    meta = json.loads((on / "run.json").read_text())
    assert meta["label"] == "autotune-on" and meta["sglang_version"] == "0.5.12"
    assert meta["benchmark_module"] == "sglang.bench_serving"
    assert meta["autotune"]["gate"]["state"] == "enabled"
    assert meta["autotune"]["server_flag_disables_it"] is False
    assert meta["autotune"]["journal_lines_this_start"].startswith("no journal")
    assert meta["server_command_line"] == "unknown: sglang.service runs no process"
    assert json.loads((off / "run.json").read_text())["autotune"]["gate"]["state"] == "commented"
    report = next(box["runs"].glob("autotune-compare-*")) / "report.md"
    assert "| 1024 | autotune-on | 3740.0 | 1870.0 | 15400.0 | 28900.0 | 556.00 | 78 | 4.23 |" in report.read_text()
    assert report.with_name("throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The starting state (shipped, autotune off) is back; no sampler left; scratch removed.
    assert (box["package"] / GATE).read_bytes() == shipped
    assert not list(box["state"].glob("*.json"))
    assert not samplers_running(str(box["scratch"]))
    assert not list(box["scratch"].iterdir())


def test_ab_restores_the_starting_state_when_a_run_fails(box, server):
    shipped = wheel_member("0.5.12", "sglang/" + GATE)
    config = json.loads(box["config"].read_text())
    box["config"].write_text(json.dumps(config | {"fail_when": "autotune-on"}))
    run = bench(box, server, "-e", "bench_compare=autotune")
    assert run.status == "failed", run.stdout
    out = flat(run.stdout)
    assert "crashed on purpose with autotune-on" in out
    # The gate was patched for the failing arm, then put back as it was.
    # One edit task, run for the patch and again for the restore.
    assert out.count("Edit the flashinfer_cutlass entry of the gate") >= 2
    assert "Restore the starting autotune gate" in out
    assert (box["package"] / GATE).read_bytes() == shipped
    assert not list(box["state"].glob("*.json"))
    assert not samplers_running(str(box["scratch"]))
    assert not list(box["runs"].glob("autotune-compare-*"))  # no report from a failed comparison


# --- bench_report.yml ------------------------------------------------------------------------------


def report(private: Path, runs: str, out: Path) -> Run:
    return run_playbook(private, "bench_report.yml", ["-e", f"bench_report_runs={runs}", "-e", f"bench_report_out={out}"])


def test_report_playbook_writes_the_table_and_the_plot(tmp_path):
    private, out = tmp_path / "runner", tmp_path / "out"
    private.mkdir()
    runs = f"{FIXTURES / 'runs' / 'autotune-off'},{FIXTURES / 'runs' / 'autotune-on'}"
    first = report(private, runs, out)
    assert (first.status, first.changed) == ("successful", 1), first.stdout
    text = (out / "report.md").read_text()
    assert "| 512 | autotune-on | 2800.0 | 1400.0 | 7960.0 | 14800.0 | 372.00 | 455 | 3.19 |" in text
    assert (out / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = report(private, runs, out)
    assert (again.status, again.changed) == ("successful", 0), again.stdout


def test_report_playbook_check_mode_writes_nothing(tmp_path):
    private, out = tmp_path / "runner", tmp_path / "out"
    private.mkdir()
    run = run_playbook(private, "bench_report.yml", [
        "-e", f"bench_report_runs={FIXTURES / 'runs' / 'autotune-off'},{FIXTURES / 'runs' / 'autotune-on'}",
        "-e", f"bench_report_out={out}", "--check"])
    assert (run.status, run.changed) == ("successful", 1), run.stdout
    assert "| 1024 | autotune-on | 3740.0 |" in run.stdout
    assert not out.exists()


def test_report_playbook_bad_line_fails_and_writes_nothing(tmp_path):
    private, out = tmp_path / "runner", tmp_path / "out"
    private.mkdir()
    bad = tmp_path / "bad"
    shutil.copytree(FIXTURES / "runs" / "autotune-on", bad)
    lines = (bad / "results.jsonl").read_text().splitlines()
    lines[1] = lines[1][:40]
    (bad / "results.jsonl").write_text("\n".join(lines) + "\n")
    run = report(private, f"{FIXTURES / 'runs' / 'autotune-off'},{bad}", out)
    assert run.status == "failed", run.stdout
    assert f"{bad / 'results.jsonl'}:2: not JSON" in " ".join(run.failures)
    assert "Nothing was written" in " ".join(run.failures)
    assert not out.exists()


def test_ab_refuses_a_pinned_autotune(box, server):
    shipped = wheel_member("0.5.12", "sglang/" + GATE)
    run = bench(box, server, "-e", "bench_compare=autotune", "-e", "autotune=false")
    assert run.status == "failed", run.stdout
    assert "asked for autotune on but the autotune role left it off" in " ".join(run.failures)
    assert "Is autotune pinned with -e autotune=...?" in " ".join(run.failures)
    assert (box["package"] / GATE).read_bytes() == shipped
    assert not box["runs"].exists()


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["-e", "bench_compare=both"], ["sglang_bench_compare", "none, autotune"]),
        (["-e", "sglang_bench_concurrencies=64,0"], ["distinct concurrencies of 1 or more", "64,0"]),
    ],
)
def test_bad_settings_fail_before_anything(box, server, extra, needles):
    before = tree_digest(box["package"])
    run = bench(box, server, *extra)
    assert run.status == "failed" and run.changed == 0, run.stdout
    message = " ".join(run.failures)
    for needle in needles:
        assert needle in message, message
    assert not box["runs"].exists() and not box["scratch"].exists()
    assert tree_digest(box["package"]) == before


# --- outputs checked first, in --check as for real ---------------------------------------------------

RUNS_AB = f"{FIXTURES / 'runs' / 'autotune-off'},{FIXTURES / 'runs' / 'autotune-on'}"


class FsFaults:
    """Real faults as root: an immutable directory (chattr +i) and small or read-only tmpfs mounts;
    undo() takes them all back."""

    def __init__(self) -> None:
        self.mounts: list[Path] = []
        self.immutables: list[Path] = []

    def immutable(self, path: Path) -> Path:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"chattr +i is not possible here: {done.stderr.strip()}")
        self.immutables.append(path)
        return path

    def tmpfs(self, path: Path, size: str = "1m") -> Path:
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"mounting a tmpfs is not possible here: {done.stderr.strip()}")
        self.mounts.append(path)
        return path

    def read_only(self, path: Path) -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)

    def undo(self) -> None:
        for path in self.immutables:
            subprocess.run(["chattr", "-i", str(path)], check=False)
        for path in reversed(self.mounts):
            subprocess.run(["umount", str(path)], check=False)


@pytest.fixture
def fs_faults():
    faults = FsFaults()
    yield faults
    faults.undo()


def _old_report(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text("old report\n")
    (out / "throughput.png").write_bytes(b"old png")


def out_is_a_file(tmp: Path, faults) -> tuple[Path, str]:
    (tmp / "out").write_text("a file\n")
    return tmp / "out", f"{tmp / 'out'} is a regular file, not a directory"


def out_under_a_file(tmp: Path, faults) -> tuple[Path, str]:
    (tmp / "file").write_text("a file\n")
    return tmp / "file" / "out", f"{tmp / 'file' / 'out'} cannot be created: {tmp / 'file'} is a regular file"


def out_unwritable(tmp: Path, faults) -> tuple[Path, str]:
    _old_report(tmp / "out")
    faults.immutable(tmp / "out")
    return tmp / "out", f"{tmp / 'out'} is not writable by uid"


def out_parent_unwritable(tmp: Path, faults) -> tuple[Path, str]:
    (tmp / "parent").mkdir()
    faults.immutable(tmp / "parent")
    return tmp / "parent" / "out", f"{tmp / 'parent' / 'out'} cannot be created: {tmp / 'parent'} is not writable"


def out_read_only(tmp: Path, faults) -> tuple[Path, str]:
    mount = faults.tmpfs(tmp / "mnt")
    _old_report(mount / "out")
    faults.read_only(mount)
    return mount / "out", f"{mount / 'out'} is on a read-only file system"


def out_report_is_a_directory(tmp: Path, faults) -> tuple[Path, str]:
    (tmp / "out" / "report.md").mkdir(parents=True)
    return tmp / "out", f"{tmp / 'out' / 'report.md'} is a directory; expected a file the report replaces"


@pytest.mark.parametrize("mode", [[], ["--check"]])
@pytest.mark.parametrize("case", [out_is_a_file, out_under_a_file, out_unwritable, out_parent_unwritable,
                                  out_read_only, out_report_is_a_directory])
def test_report_output_that_cannot_be_written_fails_in_check_as_for_real(tmp_path, fs_faults, mode, case):
    private = tmp_path / "runner"
    private.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    out, needle = case(work, fs_faults)
    before = tree_digest(work)
    run = run_playbook(private, "bench_report.yml", ["-e", f"bench_report_runs={RUNS_AB}",
                                                      "-e", f"bench_report_out={out}", *mode])
    assert run.status == "failed" and run.changed == 0, run.stdout
    message = " ".join(run.failures)
    assert needle in message and "Nothing was written" in message, message
    assert "Module failed: [Errno" not in run.stdout and "Traceback" not in run.stdout
    assert tree_digest(work) == before


def test_report_disk_full_keeps_the_old_files_and_no_temporary(tmp_path, fs_faults):
    """report.md fits, throughput.png does not: neither is replaced, no temporary is left."""
    private = tmp_path / "runner"
    private.mkdir()
    mount = fs_faults.tmpfs(tmp_path / "mnt", size="16k")
    out = mount / "out"
    _old_report(out)
    before = tree_digest(mount)
    run = run_playbook(private, "bench_report.yml", ["-e", f"bench_report_runs={RUNS_AB}", "-e", f"bench_report_out={out}"])
    assert run.status == "failed", run.stdout
    message = " ".join(run.failures)
    assert f"{out / 'throughput.png'}: cannot be written (No space left on device); nothing was written" in message, message
    assert tree_digest(mount) == before


def runs_dir_is_a_file(tmp: Path, faults) -> tuple[list[str], str]:
    (tmp / "runs").write_text("a file\n")
    return ["-e", f"sglang_bench_runs_dir={tmp / 'runs'}"], f"sglang_bench_runs_dir: {tmp / 'runs'} is a regular file"


def runs_dir_under_a_file(tmp: Path, faults) -> tuple[list[str], str]:
    (tmp / "file").write_text("a file\n")
    return (["-e", f"sglang_bench_runs_dir={tmp / 'file' / 'runs'}"],
            f"sglang_bench_runs_dir: {tmp / 'file' / 'runs'} cannot be created: {tmp / 'file'} is a regular file")


def runs_dir_unwritable(tmp: Path, faults) -> tuple[list[str], str]:
    (tmp / "runs").mkdir()
    faults.immutable(tmp / "runs")
    return ["-e", f"sglang_bench_runs_dir={tmp / 'runs'}"], f"sglang_bench_runs_dir: {tmp / 'runs'} is not writable"


def runs_dir_read_only(tmp: Path, faults) -> tuple[list[str], str]:
    mount = faults.tmpfs(tmp / "mnt")
    faults.read_only(mount)
    return (["-e", f"sglang_bench_runs_dir={mount / 'runs'}"],
            f"sglang_bench_runs_dir: {mount / 'runs'} cannot be created: {mount} is on a read-only file system")


def remote_dir_is_a_file(tmp: Path, faults) -> tuple[list[str], str]:
    (tmp / "scratch").write_text("a file\n")
    return ["-e", f"sglang_bench_remote_dir={tmp / 'scratch'}"], f"sglang_bench_remote_dir: {tmp / 'scratch'} is a regular file"


BENCH_FAULTS = [runs_dir_is_a_file, runs_dir_under_a_file, runs_dir_unwritable, runs_dir_read_only, remote_dir_is_a_file]


@pytest.fixture(scope="module", params=[[], ["--check"]], ids=["real", "check"])
def bench_faults(request, tmp_path_factory):
    """Every case of BENCH_FAULTS in one run of bench.yml: each an inventory host of its own (a
    local-connection alias of this machine) with its own faulty folder and port; one SGLang tree."""
    tmp = tmp_path_factory.mktemp("bench-faults")
    made = make_box(tmp / "box")
    faults = FsFaults()
    try:
        cases, needles, works = {}, {}, {}
        for case in BENCH_FAULTS:
            works[case.__name__] = tmp / case.__name__
            works[case.__name__].mkdir()
            extra, needles[case.__name__] = case(works[case.__name__], faults)
            cases[case.__name__] = {**as_host_vars(bench_args(made, free_port())), **as_host_vars(extra)}
        before = {name: tree_digest(work, made["package"]) for name, work in works.items()}
        runs = run_cases(made["private"], "bench.yml", cases, request.param)
        yield {name: (run, needles[name], before[name], tree_digest(works[name], made["package"]))
               for name, run in runs.items()}
    finally:
        faults.undo()


@pytest.mark.parametrize("case", [case.__name__ for case in BENCH_FAULTS])
def test_bench_output_that_cannot_be_written_fails_in_check_as_for_real(bench_faults, case):
    """Refused before the server is probed (none answers here), naming the variable and the path."""
    run, needle, before, after = bench_faults[case]
    assert run.status == "failed" and run.changed == 0, run.stdout
    message = " ".join(run.failures)
    assert needle in message and "nothing was changed" in message, message
    assert "No SGLang server answers" not in message and "Module failed: [Errno" not in run.stdout
    assert after == before

