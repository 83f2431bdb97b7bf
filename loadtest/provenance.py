"""What a result was measured on, recorded without machine paths: results are shared and committed.

The served model is named by its file name and sha256; build options keep only the last component of a
path (calibration or validation folders).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any


def triton_version(http_url: str) -> str | None:
    """The server's version from its HTTP metadata endpoint; None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{http_url}/v2", timeout=5) as response:
            return str(json.load(response).get("version"))
    except (OSError, ValueError):
        return None


def repository_record(repository: Path | None) -> dict[str, Any] | None:
    """What was served, without machine paths: the manifest's name, target, precision and model digests (a
    versioned repository: its stable version's), and whether the files still match it (``generator check``'s
    file comparison: numbers from an edited repository do not describe the recorded build)."""
    if repository is None:
        return None
    from generator.errors import GeneratorError
    from generator.repository.check import check_repository
    from generator.repository.versions import served_manifest

    record: dict[str, Any] = {"directory": repository.name}
    try:
        manifest = served_manifest(repository)
        matches = check_repository(repository, files_only=True).ok
    except GeneratorError as exc:
        return {**record, "manifest": None, "why": str(exc).replace(str(repository), repository.name)}
    source = Path(manifest.source_onnx_path).name if manifest.source_onnx_path else None
    options = _names_only(dict(manifest.options))
    return {**record, "name": manifest.name, "target": manifest.target, "precision": manifest.precision,
            "source_onnx": {"name": source, "sha256": manifest.onnx_sha256}, "options": options,
            "matches_manifest": matches}


def _names_only(options: dict[str, Any]) -> dict[str, Any]:
    """Build options with path values (calibration or gate images) reduced to their last component."""
    return {key: Path(value).name if isinstance(value, str) and Path(value).is_absolute() else value
            for key, value in options.items()}
