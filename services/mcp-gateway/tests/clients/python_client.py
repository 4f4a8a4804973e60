"""A real MCP client of the gateway: the Python SDK (`mcp`), both its high-level `Client`
(which tries `server/discover` first, so it speaks the stateless 2026-07-28 revision) and the
low-level session (the initialize handshake and a session). Prints one JSON object with what it
saw; tests/clients.rs asserts on it."""

import json
import sys

import anyio
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

URL = sys.argv[1]


async def main() -> None:
    report = {}
    async with streamable_http_client(URL) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            report["server"] = init.server_info.name
            report["protocol"] = init.protocol_version
            report["all"] = [t.name for t in (await session.list_tools()).tools]
            result = await session.call_tool(
                "set_context", {"query": "what should I wear to a wedding", "intent": "fashion advice"}
            )
            report["set_context_error"] = result.is_error
            report["filtered"] = [t.name for t in (await session.list_tools()).tools]
            result = await session.call_tool("fx__outfit_ideas", {"occasion": "wedding"})
            report["call"] = result.content[0].text
            try:
                await session.call_tool("fx__missing", {})
                report["unknown"] = "no error"
            except Exception as err:  # the SDK raises McpError for JSON-RPC errors
                report["unknown"] = str(err)
    async with Client(URL) as client:
        report["high_level_protocol"] = client.protocol_version
        report["high_level_tools"] = len((await client.list_tools()).tools)
        # No session on this revision: set_context hands back a context handle, which later
        # requests carry in their _meta.
        result = await client.call_tool(
            "set_context", {"query": "what should I wear to a wedding", "intent": "fashion advice"}
        )
        handle = (result.structured_content or {}).get("context")
        report["handle"] = handle
        report["handle_in_meta"] = (result.meta or {}).get("io.switchyard/context") == handle
        meta = {"io.switchyard/context": handle}
        listed = await client.list_tools(meta=meta)
        report["high_level_filtered"] = [t.name for t in listed.tools]
        result = await client.call_tool("fx__outfit_ideas", {"occasion": "wedding"}, meta=meta)
        report["high_level_call"] = result.content[0].text
    print(json.dumps(report))


anyio.run(main)
