"""Running ``fedrank`` in-process with click's CliRunner, and checking how it fails."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from fedrank.cli import main


def argv(command: str, *paths: Path) -> list[str]:
    """``command`` split on whitespace, then the paths (which may contain spaces)."""
    return [*command.split(), *map(str, paths)]


def run(args: list[str]) -> Result:
    return CliRunner().invoke(main, args, catch_exceptions=True)


def ok(args: list[str]) -> Result:
    result = run(args)
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.exception is None
    return result


def assert_clean_failure(result: Result, message: str) -> None:
    """Non-zero exit, a one-line ``Error: ...`` message, no Python traceback."""
    assert result.exit_code != 0
    # click exits through SystemExit; any other exception escaped the CLI's handling.
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert "Error:" in result.output
    assert message in result.output
