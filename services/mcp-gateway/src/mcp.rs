//! The gateway as an MCP server (streamable HTTP at `/mcp`, or stdio): the aggregated tools
//! filtered by the session's context, the `set_context` tool, and resources and prompts of
//! every server passed through.

use std::{borrow::Cow, sync::Arc};

#[allow(deprecated, reason = "legacy logging, still what session-based clients use")]
use rmcp::model::SetLevelRequestParams;
use rmcp::{
    ErrorData as McpError, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult, ContentBlock,
        GetPromptRequestParams, GetPromptResponse, Implementation, JsonObject, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
        ProgressNotificationParam, ProgressToken, Prompt, ProtocolVersion, ReadResourceRequestParams,
        ReadResourceResponse, Reference, RequestParamsMeta, ServerCapabilities, ServerConfig, SubscribeRequestParams,
        Tool, UnsubscribeRequestParams,
    },
    service::{NotificationContext, Peer, RequestContext, RoleServer},
};
use serde_json::json;
use switchyard_kit::{Identity, SessionId};

use crate::{
    config::ToolMode,
    error::GatewayError,
    gateway::{Gateway, ToolList},
    naming::{self, CALL_TOOL, FIND_TOOLS, SET_CONTEXT},
    store::SessionKey,
    upstream::{ProgressSink, Upstream},
};

const INSTRUCTIONS: &str = "This server fronts many tool servers. Call `set_context` with the user's request (and \
your intent) before choosing tools: the tool list is then narrowed to the tools relevant to it. Call it again \
whenever the task changes.";

/// The `set_context` tool exactly as spec "Context Injection" defines it.
pub fn set_context_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "The user's request or question"},
            "intent": {
                "type": "string",
                "description": "What you're trying to accomplish (e.g., 'file manipulation', 'data analysis')"
            }
        },
        "required": ["query"]
    });
    let schema: JsonObject = match schema {
        serde_json::Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    Tool::new(
        SET_CONTEXT,
        "Tell the proxy what you're trying to accomplish so it can surface relevant tools",
        Arc::new(schema),
    )
}

/// Most tools `find_tools` returns at once.
const MAX_FOUND: u64 = 50;

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

/// One MCP session's handler (the HTTP transport makes one per session; stdio has one).
#[derive(Clone)]
pub struct McpHandler {
    gateway: Arc<Gateway>,
    /// The session id when the transport has none of its own (stdio).
    fixed_session: Option<String>,
}

impl McpHandler {
    /// For the HTTP transport: the session is the `Mcp-Session-Id` of each request.
    pub fn http(gateway: Arc<Gateway>) -> Self {
        Self { gateway, fixed_session: None }
    }

    /// For stdio: one process, one session.
    pub fn stdio(gateway: Arc<Gateway>) -> Self {
        Self { gateway, fixed_session: Some(format!("stdio-{}", uuid::Uuid::new_v4())) }
    }

    /// The session of a request: the tenant the kit's identity layer read from the HTTP
    /// headers (stdio has none: the default tenant) and the MCP session id.
    fn key(&self, extensions: &rmcp::model::Extensions) -> Result<Option<SessionKey>, McpError> {
        let parts = extensions.get::<http::request::Parts>();
        let identity = parts.map(|p| Identity::from_extensions(&p.extensions)).unwrap_or_default();
        let header = parts.and_then(|p| p.headers.get("mcp-session-id")).and_then(|v| v.to_str().ok());
        let Some(session) = header.map(str::to_owned).or_else(|| self.fixed_session.clone()) else {
            return Ok(None);
        };
        let id = SessionId::parse_field(&session, "mcp-session-id")
            .map_err(|err| McpError::invalid_request(err.to_string(), None))?;
        Ok(Some(identity.session(id)))
    }

    async fn set_context(
        &self,
        key: Option<SessionKey>,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, McpError> {
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
        let Some(key) = key else {
            // Stateless protocol versions carry no session to keep a context in.
            return Err(McpError::invalid_request(
                "set_context needs a session: connect with a session-based protocol version (Mcp-Session-Id)",
                None,
            ));
        };
        let (_, list) = self.gateway.set_context(&key, &query, intent.as_deref()).await.map_err(to_mcp)?;
        let names: Vec<&str> = list.tools.iter().map(|t| t.tool.name.as_str()).collect();
        let text = format!(
            "Context set. The {} most relevant of {} tools are now listed: {}. Other tools can still be called by name.",
            names.len(),
            list.total,
            names.join(", ")
        );
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({"tools": names, "total_tools": list.total}));
        Ok(result)
    }

    /// `find_tools`: sets the context (so the usage learning sees the same pairs as in
    /// filtered mode) and returns the ranked tools with their schemas and score parts.
    async fn find_tools(
        &self,
        key: Option<SessionKey>,
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
        let Some(key) = key else {
            return Err(McpError::invalid_request(
                "find_tools needs a session: connect with a session-based protocol version (Mcp-Session-Id)",
                None,
            ));
        };
        // The same checks as set_context's, under this tool's name.
        self.set_context(Some(key.clone()), Some(arguments))
            .await
            .map_err(|err| McpError::new(err.code, err.message.replace("set_context:", "find_tools:"), err.data))?;
        let list = self.gateway.list_tools(Some(&key), limit).await.map_err(to_mcp)?;
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
        Ok(result)
    }

