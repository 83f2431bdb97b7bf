"""Schema validation of the rendered files: Compose Specification and Kubernetes OpenAPI schemas.

``jsonschema`` and ``kubernetes-validate`` are imported lazily: rendering does not need them.
Every function returns a list of human-readable problems; an empty list means valid.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from deploy.errors import CheckError

SCHEMA_DIR = Path(__file__).parent / "schemas"
# Objects without a schema in kubernetes-validate, and the schema file we check them against.
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-subset.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-subset.json",
}


@cache
def _schema(name: str) -> Any:
    return json.loads((SCHEMA_DIR / name).read_text(encoding="utf-8"))


def _jsonschema_errors(instance: Any, schema: Any, label: str) -> list[str]:
    try:
        import jsonschema
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise CheckError("schema checks need jsonschema: pip install jsonschema") from exc
    validator_cls = jsonschema.validators.validator_for(schema)
    validator = validator_cls(schema, format_checker=validator_cls.FORMAT_CHECKER)
    problems = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in error.absolute_path) or "<root>"
        problems.append(f"{label}: {where}: {error.message}")
    return problems


def compose_schema_errors(compose: dict[str, Any]) -> list[str]:
    """Validate an interpolated compose document against the Compose Specification schema."""
    return _jsonschema_errors(compose, _schema("compose-spec.json"), "docker-compose.yml")


def load_k8s_documents(k8s_dir: Path, files: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
    """(file name, object) for every YAML document in ``files`` under ``k8s_dir``."""
    import yaml

    docs: list[tuple[str, dict[str, Any]]] = []
    for name in files:
        try:
            loaded = list(yaml.safe_load_all((k8s_dir / name).read_text(encoding="utf-8")))
        except (OSError, yaml.YAMLError) as exc:
            raise CheckError(f"cannot read {k8s_dir / name}: {exc}") from exc
        docs.extend((name, doc) for doc in loaded if doc)
    return docs


def k8s_schema_errors(docs: Iterable[tuple[str, dict[str, Any]]], kubernetes_version: str) -> list[str]:
    """Strict OpenAPI validation of core objects; CRDs against our own schema; unknown kinds fail."""
    try:
        import kubernetes_validate
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise CheckError(
            "Kubernetes checks need kubernetes-validate: pip install kubernetes-validate"
        ) from exc
    problems = []
    for name, doc in docs:
        label = f"k8s/{name} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        crd = CRD_SCHEMAS.get((str(doc.get("apiVersion")), str(doc.get("kind"))))
        if crd is not None:
            problems.extend(_jsonschema_errors(doc, _schema(crd), label))
            continue
        try:
            kubernetes_validate.validate(doc, kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.path) or "<root>"
            problems.append(f"{label}: {where}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            problems.append(f"{label}: no schema: {exc.message}")
    return problems


def kustomization_errors(k8s_dir: Path, expected: Iterable[str]) -> list[str]:
    """kustomize is not installed here: check the resource list against the files themselves."""
    import yaml

    data = yaml.safe_load((k8s_dir / "kustomization.yaml").read_text(encoding="utf-8"))
    problems = []
    if data.get("apiVersion") != "kustomize.config.k8s.io/v1beta1" or data.get("kind") != "Kustomization":
        problems.append("k8s/kustomization.yaml: not a kustomize.config.k8s.io/v1beta1 Kustomization")
    resources = data.get("resources") or []
    missing = [r for r in resources if not (k8s_dir / r).is_file()]
    if missing:
        problems.append(f"k8s/kustomization.yaml lists missing files: {', '.join(missing)}")
    if sorted(resources) != sorted(expected):
        problems.append(f"k8s/kustomization.yaml resources {resources} != {sorted(expected)}")
    return problems
