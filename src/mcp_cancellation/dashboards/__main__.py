"""``python -m mcp_cancellation.dashboards``: see :func:`.export.main`."""

import sys

from ._export import main

sys.exit(main())