    fn mode(&self) -> ToolMode {
        self.gateway.settings().tool_mode
    }
}

/// Gateway errors as MCP errors: the caller's mistakes as invalid params (naming what), a
/// downstream's own error passed back unchanged.
pub fn to_mcp(err: GatewayError) -> McpError {
    match err {
        GatewayError::InvalidArgument { .. } => McpError::invalid_params(err.to_string(), None),
        GatewayError::UnknownTool(ref name) => McpError::invalid_params(err.to_string(), Some(json!({"tool": name}))),
        GatewayError::Downstream(inner) => inner,
        GatewayError::ServerUnavailable(_) | GatewayError::Timeout { .. } | GatewayError::Store(_) => {
            McpError::internal_error(err.to_string(), None)
        }
        GatewayError::Internal(_) => McpError::internal_error(err.to_string(), None),
    }
}

/// A call's progress, back to the MCP client that made it under the token it chose.
struct ClientProgress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
}

#[async_trait::async_trait]
impl ProgressSink for ClientProgress {
    async fn relay(&self, mut params: ProgressNotificationParam) {
        params.progress_token = self.token.clone();
        let _ = self.peer.notify_progress(params).await;
    }
}

fn tool_list(set_context: bool, list: ToolList) -> ListToolsResult {
    let mut tools = Vec::with_capacity(list.tools.len() + 1);
    if set_context {
        tools.push(set_context_tool());
    }
    tools.extend(list.tools.into_iter().map(|t| t.tool.tool.clone()));
    ListToolsResult::with_all_items(tools)
}

impl ServerHandler for McpHandler {
    /// Session-based protocol versions only (up to 2025-11-25): a context belongs to an MCP
    /// session, and 2026-07-28 has none. Clients that discover first fall back to
    /// `initialize`.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::LATEST_WITH_INITIALIZE))
    }

    #[allow(deprecated, reason = "legacy logging, still what session-based clients use")]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_completions()
                .enable_logging()
                .enable_prompts()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("switchyard-mcp-gateway", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Ok(Some(key)) = self.key(&context.extensions)
            && let Err(err) = self.gateway.session_started(&key).await
        {
            tracing::warn!(error = %err, "counting a new MCP session");
        }
        // Tell this client whenever the tool catalog changes (a server came, went or changed
        // its tools), until its session ends.
        let mut changes = self.gateway.subscribe_catalog();
        let peer = context.peer.clone();
        tokio::spawn(async move {
            while let Ok(()) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) = changes.recv().await {
                if peer.notify_tool_list_changed().await.is_err() {
                    break;
                }
            }
        });
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        if self.mode() == ToolMode::Search {
            // A fixed surface: the list never changes, whatever the context.
            return Ok(ListToolsResult::with_all_items(vec![set_context_tool(), find_tools_tool(), call_tool_tool()]));
        }
        let key = self.key(&context.extensions)?;
        let list = self.gateway.list_tools(key.as_ref(), None).await.map_err(to_mcp)?;
        Ok(tool_list(true, list))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let key = self.key(&context.extensions)?;
        let search = self.mode() == ToolMode::Search;
        if request.name == SET_CONTEXT {
            let result = self.set_context(key, request.arguments).await?;
            // The list this client sees has changed with its context (not in search mode,
            // whose list is fixed).
            if !search {
                let _ = context.peer.notify_tool_list_changed().await;
            }
            return Ok(result.into());
        }
        let mut request = request;
        if search && request.name == FIND_TOOLS {
            return Ok(self.find_tools(key, request.arguments).await?.into());
        }
        if search && request.name == CALL_TOOL {
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
        }
        let token = context.meta.get_progress_token().or_else(|| request.progress_token());
        let progress =
            token.map(|token| Arc::new(ClientProgress { peer: context.peer.clone(), token }) as Arc<dyn ProgressSink>);
        let outcome = self
            .gateway
            .call_tool_with_progress(key.as_ref(), &request.name, request.arguments, progress)
            .await
            .map_err(to_mcp)?;
        Ok(outcome.response)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let resources = self.gateway.upstreams().servers().iter().flat_map(|s| s.listing().resources.clone()).collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let templates =
            self.gateway.upstreams().servers().iter().flat_map(|s| s.listing().resource_templates.clone()).collect();
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let owner = self.resource_owner(&request.uri)?;
        let peer = owner.peer().map_err(|why| McpError::internal_error(why, None))?;
        peer.read_resource_once(request).await.map_err(|err| service_error(owner.name(), err))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let prompts = self
            .prompts()
            .into_iter()
            .map(|entry| {
                let mut prompt = entry.prompt;
                prompt.name = entry.name;
                prompt
            })
            .collect();
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        mut request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let entry = self.prompt(&request.name)?;
        let peer = entry.server.peer().map_err(|why| McpError::internal_error(why, None))?;
        request.name = entry.prompt.name;
        peer.get_prompt_once(request).await.map_err(|err| service_error(entry.server.name(), err))
    }

    async fn complete(
        &self,
        mut request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let server = match &mut request.r#ref {
            Reference::Prompt(prompt) => {
                let entry = self.prompt(&prompt.name)?;
                prompt.name = entry.prompt.name;
                entry.server
            }
            Reference::Resource(resource) => self.resource_owner(&resource.uri)?,
            #[allow(unreachable_patterns)]
            _ => return Ok(CompleteResult::default()),
        };
        let peer = server.peer().map_err(|why| McpError::internal_error(why, None))?;
        peer.complete(request).await.map_err(|err| service_error(server.name(), err))
    }

    #[allow(deprecated, reason = "legacy logging, still what session-based clients use")]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        // Passed on to every connected server that logs; accepted even if none does.
        for server in self.gateway.upstreams().servers() {
            if let Ok(peer) = server.peer()
                && peer.peer_info().is_some_and(|info| info.capabilities.logging.is_some())
            {
                let _ = peer.set_level(request.clone()).await;
            }
        }
        Ok(())
    }

    #[allow(deprecated, reason = "legacy subscriptions, still what session-based clients use")]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let server = self.resource_owner(&request.uri)?;
        let peer = server.peer().map_err(|why| McpError::internal_error(why, None))?;
        peer.subscribe(request).await.map_err(|err| service_error(server.name(), err))
    }

    #[allow(deprecated, reason = "legacy subscriptions, still what session-based clients use")]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let server = self.resource_owner(&request.uri)?;
        let peer = server.peer().map_err(|why| McpError::internal_error(why, None))?;
        peer.unsubscribe(request).await.map_err(|err| service_error(server.name(), err))
    }
}

