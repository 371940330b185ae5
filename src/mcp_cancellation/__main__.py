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

#: subcommand -> module (relative to this package) holding add_parser() and run().
SUBCOMMANDS = {
    "demo": ".demo",
    "client": ".client",
    "simulate": ".simulate",
    "dashboards": ".dashboards.command",
    "inspect": "._operator_cli",
    "cancel": "._operator_cli",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-cancellation",
        description="Cross-request cancellation for MCP servers on Streamable HTTP.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    added: set[str] = set()  # a module may register several subcommands
    for name, module_name in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name, __package__)
        except ImportError as exc:  # an optional extra is missing
            # (No options, not even --help: main() answers with the missing extra, not
            # "unrecognized arguments: --port".)
            sub = subparsers.add_parser(name, help=f"(unavailable: {exc})", add_help=False)
            sub.set_defaults(_missing=str(exc))
            continue
        if module_name not in added:
            module.add_parser(subparsers)
            added.add(module_name)
        sub = subparsers.choices[name]
        if sub.description:  # docstrings are reST: ``code`` reads as `code` in a terminal
            sub.description = sub.description.replace("``", "`")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
