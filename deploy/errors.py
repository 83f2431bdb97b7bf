"""Exception tree of the deploy package: the CLI catches ``DeployError`` and prints one line."""


class DeployError(Exception):
    """A problem the user can fix; the message says how."""


class SettingsError(DeployError):
    """A setting or an override is unknown, malformed or violates a deployment rule."""


class RenderError(DeployError):
    """A template could not be rendered (missing variable, bad output directory...)."""


class CheckError(DeployError):
    """Rendered files are invalid, drifted from the templates, or break a hardening rule."""


class LocalStackError(DeployError):
    """The local stack (`python -m deploy up|down|bases --local`) cannot be made, started or stopped."""
