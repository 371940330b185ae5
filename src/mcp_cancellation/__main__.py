"""The ``mcp-cancellation`` command: ``demo`` (a real MCP server), ``client``, ``simulate``
(traffic), ``dashboards export`` (Grafana dashboards and alert rules), and ``inspect`` and
``cancel`` (an operator's view of the calls in flight, and their cancellation).

Each subcommand lives in its own module, which registers its arguments through
``add_parser(subparsers)`` and runs through ``run(args) -> int``; modules are imported only
when listed here, so the core install does not need the ``mcp`` extra to print ``--help``;
a subcommand whose extra is missing says which to install.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .__about__ import __version__

#: subcommand -> (module relative to this package, with ``:function`` if its function
#: that registers the subcommand is not ``add_parser``), and its help.
SUBCOMMANDS = {
    "demo": ("._demo", "serve a demo MCP server whose tool calls can be cancelled"),
    "client": ("._client", "start a long tool call on the demo and cancel it, three ways"),
    "simulate": (
        ".simulate._command",
        "send well-behaved and abusive cancellation traffic to a local server",
    ),
    "dashboards": (
        ".dashboards._command",
        "write the Grafana dashboards and Prometheus alert rules into a directory",
    ),
    "inspect": (
        "._operator_cli:add_inspect_parser",
        "list the requests in flight and the tasks, across every worker",
    ),
    "cancel": (
        "._operator_cli:add_cancel_parser",
        "cancel a scope's calls in flight, as the operator",
    ),
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser. Given the command line *argv*, only the module of the subcommand it
    names is imported (the others are listed with their help), so that ``--help`` needs
    no SDK import; without it, every subcommand's module."""
    parser = argparse.ArgumentParser(
        prog="mcp-cancellation",
        description="Cross-request cancellation for MCP servers on Streamable HTTP.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = None if argv is None else next((w for w in argv if not w.startswith("-")), "")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        if chosen is not None and name != chosen:
            subparsers.add_parser(name, help=help_text, add_help=False)
            continue
        module_name, _, function = module_name.partition(":")
        try:
            module = importlib.import_module(module_name, __package__)
        except ImportError as exc:  # an optional extra is missing
            # (No options, not even --help: main() answers with the missing extra, not
            # "unrecognized arguments: --port".)
            sub = subparsers.add_parser(name, help=f"(unavailable: {exc})", add_help=False)
            sub.set_defaults(_missing=str(exc))
            continue
        getattr(module, function or "add_parser")(subparsers)
        sub = subparsers.choices[name]
        if sub.description:  # docstrings are reST: ``code`` reads as `code` in a terminal
            sub.description = sub.description.replace("``", "`")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args, unknown = parser.parse_known_args(argv)
    missing = getattr(args, "_missing", None)
    if missing is not None:
        parser.error(missing)  # e.g. "... needs the mcp extra: pip install ..."
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
