"""A module whose extra is missing says which extra to install (in a venv without any)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: (Each builds a wheel or a virtualenv: seconds, left out of ./dev quick.)
pytestmark = pytest.mark.slow

#: (what the user imports, the extra it needs, the feature the message names)
CASES = [
    ("from mcp_cancellation import RedisStorage", "redis", "RedisStorage"),
    ("import mcp_cancellation.storage.redis", "redis", "RedisStorage"),
    ("from mcp_cancellation.storage import RedisStorage", "redis", "RedisStorage"),
    ("import mcp_cancellation.telemetry.prometheus", "prometheus", "The Prometheus bridge"),
    ("from mcp_cancellation.telemetry import metrics_app", "prometheus", "The Prometheus bridge"),
    ("import mcp_cancellation.telemetry.otel", "otel", "The OpenTelemetry bridge"),
    ("from mcp_cancellation.telemetry import instrument", "otel", "The OpenTelemetry bridge"),
    (
        "import mcp_cancellation.telemetry._instrumentation",
        "otel-instrumentation",
        "McpCancellationInstrumentor",
    ),
    ("from mcp_cancellation.integrations import cancellable", "mcp", "The SDK helpers"),
    ("import mcp_cancellation.integrations.fastmcp", "fastmcp", "integrations.fastmcp"),
    ("import mcp_cancellation._demo", "mcp", "mcp-cancellation demo"),
    ("import mcp_cancellation.simulate", "mcp", "mcp-cancellation simulate"),
    ("import mcp_cancellation._client", "mcp", "mcp-cancellation client"),
]


def _run(python: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-W", "ignore::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_core_works_without_any_extra(bare_venv: Path) -> None:
    code = (
        "import asyncio\n"
        "from mcp_cancellation import CancellationRegistry, CancellationMiddleware\n"
        "async def main():\n"
        "    async with CancellationRegistry() as r:\n"
        "        async with r.request(1, 'ip:1.2.3.4') as token:\n"
        "            assert await r.cancel_in_flight(1, 'stop', 'ip:1.2.3.4')\n"
        "            assert token.cancelled\n"
        "asyncio.run(main())\n"
        "print('ok')\n"
    )
    done = _run(bare_venv, code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize(("statement", "extra", "feature"), CASES)
def test_a_missing_extra_names_what_to_install(
    bare_venv: Path, statement: str, extra: str, feature: str
) -> None:
    code = (
        "try:\n"
        f"    {statement}\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc, sep='|')\n"
        "else:\n"
        "    print('imported')\n"
    )
    done = _run(bare_venv, code)
    assert done.returncode == 0, done.stderr
    kind, message = done.stdout.strip().split("|", 1)
    assert kind == "MissingExtra"  # an ImportError subclass
    assert f"needs the {extra} extra: pip install 'mcp-cancellation[{extra}]'" in message
    assert feature in message


@pytest.mark.parametrize("arguments", [[], ["--port", "8130"], ["--help"]])
def test_the_command_names_the_extra_of_a_subcommand(bare_venv: Path, arguments: list[str]) -> None:
    command = bare_venv.parent / "mcp-cancellation"
    done = subprocess.run(
        [str(command), "demo", *arguments], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "needs the mcp extra: pip install 'mcp-cancellation[mcp]'" in done.stderr
    assert "unrecognized arguments" not in done.stderr
    help_text = subprocess.run(
        [str(command), "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    assert "demo" in help_text.stdout


def test_help_lists_every_command_without_importing_the_sdk() -> None:
    """``mcp-cancellation --help`` answers at once: no subcommand's module (nor the mcp
    SDK, nor redis) is imported to list them."""
    code = (
        "import contextlib, io, sys\n"
        "from mcp_cancellation.__main__ import SUBCOMMANDS, main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "assert all(name in out.getvalue() for name in SUBCOMMANDS), out.getvalue()\n"
        "heavy = ('mcp', 'redis', 'httpx', 'mcp_cancellation._demo')\n"
        "assert not [m for m in heavy if m in sys.modules]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("command", ["demo", "client", "simulate", "inspect", "cancel"])
def test_every_option_with_a_default_says_it_in_help(command: str) -> None:
    import argparse

    from mcp_cancellation.__main__ import build_parser

    parser = build_parser([command])
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub = subparsers.choices[command]
    silent = [
        action.dest
        for action in sub._actions
        if action.option_strings
        and action.default not in (None, False, [], argparse.SUPPRESS)
        and action.help is not None
        and "default" not in action.help
    ]
    assert silent == []


@pytest.mark.parametrize(
    ("arguments", "extra"),
    [
        (["inspect", "--redis", "redis://127.0.0.1:1/0"], "redis"),
        (
            ["cancel", "--redis", "redis://127.0.0.1:1/0", "--scope", "ip:192.0.2.1", "--all"],
            "redis",
        ),
    ],
)
def test_an_operator_command_without_its_extra_is_one_line(
    bare_venv: Path, arguments: list[str], extra: str
) -> None:
    command = bare_venv.parent / "mcp-cancellation"
    done = subprocess.run(
        [str(command), *arguments], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"needs the {extra} extra: pip install 'mcp-cancellation[{extra}]'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_dashboards_check_without_pyyaml_names_its_extra(
    bare_venv: Path, tmp_path: Path
) -> None:
    export = subprocess.run(
        [str(bare_venv.parent / "mcp-cancellation"), "dashboards", "export", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert export.returncode == 0, export.stderr
    check = [str(bare_venv), "-m", "mcp_cancellation.dashboards", "--check", "--dir", str(tmp_path)]
    done = subprocess.run(check, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "pip install 'mcp-cancellation[dashboards]'" in done.stderr


def test_the_dashboards_check_passes_on_an_exported_directory(tmp_path: Path) -> None:
    """With the extra (the test environment has every one), ``--check`` of what the
    installed package exports finds nothing wrong."""
    from mcp_cancellation.dashboards._export import export, main

    export(tmp_path)
    assert main(["--check", "--dir", str(tmp_path), "--docs", str(tmp_path / "none")]) == 0
