import pytest

from clients.errors import ClientError, ImageSourceError
from clients.images import image_bytes


def test_bytes_pass_through():
    assert image_bytes(b"abc") == b"abc"
    assert image_bytes(bytearray(b"abc")) == b"abc"
    assert image_bytes(memoryview(b"abc")) == b"abc"


def test_path_and_str_are_read(tmp_path):
    path = tmp_path / "x.jpg"
    path.write_bytes(b"\xff\xd8data")
    assert image_bytes(path) == b"\xff\xd8data"
    assert image_bytes(str(path)) == b"\xff\xd8data"


def test_missing_file_is_a_client_error(tmp_path):
    with pytest.raises(ImageSourceError, match=r"nope\.png"):
        image_bytes(tmp_path / "nope.png")
    with pytest.raises(ImageSourceError):
        image_bytes(tmp_path)  # a directory


def test_other_types_rejected():
    with pytest.raises(ClientError, match="int"):
        image_bytes(3)  # type: ignore[arg-type]
