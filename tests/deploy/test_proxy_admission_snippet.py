"""deploy/proxy_admission.py on its own: the snippet nginx includes, written or removed from a manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy import proxy_admission
from deploy.render.files import render_all
from deploy.settings import Settings


def _manifest(directory: Path, admission: dict[str, object]) -> Path:
    directory.mkdir(parents=True)
    path = directory / "manifest.json"
    path.write_text(json.dumps({"admission": admission}))
    return path


def test_the_snippet_is_the_manifests_limit_and_a_manifest_without_one_removes_it(tmp_path: Path) -> None:
    volume = tmp_path / "models"
    limit = proxy_admission.write(volume.parent, _manifest(volume / "yolo_v1", {"max_in_flight": 24}))
    written = tmp_path / proxy_admission.SNIPPET
    assert limit == 24 and written.read_text().endswith("limit_conn admission 24;\n")
    assert written.stat().st_mode & 0o777 == 0o644  # nginx runs as another user
    assert proxy_admission.write(tmp_path, _manifest(volume / "yolo_v0", {"max_queue_ms": 250})) is None
    assert not written.exists()  # an older build: no limit rather than a stale one


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_in_flight must be at least 1, got 0"):
        proxy_admission.snippet(0, Path("manifest.json"))


def test_both_public_servers_include_the_limit_and_answer_a_refusal_in_their_protocol() -> None:
    conf = render_all(Settings())["proxy/nginx.conf"]
    include = f"include /models/{proxy_admission.INCLUDE_PATTERN};"
    assert conf.count(include) == 2
    assert "limit_conn_status 429;" in conf and "zone=admission:1m" in conf
    assert f"add_header Retry-After {proxy_admission.RETRY_AFTER_S} always;" in conf
    assert "add_header grpc-status 8 always;" in conf
    # Only inference is counted: both protocols' paths, nothing else.
    assert '"~^/v2/models/[^/]+(/versions/[^/]+)?/infer$" "infer";' in conf
    assert '"/inference.GRPCInferenceService/ModelInfer" "infer";' in conf
