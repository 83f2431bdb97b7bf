"""The three ends of a rollout and their exit codes, one table for every caller (``generator rollout``,
``deploy update``, the site install, the Kubernetes rollout Job): promoted, rolled back because the candidate is
worse, or undecided for lack of evidence (the stable version serves; the candidate stays a candidate)."""

from __future__ import annotations

from collections.abc import Mapping

PROMOTED = 0
ROLLED_BACK = 3  # by its checks, its watch, an interruption, or by hand
UNDECIDED = 4  # not enough traffic (or probes) in the window for a verdict, even observed on to its limit
EXIT_CODES = {"promote": PROMOTED, "undecided": UNDECIDED}
WORDS = {PROMOTED: "promoted", ROLLED_BACK: "rolled back", UNDECIDED: "undecided (not enough traffic)"}


def exit_code(record: Mapping[str, object]) -> int:
    """A decision record's exit code: 0 promoted (and kept), 4 undecided, 3 any rollback."""
    return EXIT_CODES.get(str(record.get("action")), ROLLED_BACK)
