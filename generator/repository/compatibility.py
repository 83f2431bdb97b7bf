"""Will a plan built with one TensorRT load with another? TensorRT's engine compatibility rules as code.

From TensorRT's documentation ("Engine Compatibility", 11.1; "Version Compatibility", 10.x; support
matrix, 11.4):
- By default an engine loads only with the TensorRT version that built it.
- Built with ``BuilderFlag.VERSION_COMPATIBLE`` (supported from 8.6 on, build and runtime), it also loads
  with later releases of the same major version, and across majors only where NVIDIA says so:
  8 -> 9 and 8 -> 10 (10.x docs), 10 -> 11 (11.x docs). Never with an older runtime.
Versions are compared as major.minor.patch: that is what ``getInferLibVersion`` reports.
"""

from __future__ import annotations

from dataclasses import dataclass

# (plan major, runtime major) pairs that run version-compatible plans across a major boundary.
CROSS_MAJOR = frozenset({(8, 9), (8, 10), (10, 11)})
VERSION_COMPATIBLE_SINCE = (8, 6)


@dataclass(frozen=True)
class Verdict:
    loads: bool
    reason: str  # why not, or why yes; one clause, for messages


def parse_version(version: str) -> tuple[int, ...]:
    """Leading numeric components of ``10.3.0.26`` or ``10.3.0.post1`` -> (10, 3, 0, 26)."""
    parts: list[int] = []
    for piece in version.split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def short(version: str) -> str:
    """major.minor.patch of a version string, as printed in messages."""
    parts = parse_version(version)
    return ".".join(str(p) for p in parts[:3]) if parts else version


def plan_loads(built_with: str, runtime: str, version_compatible: bool) -> Verdict:
    """Whether a plan built with TensorRT ``built_with`` deserialises with TensorRT ``runtime``."""
    built, here = parse_version(built_with)[:3], parse_version(runtime)[:3]
    if len(built) < 2 or len(here) < 2:
        return Verdict(False, f"cannot compare TensorRT versions {built_with!r} and {runtime!r}")
    if built == here:
        return Verdict(True, f"same TensorRT {short(runtime)}")
    if not version_compatible:
        return Verdict(False, f"a plan loads only with the TensorRT that built it ({short(built_with)}), "
                              f"not {short(runtime)}")
    if built[:2] < VERSION_COMPATIBLE_SINCE:
        return Verdict(False, f"version compatibility needs a plan built with TensorRT >= 8.6, not {short(built_with)}")
    if here < built:
        return Verdict(False, f"a version-compatible plan from TensorRT {short(built_with)} does not load with the "
                              f"older {short(runtime)}")
    if here[0] == built[0] or (built[0], here[0]) in CROSS_MAJOR:
        return Verdict(True, f"version-compatible plan from {short(built_with)} runs on {short(runtime)}")
    return Verdict(False, f"TensorRT {here[0]} does not run version-compatible plans from TensorRT {built[0]}")
