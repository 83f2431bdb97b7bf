"""One module per ``python -m loadtest`` subcommand: ``add_arguments(parser)`` and ``run(args) -> int``."""
