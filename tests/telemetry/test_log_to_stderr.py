"""``log_to_stderr()`` shows the package's log lines on stderr, once, without the root
logger."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from mcp_cancellation.logs import log_to_stderr


@pytest.fixture
def package_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("mcp_cancellation")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield logger
    logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]


def test_lines_reach_stderr_once_and_not_the_root_logger(
    package_logger: logging.Logger,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = log_to_stderr()
    assert log_to_stderr() is first  # a second call adds no handler
    assert package_logger.handlers.count(first) == 1
    with caplog.at_level(logging.DEBUG):  # the root logger's capture sees nothing
        logging.getLogger("mcp_cancellation.asgi").info("cancelled request 7")
        logging.getLogger("mcp_cancellation.asgi").debug("not at INFO")
    assert capsys.readouterr().err == "INFO mcp_cancellation.asgi: cancelled request 7\n"
    assert caplog.records == []
