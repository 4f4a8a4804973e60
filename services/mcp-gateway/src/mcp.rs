//! The gateway as an MCP server (streamable HTTP at `/mcp`, or stdio): the aggregated tools
//! filtered by the session's context, the `set_context` tool, and resources and prompts of
//! every server passed through.

use std::{borrow::Cow, sync::Arc};

#[allow(deprecated, reason = "legacy logging, still what session-based clients use")]
use rmcp::model::SetLevelRequestParams;
use rmcp::{
    ErrorData as McpError, ServerHandler,
    model::{
        CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ClientResult, CompleteRequestParams,
        CompleteResult, ContentBlock, DiscoverResult, GetPromptRequestParams, GetPromptResponse, Implementation,
        JsonObject, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
        PaginatedRequestParams, ProgressNotificationParam, ProgressToken, Prompt, ProtocolVersion,
        ReadResourceRequestParams, ReadResourceResponse, Reference, RequestParamsMeta,
        ResourceUpdatedNotificationParam, ResultType, ServerCapabilities, ServerConfig, ServerRequest,
        SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams,
    },
    service::{NotificationContext, Peer, RequestContext, RoleServer, SubscriptionContext, SubscriptionSink},
};
use serde_json::json;
use switchyard_kit::{Identity, SessionId};
use tokio::sync::broadcast::{self, error::RecvError};

use crate::{
    config::ToolMode,
    error::GatewayError,
    gateway::{Gateway, ToolList},
    naming::{self, CALL_TOOL, FIND_TOOLS, SET_CONTEXT},
    scope::{self, CONTEXT_META, ContextScope},
    store::SessionKey,
    upstream::{Caller, ListChanged, Subscriber, Upstream},
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

/// How long a client may keep `server/discover`'s answer: it changes only with a new release.
const DISCOVER_TTL_MS: u64 = 60 * 60 * 1000;

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
    /// This client connection, for telling its calls from other clients' ([`Caller::client_id`]).
    client: u64,
}

