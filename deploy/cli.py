"""``python -m deploy``: argv in, library calls out, exit code back.

The files: ``render`` (write them from deploy/settings.py), ``check`` (schemas, policy, drift), ``show`` (the
settings and the sizes derived from them). The CPU stack on this machine (``--local``, deploy/local/): ``up``,
``build``, ``down``, ``bases`` (base images where no registry answers); a model version in the running stack:
``update``, ``rollback``; a site with no network: ``archive``, ``install``. Every subcommand is in ``--help``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from deploy.errors import DeployError
from deploy.settings import Settings, load_settings
from generator.extras import install_hint


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m deploy",
        description="Render and check the deployment files (render, check, show); run the CPU stack on this machine "
                    "(up, build, down, bases --local), update or roll back its model (update, rollback --local) and "
                    "carry it to a site with no network (archive, install --local)."
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, help="YAML file of setting: value overrides")
    common.add_argument(
        "--set",
        dest="assignments",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting (repeatable; wins over --config)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    render = sub.add_parser("render", parents=[common], help="write .env, compose, k8s and monitoring files")
    render.add_argument(
        "--out", type=Path, default=Path(__file__).parent, help="output directory (default: deploy/)"
    )
    check = sub.add_parser(
        "check", parents=[common], help="validate a rendered tree (schemas, policy, drift)"
    )
    check.add_argument(
        "--dir", type=Path, default=Path(__file__).parent, help="rendered directory (default: deploy/)"
    )
    check.add_argument("--no-drift", action="store_true", help="skip the comparison with a fresh render")
    sub.add_parser("show", parents=[common], help="print the settings and the derived sizes")
    _local_parsers(sub, common)
    return parser


def _local_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                   common: argparse.ArgumentParser) -> None:
    """up, down and bases: the stack on this machine (deploy/local/)."""
    local = argparse.ArgumentParser(add_help=False)
    local.add_argument("--local", action="store_true", required=True,
                       help="this machine (the only mode: on a GPU host or a cluster see deploy/README.md)")
    local.add_argument("--project", default="yolo-triton-local", help="compose project name (default: %(default)s)")
    images = argparse.ArgumentParser(add_help=False)
    images.add_argument("--no-pull", dest="pull", action="store_false",
                        help="never ask a registry for the pinned base images (make local ones)")
    images.add_argument("--build-network", default="host",
                        help="network of the image builds' downloads (default: %(default)s)")
    images.add_argument("--build-ca-bundle", type=Path,
                        help="CA bundle for pip in the image builds (default: $BUILD_CA_BUNDLE or the system bundle)")
    images.add_argument("--platform", help="build (and run) the stack for this architecture, linux/amd64 or "
                                           "linux/arm64 (default: the Docker daemon's; another one runs emulated)")
    control = argparse.ArgumentParser(add_help=False)
    control.add_argument("--control-images", type=Path,
                         help="your images for the rollout's agreement check (default: the demo's synthetic scenes)")
    control.add_argument("--control-labels", type=Path, help="their labels, a COCO JSON (optional)")
    up = sub.add_parser("up", parents=[common, local, images],
                        help="build and start the CPU stack with monitoring here; print its endpoints as JSON")
    up.add_argument("--publish", choices=("settings", "auto"), default="settings",
                    help="host ports: the settings' (8443, 8444, 9090) or free ones the engine picks")
    up.add_argument("--tls-dir", type=Path,
                    help="your tls.crt, tls.key and ca.crt (default: a throwaway CA and certificate)")
    sub.add_parser("build", parents=[common, local, images],
                   help="only build the CPU stack's and the load test's images (bases made where needed)")
    update = sub.add_parser("update", parents=[common, local, control],
                            help="add a model version to the running stack and roll it out (promote or roll back)")
    update.add_argument("--onnx", type=Path, help="the new detector (default: the one baked into the builder image)")
    update.add_argument("--build-flags", help='extra generator build flags, one string: "--conf-threshold 0.5"')
    update.add_argument("--rollout-flags", help='extra generator rollout flags, one string: "--window-s 300"')
    sub.add_parser("rollback", parents=[common, local],
                   help="stop the running stack's canary, or move it back to the previous stable version")
    sub.add_parser("down", parents=[common, local], help="remove the local stack's containers, networks, volumes")
    bases = sub.add_parser("bases", parents=[common, local],
                           help="make the base images locally where no registry answers (root, debootstrap)")
    bases.add_argument("--rebuild", action="store_true", help="make the local ones again even if present")
    bases.add_argument("--no-pull", dest="pull", action="store_false", help="never ask a registry")
    bases.add_argument("--build-network", default="host", help="network of the stand-ins' apt downloads")
    bases.add_argument("--platform", help="the architecture to make them for (default: the Docker daemon's)")
    _site_parsers(sub, common, local, images, control)


def _site_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser,
                  local: argparse.ArgumentParser, images: argparse.ArgumentParser,
                  control: argparse.ArgumentParser) -> None:
    """archive and install: the CPU stack carried to a site with no network (deploy/local/site*.py)."""
    archive = sub.add_parser("archive", parents=[common, local, images],
                             help="write one archive of the CPU stack's images, repository and rendered files "
                                  "for a site with no network")
    archive.add_argument("--output", type=Path, default=Path(), help="folder the archive is written to")
    archive.add_argument("--tag", help="tag of the images in the archive (default: site- and a digest of them)")
    archive.add_argument("--split", metavar="SIZE",
                         help="cut the archive into numbered parts of at most SIZE bytes (500M, 2G)")
    install = sub.add_parser("install", parents=[common, local, control],
                             help="verify a site archive, load its images and repository; then `up` builds nothing")
    install.add_argument("archive", type=Path, help="the archive, or any one of its parts")
    install.add_argument("--rollout-flags", help="on a running site, extra generator rollout flags for the archive's "
                                                 'model, one string: "--window-s 300"')


def _show(settings: Settings) -> None:
    from deploy import sizing

    for key, value in sorted(vars(settings).items()):
        print(f"{key} = {value!r}")
    shm = sizing.shm_breakdown(settings)
    print(f"composing_models = {', '.join(settings.composing_models)}")
    terms = " + ".join(f"{name} {size}" for name, size in shm.tensors.items())
    print(
        f"shm: per image {shm.per_item} B ({terms}) x batch {shm.max_batch} "
        f"x {shm.python_model_instances} Python instances x 2 + 64 MiB -> {shm.total_mib} MiB"
    )
    print(f"max_request_bytes (proxy body limit, --http-max-input-size) = {sizing.max_request_bytes(settings)} B")


def _local(args: argparse.Namespace, settings: Settings) -> int:
    import json
    import logging

    from deploy.local import bases, stack

    logging.basicConfig(level=logging.INFO, format="deploy: %(message)s", stream=sys.stderr)
    if args.command == "bases":
        target = stack.LocalStack(platform=args.platform).target()
        chosen = bases.resolve_bases(settings, target, pull=args.pull, build_network=args.build_network,
                                     force=args.rebuild)
        print(json.dumps(chosen))
        return 0
    if args.command in ("archive", "install"):
        done = _site(args, settings)
        print(json.dumps(done))
        rollout = done.get("rollout")
        # As deploy update: 3 rolled back, 4 undecided (generator/operate/rollout/outcome.py).
        return int(rollout["exit"]) if isinstance(rollout, dict) and rollout.get("exit") in (3, 4) else 0
    if args.command == "down":
        stack.down(stack.LocalStack(project=args.project))
        print(f"removed the local stack {args.project}", file=sys.stderr)
        return 0
    options = stack.LocalStack(project=args.project, publish=getattr(args, "publish", "settings"),
                               tls_dir=getattr(args, "tls_dir", None), pull=args.pull,
                               build_network=args.build_network, build_ca_bundle=args.build_ca_bundle,
                               platform=args.platform)
    if args.command == "build":
        print(json.dumps(stack.build(settings, options, loadtest=True)))
        return 0
    print(json.dumps(stack.up(settings, options)), flush=True)
    return 0


def _update(args: argparse.Namespace, settings: Settings) -> int:
    """update/rollback --local: the decision record on stdout; exit 0 promoted, 3 rolled back, 4 undecided."""
    import json
    import logging

    from deploy.local import update
    from deploy.local.stack import LocalStack

    logging.basicConfig(level=logging.INFO, format="deploy: %(message)s", stream=sys.stderr)
    stack = LocalStack(project=args.project)
    if args.command == "rollback":
        code, record = update.run_rollout(stack, update.Update(), "--rollback")
    else:
        change = update.Update(onnx=args.onnx, build_flags=update.parse_flags(args.build_flags),
                               rollout_flags=update.parse_flags(args.rollout_flags),
                               control_images=args.control_images, control_labels=args.control_labels)
        code, record = update.update(settings, stack, change)
    print(json.dumps(record, indent=2))
    return code


def _site(args: argparse.Namespace, settings: Settings) -> dict[str, object]:
    from deploy.local import site_archive, site_install
    from deploy.local.stack import LocalStack
    from generator.archive.parts import parse_size
    from generator.errors import ServerError

    try:
        if args.command == "install":
            from deploy.local.update import Update, parse_flags

            change = Update(rollout_flags=parse_flags(args.rollout_flags), control_images=args.control_images,
                            control_labels=args.control_labels)
            return site_install.install_site(args.archive, args.project, change)
        stack = LocalStack(project=args.project, pull=args.pull, build_network=args.build_network,
                           build_ca_bundle=args.build_ca_bundle, platform=args.platform)
        split = parse_size(args.split) if args.split else None
        paths, listing = site_archive.make_site_archive(settings, stack, args.output, tag=args.tag,
                                                        split_bytes=split)
    except ServerError as exc:  # the shared archive code's parts and sizes
        raise DeployError(str(exc)) from None
    return {"archive": [str(p) for p in paths], "bytes": sum(p.stat().st_size for p in paths),
            "sha256": str(listing)}


def _site_settings(args: argparse.Namespace) -> Path | None:
    """``up`` and ``update`` of a site installed from an archive read the archive's settings unless --config says
    otherwise (the builder's flags, so its record of what it built finds the site's version)."""
    if args.command not in ("up", "update") or args.config is not None:
        given: Path | None = args.config
        return given
    from deploy.local.site import SETTINGS_FILE, site_dir

    recorded = site_dir(args.project) / SETTINGS_FILE
    return recorded if recorded.is_file() else None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load_settings(_site_settings(args), args.assignments)
        if args.command == "render":
            from deploy.render.files import render_all, write_rendered

            written = write_rendered(render_all(settings), args.out)
            print(f"rendered {len(written)} files into {args.out}")
        elif args.command == "check":
            from deploy.checks import run_checks

            problems = run_checks(args.dir, settings, check_drift=not args.no_drift)
            for problem in problems:
                print(problem, file=sys.stderr)
            if problems:
                print(f"deploy check: {len(problems)} problem(s)", file=sys.stderr)
                return 1
            print("deploy check: rendered files are current, valid and hardened")
        elif args.command in ("update", "rollback"):
            return _update(args, settings)
        elif args.command in ("up", "down", "bases", "build", "archive", "install"):
            return _local(args, settings)
        else:
            _show(settings)
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:  # the base install: templates, YAML and schemas come with the deploy extra
        hint = install_hint(exc, "deploy", f"python -m deploy {args.command}")
        if hint is None:
            raise
        print(f"error: {hint}", file=sys.stderr)
        return 1
    return 0
