"""Exception tree of the load-test package: the CLI catches ``LoadTestError`` and prints one line."""


class LoadTestError(Exception):
    """A problem the user can fix; the message says how."""


class CorpusError(LoadTestError):
    """The image corpus could not be built (empty folder, unreadable files, bad size spec)."""


class MetricsError(LoadTestError):
    """Triton's metrics endpoint could not be scraped or parsed."""


class ToolMissingError(LoadTestError):
    """An external tool (Locust, perf_analyzer) or one of its libraries is not available."""


class RunError(LoadTestError):
    """A load run itself failed (Locust crashed, produced no results, the server went away)."""


class InferenceFailed(LoadTestError):
    """The server answered a load-test request with an error or an incomplete result."""
