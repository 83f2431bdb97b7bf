from __future__ import annotations

import cv2
import numpy as np
import pytest

from loadtest.errors import CorpusError
from loadtest.images import build_corpus, load_folder, parse_sizes, synthetic_images


def test_parse_sizes_names_and_numbers():
    assert parse_sizes("640x480, 720p,1080p") == [(640, 480), (1280, 720), (1920, 1080)]
    for bad in ("", "640", "640x", "10x10", "axb"):
        with pytest.raises(CorpusError):
            parse_sizes(bad)


def test_synthetic_images_are_jpegs_of_the_asked_sizes_interleaved():
    images = synthetic_images([(320, 240), (256, 512)], per_size=2, seed=1)
    shapes = []
    for i in images:
        decoded = cv2.imdecode(np.frombuffer(i, np.uint8), cv2.IMREAD_COLOR)
        assert decoded is not None
        shapes.append(decoded.shape[:2])
    assert shapes == [(240, 320), (512, 256), (240, 320), (512, 256)]
    assert all(i[:2] == b"\xff\xd8" for i in images)
    assert synthetic_images([(320, 240)], per_size=1, seed=1) == images[:1]  # seeded: reproducible


def test_folder_corpus_reads_images_only_sorted(tmp_path):
    (tmp_path / "b.png").write_bytes(b"png-bytes")
    (tmp_path / "a.JPG").write_bytes(b"jpg-bytes")
    (tmp_path / "notes.txt").write_text("not an image")
    assert load_folder(tmp_path) == [b"jpg-bytes", b"png-bytes"]
    assert build_corpus(tmp_path) == [b"jpg-bytes", b"png-bytes"]


def test_folder_problems_are_named(tmp_path):
    with pytest.raises(CorpusError, match="no images"):
        load_folder(tmp_path)
    (tmp_path / "x.jpg").write_bytes(b"")
    with pytest.raises(CorpusError, match="empty image files"):
        load_folder(tmp_path)
    with pytest.raises(CorpusError, match="not found"):
        load_folder(tmp_path / "missing")
