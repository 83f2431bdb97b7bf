import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from clients.detect import _output_names, format_json, format_table, main
from clients.detection import Detection, DetectionResult

ROOT = Path(__file__).resolve().parents[2]
RESULT = DetectionResult(
    (
        Detection(box=(1.0, 2.5, 30.25, 40.0), score=0.875, class_id=2, class_name="triangle"),
        Detection(box=(5.0, 6.0, 7.0, 8.0), score=0.5, class_id=0, class_name="circle"),
    )
)


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(b"\x89PNG not really")
    return path


def test_help_works_without_importing_tritonclient():
    code = (
        "import sys\n"
        "from clients.detect import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert main(['--help']) == 0\n"
        "bad = [m for m in sys.modules if m.startswith(('tritonclient', 'grpc', 'gevent', 'aiohttp', 'cv2'))]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--annotate" in proc.stdout


def test_missing_image_is_one_line_exit_1(tmp_path, capsys):
    assert main([str(tmp_path / "missing.jpg"), str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("error: image not found") and "missing.jpg" in err


@pytest.mark.parametrize(
    ("args", "fragment"),
    [(["--batch", "0"], "--batch"), (["--timeout", "0"], "--timeout"), (["--timeout", "-3"], "--timeout"),
     (["--retries", "-1"], "--retries")],
)
def test_bad_numbers_exit_1(image, capsys, args, fragment):
    assert main([str(image), *args]) == 1
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize("args", [[], ["--protocol", "smtp"], ["--batch", "x"], ["--bogus"]])
def test_usage_errors_exit_2(image, capsys, args):
    argv = [str(image), *args] if args else []
    assert main(argv) == 2
    assert "usage:" in capsys.readouterr().err


def test_bad_url_exit_1(image, capsys):
    assert main([str(image), "--url", "ftp://x:1"]) == 1
    assert "unsupported URL scheme" in capsys.readouterr().err


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_unreachable_server_is_one_line_exit_1(image, capsys, protocol):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert main([str(image), "--url", f"127.0.0.1:{port}", "--protocol", protocol, "--timeout", "2"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert err.count("\n") == 0
    assert err.startswith("error: cannot reach Triton at") or err.startswith("error: Triton at")
    assert str(port) in err


def test_format_json_round_trips(tmp_path):
    line = format_json(tmp_path / "a.png", RESULT)
    assert "\n" not in line
    obj = json.loads(line)
    assert obj["image"] == str(tmp_path / "a.png")
    assert obj["detections"][0] == {
        "box": [1.0, 2.5, 30.25, 40.0],
        "score": 0.875,
        "class_id": 2,
        "class_name": "triangle",
    }
    assert len(obj["detections"]) == 2
    assert json.loads(format_json(Path("b.jpg"), DetectionResult(())))["detections"] == []


def test_format_table():
    table = format_table(Path("img.jpg"), RESULT).splitlines()
    assert table[0] == "img.jpg: 2 detections"
    assert table[1].split() == ["class", "score", "x1", "y1", "x2", "y2"]
    assert table[2].split() == ["triangle", "0.875", "1.0", "2.5", "30.2", "40.0"]
    assert format_table(Path("e.jpg"), DetectionResult(())) == "e.jpg: 0 detections"


def test_a_classifiers_result_prints_its_top_classes():
    from clients.detection import Classification

    result = DetectionResult((), (Classification(7, "cat", 0.75), Classification(2, "lynx", 0.125)))
    assert json.loads(format_json(Path("c.jpg"), result)) == {
        "image": "c.jpg", "detections": [],
        "top": [{"class_id": 7, "class_name": "cat", "score": 0.75}, {"class_id": 2, "class_name": "lynx", "score": 0.125}]}
    assert format_table(Path("c.jpg"), result).splitlines() == [
        "c.jpg: top 2 classes", "  class  score", "  cat    0.750", "  lynx   0.125"]


def test_output_names_stay_unique():
    paths = [Path("x/a.jpg"), Path("y/a.jpg"), Path("z/A.jpg"), Path("b.png")]
    names = _output_names(paths)
    assert [names[p] for p in paths] == ["a.jpg", "a-1.jpg", "A-2.jpg", "b.png"]


def test_the_admin_token_and_the_ca_come_from_files(image, tmp_path, capsys):
    """--admin-token-file reads a token kept in a file (deploy up's admin_token_file); --ca-cert is for TLS URLs.
    The old spelling --admin-key-file still works and warns."""
    from clients.admin_token import read_token_file

    token = tmp_path / "admin-token"
    token.write_text("0123abcd\n")
    assert read_token_file(token) == "0123abcd"
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert main([str(image), "--admin-token-file", str(empty)]) == 1
    assert capsys.readouterr().err.splitlines() == [f"error: the admin token file {empty} is empty"]
    assert main([str(image), "--admin-key-file", str(tmp_path / "missing")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "warning: --admin-key-file is renamed --admin-token-file (the old name will go)",
        f"error: cannot read the admin token file {tmp_path / 'missing'}: No such file or directory"]
    ca = tmp_path / "ca.crt"
    ca.write_text("unused")
    assert main([str(image), "--url", "grpc://127.0.0.1:1", "--ca-cert", str(ca)]) == 1
    assert "use grpcs:// or https://" in capsys.readouterr().err
