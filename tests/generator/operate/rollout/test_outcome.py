"""The three ends of a rollout have three exit codes, whatever calls it."""

from __future__ import annotations

import pytest

from generator.operate.rollout.outcome import exit_code


@pytest.mark.parametrize(("action", "code"), [
    ("promote", 0), ("undecided", 4),
    ("rollback", 3), ("rollback_after_promotion", 3), ("manual_rollback", 3),
])
def test_each_outcome_has_its_own_exit_code(action: str, code: int) -> None:
    assert exit_code({"action": action}) == code


def test_the_cli_refuses_a_max_window_shorter_than_the_window() -> None:
    import argparse

    from generator.cli import rollout as cli
    from generator.errors import GeneratorError

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--model-repository", "r", "--window-s", "12", "--max-window-s", "6"])
    with pytest.raises(GeneratorError, match="--max-window-s 6 is shorter than --window-s 12"):
        cli.settings_from_args(args)
