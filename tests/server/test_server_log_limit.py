"""The rate limit on repeated error logs (issue 15, F11: a full disk logged 2,566
tracebacks in 15 s)."""

from __future__ import annotations

import logging

import pytest

from fedrank.server.log_limit import RateLimit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _logger(name: str, clock: Clock) -> tuple[logging.Logger, list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger(name)
    logger.propagate = False
    logger.handlers = [Keep()]
    logger.filters = [RateLimit(interval=10.0, clock=clock)]
    logger.setLevel(logging.DEBUG)
    return logger, records


def test_a_repeated_failure_is_logged_once_per_interval_with_a_count() -> None:
    clock = Clock()
    logger, records = _logger("test.ratelimit.repeat", clock)
    for k in range(2566):
        clock.now = k * 15 / 2566  # 2,566 failures in 15 s
        try:
            raise OSError("database or disk is full")
        except OSError:
            logger.exception("storing %d updates failed", k)
    assert len(records) == 2  # at 0 s and at 10 s
    assert records[0].exc_info is not None  # the first keeps its traceback
    assert "more like this" in records[1].getMessage()
    held = int(records[1].getMessage().split("[")[1].split()[0])
    assert held == sum(1 for k in range(2566) if 0 < k * 15 / 2566 < 10)


def test_different_failures_and_info_records_are_not_held_back() -> None:
    clock = Clock()
    logger, records = _logger("test.ratelimit.kinds", clock)
    for _ in range(3):
        logger.error("closing the iteration failed")
        logger.error("storing updates failed")
        logger.info("closed iteration %d", 1)
        try:
            raise ValueError("x")
        except ValueError:
            logger.exception("closing the iteration failed")  # another exception type
    messages = [r.getMessage() for r in records]
    assert messages.count("closing the iteration failed") == 2  # plain + with ValueError
    assert messages.count("storing updates failed") == 1
    assert messages.count("closed iteration 1") == 3


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval"):
        RateLimit(interval=0)


def test_uvicorn_error_log_of_the_server_is_rate_limited() -> None:
    """Issue 51, finding 8: 2,000 failed requests wrote 2,000 tracebacks through uvicorn's
    error logger; with the server's app loaded, a flood of one failure logs once."""
    import fedrank.server.app  # noqa: F401  (the app limits uvicorn's error logger)

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("uvicorn.error")
    keep = Keep()
    logger.addHandler(keep)
    try:
        for _ in range(2000):
            try:
                raise OverflowError("Python int too large to convert to C long")
            except OverflowError as exc:
                logger.error("Exception in ASGI application (test)\n", exc_info=exc)
    finally:
        logger.removeHandler(keep)
    assert len(records) == 1 and records[0].exc_info is not None
