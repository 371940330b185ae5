"""What the generated dashboards point at: the label selector and the datasource."""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from ._selector import label_matchers

__all__ = ["DEFAULT", "RUNBOOK_BASE", "SCHEMA_VERSION", "DashboardConfig"]

#: Where alert annotations point (the project's docs/alerts.md, rendered by GitHub).
RUNBOOK_BASE: Final = (
    "https://github.com/mcp-cancellation/mcp-cancellation/blob/main/docs/alerts.md"
)
#: Oldest Grafana dashboard schema the files claim (Grafana 10.4 writes 39).
SCHEMA_VERSION: Final = 39


@dataclasses.dataclass(frozen=True, kw_only=True)
class DashboardConfig:
    """How the dashboards select their series.

    *selector* holds label matchers added to every metric the panels query (default: the
    dashboards' own ``job`` and ``instance`` variables; e.g. ``'job="mcp"'`` to pin one
    job; braces are optional). *datasource* is the Prometheus datasource uid of every
    panel (default: the ``datasource`` template variable, so the user picks one on
    import). A selector that is not a list of PromQL label matchers raises
    ``ValueError``.
    """

    selector: str = 'job=~"$job", instance=~"$instance"'
    datasource: str = "${datasource}"

    def __post_init__(self) -> None:
        object.__setattr__(self, "selector", label_matchers(self.selector))

    @property
    def datasource_ref(self) -> dict[str, Any]:
        """The ``datasource`` object of every panel and query."""
        return {"type": "prometheus", "uid": self.datasource}


#: The dashboards as shipped in ``dashboards/``.
DEFAULT: Final = DashboardConfig()
