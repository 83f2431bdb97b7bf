"""perf_analyzer input data must carry exactly what tritonclient itself would put on the wire."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from tritonclient.utils import serialize_byte_tensor  # returns a 0-d object array holding the bytes

from loadtest.errors import CorpusError
from loadtest.images import synthetic_images
from loadtest.perf_inputs import bytes_tensor_content, input_data, write_input_data


@pytest.fixture(scope="module")
def images() -> list[bytes]:
    # Real JPEGs of two sizes plus bytes that look like a length prefix and contain NULs.
    return [*synthetic_images([(320, 240), (200, 300)], per_size=1), b"\x00\x01\x00\x00tail\x00"]


def test_each_entry_is_tritonclients_own_serialisation(images, tmp_path):
    path = write_input_data(images, tmp_path / "input.json")
    data = json.loads(path.read_text())["data"]
    assert len(data) == len(images)
    for entry, image in zip(data, images, strict=True):
        tensor = entry["IMAGE"]
        assert tensor["shape"] == [1]
        expected = serialize_byte_tensor(np.array([image], dtype=np.object_)).item()
        assert base64.b64decode(tensor["content"]["b64"]) == expected


def test_the_length_prefix_is_there(images):
    content = bytes_tensor_content([images[0]])
    assert int.from_bytes(content[:4], "little") == len(images[0])
    assert content[4:] == images[0]
    assert content[4:6] == b"\xff\xd8"  # a JPEG follows the prefix


def test_several_elements_match_a_multi_element_tensor(images):
    expected = serialize_byte_tensor(np.array(images, dtype=np.object_)).item()
    assert bytes_tensor_content(images) == expected


def test_custom_input_name_and_empty_corpus(images):
    assert set(input_data(images[:1], "frames")["data"][0]) == {"frames"}
    with pytest.raises(CorpusError):
        input_data([])
