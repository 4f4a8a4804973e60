"""The fixture the MCP conformance suite's server scenarios call by exact name
(`@modelcontextprotocol/conformance` ships none), written with the Python SDK. It runs behind
the gateway (stdio) in tests/conformance.rs, or alone over HTTP: `fixture_server.py PORT`.

The sampling, elicitation and roots tools send the server-to-client requests the gateway
relays to the calling client (tests/conformance.rs and tests/relay.rs). Resources can be
subscribed to: `test_update_resource` announces a change to a subscribed resource,
`test_subscriptions` lists what the fixture's client (the gateway) holds (with
`--no-subscriptions` the server takes none), `test_grow` adds a
tool, a resource and a prompt and says the lists changed, and `test_exit` ends the process, as
a crash would (tests/subscriptions.rs). `test://refused-once` refuses the first subscription
to it after a pause, and `test://slow-resource` takes a minute to read, for the gateway's
handling of refusals and of servers that stop answering."""

import asyncio
import base64
import json
import os
import sys

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.server.mcpserver.utilities.types import Audio, Image
from mcp.shared.exceptions import MCPError
from mcp_types import (
    Completion,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    SamplingMessage,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)

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


@app.tool()
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Asks the client's model to complete a prompt (sampling/createMessage)."""
    result = await ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
        max_tokens=100,
        related_request_id=ctx.request_id,
    )
    text = result.content.text if isinstance(result.content, TextContent) else str(result.content)
    return f"LLM response: {text}"


@app.tool()
async def test_elicitation(message: str, ctx: Context) -> str:
    """Asks the client's user for a name and an e-mail address (elicitation/create)."""
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    result = await ctx.session.elicit_form(message, schema, ctx.request_id)
    return f"User response: action={result.action}, content={json.dumps(result.content)}"


@app.tool()
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Asks for input with a default for every primitive type."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
            "verified": {"type": "boolean", "default": True},
        },
    }
    result = await ctx.session.elicit_form("Please review your details", schema, ctx.request_id)
    return f"Elicitation completed: action={result.action}, content={json.dumps(result.content)}"


@app.tool()
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Asks for input with each of the five enum schema forms."""
    options = ["option1", "option2", "option3"]
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": options},
            "titledSingle": {
                "type": "string",
                "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"},
                ],
            },
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": options}},
            "titledMulti": {
                "type": "array",
                "items": {
                    "anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"},
                    ]
                },
            },
        },
    }
    result = await ctx.session.elicit_form("Please choose", schema, ctx.request_id)
    return f"Elicitation completed: action={result.action}, content={json.dumps(result.content)}"


@app.tool()
async def test_roots(ctx: Context) -> str:
    """Lists the client's roots (roots/list)."""
    result = await ctx.session.list_roots()
    return "Roots: " + ", ".join(str(root.uri) for root in result.roots)


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


@app.resource("test://refused-once", mime_type="text/plain", description="Refuses its first subscription")
def refused_once() -> str:
    return "A resource whose first subscription is refused."


@app.resource("test://slow-resource", mime_type="text/plain", description="Takes a minute to read")
async def slow_resource() -> str:
    await asyncio.sleep(60)
    return "Read at last."


# The URIs the client (the gateway) is subscribed to. The SDK's high-level server has no
# subscription handlers of its own, so they are registered on the protocol server beneath it.
SUBSCRIBED: set[str] = set()


# Whether the first subscription to test://refused-once was refused yet.
REFUSED_ONCE: list[bool] = []


async def subscribe(_ctx, params: SubscribeRequestParams) -> EmptyResult:
    uri = str(params.uri)
    if uri == "test://refused-once" and not REFUSED_ONCE:
        REFUSED_ONCE.append(True)
        # Long enough for a second subscriber to arrive while this one is under way.
        await asyncio.sleep(1)
        raise MCPError(code=-32603, message=f"{uri}: refused this once")
    SUBSCRIBED.add(uri)
    return EmptyResult()


async def unsubscribe(_ctx, params: UnsubscribeRequestParams) -> EmptyResult:
    SUBSCRIBED.discard(str(params.uri))
    return EmptyResult()


# `--no-subscriptions`: a server that offers resources but takes no subscriptions.
if "--no-subscriptions" in sys.argv:
    sys.argv.remove("--no-subscriptions")
else:
    app._lowlevel_server.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
    app._lowlevel_server.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)


@app.tool()
async def test_update_resource(uri: str, ctx: Context) -> str:
    """Changes a resource; if it is subscribed to, says so (notifications/resources/updated)."""
    if uri not in SUBSCRIBED:
        return f"{uri} changed; nobody is subscribed"
    await ctx.session.send_resource_updated(uri)
    return f"{uri} changed; subscribers told"


@app.tool()
def test_subscriptions() -> str:
    """The resource URIs this server's client is subscribed to, as a JSON list."""
    return json.dumps(sorted(SUBSCRIBED))


@app.tool()
async def test_grow(name: str, ctx: Context) -> str:
    """Adds a tool, a resource and a prompt called `name`, and tells the client its tool,
    resource and prompt lists changed."""

    def grown() -> str:
        return f"{name} grown"

    app.add_tool(grown, name=name, description=f"A tool added at run time: {name}")
    app.resource(f"test://grown/{name}", name=name, mime_type="text/plain")(grown)
    app.prompt(name=name, description=f"A prompt added at run time: {name}")(grown)
    await ctx.session.send_tool_list_changed()
    await ctx.session.send_resource_list_changed()
    await ctx.session.send_prompt_list_changed()
    return f"{name} added"


@app.tool()
def test_exit() -> str:
    """Ends the process at once, as a crash would."""
    os._exit(3)


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
