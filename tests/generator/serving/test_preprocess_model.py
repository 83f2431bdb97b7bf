"""The preprocess model file as Triton's Python stub imports it: OpenCV's pixel backstop is set first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from generator.builder.pipeline import _python_step_files
from generator.serving.contract import OPENCV_PIXEL_LIMIT, OPENCV_PIXEL_LIMIT_ENV

# Imports the model file the way the stub does, then asks OpenCV to decode 1600 pixels.
PROBE = """
import sys
sys.path[:0] = sys.argv[1:3]
import model
import os, cv2, numpy as np
print(os.environ["OPENCV_IO_MAX_IMAGE_PIXELS"])
try:
    cv2.imdecode(cv2.imencode(".png", np.zeros((40, 40, 3), np.uint8))[1], cv2.IMREAD_COLOR)
    print("decoded")
except cv2.error:
    print("refused")
"""


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """The preprocess model's version folder as the build writes it, with a 1000-pixel backstop."""
    for name, data in _python_step_files("pre", "preprocess.py").items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    contract = tmp_path / "pre/1/ensemble_pipeline/contract.py"
    text = contract.read_text()
    assert "OPENCV_PIXEL_LIMIT = 1 << 28" in text
    contract.write_text(text.replace("OPENCV_PIXEL_LIMIT = 1 << 28", "OPENCV_PIXEL_LIMIT = 1000"))
    (tmp_path / "stub").mkdir()
    (tmp_path / "stub/triton_python_backend_utils.py").write_text("")  # only the stub provides the real one
    return tmp_path


def probe(model_dir: Path, env: dict[str, str]) -> list[str]:
    result = subprocess.run([sys.executable, "-c", PROBE, str(model_dir / "pre/1"), str(model_dir / "stub")],
                            env=env, capture_output=True, text=True, check=True)
    return result.stdout.split()


def test_backstop_is_set_before_opencv_loads(model_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != OPENCV_PIXEL_LIMIT_ENV}
    assert probe(model_dir, env) == ["1000", "refused"]


def test_a_limit_from_the_server_environment_wins(model_dir: Path) -> None:
    env = {**os.environ, OPENCV_PIXEL_LIMIT_ENV: "5000"}
    assert probe(model_dir, env) == ["5000", "decoded"]


def test_the_backstop_is_above_every_accepted_image() -> None:
    from generator.builder.spec.options import ImageLimitOptions

    assert OPENCV_PIXEL_LIMIT == 16384 * 16384 >= ImageLimitOptions().max_pixels
