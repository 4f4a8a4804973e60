//! A small real MCP server for the gateway's tests and benchmarks: serves a given tool list
//! over streamable HTTP (rmcp, on a loopback port), answers every call with what it was
//! called with, checks required arguments the way real servers do, and can change its tool
//! list at run time (sending `notifications/tools/list_changed`), which the public reference
//! servers cannot be asked to do. It can also demand credentials of its clients
//! ([`FixtureServer::start_guarded`]), recording what each request carried. Also an MCP client
//! of any such endpoint.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicUsize, Ordering},
    },
};

use axum::http::{HeaderMap, StatusCode, header};

use rmcp::{
    ErrorData as McpError, RoleClient, ServerHandler, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock,
        Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
        ServerConfig, Tool,
    },
    service::{NotificationContext, Peer, RequestContext, RoleServer, RunningService},
    transport::{
        StreamableHttpClientTransport,
        streamable_http_client::StreamableHttpClientTransportConfig,
        streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
        },
    },
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A tool with a description and required string parameters.
pub fn tool(name: &str, description: &str, parameters: &[&str]) -> Tool {
    let properties: JsonObject = parameters.iter().map(|p| ((*p).to_owned(), json!({"type": "string"}))).collect();
    let schema = json!({"type": "object", "properties": properties, "required": parameters});
    let schema = match schema {
        serde_json::Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    Tool::new(name.to_owned(), description.to_owned(), Arc::new(schema))
}

#[derive(Clone, Default)]
struct Shared {
    tools: Arc<RwLock<Vec<Tool>>>,
    peers: Arc<RwLock<Vec<Peer<RoleServer>>>>,
}

#[derive(Clone)]
struct FixtureHandler(Shared);

impl ServerHandler for FixtureHandler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Ok(mut peers) = self.0.peers.write() {
            peers.push(context.peer);
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self.0.tools.read().map(|t| t.clone()).unwrap_or_default();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tool = self
            .0
            .tools
            .read()
            .ok()
            .and_then(|tools| tools.iter().find(|t| t.name == request.name).cloned())
            .ok_or_else(|| McpError::invalid_params(format!("tool {} not found", request.name), None))?;
        let arguments = request.arguments.unwrap_or_default();
        let required = tool.input_schema.get("required").and_then(|r| r.as_array()).cloned().unwrap_or_default();
        for name in required.iter().filter_map(|r| r.as_str()) {
            match arguments.get(name) {
                Some(serde_json::Value::String(_)) => {}
                Some(_) => {
                    return Err(McpError::invalid_params(format!("argument `{name}` must be a string"), None));
                }
                None => return Err(McpError::invalid_params(format!("missing required argument `{name}`"), None)),
            }
        }
        if arguments.get("fail").is_some() {
            return Ok(CallToolResult::error(vec![ContentBlock::text("failed as asked")]).into());
        }
        let text = format!("{} called with {}", request.name, serde_json::Value::Object(arguments));
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

/// A running fixture server.
pub struct FixtureServer {
    pub addr: SocketAddr,
    shared: Shared,
    stop: CancellationToken,
}

/// Decides from a request's headers whether a guarded fixture server serves it.
pub type Guard = Arc<dyn Fn(&HeaderMap) -> bool + Send + Sync>;

/// What a guarded fixture server received: every request's headers, and how many requests it
/// refused (`401` with a `WWW-Authenticate: Bearer` challenge).
#[derive(Clone, Default)]
pub struct Seen {
    headers: Arc<Mutex<Vec<HeaderMap>>>,
    refused: Arc<AtomicUsize>,
}

impl Seen {
    pub fn headers(&self) -> Vec<HeaderMap> {
        self.headers.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// Every value of `name` the server was sent, in order.
    pub fn values(&self, name: &str) -> Vec<String> {
        self.headers()
            .iter()
            .flat_map(|headers| {
                headers.get_all(name).iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            })
            .collect()
    }

    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

impl FixtureServer {
    pub async fn start(tools: Vec<Tool>) -> std::io::Result<Self> {
        Self::start_with(tools, None).await
    }

    /// A fixture server that answers only requests `guard` lets in, and records all of them.
    pub async fn start_guarded(tools: Vec<Tool>, guard: Guard) -> std::io::Result<(Self, Seen)> {
        let seen = Seen::default();
        Ok((Self::start_with(tools, Some((guard, seen.clone()))).await?, seen))
    }

    async fn start_with(tools: Vec<Tool>, guard: Option<(Guard, Seen)>) -> std::io::Result<Self> {
        let shared = Shared { tools: Arc::new(RwLock::new(tools)), ..Shared::default() };
        let stop = CancellationToken::new();
        let handler = FixtureHandler(shared.clone());
        let service = StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token()),
        );
        let mut router = axum::Router::new().nest_service("/mcp", service);
        if let Some((guard, seen)) = guard {
            router = router.layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let (guard, seen) = (guard.clone(), seen.clone());
                    async move {
                        if let Ok(mut headers) = seen.headers.lock() {
                            headers.push(request.headers().clone());
                        }
                        if guard(request.headers()) {
                            next.run(request).await
                        } else {
                            seen.refused.fetch_add(1, Ordering::SeqCst);
                            let mut refusal = axum::response::IntoResponse::into_response(StatusCode::UNAUTHORIZED);
                            refusal.headers_mut().insert(
                                header::WWW_AUTHENTICATE,
                                axum::http::HeaderValue::from_static("Bearer realm=\"fixture\""),
                            );
                            refusal
                        }
                    }
                },
            ));
        }
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let shutdown = stop.clone();
        tokio::spawn(async move {
            // As production servers do: without TCP_NODELAY the event after the response head
            // waits on the client's delayed ACK, 40 ms a call on a kept connection.
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
                let _ = tcp.set_nodelay(true);
            });
            let _ = axum::serve(listener, router).with_graceful_shutdown(shutdown.cancelled_owned()).await;
        });
        Ok(Self { addr, shared, stop })
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Replaces the tool list and tells every connected client.
    pub async fn set_tools(&self, tools: Vec<Tool>) {
        if let Ok(mut current) = self.shared.tools.write() {
            *current = tools;
        }
        let peers = self.shared.peers.read().map(|p| p.clone()).unwrap_or_default();
        for peer in peers {
            let _ = peer.notify_tool_list_changed().await;
        }
    }
}

impl Drop for FixtureServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub type Client = RunningService<RoleClient, ClientConfig>;

/// An MCP client of `url` over streamable HTTP (rmcp), with the initialize handshake done.
pub async fn client(url: &str) -> Client {
    let transport =
        StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(url.to_owned()));
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("switchyard-test", "0"))
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
        .serve(transport)
        .await
        .unwrap_or_else(|err| panic!("MCP client to {url}: {err}"))
}

/// An MCP client of `url` on the stateless revision (2026-07-28): `server/discover` instead of
/// the handshake, no session, every request carrying its own protocol metadata.
pub async fn stateless_client(url: &str) -> Client {
    use rmcp::{ClientLifecycleMode, ClientServiceExt};
    let transport =
        StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(url.to_owned()));
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("switchyard-test-stateless", "0"))
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] },
        )
        .await
        .unwrap_or_else(|err| panic!("stateless MCP client to {url}: {err}"))
}
