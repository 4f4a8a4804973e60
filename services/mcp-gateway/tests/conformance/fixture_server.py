"""The fixture the MCP conformance suite's server scenarios call by exact name
(`@modelcontextprotocol/conformance` ships none), written with the Python SDK. It runs behind
the gateway (stdio) in tests/conformance.rs, or alone over HTTP: `fixture_server.py PORT`.

Not here: the sampling and elicitation fixtures (server-to-client requests, which the gateway
does not relay) — see the README's conformance table."""

import asyncio
import base64
import json
import sys

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.server.mcpserver.utilities.types import Audio, Image
from mcp_types import Completion, EmbeddedResource, ImageContent, TextContent, TextResourceContents

# A 1x1 PNG and a tiny WAV header, as the scenarios only check type, data and mime type.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
WAV = b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00D\xac\x00\x00\x88X\x01\x00\x02\x00\x10\x00data\x00\x00\x00\x00"

app = MCPServer("switchyard-conformance-fixture")


@app.tool()
def test_simple_text() -> str:
    """Returns simple text."""
    return "This is a simple text response for testing."


@app.tool()
def test_image_content() -> Image:
    """Returns an image."""
    return Image(data=PNG, format="png")


@app.tool()
def test_audio_content() -> Audio:
    """Returns audio."""
    return Audio(data=WAV, format="wav")


@app.tool()
def test_embedded_resource() -> list:
    """Returns an embedded resource."""
    return [
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
            ),
        )
    ]


@app.tool()
def test_multiple_content_types() -> list:
    """Returns text, an image and a resource."""
    return [
        TextContent(type="text", text="Multiple content types test:"),
        ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png"),
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="test://mixed-content-resource",
                mime_type="application/json",
                text=json.dumps({"test": "data", "value": 123}),
            ),
        ),
    ]


@app.tool()
def test_error_handling() -> str:
    """Always fails."""
    raise ValueError("This tool intentionally returns an error for testing")


@app.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Logs three messages while it runs."""
    await ctx.info("Tool execution started")
    await asyncio.sleep(0.05)
    await ctx.info("Tool processing data")
    await asyncio.sleep(0.05)
    await ctx.info("Tool execution completed")
    return "Tool with logging executed successfully"


@app.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Reports progress three times."""
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100)
        await asyncio.sleep(0.05)
    return "Tool with progress executed successfully"


@app.resource("test://static-text", mime_type="text/plain", description="Static text")
def static_text() -> str:
    return "This is the content of the static text resource."


@app.resource("test://static-binary", mime_type="image/png", description="Static binary")
def static_binary() -> bytes:
    return PNG


@app.resource("test://template/{id}/data", mime_type="application/json", description="Templated data")
def template_data(id: str) -> str:
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@app.resource("test://watched-resource", mime_type="text/plain", description="A resource to subscribe to")
def watched() -> str:
    return "Watched resource content."


@app.prompt()
def test_simple_prompt() -> str:
    """A simple prompt."""
    return "This is a simple prompt for testing."


@app.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    """A prompt with arguments."""
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@app.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list:
    """A prompt with an embedded resource."""
    return [
        UserMessage(
            content=EmbeddedResource(
                type="resource",
                resource=TextResourceContents(
                    uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
                ),
            )
        ),
        UserMessage(content="Please process the embedded resource above."),
    ]


@app.prompt()
def test_prompt_with_image() -> list:
    """A prompt with an image."""
    return [
        UserMessage(content=ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png")),
        UserMessage(content="Please analyze the image above."),
    ]


@app.completion()
async def complete(ref, argument, context):
    return Completion(values=[f"{argument.value}-one", f"{argument.value}-two"])


if __name__ == "__main__":
    if sys.argv[1:] in ([], ["stdio"]):
        app.run()
    else:
        app.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
