"""The alias of a versioned repository: the stable version's ensemble config under the plain name.

Clients call the plain name; ``python -m generator rollout`` moves it from one version to the next. Triton keeps one
``config.pbtxt`` per model, so the alias is a model of its own (version folder 1) whose steps stay pinned to the
version it was made from (generator/repository/versions.py describes the layout). The index records the files'
hashes and that version, so ``check`` verifies the alias without rendering it again.
"""

from __future__ import annotations

from google.protobuf import text_format

from generator.builder.stages.config.render import parse_config
from generator.repository.versions import ALIAS_VERSION


def alias_files(name: str, ensemble_config: str) -> dict[str, bytes]:
    """The alias ensemble ``name`` made from a version's ensemble config: its config and version folder 1.

    Parsed and written by Triton's own proto, so the alias is the same model the version was checked as.
    """
    config = parse_config("alias", ensemble_config)
    pinned = {step.model_version for step in config.ensemble_scheduling.step}
    config.name = name
    config.ClearField("version_policy")
    header = (f"# {name}: the stable version's ensemble under the plain name (generator rollout moves it; "
              f"steps pinned to version {', '.join(map(str, sorted(pinned)))}).\n")
    text = header + text_format.MessageToString(config)
    parse_config(name, text)
    return {f"{name}/config.pbtxt": text.encode(), f"{name}/{ALIAS_VERSION}/.keep": b""}
