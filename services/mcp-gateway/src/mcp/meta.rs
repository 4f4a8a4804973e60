//! What the gateway's own tools do when called: `set_context` (a session's, a handle's or a
//! caller's context), and in search mode `find_tools` (the ranking as a tool) and `call_tool`
//! (any tool by name). Their schemas are in [`super::tools`].

use rmcp::{
    ErrorData as McpError,
    model::{CallToolRequestParams, CallToolResult, ContentBlock, JsonObject},
};
use serde_json::json;
use switchyard_kit::Identity;

use super::{McpHandler, error::to_mcp, tools::MAX_FOUND};
use crate::{
    error::GatewayError,
    policy::Subject,
    scope::{self, CONTEXT_META, ContextScope},
};

impl McpHandler {
    pub(super) async fn set_context(
        &self,
        scope: ContextScope,
        identity: &Identity,
        subject: &Subject,
        arguments: Option<JsonObject>,
    ) -> Result<(CallToolResult, ContextScope), McpError> {
        let arguments = arguments.unwrap_or_default();
        let query = match arguments.get("query") {
            Some(serde_json::Value::String(query)) => query.clone(),
            Some(_) => return Err(McpError::invalid_params("set_context: `query` must be a string", None)),
            None => return Err(McpError::invalid_params("set_context: `query` is required", None)),
        };
        let intent = match arguments.get("intent") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(intent)) => Some(intent.clone()),
            Some(_) => return Err(McpError::invalid_params("set_context: `intent` must be a string", None)),
        };
        if let Some(unknown) = arguments.keys().find(|k| *k != "query" && *k != "intent") {
            return Err(McpError::invalid_params(format!("set_context: unknown argument `{unknown}`"), None));
        }
        let scope = match scope {
            // A stateless request with nowhere to keep a context: a new handle is that place.
            ContextScope::None => {
                let minted = scope::mint(identity);
                if let Some(key) = minted.key()
                    && let Err(err) = self.gateway.session_started(key).await
                {
                    switchyard_kit::warn_throttled!("session count", error = %err, "counting a new context handle");
                }
                minted
            }
            ContextScope::Handle(key) => {
                // Only handles the gateway minted and still holds: never a client-made one.
                if self.gateway.contexts().get(&key).await.map_err(|err| to_mcp(GatewayError::Store(err)))?.is_none() {
                    return Err(scope::unknown_handle(key.id.as_str()));
                }
                ContextScope::Handle(key)
            }
            other => other,
        };
        let Some(key) = scope.key() else {
            return Err(McpError::internal_error("set_context: no context key", None));
        };
        let (_, list) = self.gateway.set_context_as(subject, key, &query, intent.as_deref()).await.map_err(to_mcp)?;
        let names: Vec<&str> = list.tools.iter().map(|t| t.tool.name.as_str()).collect();
        let mut text = format!(
            "Context set. The {} most relevant of {} tools are now listed: {}. Other tools can still be called by name.",
            names.len(),
            list.total,
            names.join(", ")
        );
        if let Some(handle) = scope.handle() {
            text.push_str(&format!(" Send `_meta[\"{CONTEXT_META}\"]: \"{handle}\"` with later requests."));
        }
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({"tools": names, "total_tools": list.total}));
        give_handle(&mut result, &scope);
        Ok((result, scope))
    }

    /// `find_tools`: sets the context (so the usage learning sees the same pairs as in
    /// filtered mode) and returns the ranked tools with their schemas and score parts.
    pub(super) async fn find_tools(
        &self,
        scope: ContextScope,
        identity: &Identity,
        subject: &Subject,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, McpError> {
        let mut arguments = arguments.unwrap_or_default();
        let limit = match arguments.remove("limit") {
            None | Some(serde_json::Value::Null) => None,
            Some(value) => match value.as_u64() {
                Some(n @ 1..=MAX_FOUND) => Some(n as usize),
                _ => {
                    return Err(McpError::invalid_params(
                        format!("find_tools: `limit` must be an integer from 1 to {MAX_FOUND}"),
                        None,
                    ));
                }
            },
        };
        // The same checks as set_context's, under this tool's name.
        let (_, scope) = self
            .set_context(scope, identity, subject, Some(arguments))
            .await
            .map_err(|err| McpError::new(err.code, err.message.replace("set_context:", "find_tools:"), err.data))?;
        let list = self.gateway.list_tools_as(subject, scope.key(), limit).await.map_err(to_mcp)?;
        let tools: Vec<serde_json::Value> = list
            .tools
            .iter()
            .map(|shown| {
                let tool = &shown.tool.tool;
                let mut entry = json!({
                    "name": shown.tool.name,
                    "description": tool.description,
                    "input_schema": tool.input_schema,
                });
                if let Some(score) = shown.score {
                    entry["score"] = json!({
                        "total": score.score,
                        "bm25": score.bm25,
                        "embedding": score.embedding,
                        "usage_prior": score.usage_prior,
                    });
                }
                entry
            })
            .collect();
        let lines: Vec<String> = list
            .tools
            .iter()
            .map(|t| {
                let description = t.tool.tool.description.as_deref().unwrap_or_default();
                format!("- {}: {}", t.tool.name, description.lines().next().unwrap_or_default())
            })
            .collect();
        let text = format!("The {} best of {} tools:\n{}", lines.len(), list.total, lines.join("\n"));
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({"tools": tools, "total_tools": list.total}));
        give_handle(&mut result, &scope);
        Ok(result)
    }

    /// Search mode's `call_tool`: the request for the tool it names, with that tool's own
    /// arguments.
    pub(super) fn unwrap_call_tool(mut request: CallToolRequestParams) -> Result<CallToolRequestParams, McpError> {
        let mut arguments = request.arguments.take().unwrap_or_default();
        let name = match arguments.remove("name") {
            Some(serde_json::Value::String(name)) => name,
            _ => return Err(McpError::invalid_params("call_tool: `name` (a string) is required", None)),
        };
        let inner = match arguments.remove("arguments") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::Object(map)) => Some(map),
            Some(_) => return Err(McpError::invalid_params("call_tool: `arguments` must be an object", None)),
        };
        if let Some(unknown) = arguments.keys().next() {
            return Err(McpError::invalid_params(format!("call_tool: unknown argument `{unknown}`"), None));
        }
        request.name = name.into();
        request.arguments = inner;
        Ok(request)
    }
}

/// Puts a stateless context's handle where the client reads it back: the result's `_meta` (for
/// client code) and `structuredContent.context` (for the model).
fn give_handle(result: &mut CallToolResult, scope: &ContextScope) {
    let Some(handle) = scope.handle() else { return };
    if let Some(serde_json::Value::Object(structured)) = result.structured_content.as_mut() {
        structured.insert("context".to_owned(), json!(handle));
    }
    result.meta.get_or_insert_with(Default::default).insert(CONTEXT_META.to_owned(), json!(handle));
}
