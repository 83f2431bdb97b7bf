"""Build the GPU-detector proof's repositories and their CPU reference here, where ``generator build`` runs.

    python -m tools.gpu.detector_repos --out DIR --yolov8n yolov8n.onnx [--only NAME ...] [--dry-run]

Writes one model repository per case of ``tools.gpu.detector_cases.CASES`` (all ``--device gpu``) into
``DIR/repos/``, and the CPU reference (detections of the CPU path on ONNX Runtime's CPU provider, the digest of
each preprocessed input, the first scenes' whole heads) into ``DIR/``. ``--dry-run`` builds every case with the
CPU detector and the CPU preprocess, to run the whole proof on a machine without a GPU. Served ONNX files that
repeat (the same graph in several repositories) are stored once in ``DIR/onnx/`` by digest and linked back on
the device (``detector_proof --repos``), so the carry holds each graph once.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import logging
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tools.gpu.detector_cases import CASES, build_options, cpu_reference, images, save_reference

logger = logging.getLogger(__name__)
LINKS = "onnx_links.txt"


def calibration_folder(folder: Path, count: int = 64) -> Path:
    """Synthetic camera frames for the yolov8n INT8 calibration (its random weights see nothing anyway)."""
    from loadtest.images import synthetic_images

    folder.mkdir(parents=True, exist_ok=True)
    for index, data in enumerate(synthetic_images([(1280, 720), (640, 480)], per_size=count // 2, seed=20)):
        (folder / f"calib-{index:03d}.jpg").write_bytes(data)
    return folder


def build(out: Path, yolov8n: Path, only: Sequence[str], dry_run: bool) -> list[str]:
    from generator.builder.pipeline import build_repository
    from generator.demo import DEMO_ONNX

    sources = {"demo": DEMO_ONNX, "yolov8n": yolov8n}
    built = []
    with tempfile.TemporaryDirectory(prefix="tde-calib-") as tmp:
        calib = calibration_folder(Path(tmp))
        for name, case in CASES.items():
            if only and name not in only:
                continue
            options = build_options(name, case, calib)
            if dry_run:
                options = dataclasses.replace(options, device="cpu", preprocess_device="cpu")
            build_repository(sources[case.source], out / "repos" / name, options, force=True)
            built.append(name)
            logger.info("built %s", name)
    return built


def deduplicate(out: Path) -> int:
    """Move every served model.onnx into ``out/onnx/<sha256>.onnx``; ``out/onnx_links.txt`` says where each goes."""
    store = out / "onnx"
    store.mkdir(exist_ok=True)
    lines = []
    for path in sorted((out / "repos").glob("*/*_detector/1/model.onnx")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        target = store / f"{digest}.onnx"
        if not target.exists():
            shutil.copyfile(path, target)
        lines.append(f"{digest} {path.relative_to(out / 'repos').as_posix()}")
        path.unlink()
    (out / LINKS).write_text("\n".join(lines) + "\n")
    return len(list(store.iterdir()))


def restore(out: Path, repos: Path) -> None:
    """Put every stored model.onnx back where ``deduplicate`` took it from (on the device)."""
    for line in (out / LINKS).read_text().split("\n"):
        if line:
            digest, relative = line.split(" ", 1)
            if not (repos / relative).exists():
                shutil.copyfile(out / "onnx" / f"{digest}.onnx", repos / relative)


def references(out: Path, names: Sequence[str]) -> None:
    named = images()
    rows, heads = {}, {}
    for name in names:
        rows[name], kept = cpu_reference(out / "repos" / name, name, named)
        heads.update(kept)
    save_reference(out, rows, heads)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--yolov8n", type=Path, required=True, help="a yolov8n-structure export, dynamic batch")
    parser.add_argument("--only", nargs="*", default=(), help="build only these cases")
    parser.add_argument("--dry-run", action="store_true", help="CPU detector and preprocess: the proof without a GPU")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    names = build(args.out, args.yolov8n, args.only, args.dry_run)
    references(args.out, names)
    graphs = deduplicate(args.out)
    print(f"{len(names)} repositories, {graphs} distinct served graphs, reference in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