/// Numbers client connections.
static CLIENTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_client() -> u64 {
    CLIENTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl McpHandler {
    /// For the HTTP transport: the session is the `Mcp-Session-Id` of each request.
    pub fn http(gateway: Arc<Gateway>) -> Self {
        Self { gateway, fixed_session: None, client: next_client() }
    }

    /// For stdio: one process, one session.
    pub fn stdio(gateway: Arc<Gateway>) -> Self {
        Self { gateway, fixed_session: Some(format!("stdio-{}", uuid::Uuid::new_v4())), client: next_client() }
    }

    /// The session of a session-based request: the tenant the kit's identity layer read from
    /// the HTTP headers (stdio has none: the default tenant) and the MCP session id.
    fn session_key(&self, extensions: &rmcp::model::Extensions) -> Result<Option<SessionKey>, McpError> {
        let parts = extensions.get::<http::request::Parts>();
        let header = parts.and_then(|p| p.headers.get("mcp-session-id")).and_then(|v| v.to_str().ok());
        let Some(session) = header.map(str::to_owned).or_else(|| self.fixed_session.clone()) else {
            return Ok(None);
        };
        let id = SessionId::parse_field(&session, "mcp-session-id")
            .map_err(|err| McpError::invalid_request(err.to_string(), None))?;
        Ok(Some(identity(extensions).session(id)))
    }

    /// Waits for a request forwarded to `server` no longer than `--call-timeout`, so a server
    /// that stops answering costs the client an error, not a request that never ends.
    async fn forwarded<T>(
        &self,
        server: &str,
        method: &str,
        request: impl Future<Output = Result<T, rmcp::ServiceError>>,
    ) -> Result<T, McpError> {
        let timeout = self.gateway.settings().call_timeout;
        match tokio::time::timeout(timeout, request).await {
            Ok(result) => result.map_err(|err| service_error(server, err)),
            Err(_) => Err(McpError::internal_error(
                format!("server `{server}` did not answer {method} within {timeout:?}"),
                None,
            )),
        }
    }

    /// The session that subscribes (its store key): updates need a session's stream to go to,
    /// which a stateless (2026-07-28) request does not have. (That revision has no
    /// `resources/subscribe`, so the transport refuses it first; this holds should one reach
    /// the handler anyway.)
    fn subscribing_session(&self, context: &RequestContext<RoleServer>, what: &str) -> Result<String, McpError> {
        match self.session_key(&context.extensions)? {
            Some(key) => Ok(key.store_key()),
            None => Err(McpError::invalid_request(
                format!(
                    "{what} needs an MCP session (protocol revisions up to 2025-11-25): a request without one \
                     has no stream for notifications/resources/updated"
                ),
                None,
            )),
        }
    }

    /// Where a request's context lives: its MCP session, or for a stateless (2026-07-28)
    /// request the handle in its `_meta` or the caller (see [`crate::scope`]).
    fn scope(&self, context: &RequestContext<RoleServer>) -> Result<ContextScope, McpError> {
        match self.session_key(&context.extensions)? {
            Some(key) => Ok(ContextScope::Session(key)),
            None => scope::stateless(&identity(&context.extensions), &context.meta),
        }
    }

    async fn set_context(
        &self,
        scope: ContextScope,
        identity: &Identity,
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
                    tracing::warn!(error = %err, "counting a new context handle");
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
        let (_, list) = self.gateway.set_context(key, &query, intent.as_deref()).await.map_err(to_mcp)?;
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
    async fn find_tools(
        &self,
        scope: ContextScope,
        identity: &Identity,
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
            .set_context(scope, identity, Some(arguments))
            .await
            .map_err(|err| McpError::new(err.code, err.message.replace("set_context:", "find_tools:"), err.data))?;
        let list = self.gateway.list_tools(scope.key(), limit).await.map_err(to_mcp)?;
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

    fn mode(&self) -> ToolMode {
        self.gateway.settings().tool_mode
    }
}

/// Gateway errors as MCP errors: the caller's mistakes as invalid params (naming what), a
/// downstream's own error passed back unchanged.
pub fn to_mcp(err: GatewayError) -> McpError {
    // The one place the gateway's own errors become an MCP client's: each logged here, once (a
    // downstream server's error is that server's, passed on as it is).
    match &err {
        GatewayError::Downstream(_) => {}
        GatewayError::InvalidArgument { .. } | GatewayError::UnknownTool(_) => {
            tracing::info!(error = %err, "mcp request refused");
        }
        _ => tracing::error!(error = %err, "mcp request failed"),
    }
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

/// Puts a stateless context's handle where the client reads it back: the result's `_meta` (for
/// client code) and `structuredContent.context` (for the model).
fn give_handle(result: &mut CallToolResult, scope: &ContextScope) {
    let Some(handle) = scope.handle() else { return };
    if let Some(serde_json::Value::Object(structured)) = result.structured_content.as_mut() {
        structured.insert("context".to_owned(), json!(handle));
    }
    result.meta.get_or_insert_with(Default::default).insert(CONTEXT_META.to_owned(), json!(handle));
}

/// The caller as the kit's identity layer read it from the HTTP headers (stdio has none: the
/// default tenant).
fn identity(extensions: &rmcp::model::Extensions) -> Identity {
    extensions.get::<http::request::Parts>().map(|p| Identity::from_extensions(&p.extensions)).unwrap_or_default()
}

/// The MCP client a call is made for: what the downstream server sends during the call goes
/// back to it — progress under the token the client chose, log messages, and the server's
/// requests (sampling, elicitation, roots), each only if the client declared it can answer.
struct ClientCaller {
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    client: u64,
    /// How long the client has to answer a request (a person may be answering an elicitation).
    timeout: std::time::Duration,
}

#[async_trait::async_trait]
impl Caller for ClientCaller {
    async fn progress(&self, mut params: ProgressNotificationParam) {
        // A client that sent no token asked for no progress.
        if let Some(token) = &self.token {
            params.progress_token = token.clone();
            let _ = self.peer.notify_progress(params).await;
        }
    }

    #[allow(deprecated, reason = "legacy logging, still what session-based clients use")]
    async fn log(&self, params: rmcp::model::LoggingMessageNotificationParam) {
        let _ = self.peer.notify_logging_message(params).await;
    }

    async fn request(&self, request: ServerRequest) -> Result<ClientResult, McpError> {
        let capabilities = self.peer.peer_info().map(|info| info.capabilities.clone()).unwrap_or_default();
        let (what, declared) = match &request {
            ServerRequest::CreateMessageRequest(_) => ("sampling", capabilities.sampling.is_some()),
            ServerRequest::ElicitRequest(_) => ("elicitation", capabilities.elicitation.is_some()),
            ServerRequest::ListRootsRequest(_) => ("roots", capabilities.roots.is_some()),
            _ => ("this request", false),
        };
        if !declared {
            return Err(McpError::invalid_request(format!("the calling client does not support {what}"), None));
        }
        match tokio::time::timeout(self.timeout, self.peer.send_request(request)).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(rmcp::ServiceError::McpError(err))) => Err(err),
            Ok(Err(err)) => Err(McpError::internal_error(format!("asking the calling client for {what}: {err}"), None)),
            Err(_) => Err(McpError::internal_error(
                format!("the calling client did not answer {what} within {:?}", self.timeout),
                None,
            )),
        }
    }

    fn client_id(&self) -> u64 {
        self.client
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
    /// Every revision up to 2026-07-28: session-based clients keep their context in the MCP
    /// session, stateless ones in a handle or their identity ([`crate::scope`]).
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    /// `server/discover` (2026-07-28): the same capabilities, with instructions that say where
    /// a stateless client's context lives. The answer is the same for every caller.
    async fn discover(&self, _context: RequestContext<RoleServer>) -> Result<DiscoverResult, McpError> {
        let mut info = self.get_info();
        info.instructions = Some(format!(
            "{INSTRUCTIONS} Without a session (protocol 2026-07-28), `set_context` returns a context handle in \
             `_meta[\"{CONTEXT_META}\"]` of its result: send it back in `_meta[\"{CONTEXT_META}\"]` of later \
             requests (tools/list, tools/call, set_context)."
        ));
        Ok(DiscoverResult::from_server_info(self.supported_protocol_versions().into_owned(), info)
            .with_cache_scope(CacheScope::Public)
            .with_ttl_ms(DISCOVER_TTL_MS))
    }

    #[allow(deprecated, reason = "legacy logging, still what session-based clients use")]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_completions()
                .enable_logging()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("switchyard-mcp-gateway", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Ok(Some(key)) = self.session_key(&context.extensions)
            && let Err(err) = self.gateway.session_started(&key).await
        {
            tracing::warn!(error = %err, "counting a new MCP session");
        }
        // Tell this client whenever the tool catalog changes (a server came, went or changed
        // its tools) and whenever a server's resources or prompts change, until its session
        // ends.
        let changes = ListChanges::new(&self.gateway);
        let peer = context.peer.clone();
        tokio::spawn(async move { changes.tell(&peer, |_| true).await });
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
        let scope = self.scope(&context)?;
        let list = self.gateway.list_tools(scope.key(), None).await.map_err(to_mcp)?;
        if let (ContextScope::Handle(key), false) = (&scope, list.filtered) {
            // A handle whose context is gone would silently list every tool.
            return Err(scope::unknown_handle(key.id.as_str()));
        }
        // A filtered list is this caller's alone; caches (2026-07-28's `cacheScope`) must not
        // share it, and it changes whenever the context does.
        let scope = if list.filtered { CacheScope::Private } else { CacheScope::Public };
        Ok(tool_list(true, list).with_cache_scope(scope).with_ttl_ms(0))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let scope = self.scope(&context)?;
        let identity = identity(&context.extensions);
        let search = self.mode() == ToolMode::Search;
        if request.name == SET_CONTEXT {
            let stateless = scope.is_stateless();
            let (result, _) = self.set_context(scope, &identity, request.arguments).await?;
            // The list this client sees has changed with its context (not in search mode,
            // whose list is fixed; a stateless client has no channel for notifications).
            if !search && !stateless {
                let _ = context.peer.notify_tool_list_changed().await;
            }
            return Ok(result.into());
        }
        let mut request = request;
        if search && request.name == FIND_TOOLS {
            return Ok(self.find_tools(scope, &identity, request.arguments).await?.into());
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
        let caller = Arc::new(ClientCaller {
            peer: context.peer.clone(),
            token: context.meta.get_progress_token().or_else(|| request.progress_token()),
            client: self.client,
            timeout: self.gateway.settings().call_timeout,
        });
        let outcome = self
            .gateway
            .call_tool_for(scope.key(), &request.name, request.arguments, Some(caller))
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
        let mut response = self.forwarded(owner.name(), "resources/read", peer.read_resource_once(request)).await?;
        if let ReadResourceResponse::Complete(result) = &mut response {
            result.result_type.get_or_insert(ResultType::COMPLETE);
        }
        Ok(response)
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
        let mut response = self.forwarded(entry.server.name(), "prompts/get", peer.get_prompt_once(request)).await?;
        if let GetPromptResponse::Complete(result) = &mut response {
            result.result_type.get_or_insert(ResultType::COMPLETE);
        }
        Ok(response)
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
        let mut result = self.forwarded(server.name(), "completion/complete", peer.complete(request)).await?;
        result.result_type.get_or_insert(ResultType::COMPLETE);
        Ok(result)
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

    /// `subscriptions/listen` (2026-07-28): the notification channel of a client without a
    /// session. It hears of tool-list changes (not in search mode, whose list never changes),
    /// resource and prompt list changes, and updates of the resources it names — those some
    /// server offers and can be subscribed to at; the acknowledged filter leaves out the rest.
    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let mut accepted = requested.clone();
        if self.mode() == ToolMode::Search {
            accepted.tools_list_changed = None;
        }
        if let Some(uris) = accepted.resource_subscriptions.as_mut() {
            uris.retain(|uri| self.resource_owner(uri).is_ok_and(|server| supports_subscriptions(&server)));
        }
        Some(accepted)
    }

    /// Runs one `subscriptions/listen` until the client cancels it or its stream closes. Its
    /// resource subscriptions share the downstream ones of session clients (see
    /// [`crate::upstream::Subscriptions`]) and end with it; a listen keyed to a context (see
    /// [`crate::scope`]) also hears that context being set.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        // A listen carrying a context handle in `_meta` (or from an authenticated caller) is
        // told when that context is set again, as a session client is after its set_context.
        let scope = self.scope(context.request_context())?;
        let sink = context.sink().clone();
        let accepted = context.accepted().clone();
        let upstreams = self.gateway.upstreams();
        let listener = format!("listen-{}", uuid::Uuid::new_v4());
        let subscriber: Arc<dyn Subscriber> = Arc::new(ListenSubscriber(sink.clone()));
        for uri in accepted.resource_subscriptions.iter().flatten() {
            let Ok(server) = self.resource_owner(uri) else { continue };
            let downstream = upstreams.subscriptions().add(server.name(), uri, &listener, subscriber.clone());
            // A server that is down is subscribed when it is back (the supervisor).
            let Ok(peer) = server.peer() else { continue };
            #[allow(deprecated, reason = "servers behind the gateway still use legacy subscriptions")]
            let subscribe = self.forwarded(
                server.name(),
                "resources/subscribe",
                peer.subscribe(SubscribeRequestParams::new(uri.clone())),
            );
            if let Err(err) = downstream.ensure(subscribe).await {
                tracing::warn!(server = %server.name(), %uri, error = %err.message, "subscribing downstream for a listener");
            }
        }
        let wanted = |kind: ListChanged| {
            let flag = match kind {
                ListChanged::Tools => accepted.tools_list_changed,
                ListChanged::Resources => accepted.resources_list_changed,
                ListChanged::Prompts => accepted.prompts_list_changed,
            };
            flag == Some(true)
        };
        tokio::select! {
            () = context.cancelled() => {}
            () = ListChanges::new(&self.gateway).with_context(&self.gateway, scope.key()).tell(&sink, wanted) => {}
        }
        upstreams.release(upstreams.subscriptions().end_session(&listener)).await;
        Ok(())
    }

    /// Subscribes this session to a resource: the owning server's
    /// `notifications/resources/updated` for it reach this session (and only the sessions
    /// subscribed), over one downstream subscription however many sessions hold it.
    #[allow(deprecated, reason = "legacy subscriptions, still what session-based clients use")]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let session = self.subscribing_session(&context, "resources/subscribe")?;
        let server = self.resource_owner(&request.uri)?;
        let peer = server.peer().map_err(|why| McpError::internal_error(why, None))?;
        let subscriptions = self.gateway.upstreams().subscriptions();
        let subscriber = Arc::new(ClientSubscriber { peer: context.peer.clone() });
        let downstream = subscriptions.add(server.name(), &request.uri, &session, subscriber);
        // The first subscriber makes the downstream subscription; any who come meanwhile wait
        // for it, so none is told it is subscribed while the server refused.
        let subscribe = self.forwarded(server.name(), "resources/subscribe", peer.subscribe(request.clone()));
        if let Err(err) = downstream.ensure(subscribe).await {
            subscriptions.remove(server.name(), &request.uri, &session);
            return Err(err);
        }
        Ok(())
    }

    /// Takes this session off a resource; the downstream subscription ends with its last
    /// subscriber. Unsubscribing from a resource the session does not hold is not an error.
    #[allow(deprecated, reason = "legacy subscriptions, still what session-based clients use")]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let session = self.subscribing_session(&context, "resources/unsubscribe")?;
        let upstreams = self.gateway.upstreams();
        upstreams.release(upstreams.subscriptions().leave(&request.uri, &session)).await;
        Ok(())
    }
}

/// The list changes a client hears of: the published tool catalog (the tools clients are
/// shown: a server's own tool list only matters once the catalog built from it changes),
/// servers' resources and prompts, and for a stateless listener keyed to a context (a handle,
/// or the authenticated caller) that context being set again, which changes its filtered list.
struct ListChanges {
    catalog: broadcast::Receiver<()>,
    listings: broadcast::Receiver<ListChanged>,
    context: Option<(SessionKey, broadcast::Receiver<SessionKey>)>,
}

impl ListChanges {
    fn new(gateway: &Gateway) -> Self {
        Self { catalog: gateway.subscribe_catalog(), listings: gateway.upstreams().subscribe_listings(), context: None }
    }

    /// Also tells of `key`'s context being set (session clients are told by their own
    /// `set_context` call instead).
    fn with_context(mut self, gateway: &Gateway, key: Option<&SessionKey>) -> Self {
        self.context = key.map(|key| (key.clone(), gateway.subscribe_contexts()));
        self
    }

    /// The kinds that changed next (every kind a lagging receiver may have missed), or None
    /// once the gateway shuts down.
    async fn next(&mut self) -> Option<&'static [ListChanged]> {
        loop {
            let context_set = async {
                match &mut self.context {
                    Some((key, contexts)) => match contexts.recv().await {
                        Ok(set) => Some(set == *key),
                        // Ours may be among those missed.
                        Err(RecvError::Lagged(_)) => Some(true),
                        Err(RecvError::Closed) => None,
                    },
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = self.catalog.recv() => return match changed {
                    Ok(()) | Err(RecvError::Lagged(_)) => Some(&[ListChanged::Tools]),
                    Err(RecvError::Closed) => None,
                },
                changed = self.listings.recv() => match changed {
                    Ok(ListChanged::Resources) => return Some(&[ListChanged::Resources]),
                    Ok(ListChanged::Prompts) => return Some(&[ListChanged::Prompts]),
                    Ok(ListChanged::Tools) => {}
                    Err(RecvError::Lagged(_)) => return Some(&[ListChanged::Resources, ListChanged::Prompts]),
                    Err(RecvError::Closed) => return None,
                },
                ours = context_set => match ours {
                    Some(true) => return Some(&[ListChanged::Tools]),
                    Some(false) => {}
                    None => return None,
                },
            }
        }
    }

    /// Tells `client` of every change it `wants`, until the gateway shuts down or the client
    /// is gone.
    async fn tell(mut self, client: &impl ChangeListener, wants: impl Fn(ListChanged) -> bool) {
        while let Some(kinds) = self.next().await {
            for kind in kinds.iter().copied().filter(|kind| wants(*kind)) {
                if !client.list_changed(kind).await {
                    return;
                }
            }
        }
    }
}

/// Where list changes go: a session's peer, or a `subscriptions/listen` stream.
#[async_trait::async_trait]
trait ChangeListener: Sync {
    /// Sends `notifications/<kind>/list_changed`; false when the client is gone.
    async fn list_changed(&self, kind: ListChanged) -> bool;
}

#[async_trait::async_trait]
impl ChangeListener for Peer<RoleServer> {
    async fn list_changed(&self, kind: ListChanged) -> bool {
        match kind {
            ListChanged::Tools => self.notify_tool_list_changed().await,
            ListChanged::Resources => self.notify_resource_list_changed().await,
            ListChanged::Prompts => self.notify_prompt_list_changed().await,
        }
        .is_ok()
    }
}

#[async_trait::async_trait]
impl ChangeListener for SubscriptionSink {
    async fn list_changed(&self, kind: ListChanged) -> bool {
        match kind {
            ListChanged::Tools => self.notify_tool_list_changed().await,
            ListChanged::Resources => self.notify_resource_list_changed().await,
            ListChanged::Prompts => self.notify_prompt_list_changed().await,
        }
        .is_ok()
    }
}

/// A `subscriptions/listen` that named resources: their updates go down its stream.
struct ListenSubscriber(SubscriptionSink);

#[async_trait::async_trait]
impl Subscriber for ListenSubscriber {
    async fn resource_updated(&self, params: ResourceUpdatedNotificationParam) -> bool {
        self.0.notify_resource_updated(params.uri).await.is_ok()
    }
}

/// A session subscribed to resources: the owning server's updates go to its client.
struct ClientSubscriber {
    peer: Peer<RoleServer>,
}

#[async_trait::async_trait]
impl Subscriber for ClientSubscriber {
    async fn resource_updated(&self, params: ResourceUpdatedNotificationParam) -> bool {
        self.peer.notify_resource_updated(params).await.is_ok()
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

/// Whether `server` takes resource subscriptions (a server that is not connected is given the
/// benefit of the doubt: it is subscribed to when it is back).
fn supports_subscriptions(server: &Upstream) -> bool {
    let Ok(peer) = server.peer() else { return true };
    let Some(info) = peer.peer_info() else { return true };
    info.capabilities.resources.as_ref().is_some_and(|resources| resources.subscribe == Some(true))
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
