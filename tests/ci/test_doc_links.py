"""Every relative link in the project's Markdown points at a file that exists, and every #anchor at a heading.

The README sends users to docs/ for the details: a moved or renamed section must not leave a dead link behind.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".venv", ".git", ".pytest-tmp", "runs", "node_modules", ".mypy-stubs"}
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def markdown_files() -> list[Path]:
    """The checkout's Markdown: what git tracks or would add (git-ignored scratch copies are not the project's)."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked release)
        return sorted(p for p in ROOT.rglob("*.md") if not SKIP_DIRS & set(p.relative_to(ROOT).parts))
    return sorted(p for p in (ROOT / line for line in listed) if p.is_file()
                  and not SKIP_DIRS & set(p.relative_to(ROOT).parts))


def anchor(heading: str) -> str:
    """GitHub's heading slug: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def test_anchor_follows_github() -> None:
    assert anchor("Overload: what sheds and what is limited") == "overload-what-sheds-and-what-is-limited"
    assert anchor("The `tensorrt` target") == "the-tensorrt-target"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    dead = []
    for target in LINK.findall(FENCE.sub("", path.read_text())):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            dead.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            dead.append(f"{target}: no heading #{fragment}")
    assert not dead, f"{path.relative_to(ROOT)}: {dead}"
