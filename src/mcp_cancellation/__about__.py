"""Version of the mcp-cancellation distribution."""

__version__ = "0.3.0"