/// A prompt under its gateway name.
struct PromptEntry {
    name: String,
    server: Arc<Upstream>,
    /// The server's prompt, under its own name.
    prompt: Prompt,
}

impl McpHandler {
    /// Every server's prompts, named like tools (`<server>__<prompt>`, or their own names when
    /// prefixing is off and they are free).
    fn prompts(&self) -> Vec<PromptEntry> {
        let servers = self.gateway.upstreams().servers();
        let listed: Vec<(Arc<Upstream>, Prompt)> = servers
            .iter()
            .flat_map(|s| s.listing().prompts.iter().map(|p| (s.clone(), p.clone())).collect::<Vec<_>>())
            .collect();
        let pairs: Vec<(&str, &str)> = listed.iter().map(|(s, p)| (s.name(), p.name.as_str())).collect();
        let (names, _) = naming::assign(&pairs, self.gateway.settings().prefix_tools);
        listed.into_iter().zip(names).map(|((server, prompt), name)| PromptEntry { name, server, prompt }).collect()
    }

    fn prompt(&self, name: &str) -> Result<PromptEntry, McpError> {
        self.prompts()
            .into_iter()
            .find(|entry| entry.name == name)
            .ok_or_else(|| McpError::invalid_params(format!("unknown prompt `{name}`"), None))
    }

    /// The server that listed `uri`, else the first whose templates could produce it.
    fn resource_owner(&self, uri: &str) -> Result<Arc<Upstream>, McpError> {
        let servers = self.gateway.upstreams().servers();
        servers
            .iter()
            .find(|s| s.listing().resources.iter().any(|r| r.uri == uri))
            .or_else(|| {
                servers
                    .iter()
                    .find(|s| s.listing().resource_templates.iter().any(|t| template_matches(&t.uri_template, uri)))
            })
            .cloned()
            .ok_or_else(|| McpError::resource_not_found(format!("no server offers resource `{uri}`"), None))
    }
}

fn service_error(server: &str, err: rmcp::ServiceError) -> McpError {
    match err {
        rmcp::ServiceError::McpError(inner) => inner,
        other => McpError::internal_error(format!("server `{server}`: {other}"), None),
    }
}

/// Whether `uri` could come from an RFC 6570 level-1 template (`file:///{path}`): the literal
/// parts must appear in order.
fn template_matches(template: &str, uri: &str) -> bool {
    let mut rest = uri;
    let mut pieces = template.split('{').enumerate().peekable();
    while let Some((i, piece)) = pieces.next() {
        let literal = if i == 0 { piece } else { piece.split_once('}').map_or("", |(_, after)| after) };
        if i == 0 {
            match rest.strip_prefix(literal) {
                Some(after) => rest = after,
                None => return false,
            }
        } else if pieces.peek().is_none() && !literal.is_empty() {
            return rest.ends_with(literal);
        } else if let Some(at) = rest.find(literal) {
            rest = &rest[at + literal.len()..];
        } else {
            return false;
        }
    }
    true
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

    #[test]
    fn templates() {
        assert!(template_matches("demo://resource/static/document/{name}", "demo://resource/static/document/a.md"));
        assert!(template_matches("test://{id}/data.json", "test://7/data.json"));
        assert!(!template_matches("test://{id}/data.json", "test://7/data.xml"));
        assert!(!template_matches("other://{x}", "test://1"));
    }
}
