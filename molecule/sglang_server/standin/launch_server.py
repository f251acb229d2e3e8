"""Stand-in for sglang/launch_server.py, for the Molecule scenario only (never shipped).

make_wheel.py puts it in place of the real file inside the real SGLang wheel;
everything else in the installed tree (the autotune gate included) is SGLang's.
It decides like SGLang whether FlashInfer autotune runs, by reading the
installed, possibly patched, gate with the AST: the gate function must list
"flashinfer_cutlass", the MoE runner backend must be flashinfer_cutlass, and
--disable-flashinfer-autotune must be absent. It then logs one line per TP rank
as SGLang does, says it is ready, and serves /health and /health_generate
(and /v1/models, which needs the API key when one is given).

Like SGLang's prepare_server_args, it reads options from the file given with
--config and puts them before the command line's (the role writes that file
as JSON, which is YAML; the venv here has no PyYAML). Like SGLang, it logs its
arguments, the API key among them, so the scenario proves the role masks it.

For the fleet (scripts/dev.sh fleet, tests/test_fleet_roll.py) it also answers
like an SGLang worker behind the gateway: /server_info, /model_info,
/v1/models, /v1/loads (num_running_reqs counts its in-flight requests),
POST /v1/completions and /v1/chat/completions with a small fixed completion
that says it is a stand-in (taking STANDIN_REQUEST_SECONDS, default 0.05),
and on SIGTERM answers 503 on /health while it finishes in-flight requests,
as SGLang does. When autotune runs it writes an autotune cache file where
SGLang 0.5.16+ would ($SGLANG_CACHE_DIR/flashinfer/autotune/<flashinfer
version>/<sm>/<key>/rank_tp<r>_pp0_dp0.json; the FlashInfer version is the
one the installed SGLang pins, the SM is STANDIN_SM or sm120), and takes
STANDIN_AUTOTUNE_SECONDS (default 0) to tune, a tenth of that with a cache
whose rank files all agree (SGLang discards a set that disagrees, one rank's
file missing included). It logs "stand-in: ready N s after start".

Failure behaviours for the tests, read from /etc/sglang-standin/mode at start:
  never_ready   serve, but answer 503 on the health endpoints forever
  crash         log the start line and exit 1
  short         one "FlashInfer autotune completed." line fewer than ranks
and how fast each release answers from /etc/sglang-standin/speed.json (release_speed).
"""

import argparse
import ast
import hashlib
import http.server
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import sglang_standin_answers as standin_answers

MODE_FILE = Path("/etc/sglang-standin/mode")
SPEED_FILE = Path("/etc/sglang-standin/speed.json")
GATE_FILES = (
    "srt/model_executor/runner/flashinfer_autotune.py",
    "srt/model_executor/runner/base_runner.py",
    "srt/model_executor/model_runner.py",
)
GATE_FUNCTIONS = ("should_run_flashinfer_autotune", "_should_run_flashinfer_autotune")
PACKAGE = Path(__file__).resolve().parent
STARTED = time.monotonic()


def log(message, rank=None):
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    where = f" TP{rank}" if rank is not None else ""
    print(f"[{stamp}{where}] {message}", flush=True)


def gate_lists_cutlass():
    for rel in GATE_FILES:
        path = PACKAGE / rel
        if not path.is_file():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in GATE_FUNCTIONS:
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.List, ast.Tuple, ast.Set)) and any(
                        isinstance(e, ast.Constant) and e.value == "flashinfer_cutlass" for e in inner.elts
                    ):
                        return True, path
                return False, path
    return False, None


def cache_era():
    """0.5.16 and later keep the autotune cache (and log its path)."""
    try:
        return tuple(int(part) for part in version().split(".")[:3]) >= (0, 5, 16)
    except ValueError:
        return True


def version():
    for dist in sorted(PACKAGE.parent.glob("sglang-*.dist-info")):
        return dist.name[len("sglang-"):-len(".dist-info")]
    return "unknown"


def flashinfer_pin():
    """The flashinfer_python version the installed SGLang requires (its METADATA)."""
    for dist in sorted(PACKAGE.parent.glob("sglang-*.dist-info")):
        text = (dist / "METADATA").read_text(encoding="utf-8")
        found = re.search(r"^Requires-Dist: flashinfer[-_]python(?:\[[^\]]*\])?\s*\(?==+\s*([^\s;)]+)", text, re.M)
        if found:
            return found.group(1)
    return "unknown"


def autotune_cache_path(args, rank):
    """Where SGLang 0.5.16+ keeps rank's tactics (flashinfer_autotune_cache_path)."""
    root = Path(os.environ.get("SGLANG_CACHE_DIR", Path.home() / ".cache" / "sglang"))
    # SGLang's key holds the skip-ops policy too: a retune without some ops never reuses a full tune.
    key_parts = [args.model_path, args.quantization or "None", args.moe_runner_backend, str(args.tp_size),
                 ",".join(sorted(args.flashinfer_autotune_skip_ops or []))]
    key = hashlib.sha256("|".join(key_parts).encode()).hexdigest()[:16]
    sm = os.environ.get("STANDIN_SM", "sm120")
    return root / "flashinfer" / "autotune" / flashinfer_pin() / sm / key / f"rank_tp{rank}_pp0_dp0.json"


