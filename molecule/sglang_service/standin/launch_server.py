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

Failure behaviours for the tests, read from /etc/sglang-standin/mode at start:
  never_ready   serve, but answer 503 on the health endpoints forever
  crash         log the start line and exit 1
  short         one "FlashInfer autotune completed." line fewer than ranks
"""

import argparse
import ast
import http.server
import json
import os
import sys
import time
from pathlib import Path

MODE_FILE = Path("/etc/sglang-standin/mode")
GATE_FILES = (
    "srt/model_executor/runner/flashinfer_autotune.py",
    "srt/model_executor/runner/base_runner.py",
    "srt/model_executor/model_runner.py",
)
GATE_FUNCTIONS = ("should_run_flashinfer_autotune", "_should_run_flashinfer_autotune")
PACKAGE = Path(__file__).resolve().parent


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


def version():
    for dist in sorted(PACKAGE.parent.glob("sglang-*.dist-info")):
        return dist.name[len("sglang-"):-len(".dist-info")]
    return "unknown"


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
    if runs:
        for rank in range(args.tp_size):
            log("Running FlashInfer autotune...", rank)
        completed = args.tp_size - 1 if mode == "short" else args.tp_size
        for rank in range(completed):
            log("FlashInfer autotune completed.", rank)

    ready = mode != "never_ready"

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path.startswith("/health"):
                self.send_response(200 if ready else 503)
            elif args.api_key and self.headers.get("Authorization") != f"Bearer {args.api_key}":
                self.send_response(401)
            else:
                self.send_response(200)
            self.end_headers()

        def log_message(self, *_):
            pass

    family = http.server.ThreadingHTTPServer
    if ":" in args.host:
        import socket

        class V6(http.server.ThreadingHTTPServer):
            address_family = socket.AF_INET6

        family = V6
    server = family((args.host, args.port), Handler)
    if ready:
        log("The server is fired up and ready to roll!")
    server.serve_forever()


if __name__ == "__main__":
    main()
