//! The router's clients of the other Switchyard services: sessions (context switching,
//! conversation memory, roles) and the MCP gateway (context, filtered tools, tool calls). Every call carries the caller's
//! tenant and user, and the current trace context (the kit's channels inject it).

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use switchyard_kit::{
    Identity, SessionId, TenantId,
    backoff::Backoff,
    client::{TracedChannel, connect_lazy},
    identity::{ADMIN_HEADER, TENANT_HEADER, USER_HEADER},
};
use switchyard_proto::{
    mcp::v1::{self as mcp, mcp_gateway_service_client::McpGatewayServiceClient},
    sessions::v1::{
        self as sessions, role_service_client::RoleServiceClient, session_service_client::SessionServiceClient,
    },
};
use tokio::sync::RwLock;
use tonic::{Request, Status};

use crate::error::RouterError;

/// How long one call to sessions or the gateway's context calls may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long appending a turn to its session is retried while sessions is UNAVAILABLE, and the
/// delays between tries.
const APPEND_RETRY_FOR: Duration = Duration::from_secs(5);
const APPEND_RETRY_INITIAL: Duration = Duration::from_millis(50);
const APPEND_RETRY_MAX: Duration = Duration::from_secs(1);
/// How long the role list is reused before it is fetched again.
const ROLES_TTL: Duration = Duration::from_secs(30);

/// A status from sessions as the router passes it on: a broken connection (a replica gone
/// mid-call) is UNAVAILABLE naming sessions, whatever code the transport gave it.
fn from_sessions(status: Status) -> Status {
    switchyard_kit::status::from_upstream("sessions", status)
}

/// [`from_sessions`] for the MCP gateway.
fn from_gateway(status: Status) -> Status {
    switchyard_kit::status::from_upstream("MCP gateway", status)
}

/// A request to another service on behalf of `identity`.
fn request<T>(message: T, identity: &Identity, timeout: Duration) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(timeout);
    let metadata = request.metadata_mut();
    if let Ok(tenant) = identity.tenant.as_str().parse() {
        metadata.insert(TENANT_HEADER, tenant);
    }
    if let Some(user) = identity.user.as_ref().and_then(|u| u.as_str().parse().ok()) {
        metadata.insert(USER_HEADER, user);
    }
    if identity.admin {
        metadata.insert(ADMIN_HEADER, tonic::metadata::MetadataValue::from_static("true"));
    }
    request
}

/// The session side of one turn, after context switching.
#[derive(Debug, Clone)]
pub struct SessionTurn {
    pub session_id: SessionId,
    pub role_id: String,
    pub switched: bool,
    pub previous_role_id: String,
    /// The active role's system prompt (with the turn's custom instructions).
    pub system_prompt: String,
    pub transition_context: String,
    /// Turns counted before this one.
    pub turn_count: u32,
    /// The session's recent messages, oldest first.
    pub recent: Vec<sessions::ConversationMessage>,
    /// In a tool loop's continuation: the role context switching would have taken, held back
    /// (empty when none).
    pub held_role_id: String,
}

/// The role list and when it was fetched.
type CachedRoles = (Instant, Arc<Vec<sessions::Role>>);
/// Tenants whose role lists are kept at most; past it, the lists are fetched afresh.
const CACHED_TENANTS: usize = 1_000;

#[derive(Clone)]
pub struct SessionsClient {
    sessions: SessionServiceClient<TracedChannel>,
    roles: RoleServiceClient<TracedChannel>,
    /// Each tenant sees its own roles (the built-in ones and its own), so lists are per tenant.
    role_cache: Arc<RwLock<HashMap<TenantId, CachedRoles>>>,
}

impl SessionsClient {
    pub fn new(url: &str) -> anyhow::Result<Self> {
        let channel = connect_lazy(url)?;
        Ok(Self {
            sessions: SessionServiceClient::new(channel.clone()),
            roles: RoleServiceClient::new(channel),
            role_cache: Arc::default(),
        })
    }

    /// A new session in its default role.
    pub async fn create_session(&self, identity: &Identity) -> Result<SessionId, RouterError> {
        let created = self
            .sessions
            .clone()
            .create_session(request(sessions::CreateSessionRequest::default(), identity, CALL_TIMEOUT))
            .await
            .map_err(|s| RouterError::from_status("creating a session", &from_sessions(s)))?
            .into_inner();
        let id = created.session.map(|s| s.session_id).unwrap_or_default();
        SessionId::parse(&id)
            .map_err(|_| RouterError::unavailable("creating a session", "the sessions service returned no session id"))
    }

