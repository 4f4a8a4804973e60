"""Python SDK (`mcp`) clients of both revisions subscribed to one resource through the gateway,
which fronts tests/conformance/fixture_server.py: a session client with `resources/subscribe`,
and a discover-first `Client` (2026-07-28) with `subscriptions/listen`. A third client changes
the resource; both subscribers must hear it. Prints one JSON object with what each saw;
tests/subscriptions.rs asserts on it."""

import json
import sys

import anyio
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

URL = sys.argv[1]
WATCHED = "test://watched-resource"
WAIT = 20


async def main() -> None:
    report = {"session_heard": [], "listener_heard": []}
    session_told = anyio.Event()

    async def on_message(message) -> None:
        uri = getattr(getattr(message, "params", None), "uri", None)
        if uri is not None:
            report["session_heard"].append(str(uri))
            session_told.set()

    async with streamable_http_client(URL) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as subscriber:
            await subscriber.initialize()
            await subscriber.subscribe_resource(WATCHED)
            async with Client(URL) as stateless:
                report["listener_protocol"] = stateless.protocol_version
                async with stateless.listen(resource_subscriptions=[WATCHED, "test://nowhere"]) as listening:
                    report["honored"] = list(listening.honored.resource_subscriptions or [])
                    async with streamable_http_client(URL) as (read2, write2):
                        async with ClientSession(read2, write2) as changer:
                            await changer.initialize()
                            result = await changer.call_tool("test_update_resource", {"uri": WATCHED})
                            report["change"] = result.content[0].text
                    with anyio.move_on_after(WAIT):
                        async for event in listening:
                            report["listener_heard"].append(str(getattr(event, "uri", event)))
                            break
            with anyio.move_on_after(WAIT):
                await session_told.wait()
            await subscriber.unsubscribe_resource(WATCHED)
    print(json.dumps(report))


anyio.run(main)
