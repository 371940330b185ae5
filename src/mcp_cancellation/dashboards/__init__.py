"""Grafana dashboards and Prometheus alert rules: generated here, validated here.

The two dashboards in ``dashboards/`` are generated from the panel lists in
:mod:`._panels`, so every panel follows the same rules (a ``datasource`` variable of type
prometheus, ``job`` and ``instance`` filters, ``$__rate_interval`` in every rate, a unit on
every panel) and every metric named is one the package exports. ``dashboards/alerts.yaml``
is written by hand (it is read by people) and checked by :func:`check_rules`.

Regenerate after editing the panels, or check that the committed files are current::

    python -m mcp_cancellation.dashboards            # rewrite dashboards/*.json
    python -m mcp_cancellation.dashboards --check    # exit 1 if stale or invalid

By job: :mod:`.config` (selector and datasource), :mod:`._panels` (what each dashboard
shows), :mod:`.generation` (Grafana JSON), :mod:`.validation` and :mod:`.rules` (the
checks), :mod:`.export` (writing a directory). Nothing else in the package imports it; it
ships so the dashboards can be rebuilt from an installed copy, e.g.
``export("out", DashboardConfig(selector='job="mcp"'))``.
"""

from __future__ import annotations

from ._panels import DASHBOARDS
from .config import RUNBOOK_BASE, SCHEMA_VERSION, DashboardConfig
from .export import check_directory, export, main
from .generation import build_dashboard, dashboards, render
from .rules import check_rules, github_anchor
from .validation import (
    PanelQuery,
    check_dashboard,
    known_metric_names,
    metric_names_in,
    panel_queries,
    substitute,
)

__all__ = [
    "DASHBOARDS",
    "RUNBOOK_BASE",
    "SCHEMA_VERSION",
    "DashboardConfig",
    "PanelQuery",
    "build_dashboard",
    "check_dashboard",
    "check_directory",
    "check_rules",
    "dashboards",
    "export",
    "github_anchor",
    "known_metric_names",
    "main",
    "metric_names_in",
    "panel_queries",
    "render",
    "substitute",
]
