//! MCP over streamable HTTP at `/mcp`: the transport (its sessions kept in the context store,
//! so any replica continues a session another started), the credential check of
//! [`crate::auth`] and the Origin and body checks of [`crate::guard`] in front, `DELETE /mcp`
//! ending a session everywhere, and in OAuth mode the protected resource metadata beside it.

use std::sync::Arc;

use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService,
    session::{SessionState, SessionStore, SessionStoreError, local::LocalSessionManager},
};
use switchyard_kit::identity::IdentityLayer;
use tokio_util::sync::CancellationToken;

use super::McpHandler;
use crate::{GatewayConfig, auth::Authenticator, gateway::Gateway, guard, store::ContextStore};

/// The MCP transport's sessions, kept in the context store so any replica can continue a
/// session another one started.
struct SharedTransportSessions(Arc<dyn ContextStore>);

#[async_trait::async_trait]
impl SessionStore for SharedTransportSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        match self.0.load_transport(session_id).await? {
            Some(json) => Ok(Some(serde_json::from_str(&json)?)),
            None => Ok(None),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        Ok(self.0.store_transport(session_id, &serde_json::to_string(state)?).await?)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        Ok(self.0.delete_transport(session_id).await?)
    }
}

/// The `/mcp` endpoint as an axum router.
pub fn router(
    gateway: Arc<Gateway>,
    config: &GatewayConfig,
    auth: Arc<Authenticator>,
    shutdown: CancellationToken,
) -> axum::Router {
    let mut http = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown)
        .with_max_request_body_bytes(config.max_argument_bytes.saturating_add(64 * 1024));
    http = if config.allowed_hosts.iter().any(|h| h == "*") {
        http.disable_allowed_hosts()
    } else {
        http.with_allowed_hosts(config.allowed_hosts.clone())
    };
    http.session_store = Some(Arc::new(SharedTransportSessions(gateway.contexts().clone())));
    let guard = guard::Guard {
        origins: guard::Origins::new(&config.allowed_origins),
        max_body_bytes: http.max_request_body_bytes,
    };
    if guard.origins.accepts_any() {
        tracing::warn!(
            "--allowed-origin *: /mcp accepts requests from any web page's origin (no DNS-rebinding protection)"
        );
    }
    let handler_gateway = gateway.clone();
    let service = StreamableHttpService::new(
        move || Ok(McpHandler::http(handler_gateway.clone())),
        Arc::new(LocalSessionManager::default()),
        http,
    );
    // The credential first (in open mode, none): it decides the identity headers the rest
    // reads, and without one nothing else is looked at. Then tenant and user from those
    // headers, checked like gRPC's. The Origin and body checks come before the transport: a
    // refused page or a malformed message never reaches a session.
    let endpoint = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(gateway, end_session))
        .layer(IdentityLayer::http())
        .layer(axum::middleware::from_fn_with_state(Arc::new(guard), guard::check))
        .layer(axum::middleware::from_fn_with_state(auth.clone(), crate::auth::check));
    let Some(tokens) = auth.tokens() else { return endpoint };
    // RFC 9728: at the root, and at the path-suffixed form clients derive from the resource
    // (`/.well-known/oauth-protected-resource/mcp`). Served without a credential.
    const ROOT: &str = "/.well-known/oauth-protected-resource";
    let mut paths = vec![ROOT.to_owned(), format!("{ROOT}/mcp"), tokens.metadata_path()];
    paths.sort();
    paths.dedup();
    let mut metadata = axum::Router::new();
    for path in &paths {
        metadata = metadata.route(path, axum::routing::get(crate::auth::metadata));
    }
    metadata.with_state(auth).merge(endpoint)
}

/// `DELETE /mcp` ends a session. The transport answers 202 whether or not it held the
/// session; clients expect 200 or 204 (the Python SDK logs "Session termination failed: 202"),
/// a session nobody holds is 404, and the gateway's own state of the session — its context and
/// the list it was last shown — goes with the transport's record, on every replica (they share
/// the stores), as do the resource subscriptions this replica holds for it. Requests for the
/// session afterwards are 404, as the transport finds no record.
async fn end_session(
    axum::extract::State(gateway): axum::extract::State<Arc<Gateway>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if request.method() != http::Method::DELETE {
        return next.run(request).await;
    }
    let header = request.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let Some(id) = header.and_then(|h| switchyard_kit::SessionId::parse_field(&h, "mcp-session-id").ok()) else {
        // No or a malformed session id: the transport's own answer (400) says so.
        return next.run(request).await;
    };
    let key = switchyard_kit::Identity::from_extensions(request.extensions()).session(id.clone());
    match gateway.contexts().load_transport(id.as_str()).await {
        Ok(Some(_)) => {}
        Ok(None) => return (http::StatusCode::NOT_FOUND, "Not Found: Session not found").into_response(),
        Err(err) => {
            tracing::warn!(error = %err, "ending an MCP session: the session store is unavailable");
            return (http::StatusCode::SERVICE_UNAVAILABLE, "session store unavailable").into_response();
        }
    }
    let response = next.run(request).await;
    if !response.status().is_success() {
        return response;
    }
    if let Err(err) = gateway.contexts().end_session(&key).await {
        tracing::warn!(session = %key.store_key(), error = %err, "MCP session ended but its context could not be removed");
    }
    // Its resource subscriptions go with it (held by this replica, which took them).
    let emptied = gateway.upstreams().subscriptions().end_session(&key.store_key());
    gateway.upstreams().release(emptied).await;
    tracing::debug!(session = %key.store_key(), "MCP session ended");
    http::StatusCode::NO_CONTENT.into_response()
}
