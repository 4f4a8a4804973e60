//! The tools the gateway itself adds to the list — `set_context` always, `find_tools` and
//! `call_tool` in search mode — and the tool list as a client sees it. The schema of
//! `set_context` is the requirement's (docs/requirements.md#mcp-set-context).

use std::sync::Arc;

use rmcp::model::{JsonObject, ListToolsResult, Tool};
use serde_json::json;

use crate::{
    gateway::ToolList,
    naming::{CALL_TOOL, FIND_TOOLS, SET_CONTEXT},
};

pub(super) const INSTRUCTIONS: &str = "This server fronts many tool servers. Call `set_context` with the user's request (and \
your intent) before choosing tools: the tool list is then narrowed to the tools relevant to it. Call it again \
whenever the task changes.";

/// The `set_context` tool exactly as the requirements define it
/// (docs/requirements.md#mcp-set-context).
pub fn set_context_tool() -> Tool {
    Tool::new(
        SET_CONTEXT,
        "Tell the proxy what you're trying to accomplish so it can surface relevant tools",
        object(json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "The user's request or question"},
                "intent": {
                    "type": "string",
                    "description": "What you're trying to accomplish (e.g., 'file manipulation', 'data analysis')"
                }
            },
            "required": ["query"]
        })),
    )
}

/// Most tools `find_tools` returns at once.
pub(super) const MAX_FOUND: u64 = 50;

fn object(value: serde_json::Value) -> Arc<JsonObject> {
    match value {
        serde_json::Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// Search mode's `find_tools`: the gateway's ranking for a query, as a tool.
pub fn find_tools_tool() -> Tool {
    Tool::new(
        FIND_TOOLS,
        "Find the tools best suited to a task: returns their names, descriptions, input schemas and relevance \
         scores, best first, and makes the query the session's context. Then call one with `call_tool`.",
        object(json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "The user's request or question"},
                "intent": {"type": "string", "description": "What you're trying to accomplish"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_FOUND, "description": "How many tools (default: the gateway's top-k)"}
            },
            "required": ["query"]
        })),
    )
}

/// Search mode's `call_tool`: any tool of the gateway, by the name `find_tools` gave.
pub fn call_tool_tool() -> Tool {
    Tool::new(
        CALL_TOOL,
        "Call a tool found with `find_tools`, by name, with its arguments.",
        object(json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The tool's name, as find_tools returned it"},
                "arguments": {"type": "object", "description": "The tool's arguments, as its input schema describes"}
            },
            "required": ["name"]
        })),
    )
}

/// The list a client is shown: `set_context` first (unless left out), then the ranked tools.
pub(super) fn tool_list(set_context: bool, list: ToolList) -> ListToolsResult {
    let mut tools = Vec::with_capacity(list.tools.len() + 1);
    if set_context {
        tools.push(set_context_tool());
    }
    tools.extend(list.tools.into_iter().map(|t| t.tool.tool.clone()));
    ListToolsResult::with_all_items(tools)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_context_schema_is_the_spec_s() {
        let tool = set_context_tool();
        assert_eq!(tool.name, "set_context");
        assert_eq!(tool.input_schema["required"], json!(["query"]));
        assert_eq!(tool.input_schema["properties"]["query"]["type"], "string");
        assert_eq!(tool.input_schema["properties"]["intent"]["type"], "string");
    }
}
