//! The gateway as an MCP server (streamable HTTP at `/mcp`, or stdio): the aggregated tools
//! filtered by the session's context, the `set_context` tool, and resources and prompts of
//! every server passed through. One file per job:
//!
//! - `tools`: the gateway's own tools (`set_context`, search mode's `find_tools` and
//!   `call_tool`) and the list a client is shown; `meta`: what they do when called;
//! - `handler`: one client's handler, which session or context a request belongs to, and
//!   the MCP methods;
//! - `relay`: requests forwarded to a server, and what a server sends during a call relayed
//!   back; `ownership`: which server a prompt or resource belongs to;
//! - `changes`: list-change fan-out; `subscriptions`: resource subscriptions and
//!   `subscriptions/listen`;
//! - `error`: gateway errors as MCP errors; the transports: `http` and `stdio`.

mod changes;
mod error;
mod handler;
pub mod http;
mod meta;
mod ownership;
mod relay;
pub mod stdio;
mod subscriptions;
mod tools;

pub use error::to_mcp;
pub use handler::McpHandler;
pub use tools::{call_tool_tool, find_tools_tool, set_context_tool};
