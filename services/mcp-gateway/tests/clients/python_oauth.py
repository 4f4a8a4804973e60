"""A real MCP client of a gateway that is an OAuth protected resource: the Python SDK (`mcp`)
with its OAuth client (client_credentials), which starts without a token, gets 401, reads the
protected resource metadata named in WWW-Authenticate, discovers the authorization server,
asks it for a token for this resource and retries — over both protocol revisions: the
low-level session (initialize, 2025-11-25) and the discover-first `Client` (2026-07-28).
Prints one JSON object with what it saw; tests/oauth.rs asserts on it."""

import json
import sys

import anyio
from mcp import Client, ClientSession
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

URL, ISSUER, CLIENT_ID, SECRET, SCOPE = sys.argv[1:6]
QUERY = {"query": "turn my question into an SQL query", "intent": "data analysis"}


class MemoryStorage:
    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


def provider(storage):
    return ClientCredentialsOAuthProvider(
        server_url=URL, storage=storage, client_id=CLIENT_ID, client_secret=SECRET, scope=SCOPE, issuer=ISSUER
    )


def names(listed):
    return [t.name for t in listed.tools]


async def outcome(call):
    """A call's text, or its error (code and message)."""
    try:
        result = await call
        return {"code": None, "text": result.content[0].text if result.content else ""}
    except Exception as err:  # the SDK raises MCPError for JSON-RPC errors
        error = getattr(err, "error", None)
        return {"code": getattr(error, "code", None), "text": str(getattr(error, "message", err))}


async def main() -> None:
    report = {}
    storage = MemoryStorage()
    async with create_mcp_http_client(auth=provider(storage)) as http:
        async with streamable_http_client(URL, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                report["protocol"] = init.protocol_version
                report["all"] = names(await session.list_tools())
                await session.call_tool("set_context", QUERY)
                report["filtered"] = names(await session.list_tools())
                report["sql_call"] = await outcome(session.call_tool("fx__sql_from_text", {"question": "how many"}))
                report["call"] = await outcome(session.call_tool("fx__outfit_ideas", {"occasion": "party"}))
    report["token_scope"] = storage.tokens.scope if storage.tokens else None
    storage = MemoryStorage()
    async with create_mcp_http_client(auth=provider(storage)) as http:
        async with Client(streamable_http_client(URL, http_client=http), cache=None) as client:
            report["stateless_protocol"] = client.protocol_version
            report["stateless_all"] = names(await client.list_tools())
            report["stateless_sql_call"] = await outcome(
                client.call_tool("fx__sql_from_text", {"question": "how many"})
            )
            report["stateless_call"] = await outcome(client.call_tool("fx__outfit_ideas", {"occasion": "party"}))
    print(json.dumps(report))


anyio.run(main)
