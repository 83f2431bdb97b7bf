"""``deploy build`` removes the image a rebuild replaced, and only that one.

Every rebuild after a change leaves the previous image untagged; the CI machine's disk filled with them (0.7 GB a
Triton image). These build two throwaway images from ``scratch`` (no base, seconds) on the lane's daemon.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.local import docker

pytestmark = [pytest.mark.live]

IMAGE = f"tde-test/superseded:{os.getpid()}"


def build(context: Path, content: str, tag: str = IMAGE) -> str:
    (context / "Dockerfile").write_text("FROM scratch\nCOPY marker /marker\n")
    (context / "marker").write_text(content)
    subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], check=True, capture_output=True, text=True)
    made = docker.image_id(tag)
    assert made is not None
    return made


@pytest.fixture()
def context(tmp_path: Path) -> Iterator[Path]:
    try:
        docker.run(["info"])
    except Exception as exc:  # noqa: BLE001 - the lane's own rule: skip or fail by TDE_REQUIRE_DOCKER
        if os.environ.get("TDE_REQUIRE_DOCKER") == "1":
            pytest.fail(f"the live-stack lane needs Docker: {exc}")
        pytest.skip(f"no Docker Engine for the live-stack lane: {exc}")
    yield tmp_path
    docker.run(["image", "rm", "-f", IMAGE, f"{IMAGE}-kept"], check=False)


def test_a_rebuild_removes_the_image_it_replaced(context: Path) -> None:
    old = build(context, "one")
    new = build(context, "two")
    assert new != old and docker.image_id(old) == old  # docker left the old one behind, untagged
    docker.remove_superseded({IMAGE: old})
    assert docker.image_id(old) is None
    assert docker.image_id(IMAGE) == new


def test_an_old_image_still_tagged_elsewhere_or_unchanged_stays(context: Path) -> None:
    old = build(context, "one")
    docker.run(["tag", old, f"{IMAGE}-kept"])
    new = build(context, "two")
    docker.remove_superseded({IMAGE: old})
    assert docker.image_id(f"{IMAGE}-kept") == old
    docker.remove_superseded({IMAGE: new})  # the tag did not move: nothing to remove
    assert docker.image_id(IMAGE) == new
