"""The image corpus a load test sends: a folder of encoded images, or synthetic camera-sized JPEG scenes.

Encoded bytes are sent as they are (the server decodes), so file size and resolution drive the cost of
each request just as with real cameras; the synthetic default mixes common camera resolutions.
"""

from __future__ import annotations

from pathlib import Path

from .errors import CorpusError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
NAMED_SIZES: dict[str, tuple[int, int]] = {
    "vga": (640, 480),
    "480p": (640, 480),
    "720p": (1280, 720),
    "hd": (1280, 720),
    "1080p": (1920, 1080),
    "fullhd": (1920, 1080),
}
DEFAULT_SIZES = "640x480,1280x720,1920x1080"


def parse_sizes(spec: str) -> list[tuple[int, int]]:
    """Parse ``"640x480,1280x720"`` or names (``vga,720p,1080p``) into (width, height) pairs."""
    sizes: list[tuple[int, int]] = []
    for raw in spec.split(","):
        item = raw.strip().lower()
        if not item:
            continue
        if item in NAMED_SIZES:
            sizes.append(NAMED_SIZES[item])
            continue
        width, sep, height = item.partition("x")
        if not sep or not width.isdigit() or not height.isdigit() or int(width) < 32 or int(height) < 32:
            raise CorpusError(
                f"bad image size {raw.strip()!r}: use WIDTHxHEIGHT (at least 32x32) or one of {sorted(NAMED_SIZES)}"
            )
        sizes.append((int(width), int(height)))
    if not sizes:
        raise CorpusError(f"no image sizes in {spec!r}: e.g. {DEFAULT_SIZES}")
    return sizes


def load_folder(folder: Path, limit: int | None = None) -> list[bytes]:
    """Read the encoded images of ``folder`` (sorted by name, not recursive)."""
    if not folder.is_dir():
        raise CorpusError(f"image folder not found: {folder}")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if limit is not None:
        files = files[:limit]
    if not files:
        raise CorpusError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in {folder}")
    images = [p.read_bytes() for p in files]
    empty = [p.name for p, data in zip(files, images, strict=True) if not data]
    if empty:
        raise CorpusError(f"empty image files in {folder}: {', '.join(empty[:5])}")
    return images


def synthetic_images(
    sizes: list[tuple[int, int]], per_size: int = 4, seed: int = 0, quality: int = 90
) -> list[bytes]:
    """Encode ``per_size`` synthetic scenes per (width, height) as JPEG, interleaved so any prefix mixes sizes."""
    import numpy as np  # heavy: only when a synthetic corpus is wanted

    from generator.synthetic import encode, make_scene

    if per_size < 1:
        raise CorpusError(f"need at least one synthetic image per size, got {per_size}")
    rng = np.random.default_rng(seed)
    return [
        encode(make_scene(rng, width, height).image, ".jpg", quality)
        for _ in range(per_size)
        for width, height in sizes
    ]


def build_corpus(folder: Path | None, sizes_spec: str = DEFAULT_SIZES, per_size: int = 4, seed: int = 0) -> list[bytes]:
    """The folder's images when a folder is given, else synthetic JPEG scenes at ``sizes_spec``."""
    if folder is not None:
        return load_folder(folder)
    return synthetic_images(parse_sizes(sizes_spec), per_size=per_size, seed=seed)


_VIDEO_FRAMES: dict[tuple[Path, int], list[bytes]] = {}


def video_frames(path: Path, limit: int = 600) -> list[bytes]:
    """The first ``limit`` frames of a video file, decoded with PyAV and JPEG-encoded once per process."""
    key = (path, limit)
    if key not in _VIDEO_FRAMES:
        from clients.errors import ClientError
        from clients.stream.decode import DecodeOptions, open_video
        from clients.stream.frame import encode_jpeg
        from clients.stream.sources import parse_source

        try:
            video = open_video(parse_source(str(path)), DecodeOptions())
        except ClientError as exc:
            raise CorpusError(str(exc)) from None
        try:
            frames = []
            for decoded in video.frames(lambda: None):
                if decoded.image is not None:
                    frames.append(encode_jpeg(decoded.image))
                if len(frames) >= limit:
                    break
        finally:
            video.close()
        if not frames:
            raise CorpusError(f"no video frames in {path}")
        _VIDEO_FRAMES[key] = frames
    return _VIDEO_FRAMES[key]
