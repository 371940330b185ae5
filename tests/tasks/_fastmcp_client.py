"""A real SEP-2663 client that this project did not write: FastMCP's ``Client`` with
``fastmcp-tasks``' ``call_tool_task`` and ``ToolTask``, run in a virtualenv of its own
(``fastmcp-tasks`` pins ``fastmcp-slim``). Each scenario creates a task through one
worker and drives it through the other; the outcomes are printed as one JSON object.

Run as ``python _fastmcp_client.py URL_A URL_B`` (each a server's ``/mcp`` URL). This
file imports nothing of the test suite: it runs in the client's venv.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from fastmcp import Client
from fastmcp_tasks.client import ToolTask, call_tool_task


async def answer(message: str, response_type: Any, params: Any, context: Any) -> Any:
    return {"name": "Ada"}


async def main(url_a: str, url_b: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with (
        Client(url_a, mode="2026-07-28") as a,
        Client(url_b, mode="2026-07-28", elicitation_handler=answer) as b,
    ):
        # Created on A, its result read through B.
        task = await call_tool_task(a, "slow_count", {"n": 20})
        out["created_status"] = task.create_result.status
        out["task_id_chars"] = len(task.task_id)
        other = ToolTask(b, "slow_count", task.create_result)
        result = await other.result()
        out["result"] = result.content[0].text

        # Cancelled through B while it runs on A; the tool stops.
        long = await call_tool_task(a, "slow_count", {"n": 100000, "step": 0.01})
        await ToolTask(b, "slow_count", long.create_result).wait(state="working", timeout=10)
        started = time.monotonic()
        await ToolTask(b, "slow_count", long.create_result).cancel()
        final = await ToolTask(b, "slow_count", long.create_result).wait(timeout=20)
        out["cancelled_status"] = final.status
        out["cancel_to_status_seconds"] = time.monotonic() - started

        # A tool that elicits: answered by B's elicitation handler through tasks/update.
        asking = await call_tool_task(a, "ask_name", {})
        answered = await ToolTask(b, "ask_name", asking.create_result).result()
        out["elicited"] = answered.content[0].text

        # A plain call_tool of a task tool: the client polls to the end by itself.
        plain = await b.call_tool("sized", {"size": 3})
        out["call_tool"] = plain.content[0].text
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
