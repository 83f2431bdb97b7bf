"""The version layout's rules: names, the index, the prune rule."""

from __future__ import annotations

import pytest

from generator.repository.versions import (
    RepositoryIndex,
    VersionError,
    VersionRecord,
    next_version,
    parse_version,
    to_prune,
    version_model,
    version_models,
    version_of_model,
)


def index(stable: int, versions: list[int], previous: int | None = None) -> RepositoryIndex:
    return RepositoryIndex("yolo", stable=stable, previous_stable=previous,
                           versions={v: VersionRecord(v, "stable" if v == stable else "candidate") for v in versions})


def test_names_of_a_version_and_back() -> None:
    assert version_models("yolo", 3) == ("yolo_v3", "yolo_v3_preprocess", "yolo_v3_detector", "yolo_v3_nms")
    assert [version_of_model("yolo", m) for m in version_models("yolo", 12)] == [12] * 4
    assert version_of_model("yolo", "yolo") is None
    assert version_of_model("yolo", "other_v2_nms") is None
    assert version_of_model("yolo_v1", version_model("yolo_v1", 2)) == 2  # a name that looks versioned itself


def test_prune_drops_the_oldest_but_never_stable_its_predecessor_or_the_new_one() -> None:
    assert to_prune(index(1, [1, 2, 3, 4]), keep=2, protect={4}) == [2, 3]
    assert to_prune(index(3, [1, 2, 3, 4], previous=1), keep=2, protect={4}) == [2]
    assert to_prune(index(1, [1, 2]), keep=3) == []
    # Keeping fewer than the protected versions keeps the protected ones anyway.
    assert to_prune(index(2, [1, 2, 3], previous=1), keep=1, protect={3}) == []


def test_index_round_trip_candidate_and_promotion() -> None:
    original = index(1, [1, 2, 3])
    assert RepositoryIndex.from_json(original.to_json()) == original
    assert original.candidate() == 3
    promoted = original.promoted(3, "yolo_v3/rollout-x.json")
    assert (promoted.stable, promoted.previous_stable) == (3, 1)
    assert promoted.versions[1].state == "retired" and promoted.versions[3].state == "stable"
    assert promoted.with_state(2, "rolled_back").versions[2].state == "rolled_back"
    with pytest.raises(VersionError, match="no candidate version"):
        index(3, [1, 2, 3]).candidate()


def test_bad_indexes_and_versions_are_refused_with_the_reason() -> None:
    with pytest.raises(VersionError, match="names version 5 stable but has no such version"):
        index(5, [1])
    with pytest.raises(VersionError, match="--keep-versions must be at least 1"):
        RepositoryIndex("yolo", stable=1, keep_versions=0, versions={1: VersionRecord(1)})
    with pytest.raises(VersionError, match="malformed"):
        RepositoryIndex.from_json({"name": "yolo"})
    assert parse_version("next") is None and parse_version("7") == 7
    for bad in ("0", "-1", "v2", ""):
        with pytest.raises(VersionError, match="positive integer or 'next'"):
            parse_version(bad)
    assert next_version([]) == 1 and next_version([1, 4]) == 5

