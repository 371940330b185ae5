"""``log_to_stderr()`` shows the package's log lines on stderr, once, without the root
logger; ``plain_beside_rich()`` does the same under a root that only Rich serves, and
leaves a logging configuration alone."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from mcp_cancellation.logs import log_to_stderr, plain_beside_rich


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


@pytest.fixture
def root_handlers() -> Iterator[list[logging.Handler]]:
    root = logging.getLogger()
    saved = list(root.handlers)
    yield root.handlers
    root.handlers[:] = saved


def test_under_a_rich_root_the_package_logs_plain_lines_at_the_roots_level(
    package_logger: logging.Logger,
    root_handlers: list[logging.Handler],
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rich.logging import RichHandler

    root_handlers[:] = [RichHandler()]  # as MCPServer's configure_logging() leaves it
    package_logger.handlers[:], package_logger.propagate = [], True
    package_logger.setLevel(logging.NOTSET)  # (an earlier test may have set one)
    assert plain_beside_rich()
    assert not plain_beside_rich()  # once
    assert package_logger.level == logging.NOTSET  # the root's level still decides
    logging.getLogger("mcp_cancellation.asgi").warning("cancelled request %r", "x" * 200)
    assert (
        capsys.readouterr().err
        == f"WARNING mcp_cancellation.asgi: cancelled request '{'x' * 200}'\n"
    )


@pytest.mark.parametrize("configured", ["other root handler", "own handler", "no propagation"])
def test_a_configured_logging_is_left_alone(
    package_logger: logging.Logger, root_handlers: list[logging.Handler], configured: str
) -> None:
    from rich.logging import RichHandler

    root_handlers[:] = [RichHandler()]
    package_logger.handlers[:], package_logger.propagate = [], True
    if configured == "other root handler":
        root_handlers.append(logging.StreamHandler())
    elif configured == "own handler":
        package_logger.addHandler(logging.NullHandler())
    else:
        package_logger.propagate = False
    before = list(package_logger.handlers)
    assert not plain_beside_rich()
    assert package_logger.handlers == before
