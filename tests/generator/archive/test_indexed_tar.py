"""The index-first verified tar both offline archives share: written whole then split, read back from any part,
and the kind's own index check run before a member is read."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from generator.archive.indexed_tar import IndexedTar, file_entries, members_of, publish
from generator.archive.parts import check_checksums, checksum_file, split_file
from generator.errors import ServerError


class Refused(Exception):
    pass


KIND = IndexedTar("index.json", 7, re.compile(r"^data/[a-z./]+$").match, "the test",
                  lambda name, problem: Refused(f"{name}: {problem}"))


def payload(root: Path) -> dict[str, Path]:
    for name, data in {"data/a.bin": b"a" * 5000, "data/sub/b.bin": b"b" * 3000}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return members_of(root)


def test_published_whole_or_in_parts_and_read_back_from_any_part(tmp_path: Path) -> None:
    members = payload(tmp_path / "payload")
    assert list(members) == ["data/a.bin", "data/sub/b.bin"]
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x.tar.001-of-009").write_bytes(b"an older archive's part")
    index = {"format": 7, "files": file_entries(members)}
    parts = publish(tmp_path / "x.tar", tmp_path / "out", "index.json", index, members, split_bytes=4096)
    assert len(parts) > 2 and sorted((tmp_path / "out").iterdir()) == parts  # the older part is gone
    read = KIND.read_verified(parts[1], tmp_path / "read")
    assert read == index and (tmp_path / "read/data/sub/b.bin").read_bytes() == b"b" * 3000
    (whole,) = publish(tmp_path / "y.tar", tmp_path / "out", "index.json", index, members)
    seen: list[int] = []
    KIND.read_verified(whole, tmp_path / "again", lambda found: seen.append(found["format"]))
    assert seen == [7]


def test_the_kinds_index_check_refuses_before_any_member_is_read(tmp_path: Path) -> None:
    members = payload(tmp_path / "payload")
    (tmp_path / "out").mkdir()
    (whole,) = publish(tmp_path / "z.tar", tmp_path / "out", "index.json",
                       {"format": 7, "files": file_entries(members)}, members)

    def refuse(index: dict[str, object]) -> None:
        raise Refused("not for this machine")

    with pytest.raises(Refused, match="not for this machine"):
        KIND.read_verified(whole, tmp_path / "work", refuse)
    assert not (tmp_path / "work").exists()
    with pytest.raises(Refused, match=r"z\.tar: its index\.json is not format 8"):
        IndexedTar("index.json", 8, KIND.member_ok, "the test", KIND.refuse).read_verified(whole, tmp_path / "w2")


def test_the_parts_sha256_listing_names_the_part_that_differs(tmp_path: Path) -> None:
    whole = tmp_path / "a.tar"
    whole.write_bytes(bytes(range(256)) * 40)
    parts = split_file(whole, 4096)
    assert check_checksums(parts) is None  # no listing: nothing to compare with
    listing = checksum_file(parts)
    assert listing.name == "a.tar.sha256" and len(listing.read_text().splitlines()) == 3
    assert check_checksums(parts) == listing
    data = bytearray(parts[1].read_bytes())
    data[100] ^= 1
    parts[1].write_bytes(bytes(data))
    with pytest.raises(ServerError, match=r"part a\.tar\.002-of-003 has sha256 [0-9a-f]{64}, a\.tar\.sha256 says"):
        check_checksums(parts)
    one = tmp_path / "b.tar"
    one.write_bytes(b"b")
    assert checksum_file([one]).read_text() == f"{hashlib.sha256(b'b').hexdigest()}  b.tar\n"
    assert check_checksums([one]) == tmp_path / "b.tar.sha256"
