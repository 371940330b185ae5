"""Grafana dashboards and Prometheus alert rules: generated here, validated here.

The two dashboards in ``dashboards/`` are generated from the panel lists in
:mod:`._panels`, so every panel follows the same rules (a ``datasource`` variable of type
prometheus, ``job`` and ``instance`` filters, ``$__rate_interval`` in every rate, a unit on
every panel) and every metric named is one the package exports. The alert rules,
``alerts.yaml`` in this package, are written by hand (they are read by people) and checked
by :func:`check_rules`.

Users export both, from the installed package, with no extra and no pyyaml::

    mcp-cancellation dashboards export DIR [--selector 'job="mcp"'] [--datasource UID]
        [--format rules|prometheus-rule|none]

This repository's ``dashboards/`` is the same export; regenerate it after editing the
panels or the rules, or check that it is current::

    python -m mcp_cancellation.dashboards            # rewrite dashboards/*.json, alerts.yaml
    python -m mcp_cancellation.dashboards --check    # exit 1 if stale or invalid

By job: :mod:`.config` (selector and datasource), :mod:`._panels` (what each dashboard
shows), :mod:`.generation` (Grafana JSON), :mod:`.validation` and :mod:`.rules` (the
checks), :mod:`.export` (writing a directory). Nothing else in the package imports it; it
ships so the dashboards can be rebuilt from an installed copy, e.g.
``export("out", DashboardConfig(selector='job="mcp"'))``.
"""

from __future__ import annotations

from ._config import DashboardConfig
from ._export import export, main
from ._generation import dashboards, render
from ._rules import (
    check_rules,
)
from ._validation import (
    check_dashboard,
)

__all__ = [
    "DashboardConfig",
    "check_dashboard",
    "check_rules",
    "dashboards",
    "export",
    "main",
    "render",
]
