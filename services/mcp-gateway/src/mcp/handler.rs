//! One MCP client's handler: which session or context a request belongs to, and the MCP
//! methods, each answered here or handed to the file that does that job (the gateway's own
//! tools in `meta`, forwarding in `relay`, ownership of prompts and resources in `ownership`,
//! subscriptions in `subscriptions`, list changes in `changes`).

use std::{borrow::Cow, sync::Arc};

#[allow(deprecated, reason = "legacy logging, still what session-based clients use")]
use rmcp::model::SetLevelRequestParams;
use rmcp::{
    ErrorData as McpError, ServerHandler,
    model::{
        CacheScope, CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, DiscoverResult,
        GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult, ListResourceTemplatesResult,
        ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
        ReadResourceResponse, Reference, RequestParamsMeta, ResultType, ServerCapabilities, ServerConfig,
        SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
    },
    service::{NotificationContext, RequestContext, RoleServer, SubscriptionContext},
};
use switchyard_kit::{Identity, SessionId};

use super::{
    changes::ListChanges,
    error::to_mcp,
    relay::ClientCaller,
    tools::{INSTRUCTIONS, call_tool_tool, find_tools_tool, set_context_tool, tool_list},
};
use crate::{
    config::ToolMode,
    gateway::Gateway,
    naming::{CALL_TOOL, FIND_TOOLS, SET_CONTEXT},
    policy::Subject,
    scope::{self, CONTEXT_META, ContextScope},
    store::SessionKey,
};

/// How long a client may keep `server/discover`'s answer: it changes only with a new release.
const DISCOVER_TTL_MS: u64 = 60 * 60 * 1000;

/// One MCP session's handler (the HTTP transport makes one per session; stdio has one).
#[derive(Clone)]
pub struct McpHandler {
    pub(super) gateway: Arc<Gateway>,
    /// The session id when the transport has none of its own (stdio).
    fixed_session: Option<String>,
    /// This client connection, for telling its calls from other clients' ([`crate::upstream::Caller::client_id`]).
    pub(super) client: u64,
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
    pub(super) fn session_key(&self, extensions: &rmcp::model::Extensions) -> Result<Option<SessionKey>, McpError> {
        let parts = extensions.get::<http::request::Parts>();
        let header = parts.and_then(|p| p.headers.get("mcp-session-id")).and_then(|v| v.to_str().ok());
        let Some(session) = header.map(str::to_owned).or_else(|| self.fixed_session.clone()) else {
            return Ok(None);
        };
        let id = SessionId::parse_field(&session, "mcp-session-id")
            .map_err(|err| McpError::invalid_request(err.to_string(), None))?;
        Ok(Some(identity(extensions).session(id)))
    }

    /// Where a request's context lives: its MCP session, or for a stateless (2026-07-28)
    /// request the handle in its `_meta` or the caller (see [`crate::scope`]).
    pub(super) fn scope(&self, context: &RequestContext<RoleServer>) -> Result<ContextScope, McpError> {
        match self.session_key(&context.extensions)? {
            Some(key) => Ok(ContextScope::Session(key)),
            None => scope::stateless(&identity(&context.extensions), &context.meta),
        }
    }

    pub(super) fn mode(&self) -> ToolMode {
        self.gateway.settings().tool_mode
    }
}

/// The caller as policies see it: its identity, role and groups (stdio has no headers: the
/// default tenant, no role, no groups). The guard refused malformed headers already.
pub(super) fn subject(extensions: &rmcp::model::Extensions) -> Result<Subject, McpError> {
    let identity = identity(extensions);
    match extensions.get::<http::request::Parts>() {
        None => Ok(Subject::tenant_of(Some(&identity.session(SessionId::generate())))),
        Some(parts) => Subject::from_parts(&identity, parts)
            .map_err(|err| McpError::invalid_request(err.to_string(), Some(serde_json::json!({"field": err.field})))),
    }
}

/// The caller as the kit's identity layer read it from the HTTP headers (stdio has none: the
/// default tenant).
pub(super) fn identity(extensions: &rmcp::model::Extensions) -> Identity {
    extensions.get::<http::request::Parts>().map(|p| Identity::from_extensions(&p.extensions)).unwrap_or_default()
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
            switchyard_kit::warn_throttled!("session count", error = %err, "counting a new MCP session");
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
        let subject = subject(&context.extensions)?;
        let list = self.gateway.list_tools_as(&subject, scope.key(), None).await.map_err(to_mcp)?;
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
        let subject = subject(&context.extensions)?;
        let search = self.mode() == ToolMode::Search;
        if request.name == SET_CONTEXT {
            let stateless = scope.is_stateless();
            let (result, _) = self.set_context(scope, &identity, &subject, request.arguments).await?;
            // The list this client sees has changed with its context (not in search mode,
            // whose list is fixed; a stateless client has no channel for notifications).
            if !search && !stateless {
                let _ = context.peer.notify_tool_list_changed().await;
            }
            return Ok(result.into());
        }
        if search && request.name == FIND_TOOLS {
            return Ok(self.find_tools(scope, &identity, &subject, request.arguments).await?.into());
        }
        let request = if search && request.name == CALL_TOOL { Self::unwrap_call_tool(request)? } else { request };
        let caller = Arc::new(ClientCaller {
            peer: context.peer.clone(),
            token: context.meta.get_progress_token().or_else(|| request.progress_token()),
            client: self.client,
            timeout: self.gateway.settings().call_timeout,
        });
        let outcome = self
            .gateway
            .call_tool_as(&subject, scope.key(), &request.name, request.arguments, Some(caller))
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
    /// session (see `subscriptions`).
    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        self.accepted_filter(requested)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        self.listen_for_changes(context).await
    }

    #[allow(deprecated, reason = "legacy subscriptions, still what session-based clients use")]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscribe_session(request, context).await
    }

    #[allow(deprecated, reason = "legacy subscriptions, still what session-based clients use")]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.unsubscribe_session(request, context).await
    }
}
