"""The CPU Triton image's first stage copies only what ``generator.server.prepare`` imports.

That stage makes the stub environment (minutes under arm64 emulation) and is keyed on the files it copies; a
module the prepare step starts to import without being copied would fail the image build. These check the list
(PREPARE_SOURCES) against the real import closure and against the rendered Dockerfile.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from generator.server.prepare import PREPARE_SOURCES

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "docker" / "triton-cpu.Dockerfile"


def covered(path: str) -> bool:
    return any(path == source or path.startswith(source + "/") for source in PREPARE_SOURCES)


def test_every_module_the_prepare_step_imports_is_copied() -> None:
    probe = ("import json, sys, generator.server.prepare; "
             "print(json.dumps(sorted(m.__file__ for n, m in sys.modules.items() "
             "if n.split('.')[0] == 'generator' and getattr(m, '__file__', None))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    files = [Path(f).resolve().relative_to(ROOT).as_posix() for f in json.loads(done.stdout)]
    assert "generator/server/prepare.py" in files
    assert [f for f in files if not covered(f)] == []
    assert all((ROOT / source).exists() for source in PREPARE_SOURCES)


def test_the_images_first_stage_copies_exactly_the_prepare_sources() -> None:
    first_stage = DOCKERFILE.read_text().split("\nFROM ", 2)[1]
    copied = [word for line in first_stage.splitlines() if line.startswith("COPY ")
              for word in line.split()[1:-1] if not word.startswith("--")]
    assert sorted(copied) == sorted(PREPARE_SOURCES)
    assert "ARG STUB_ENV=cpu" in first_stage  # the default; --build-arg STUB_ENV=openvino for --cpu-engine openvino
    assert '-m generator.server.prepare --stub-env "${STUB_ENV}"' in first_stage
