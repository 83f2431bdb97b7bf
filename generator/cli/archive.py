"""``archive``: on a connected machine, write what the embedded server needs for a machine with no package index.

One archive (or numbered parts of it) with the Triton 2.51 wheel, the locked stub environment's wheels for the
target's Python and architecture, and optionally this project's runtime wheels; ``python -m generator serve
--prepare --from-archive FILE`` installs it there, verifying every hash first (generator/server/offline.py).
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

from generator.archive.parts import parse_size
from generator.errors import ServerError
from generator.server.environments import STUB_ENVIRONMENTS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stub-env", default="cpu",
                        help=f"the stub environments the target serves with ({', '.join(STUB_ENVIRONMENTS)}, or "
                             "both comma-separated): gpu for --device gpu or --preprocess-device gpu repositories, "
                             "cpu for the others")
    parser.add_argument("--python", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                        help="the target's Python (X.Y): the one that will run python -m generator there")
    parser.add_argument("--machine", default=platform.machine(), help="the target's architecture (uname -m)")
    parser.add_argument("--output", type=Path, default=Path(), help="folder the archive is written to")
    parser.add_argument("--split", metavar="SIZE", default=None,
                        help="cut the archive into numbered parts of at most SIZE bytes (55M, 800K, 2G) for "
                             "transports that cap a transfer; the installer takes any part and finds the others")
    parser.add_argument("--runtime", metavar="EXTRAS", default=None,
                        help="also carry this project's wheel and the dependencies of these extras "
                             "(e.g. client,loadtest) for the target, for python -m generator/loadtest/clients there")
    parser.add_argument("--schema", action="store_true",
                        help="also carry the perf-analyzer environment (Triton 2.51's config schema, which "
                             "python -m generator build needs, and perf_analyzer), so builds work there too")
    parser.add_argument("--present", type=Path, default=None,
                        help="with --runtime: a file of packages the target already has (name or name==version a "
                             "line); they are left out and, where a version is given, the rest is resolved against it")


def _present(path: Path | None) -> tuple[str, ...]:
    if path is None:
        return ()
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ServerError(f"cannot read --present {path}: {exc.strerror or exc}") from None
    return tuple(line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip())


def run(args: argparse.Namespace) -> int:
    from generator.server.offline import RuntimeSpec, Target, make_archive

    target = Target(args.python, args.machine, args.stub_env)
    split = parse_size(args.split) if args.split else None
    runtime = None
    if args.runtime is not None:
        extras = tuple(e.strip() for e in args.runtime.split(",") if e.strip())
        runtime = RuntimeSpec(extras, _present(args.present))
    elif args.present is not None:
        raise ServerError("--present applies to --runtime (the project's runtime wheels)")
    paths = make_archive(target, args.output, runtime, split, schema=args.schema)
    total = sum(p.stat().st_size for p in paths)
    what = f"{len(paths)} parts" if len(paths) > 1 else "one file"
    carried = [f"the {target.names} environment{'s' if len(target.stubs) > 1 else ''}", *(["the perf-analyzer environment"] if args.schema else []),
               *(["the project runtime"] if runtime else [])]
    print(f"Wrote {target.stem}.tar ({total / 2**20:.1f} MiB, {what}) for Python {target.python} on "
          f"{target.machine}: {', '.join(carried)}:")
    for path in paths:
        print(f"  {path}  {path.stat().st_size} bytes")
    print(f"Install there, with no index: python -m generator serve --prepare --from-archive {paths[0].name}")
    return 0
