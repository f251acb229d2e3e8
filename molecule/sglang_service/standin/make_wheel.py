"""Copy a real SGLang wheel with only launch_server.py replaced by the stand-in.

    python make_wheel.py REAL.whl OUTDIR

Adds sglang_standin.pth and sglang_standin_boot.py (see that file) and
rewrites RECORD for the three files; every other member is copied byte for byte.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPLACED = {
    "sglang/launch_server.py": HERE / "launch_server.py",
    "sglang_standin.pth": HERE / "sglang_standin.pth",
    "sglang_standin_boot.py": HERE / "sglang_standin_boot.py",
}


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main(real: Path, outdir: Path) -> Path:
    out = outdir / real.name
    outdir.mkdir(parents=True, exist_ok=True)
    new = {name: path.read_bytes() for name, path in REPLACED.items()}
    with zipfile.ZipFile(real) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        for info in src.infolist():
            if info.filename in new or info.filename == record_name:
                continue
            dst.writestr(info, src.read(info))
        for name, data in new.items():
            dst.writestr(name, data)
        lines = [line for line in src.read(record_name).decode().splitlines()
                 if line and line.split(",")[0] not in new]
        lines += [record_line(name, data) for name, data in new.items()]
        dst.writestr(record_name, "\n".join(lines) + "\n")
    return out


if __name__ == "__main__":
    print(main(Path(sys.argv[1]), Path(sys.argv[2])))
