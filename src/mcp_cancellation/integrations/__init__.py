"""Integrations with the servers this package sits in front of or inside.

* :mod:`.asgi`: :class:`~mcp_cancellation.CancellationMiddleware`, pure ASGI, in front of
  any MCP app on Streamable HTTP (the layer that knows HTTP and JSON-RPC);
* :mod:`.mcp_sdk`: tool-side helpers for the SDK's ``MCPServer`` (``[mcp]``);
* :mod:`.fastmcp`: the FastMCP middleware (``[fastmcp]``).

Private helpers: ``_exchange`` (one tracked request), ``_jsonrpc`` (body classification
and the middleware's own answers). ASGI aliases and responses are in
``mcp_cancellation._asgi``, shared with the demo and the ``/metrics`` app.
"""