def run_autotune(args, mode):
    """Log as SGLang does, wait like a tuning run (shorter with a usable cache), save the cache.

    As SGLang 0.5.16+ (flashinfer_autotune_context): with the cache on, the ranks
    compare their files first and, when they differ (one missing included),
    discard them all and tune from scratch; the tactics are saved after, every
    rank the same.
    """
    paths = [autotune_cache_path(args, rank) for rank in range(args.tp_size)]
    reuse = os.environ.get("SGLANG_FLASHINFER_AUTOTUNE_CACHE", "1") != "0"
    contents = {path.read_text(encoding="utf-8") if path.is_file() else "" for path in paths}
    cached = reuse and len(contents) == 1 and "" not in contents
    if reuse and len(contents) > 1:
        log("FlashInfer autotune: per-rank caches disagree, discarding them and tuning from scratch "
            "so all ranks agree on the tactics.")
        for path in paths:
            path.unlink(missing_ok=True)
    for rank, path in enumerate(paths):
        if reuse:
            log(f"Running FlashInfer autotune with cache: {path}", rank)
        else:
            log("Running FlashInfer autotune (cache reuse DISABLED via SGLANG_FLASHINFER_AUTOTUNE_CACHE=0); "
                f"writing fresh result to: {path.parent / 'runs' / path.name}", rank)
    seconds = float(os.environ.get("STANDIN_AUTOTUNE_SECONDS", "0"))
    time.sleep(seconds / 10 if cached else seconds)
    tuned = standin_answers.tuned_tactics(args.flashinfer_autotune_skip_ops or [])
    tactics = contents.pop() if cached else json.dumps({"stand-in": True, "tactics": tuned}) + "\n"
    for path in paths:
        target = path if reuse else path.parent / "runs" / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(tactics, encoding="utf-8")
    log(f"stand-in: autotune {'reused the cache' if cached else 'tuned and wrote the cache'}")
    completed = args.tp_size - 1 if mode == "short" else args.tp_size
    for rank in range(completed):
        log("FlashInfer autotune completed.", rank)
    try:
        return json.loads(tactics).get("tactics") or {}
    except ValueError:
        return {}


def release_speed():
    """How long this release takes per request, from /etc/sglang-standin/speed.json keyed by the
    SGLang version, read once at start (a release's speed is fixed until it restarts), e.g.
    {"0.5.18": {"request_seconds": 0.15, "crowded": {"inflight": 2, "request_seconds": 0.3}}}:
    0.15 s each, 0.3 s for a request that arrives while 2 or more are in flight (so slower at a
    high concurrency only). Without an entry: STANDIN_REQUEST_SECONDS (default 0.05) always."""
    base = {"request_seconds": float(os.environ.get("STANDIN_REQUEST_SECONDS", "0.05"))}
    if SPEED_FILE.is_file():
        entry = json.loads(SPEED_FILE.read_text(encoding="utf-8")).get(version())
        if isinstance(entry, dict):
            base.update(entry)
    crowded = base.get("crowded") or {}

    def seconds(inflight_before):
        if crowded and inflight_before >= int(crowded["inflight"]):
            return float(crowded["request_seconds"])
        return float(base["request_seconds"])
    return seconds