    /// Opens the turn on the session: creates the session when the caller gave none, reads its
    /// recent messages, and runs context switching on the message (ProcessQuery,
    /// docs/requirements.md#sessions-switching).
    pub async fn begin_turn(
        &self,
        identity: &Identity,
        session_id: Option<&SessionId>,
        message: &str,
        force_role_id: Option<&str>,
        custom_instructions: Option<&str>,
    ) -> Result<SessionTurn, RouterError> {
        let mut client = self.sessions.clone();
        // A session the caller names is read with the turn itself (one call); a new one is
        // created first and has nothing to read.
        let (session_id, include_messages) = match session_id {
            Some(id) => (id.clone(), true),
            None => (self.create_session(identity).await?, false),
        };
        let processed = client
            .process_query(request(
                sessions::ProcessQueryRequest {
                    session_id: session_id.to_string(),
                    query: message.to_owned(),
                    custom_instructions: custom_instructions.map(str::to_owned),
                    force_role_id: force_role_id.map(str::to_owned),
                    include_messages,
                    preview: false,
                },
                identity,
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|s| session_error("context switching", s))?
            .into_inner();
        // The turn is counted by now: the turns before it are one fewer.
        let turn_count = processed.session.as_ref().map_or(0, |s| s.turn_count.saturating_sub(1));
        Ok(SessionTurn {
            session_id,
            role_id: processed.role_id,
            switched: processed.switched,
            previous_role_id: processed.previous_role_id,
            system_prompt: processed.system_prompt,
            transition_context: processed.transition_context,
            turn_count,
            recent: processed.recent_messages,
            held_role_id: String::new(),
        })
    }

    /// Reopens a session for a turn that continues a tool loop: its role as it stands, with no
    /// context switching (a tool result is not the user changing the subject) and nothing
    /// counted; the role's own prompt (with the turn's custom instructions) is the persona.
    /// With `new_text` (the tool results), sessions says which switch it would have made on
    /// it, and that switch is held back.
    pub async fn resume_turn(
        &self,
        identity: &Identity,
        session_id: &SessionId,
        custom_instructions: Option<&str>,
        new_text: &str,
    ) -> Result<SessionTurn, RouterError> {
        if !new_text.trim().is_empty() {
            let previewed = self
                .sessions
                .clone()
                .process_query(request(
                    sessions::ProcessQueryRequest {
                        session_id: session_id.to_string(),
                        query: clip(new_text, MAX_PREVIEW_BYTES).to_owned(),
                        custom_instructions: custom_instructions.map(str::to_owned),
                        force_role_id: None,
                        include_messages: true,
                        preview: true,
                    },
                    identity,
                    CALL_TIMEOUT,
                ))
                .await
                .map_err(|s| session_error("reading the session", s))?
                .into_inner();
            return Ok(SessionTurn {
                session_id: session_id.clone(),
                previous_role_id: previewed.role_id.clone(),
                role_id: previewed.role_id,
                switched: false,
                system_prompt: previewed.system_prompt,
                transition_context: String::new(),
                turn_count: previewed.session.as_ref().map_or(0, |s| s.turn_count),
                recent: previewed.recent_messages,
                held_role_id: previewed.held_role_id,
            });
        }
        let got = self
            .sessions
            .clone()
            .get_session(request(
                sessions::GetSessionRequest { session_id: session_id.to_string(), include_messages: true },
                identity,
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|s| session_error("reading the session", s))?
            .into_inner();
        let session = got.session.unwrap_or_default();
        let mut system_prompt = got.role.map(|r| r.system_prompt).unwrap_or_default();
        if let Some(extra) = custom_instructions.map(str::trim).filter(|s| !s.is_empty()) {
            system_prompt.push_str("\n\nAdditional instructions: ");
            system_prompt.push_str(extra);
        }
        Ok(SessionTurn {
            session_id: session_id.clone(),
            role_id: session.role_id.clone(),
            switched: false,
            previous_role_id: session.role_id,
            system_prompt,
            transition_context: String::new(),
            turn_count: session.turn_count,
            recent: got.recent_messages,
            held_role_id: String::new(),
        })
    }

    /// True when the session is closed or no longer exists for the caller (a conversation key
    /// that names it then starts a new one); false when it is there, or cannot be told.
    pub async fn is_gone(&self, identity: &Identity, session_id: &SessionId) -> bool {
        let got = self
            .sessions
            .clone()
            .get_session(request(
                sessions::GetSessionRequest { session_id: session_id.to_string(), include_messages: false },
                identity,
                CALL_TIMEOUT,
            ))
            .await;
        match got {
            Err(status) => status.code() == tonic::Code::NotFound,
            Ok(got) => got.into_inner().session.is_some_and(|s| s.status() == sessions::SessionStatus::Closed),
        }
    }

    /// Records the user's message and the answer in the session's conversation, under the
    /// turn's id (`turn_id`), which makes the retries below safe: sessions appends a batch of
    /// one id once, so a retry after a lost reply does not record the turn twice.
    pub async fn end_turn(
        &self,
        identity: &Identity,
        session_id: &SessionId,
        turn_id: &str,
        role_id: &str,
        message: &str,
        answer: &str,
    ) -> Result<(), Status> {
        let turn = |role: sessions::MessageRole, content: &str| sessions::ConversationMessage {
            role: role as i32,
            content: content.to_owned(),
            role_id: role_id.to_owned(),
            created_at: None,
        };
        // A tool loop's continuation has no user message of its own, and a turn that ended in
        // calls of the caller's tools no answer yet: the loop's question and its final answer
        // are what the conversation keeps.
        let mut messages = Vec::new();
        if !message.trim().is_empty() {
            messages.push(turn(sessions::MessageRole::User, message));
        }
        if !answer.is_empty() {
            messages.push(turn(sessions::MessageRole::Assistant, answer));
        }
        if messages.is_empty() {
            return Ok(());
        }
        // The answer is already made: a turn whose append fails is answered but missing from the
        // conversation. Sessions answers UNAVAILABLE while its Redis restarts (a dropped
        // connection's first command fails, then the client reconnects), so that one is retried
        // for a few seconds, which outlasts such a restart; any other error is final. The
        // batch's id makes a retry of an append that did land (its reply lost) a no-op.
        let mut backoff = Backoff::new(APPEND_RETRY_INITIAL, APPEND_RETRY_MAX);
        let started = Instant::now();
        loop {
            let appended = self
                .sessions
                .clone()
                .append_messages(request(
                    sessions::AppendMessagesRequest {
                        session_id: session_id.to_string(),
                        messages: messages.clone(),
                        append_id: turn_id.to_owned(),
                    },
                    identity,
                    CALL_TIMEOUT,
                ))
                .await
                .map_err(from_sessions);
            match appended {
                Err(status) if status.code() == tonic::Code::Unavailable && started.elapsed() < APPEND_RETRY_FOR => {
                    tracing::debug!(session_id = %session_id, error = %status.message(), "appending the turn; retrying");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                done => return done.map(|_| ()),
            }
        }
    }

    /// Every role the caller's tenant sees (cached briefly: roles change rarely, experts are
    /// resolved on every multi-agent turn).
    pub async fn roles(&self, identity: &Identity) -> Result<Arc<Vec<sessions::Role>>, Status> {
        if let Some((at, roles)) = self.role_cache.read().await.get(&identity.tenant)
            && at.elapsed() < ROLES_TTL
        {
            return Ok(roles.clone());
        }
        let mut all = Vec::new();
        let mut page_token = String::new();
        let mut client = self.roles.clone();
        loop {
            let page = client
                .list_roles(request(
                    sessions::ListRolesRequest { domain: String::new(), page_size: 100, page_token },
                    identity,
                    CALL_TIMEOUT,
                ))
                .await
                .map_err(from_sessions)?
                .into_inner();
            all.extend(page.roles);
            if page.next_page_token.is_empty() {
                break;
            }
            page_token = page.next_page_token;
        }
        let roles = Arc::new(all);
        let mut cache = self.role_cache.write().await;
        if cache.len() >= CACHED_TENANTS {
            cache.clear();
        }
        cache.insert(identity.tenant.clone(), (Instant::now(), roles.clone()));
        Ok(roles)
    }
}

/// The most of a tool loop's new text sent for a held-back switching decision: enough for the
/// triggers, well inside the sessions' query limit.
const MAX_PREVIEW_BYTES: usize = 4 * 1024;

/// `text` cut to at most `max` bytes at a character boundary.
fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Session errors keep their class and their message (it names the session or the role that
/// is missing); an invalid argument keeps the field the sessions service named, which is the
/// router's field of the same name (`session_id`, `force_role_id`, `custom_instructions`).
fn session_error(context: &'static str, status: Status) -> RouterError {
    let status = &from_sessions(status);
    let err = match status.code() {
        tonic::Code::NotFound => RouterError::NotFound(status.message().to_owned()),
        tonic::Code::InvalidArgument => match switchyard_kit::error::field_violation(status) {
            (Some(field), reason) => RouterError::invalid(field, reason),
            (None, reason) => RouterError::invalid("session_id", reason),
        },
        _ => RouterError::from_status(context, status),
    };
    err.passed_on(status)
}

/// A tool the MCP agent may call, as the gateway lists it.
#[derive(Debug, Clone)]
pub struct AgentTool {
    pub name: String,
    pub description: String,
    pub input_schema: serde_json::Value,
    pub server: String,
}

/// One tool call's outcome.
#[derive(Debug, Clone)]
pub struct ToolOutcome {
    pub text: String,
    pub is_error: bool,
    pub server: String,
}

#[derive(Clone)]
pub struct GatewayClient {
    client: McpGatewayServiceClient<TracedChannel>,
}

impl GatewayClient {
    pub fn new(url: &str) -> anyhow::Result<Self> {
        Ok(Self { client: McpGatewayServiceClient::new(connect_lazy(url)?) })
    }

    /// Stores the turn's context (`set_context`, docs/requirements.md#mcp-set-context) and
    /// returns the `limit` tools relevant to it, best first: one call, the ranked tools come
    /// back with the context.
    pub async fn tools_for(
        &self,
        identity: &Identity,
        session_id: &SessionId,
        query: &str,
        intent: &str,
        limit: u32,
    ) -> Result<Vec<AgentTool>, Status> {
        let set = self
            .client
            .clone()
            .set_context(request(
                mcp::SetContextRequest {
                    session_id: session_id.to_string(),
                    query: query.to_owned(),
                    intent: (!intent.is_empty()).then(|| intent.to_owned()),
                    limit,
                },
                identity,
                CALL_TIMEOUT,
            ))
            .await
            .map_err(from_gateway)?
            .into_inner();
        Ok(set
            .tools
            .into_iter()
            .filter_map(|scored| scored.tool)
            .map(|tool| AgentTool {
                input_schema: tool
                    .input_schema
                    .as_ref()
                    .map(|s| serde_json::Value::Object(switchyard_kit::proto_json::from_struct(s)))
                    .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
                name: tool.name,
                description: tool.description,
                server: tool.server,
            })
            .collect())
    }

    pub async fn call_tool(
        &self,
        identity: &Identity,
        session_id: &SessionId,
        name: &str,
        arguments: &serde_json::Map<String, serde_json::Value>,
        timeout: Duration,
    ) -> Result<ToolOutcome, Status> {
        let response = self
            .client
            .clone()
            .call_tool(request(
                mcp::CallToolRequest {
                    session_id: session_id.to_string(),
                    name: name.to_owned(),
                    arguments: Some(switchyard_kit::proto_json::to_struct(arguments)),
                },
                identity,
                timeout,
            ))
            .await
            .map_err(from_gateway)?
            .into_inner();
        let mut text = response
            .content
            .iter()
            .filter_map(|c| match &c.kind {
                Some(mcp::content::Kind::Text(t)) => Some(t.clone()),
                Some(mcp::content::Kind::Resource(r)) => match &r.contents {
                    Some(mcp::embedded_resource::Contents::Text(t)) => Some(format!("[{}]\n{t}", r.uri)),
                    _ => Some(format!("[resource {}]", r.uri)),
                },
                Some(mcp::content::Kind::Image(b)) => Some(format!("[image {}]", b.mime_type)),
                Some(mcp::content::Kind::Audio(b)) => Some(format!("[audio {}]", b.mime_type)),
                None => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        if text.is_empty()
            && let Some(structured) = &response.structured_content
        {
            text = serde_json::Value::Object(switchyard_kit::proto_json::from_struct(structured)).to_string();
        }
        Ok(ToolOutcome { text, is_error: response.is_error, server: response.server })
    }
}
