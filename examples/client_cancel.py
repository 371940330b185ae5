"""Start a long tool call and cancel it, three ways: see `mcp-cancellation client`.

Run a server first (``./dev demo``, ``python examples/sdk_server.py`` or
``python examples/fastmcp_server.py``), then either of::

    ./dev client [--url http://127.0.0.1:8000/mcp] [--after 2]
    python examples/client_cancel.py [--url ...] [--after 2]     (in the project's venv)
"""

from __future__ import annotations

import sys

from mcp_cancellation.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["client", *sys.argv[1:]]))