def merged_argv(argv):
    """argv with the --config file's options first, as SGLang's ConfigArgumentMerger does."""
    if "--config" not in argv:
        return argv
    index = argv.index("--config")
    data = json.loads(Path(argv[index + 1]).read_text(encoding="utf-8"))
    config = [item for key, value in data.items() for item in (f"--{key}", str(value))]
    return config + argv[:index] + argv[index + 2:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp-size", "--tp", type=int, default=1)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--moe-runner-backend", default="auto")
    parser.add_argument("--disable-flashinfer-autotune", action="store_true")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--model-path", default="stand-in")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--quantization", default=None)
    parser.add_argument("--flashinfer-autotune-skip-ops", nargs="+", default=[])
    argv = merged_argv(sys.argv[1:])
    args, _ = parser.parse_known_args(argv)
    mode = MODE_FILE.read_text().strip() if MODE_FILE.is_file() else "normal"
    shown = ["<redacted>" if before == "--api-key" else "--api-key=<redacted>"
             if arg.startswith("--api-key=") else arg
             for before, arg in zip(["", *sys.argv[1:]], sys.argv[1:])]
    log(f"stand-in launch_server: SGLang {version()} starting, pid {os.getpid()}, mode {mode}")
    log("stand-in argv: " + json.dumps(shown))
    log(f"server_args=ServerArgs(tp_size={args.tp_size}, host={args.host!r}, port={args.port}, "
        f"api_key={args.api_key!r})")
    if mode == "crash":
        log("stand-in: crashing at start as asked")
        sys.exit(1)

    listed, gate = gate_lists_cutlass()
    runs = listed and args.moe_runner_backend == "flashinfer_cutlass" and not args.disable_flashinfer_autotune
    log(f"stand-in: gate {gate} lists flashinfer_cutlass: {listed}; "
        f"disable flag: {args.disable_flashinfer_autotune}; autotune runs: {runs}")
    tactics = {}
    if runs and cache_era():
        tactics = run_autotune(args, mode)
    elif runs:
        tactics = standin_answers.tuned_tactics(args.flashinfer_autotune_skip_ops or [])
        for rank in range(args.tp_size):
            log("Running FlashInfer autotune...", rank)
        completed = args.tp_size - 1 if mode == "short" else args.tp_size
        for rank in range(completed):
            log("FlashInfer autotune completed.", rank)

    log(f"stand-in: tactics in use: {json.dumps(tactics, sort_keys=True)}")
    known = standin_answers.load_prompts()
    speed = release_speed()
    state = {"ready": mode != "never_ready", "inflight": 0}
    lock = threading.Lock()
    name = args.served_model_name or args.model_path
    info = {"model_path": args.model_path, "served_model_name": name, "tp_size": args.tp_size,
            "version": version(), "stand_in": True}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def reply(self, code, body=None):
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorised(self):
            return not args.api_key or self.headers.get("Authorization") == f"Bearer {args.api_key}"

        def do_GET(self):  # noqa: N802
            path = self.path.split("?")[0]
            if path.startswith("/health"):
                self.reply(200 if state["ready"] else 503)
            elif not self.authorised():
                self.reply(401)
            elif path in ("/server_info", "/get_server_info"):
                self.reply(200, info)
            elif path in ("/model_info", "/get_model_info"):
                self.reply(200, {"model_path": args.model_path, "is_generation": True, "stand_in": True})
            elif path == "/v1/models":
                self.reply(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "stand-in"}]})
            elif path == "/v1/loads":
                self.reply(200, {"version": version(), "stand_in": True,
                                 "loads": [{"dp_rank": 0, "num_running_reqs": state["inflight"], "num_waiting_reqs": 0}]})
            else:
                self.reply(200)

        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?")[0]
            if not self.authorised():
                self.reply(401)
                return
            if path not in ("/v1/completions", "/v1/chat/completions", "/generate"):
                self.reply(404, {"error": f"stand-in has no {path}"})
                return
            with lock:
                before = state["inflight"]
                state["inflight"] += 1
            try:
                time.sleep(speed(before))
                text = f"stand-in completion from {os.uname().nodename} (SGLang {version()})"
                request = json.loads(body or b"{}")
                prompt = request.get("prompt") if path != "/v1/chat/completions" else (
                    (request.get("messages") or [{}])[-1].get("content"))
                if isinstance(prompt, str) and (prompt in known or standin_answers.bad_tactic(tactics)):
                    text = standin_answers.answer(prompt, int(request.get("max_tokens") or 16), tactics, known)
                if path == "/v1/chat/completions":
                    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                    kind = "chat.completion"
                else:
                    choice = {"index": 0, "text": text, "finish_reason": "stop"}
                    kind = "text_completion"
                self.reply(200, {"id": "standin-" + hashlib.sha1(body).hexdigest()[:8], "object": kind,
                                 "model": name, "choices": [choice],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 8, "total_tokens": 9}})
            finally:
                with lock:
                    state["inflight"] -= 1

        def log_message(self, *_):
            pass

    family = http.server.ThreadingHTTPServer
    if ":" in args.host:
        import socket

        class V6(http.server.ThreadingHTTPServer):
            address_family = socket.AF_INET6

        family = V6
    family.daemon_threads = True
    # uvicorn (SGLang) listens with a backlog of 2048; http.server with 5 resets a burst of clients.
    family.request_queue_size = 256
    server = family((args.host, args.port), Handler)

    def drain(*_):
        # As SGLang does on SIGTERM: /health answers 503, in-flight work finishes.
        state["ready"] = False
        log("stand-in: SIGTERM, finishing in-flight requests")

        def stop():
            deadline = time.monotonic() + 30
            while state["inflight"] and time.monotonic() < deadline:
                time.sleep(0.05)
            server.shutdown()
        threading.Thread(target=stop, daemon=True).start()

    signal.signal(signal.SIGTERM, drain)
    if state["ready"]:
        log(f"stand-in: ready {time.monotonic() - STARTED:.2f} s after start")
        log("The server is fired up and ready to roll!")
    server.serve_forever()


if __name__ == "__main__":
    main()
