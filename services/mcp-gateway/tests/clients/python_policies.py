"""A real MCP client of a gateway with tool policies: the Python SDK (`mcp`), as a caller of
the user groups given (sent in `x-switchyard-groups`), over both protocol revisions — the
low-level session (initialize, 2025-11-25) and the discover-first `Client` (2026-07-28).
Prints one JSON object with what it saw; tests/policies.rs asserts on it."""

import json
import sys

import anyio
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

URL, GROUPS, DENIED = sys.argv[1], sys.argv[2], sys.argv[3]
QUERY = {"query": "turn my question into an SQL query", "intent": "data analysis"}


def names(listed):
    return [t.name for t in listed.tools]


async def refused(call):
    """The error a call gets (code and message), or None when it succeeded."""
    try:
        result = await call
        return {"code": None, "message": "no error: " + str(result.content[0].text if result.content else "")}
    except Exception as err:  # the SDK raises MCPError for JSON-RPC errors
        error = getattr(err, "error", None)
        return {"code": getattr(error, "code", None), "message": str(getattr(error, "message", err))}


async def main() -> None:
    report = {}
    headers = {"x-switchyard-groups": GROUPS} if GROUPS else {}
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(URL, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                report["protocol"] = init.protocol_version
                report["all"] = names(await session.list_tools())
                await session.call_tool("set_context", QUERY)
                report["filtered"] = names(await session.list_tools())
                report["denied_call"] = await refused(session.call_tool(DENIED, {"question": "how many users"}))
                report["allowed_call"] = await refused(session.call_tool("fx__outfit_ideas", {"occasion": "party"}))
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(URL, http_client=http), cache=None) as client:
            report["stateless_protocol"] = client.protocol_version
            report["stateless_all"] = names(await client.list_tools())
            result = await client.call_tool("set_context", QUERY)
            meta = {"io.switchyard/context": (result.structured_content or {}).get("context")}
            report["stateless_filtered"] = names(await client.list_tools(meta=meta))
            report["stateless_denied_call"] = await refused(
                client.call_tool(DENIED, {"question": "how many users"}, meta=meta)
            )
    print(json.dumps(report))


anyio.run(main)
