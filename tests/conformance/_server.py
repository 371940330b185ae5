"""The "everything" server the official MCP conformance suite runs against: an SDK
``MCPServer`` with the suite's fixtures (tools, resources, prompts and, with ``--tasks``,
the SEP-2663 task fixtures), served bare, behind ``CancellationMiddleware`` on the
memory storage (``--middleware``), or with ``TasksExtension`` on Redis (``--tasks``).

Run as ``python -m tests.conformance._server --port P [--middleware | --tasks
--redis-url URL --prefix PREFIX]``. The fixtures follow the scenarios' own descriptions
(``conformance list``, each scenario's "Server Implementation Requirements").
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import Message, UserMessage
from mcp.shared.exceptions import MCPError
from mcp_types import (
    AudioContent,
    ElicitRequest,
    ElicitRequestFormParams,
    EmbeddedResource,
    ImageContent,
    InputRequiredResult,
    TextContent,
    TextResourceContents,
)
from pydantic import BaseModel

from mcp_cancellation import raise_if_cancelled

#: A 1x1 red PNG, and a tiny WAV (the suite checks only that each is there).
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
        "0000000c4944415408d763f8cfc000000301010018dd8db00000000049454e44ae426082"
    )
).decode()
WAV = base64.b64encode(
    b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00D\xac\x00\x00"
    b"\x88X\x01\x00\x02\x00\x10\x00data\x00\x00\x00\x00"
).decode()
#: The task fixtures (SEP-2663 scenarios) and their task support.
TASK_SUPPORT = {
    "slow_compute": "optional",
    "failing_job": "required",
    "protocol_error_job": "optional",
    "confirm_delete": "optional",
    "multi_input": "optional",
    "test_tool_with_task": "required",
}


class Confirm(BaseModel):
    confirm: bool = True


class NameAndConfirm(BaseModel):
    name: str = ""
    confirm: bool = True


def build_server(*, extensions: list[Any] | None = None) -> MCPServer:
    extensions = extensions or []
    server = MCPServer(
        "conformance-everything",
        extensions=extensions,
        middleware=extensions,
    )

    @server.tool(description="Returns a simple text response.")
    def test_simple_text() -> str:
        return "This is a simple text response for testing."

    @server.tool(description="Returns an image.")
    def test_image_content() -> list[Any]:
        return [ImageContent(type="image", data=PNG, mime_type="image/png")]

    @server.tool(description="Returns audio.")
    def test_audio_content() -> list[Any]:
        return [AudioContent(type="audio", data=WAV, mime_type="audio/wav")]

    @server.tool(description="Returns an embedded resource.")
    def test_embedded_resource() -> list[Any]:
        resource = TextResourceContents(
            uri="test://embedded-resource",
            mime_type="text/plain",
            text="This is an embedded resource content.",
        )
        return [EmbeddedResource(type="resource", resource=resource)]

    @server.tool(description="Returns text, an image and a resource.")
    def test_multiple_content_types() -> list[Any]:
        resource = TextResourceContents(
            uri="test://mixed-content-resource",
            mime_type="application/json",
            text='{"test":"data","value":123}',
        )
        return [
            TextContent(type="text", text="Multiple content types test:"),
            ImageContent(type="image", data=PNG, mime_type="image/png"),
            EmbeddedResource(type="resource", resource=resource),
        ]

    @server.tool(description="Always fails.")
    def test_error_handling() -> str:
        raise ValueError("This tool intentionally returns an error for testing")

    @server.tool(description="Reports progress 0, 50 and 100 of 100.")
    async def test_tool_with_progress(ctx: Context) -> str:
        for done in (0, 50, 100):
            await ctx.report_progress(done, 100)
            await asyncio.sleep(0.05)
        return "Progress test completed"

    @server.tool(description="Greets.")
    def greet(name: str) -> str:
        return f"Hello, {name}!"

    @server.tool(description="Works `seconds`, then answers (a task when asked).")
    async def slow_compute(seconds: float = 1.0, label: str = "") -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while loop.time() < deadline:
            raise_if_cancelled()  # tasks/cancel stops it (the tasks server only)
            await asyncio.sleep(min(0.02, max(0.0, deadline - loop.time())))
        return f"computed {label}".strip()

    @server.tool(description="A task that reports a tool execution error.")
    async def failing_job() -> str:
        await asyncio.sleep(1.0)
        raise ValueError("the job failed")

    @server.tool(description="A task that ends in a protocol error.")
    async def protocol_error_job() -> str:
        await asyncio.sleep(0.2)
        raise MCPError(-32603, "the job broke")

    @server.tool(description="Asks for confirmation, then deletes (a task).")
    async def confirm_delete(filename: str, ctx: Context) -> str:
        answer = await ctx.elicit(f"Delete {filename}?", Confirm)
        confirmed = answer.action == "accept" and answer.data.confirm
        return f"deleted {filename}" if confirmed else f"kept {filename}"

    @server.tool(description="Asks two questions at once (a task).")
    async def multi_input(ctx: Context) -> str:
        first, second = await asyncio.gather(
            ctx.elicit("Name?", NameAndConfirm), ctx.elicit("Sure?", NameAndConfirm)
        )
        names = [a.data.name for a in (first, second) if a.action == "accept"]
        return "answers: " + ", ".join(names)

    @server.tool(description="Asks for a name first, then runs as a task.")
    async def test_tool_with_task(ctx: Context) -> str | InputRequiredResult:
        answer = (ctx.input_responses or {}).get("user_name")
        if answer is None:
            schema = {"type": "object", "properties": {"name": {"type": "string"}}}
            ask = ElicitRequestFormParams(message="Your name?", requested_schema=schema)
            return InputRequiredResult(input_requests={"user_name": ElicitRequest(params=ask)})
        await asyncio.sleep(0.2)
        content = getattr(answer, "content", None) or {}
        return f"Hello, {content.get('name', '?')}!"

    @server.resource("test://static-text", description="A text resource.", mime_type="text/plain")
    def static_text() -> str:
        return "This is the content of the static text resource."

    @server.resource(
        "test://static-binary", description="A binary resource.", mime_type="image/png"
    )
    def static_binary() -> bytes:
        return base64.b64decode(PNG)

    @server.resource(
        "test://template/{id}/data",
        description="A templated resource.",
        mime_type="application/json",
    )
    def template_data(id: str) -> str:
        return f'{{"id":"{id}","templateTest":true,"data":"Data for ID: {id}"}}'

    @server.prompt(description="A simple prompt.")
    def test_simple_prompt() -> str:
        return "This is a simple prompt for testing."

    @server.prompt(description="A prompt with arguments.")
    def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
        return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"

    @server.prompt(description="A prompt with an embedded resource.")
    def test_prompt_with_embedded_resource(resourceUri: str) -> list[Message]:
        resource = TextResourceContents(
            uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
        )
        return [
            UserMessage(EmbeddedResource(type="resource", resource=resource)),
            UserMessage("Please process the embedded resource above."),
        ]

    @server.prompt(description="A prompt with an image.")
    def test_prompt_with_image() -> list[Message]:
        return [
            UserMessage(ImageContent(type="image", data=PNG, mime_type="image/png")),
            UserMessage("Please analyze the image above."),
        ]

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--middleware", action="store_true")
    parser.add_argument("--tasks", action="store_true")
    parser.add_argument("--redis-url", default="")
    parser.add_argument("--prefix", default="conformance")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    app: Any
    if args.tasks or args.middleware:
        from mcp_cancellation import CancellationMiddleware, CancellationRegistry, MemoryStorage
        from mcp_cancellation.integrations import tool_names
        from mcp_cancellation.storage import Storage
        from mcp_cancellation.tasks import TasksExtension

        storage: Storage = MemoryStorage()
        if args.redis_url:
            from mcp_cancellation.storage.redis import RedisStorage

            storage = RedisStorage.from_url(args.redis_url, prefix=args.prefix)
        registry = CancellationRegistry(storage)
        extensions: list[Any] = []
        if args.tasks:
            extensions.append(TasksExtension(registry, tools=TASK_SUPPORT, poll_interval=0.1))
        server = build_server(extensions=extensions)
        app = CancellationMiddleware(
            server.streamable_http_app(), registry=registry, tools=tool_names(server)
        )
    else:
        app = build_server().streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
