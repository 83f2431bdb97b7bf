"""Read ``.env`` and interpolate the compose file the way ``docker compose`` does, without Docker.

Only the forms the rendered files use are supported (``${VAR}``, ``${VAR:-default}``,
``${VAR-default}``, ``${VAR:?message}``, ``${VAR?message}``, ``$$``); anything else is an error so a
new form cannot slip past the checks uninterpreted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deploy.errors import CheckError

_VAR_RE = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def parse_env(text: str) -> dict[str, str]:
    """``KEY=value`` lines; comments and blank lines skipped; optional matching quotes stripped."""
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key.strip()):
            raise CheckError(f".env line {number} is not KEY=value: {line!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Substitute variables in ``text``; a required variable that is unset or empty raises."""

    def replace(match: re.Match[str]) -> str:
        escaped, name, op, arg, bare = match.groups()
        if escaped:
            return "$"
        if bare:
            raise CheckError(f"compose variable ${bare} must be written ${{{bare}}}")
        value = env.get(name)
        if op is None:
            return value if value is not None else ""
        empty_counts = op.startswith(":")
        missing = value is None or (empty_counts and value == "")
        if op.endswith("-"):
            return arg if missing else str(value)
        if missing:
            raise CheckError(f"required variable {name} is not set: {arg or 'no message'}")
        return str(value)

    return _VAR_RE.sub(replace, text)


def referenced_variables(text: str) -> set[str]:
    return {m.group(2) for m in _VAR_RE.finditer(text) if m.group(2)}


def load_compose(compose_text: str, env: Mapping[str, str]) -> dict[str, Any]:
    """Interpolate and parse; the result is what ``docker compose config`` would validate."""
    import yaml

    try:
        data = yaml.safe_load(interpolate(compose_text, env))
    except yaml.YAMLError as exc:
        raise CheckError(f"docker-compose.yml is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise CheckError("docker-compose.yml is not a mapping")
    return data


def load_compose_dir(deploy_dir: Path, extra_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Load ``deploy_dir``/docker-compose.yml with ``deploy_dir``/.env plus ``extra_env`` on top."""
    env = parse_env((deploy_dir / ".env").read_text(encoding="utf-8"))
    env.update(extra_env or {})
    return load_compose((deploy_dir / "docker-compose.yml").read_text(encoding="utf-8"), env)
