"""Copy a real SGLang wheel with only launch_server.py replaced by the stand-in.

    python make_wheel.py REAL.whl OUTDIR [--slim]

Adds sglang_standin.pth and sglang_standin_boot.py (see that file) and
rewrites RECORD for the four files (sglang_standin_answers.py: its answers and tactics); every other member is copied byte for byte.
--slim keeps only what the roles read without SGLang's dependencies (the
top-level modules, the flag sources, model_executor with the autotune gate,
the dist-info; RECORD lists exactly those), with the stand-in benchmark
(bench_serving.py) as sglang/benchmark/serving.py: a 0.5.23 wheel goes from about
6,400 files to under 200, so that installing it is cheap (tests/test_fleet_roll.py).
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPLACED = {
    "sglang/launch_server.py": HERE / "launch_server.py",
    "sglang_standin.pth": HERE / "sglang_standin.pth",
    "sglang_standin_boot.py": HERE / "sglang_standin_boot.py",
    "sglang_standin_answers.py": HERE / "sglang_standin_answers.py",
}

# --slim only: SGLang's benchmark needs dependencies the slim install has not.
SLIM_REPLACED = {"sglang/benchmark/serving.py": HERE / "bench_serving.py"}

SLIM = re.compile(r"sglang/[^/]+|sglang/srt/server_args[^/]*\.py|sglang/srt/(arg_groups|model_executor)/.*"
                  r"|sglang-[^/]+\.dist-info/.*")


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main(real: Path, outdir: Path, slim: bool = False) -> Path:
    out = outdir / real.name
    outdir.mkdir(parents=True, exist_ok=True)
    new = {name: path.read_bytes() for name, path in {**REPLACED, **(SLIM_REPLACED if slim else {})}.items()}
    with zipfile.ZipFile(real) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        for info in src.infolist():
            if info.filename in new or info.filename == record_name or (
                    slim and not SLIM.fullmatch(info.filename)):
                continue
            dst.writestr(info, src.read(info))
        for name, data in new.items():
            dst.writestr(name, data)
        lines = [line for line in src.read(record_name).decode().splitlines()
                 if line and line.split(",")[0] not in new
                 and (not slim or SLIM.fullmatch(line.split(",")[0]))]
        lines += [record_line(name, data) for name, data in new.items()]
        dst.writestr(record_name, "\n".join(lines) + "\n")
    return out


if __name__ == "__main__":
    print(main(Path(sys.argv[1]), Path(sys.argv[2]), slim="--slim" in sys.argv[3:]))
