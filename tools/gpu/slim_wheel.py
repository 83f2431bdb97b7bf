"""Repack a wheel with only some of its files (and its metadata), under build tag 1, so it travels smaller.

    python tools/gpu/slim_wheel.py WHEEL OUT_DIR FILE...

The RECORD is written anew with the kept files' digests, so pip installs the repack like any wheel.
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path


def slim(wheel: Path, out_dir: Path, keep: set[str]) -> Path:
    name, version, rest = wheel.name.split("-", 2)
    target = out_dir / f"{name}-{version}-1-{rest}"
    dist_info = f"{name}-{version}.dist-info/"
    out_dir.mkdir(parents=True, exist_ok=True)
    record = []
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as sink:
        for info in source.infolist():
            member = info.filename
            if member in keep or (member.startswith(dist_info) and not member.endswith("RECORD")):
                data = source.read(member)
                entry = zipfile.ZipInfo(member, info.date_time)
                entry.external_attr, entry.compress_type = info.external_attr, zipfile.ZIP_DEFLATED
                sink.writestr(entry, data)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                record.append(f"{member},sha256={digest},{len(data)}")
        missing = keep - set(source.namelist())
        if missing:
            raise SystemExit(f"not in {wheel.name}: {', '.join(sorted(missing))}")
        record.append(f"{dist_info}RECORD,,")
        sink.writestr(dist_info + "RECORD", "\n".join(record) + "\n")
    return target


def main(argv: list[str]) -> int:
    wheel, out_dir, *keep = argv
    if not re.fullmatch(r"[^-]+-[^-]+-.+\.whl", Path(wheel).name):
        raise SystemExit(f"{wheel} is not a wheel file name")
    target = slim(Path(wheel), Path(out_dir), set(keep))
    print(target, target.stat().st_size)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
