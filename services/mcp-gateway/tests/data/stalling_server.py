"""A stdio MCP server (Python SDK) for the gateway's server-fault tests (tests/server_faults.rs):
`hold` answers only after the seconds it is asked to wait, first creating the file it is given
so a test knows the call reached the server; `pid` names the process, so a test can kill it
mid-call; `echo` answers at once."""

import asyncio
import os
import pathlib

from mcp.server import MCPServer

app = MCPServer("switchyard-stalling-fixture")


@app.tool()
async def hold(seconds: float, mark: str) -> str:
    """Creates the file `mark`, then waits `seconds` before answering."""
    pathlib.Path(mark).touch()
    await asyncio.sleep(seconds)
    return f"held {seconds}s"


@app.tool()
def pid() -> str:
    """This server's process id."""
    return str(os.getpid())


@app.tool()
def echo(text: str) -> str:
    """Answers `text` at once."""
    return text


if __name__ == "__main__":
    app.run()
