//! The edge: Switchyard's HTTP/JSON front door for chat front-ends and API gateways.
//!
//! - `transcode` serves every RPC with a `google.api.http` annotation at its path, driven by the
//!   descriptor set (so the REST API cannot drift from the protos); `openapi` describes the
//!   same routes.
//! - `rest` adds Server-Sent Events for streams and the streamed processing of
//!   docs/requirements.md#sessions-endpoints; `llm_api` speaks the LLM vendors' APIs
//!   (OpenAI's chat completions and responses, Anthropic's messages); each reads its request
//!   into one `turn` for the router; `console` is a small page for trying it all.
//! - `auth` turns API keys and JWTs into the tenant and user the services see; `limit` caps
//!   each credential's rate.

pub mod auth;
pub mod chat;
pub mod clients;
pub mod config;
pub mod console;
pub mod error;
pub mod health;
pub mod http_metrics;
pub mod limit;
pub mod llm_api;
pub mod openapi;
pub mod rest;
pub mod shutdown;
pub mod transcode;
pub mod turn;

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use axum::{
    Router,
    body::Body,
    routing::{get, post},
};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, header};
use switchyard_kit::{
    ShutdownNotice,
    http_server::{self, BodyError, HttpLimits},
    json_depth,
    store::RedisConnection,
};
use tower_http::{
    cors::{AllowOrigin, CorsLayer},
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
};

pub use config::EdgeConfig;

use crate::{
    auth::{Authenticator, Caller, JwtVerifier, KeyStore},
    clients::Upstreams,
    error::ApiError,
    limit::RateLimit,
    llm_api::{anthropic, openai, responses},
    transcode::rules::RouteTable,
};

/// Everything a request handler needs.
pub struct Edge {
    pub routes: RouteTable,
    pub upstreams: Upstreams,
    pub auth: Authenticator,
    pub limit: Option<RateLimit>,
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
    pub openapi: Bytes,
    pub readiness: health::Readiness,
    /// Cut a little before the shutdown grace runs out: requests still unanswered then get a
    /// 503 (`shutdown::answer_at_the_cut`) and streams still open end with one error event
    /// (`rest::client_stream`), both saying the edge is shutting down.
    pub shutdown: ShutdownNotice,
    /// `/v1/responses` answers, for `previous_response_id` and `GET /v1/responses/{id}`.
    pub responses: responses::ResponseStore,
    pub http_metrics: http_metrics::HttpMetrics,
}

impl Edge {
    /// Authenticates the caller and counts the request against its rate limit.
    pub async fn admit(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let caller = self.auth.authenticate(headers).await?;
        if let Some(limit) = &self.limit {
            limit.check(&caller.principal).await?;
        }
        Ok(caller)
    }

    /// The request body, at most `max_body_bytes`, which must be JSON when present and nest
    /// no deeper than the kit's `json_depth::MAX_DEPTH`.
    pub async fn read_json_body(&self, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
        let announced = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        let bytes = match http_server::read_body(body, self.max_body_bytes, announced).await {
            Ok(bytes) => bytes,
            Err(BodyError::TooLarge) => return Err(ApiError::payload_too_large(self.max_body_bytes)),
            Err(BodyError::Unreadable(err)) => {
                return Err(ApiError::bad_request("body", format!("could not be read: {err}")));
            }
        };
        if !bytes.iter().all(u8::is_ascii_whitespace)
            && let Some(content_type) = headers.get(header::CONTENT_TYPE)
        {
            let text = content_type.to_str().unwrap_or_default();
            let essence = text.split(';').next().unwrap_or_default().trim();
            if !essence.eq_ignore_ascii_case("application/json") && !essence.to_ascii_lowercase().ends_with("+json") {
                return Err(ApiError::unsupported_media_type(text));
            }
        }
        // The parsers stop at their own depth limit, with an error naming no field: name it.
        if let Some(path) = json_depth::too_deep(&bytes, json_depth::MAX_DEPTH) {
            let field = if path.is_empty() { "body" } else { path.as_str() };
            return Err(ApiError::bad_request(field, format!("nests deeper than {} levels", json_depth::MAX_DEPTH)));
        }
        Ok(bytes)
    }
}

/// The HTTP application: the fixed routes, then the transcoding layer for everything else.
pub fn app(edge: Arc<Edge>, cors_origins: &[String]) -> Router {
    let router = Router::new()
        .route("/", get(console::index))
        .route("/console/{asset}", get(console::asset))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(http_metrics::scrape))
        .route("/openapi.json", get(openapi::document))
        .route("/v1/models", get(openai::models))
        .route("/v1/chat/completions", post(openai::chat_completions))
        // Claude Code posts to `/v1/messages?beta=true`: the query is accepted and not read.
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/responses", post(responses::create))
        .route("/v1/responses/{id}", get(responses::retrieve))
        .route("/api/context/process/stream", post(rest::process_stream))
        .fallback(rest::transcode)
        // A request still unanswered when the shutdown grace is about to end gets a 503 before
        // its connection closes; inside the metrics and failure log, which count and log it.
        .layer(axum::middleware::from_fn_with_state(edge.clone(), shutdown::answer_at_the_cut))
        // Rate, errors and latency per route template; inside the request id layers.
        .layer(axum::middleware::from_fn_with_state(edge.clone(), http_metrics::measure))
        .with_state(edge)
        // A request id for every request (the caller's, or a new one), answered in
        // `x-request-id`, sent on to the services and named in the one log line of a failure.
        .layer(axum::middleware::from_fn(error::log_failures))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid));
    match cors(cors_origins) {
        Some(layer) => router.layer(layer),
        None => router,
    }
}

fn cors(origins: &[String]) -> Option<CorsLayer> {
    let origins: Vec<&str> = origins.iter().map(|o| o.trim()).filter(|o| !o.is_empty()).collect();
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.contains(&"*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE])
            // Anthropic's SDKs in a browser send their version, beta and browser-access headers.
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                "x-api-key".parse().expect("static header name"),
                "x-session-id".parse().expect("static header name"),
                "anthropic-version".parse().expect("static header name"),
                "anthropic-beta".parse().expect("static header name"),
                "anthropic-dangerous-direct-browser-access".parse().expect("static header name"),
            ])
            .expose_headers([header::RETRY_AFTER, "x-request-id".parse().expect("static header name")])
            .max_age(Duration::from_secs(600)),
    )
}

/// The edge bound to its port, ready to serve.
pub struct EdgeServer {
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown_grace: Duration,
    limits: HttpLimits,
    edge: Arc<Edge>,
}

impl EdgeServer {
    pub async fn bind(config: &EdgeConfig) -> anyhow::Result<Self> {
        let keys = match &config.database_url {
            Some(url) => Some(Arc::new(
                KeyStore::connect(url.expose(), &config.db_schema, config.key_cache_ttl)
                    .await
                    .with_context(|| format!("opening the API key table at {}", url.url_without_credentials()))?
                    .with_max_staleness(config.key_max_staleness),
            )),
            None => None,
        };
        let jwt_config = config.jwt();
        let jwt = if jwt_config.is_configured() { Some(Arc::new(JwtVerifier::new(jwt_config)?)) } else { None };
        anyhow::ensure!(
            config.open || keys.is_some() || jwt.is_some(),
            "no way to authenticate callers: set DATABASE_URL (API keys), EDGE_JWT_HS256_SECRET or \
             EDGE_JWT_JWKS_FILE (tokens), or --open for local use"
        );
        let auth = Authenticator::new(config.open, keys, jwt);
        Self::bind_with_auth(config, auth).await
    }

    pub async fn bind_with_auth(config: &EdgeConfig, auth: Authenticator) -> anyhow::Result<Self> {
        let routes = RouteTable::switchyard().context("reading the HTTP rules of the protos")?;
        let upstreams = Upstreams::connect(&config.urls(), config.max_message_bytes)?;
        let openapi = Bytes::from(openapi::generate(&routes).to_string());
        let limit = match &config.redis_url {
            Some(url) if config.rate_limit > 0 => {
                let conn = RedisConnection::connect(url).await.with_context(|| {
                    format!("connecting to Redis at {} (rate limits)", url.url_without_credentials())
                })?;
                RateLimit::shared(config.rate_limit, config.rate_burst, conn, &config.redis_prefix)
            }
            _ => RateLimit::new(config.rate_limit, config.rate_burst),
        };
        tracing::info!(
            per_second = config.rate_limit,
            burst = config.rate_burst,
            shared = limit.as_ref().is_some_and(RateLimit::is_shared),
            "rate limits per credential"
        );
        if let Some(limit) = &limit {
            limit.spawn_sweeper();
        }
        if auth.is_open() {
            tracing::warn!(
                "the edge is OPEN: requests without a credential are served as tenant `default` with \
                 administrator rights; never expose it beyond this machine"
            );
        }
        tracing::info!(accepts = %auth.describe(), "edge authentication");
        let responses = match &config.redis_url {
            Some(url) => responses::ResponseStore::redis(url, &config.redis_prefix, config.responses_ttl)
                .await
                .with_context(|| format!("connecting to Redis at {}", url.url_without_credentials()))?,
            None => responses::ResponseStore::memory(config.responses_ttl, config.responses_max),
        };
        tracing::info!(store = responses.describe(), "stored responses");
        let readiness = health::Readiness::new(upstreams.clone(), auth.keys().cloned(), auth.has_keyless_credentials());
        let edge = Arc::new(Edge {
            routes,
            upstreams,
            auth,
            limit,
            max_body_bytes: config.max_body_bytes,
            request_timeout: config.request_timeout,
            openapi,
            readiness,
            shutdown: ShutdownNotice::default(),
            responses,
            http_metrics: http_metrics::HttpMetrics::new(),
        });
        let app = app(edge.clone(), &config.cors_origins);
        let listener =
            tokio::net::TcpListener::bind(config.listen).await.with_context(|| format!("binding {}", config.listen))?;
        Ok(Self { listener, app, shutdown_grace: config.shutdown_grace, limits: config.http_limits(), edge })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    pub fn edge(&self) -> Arc<Edge> {
        self.edge.clone()
    }

    /// Serves until `shutdown`, then stops accepting and lets requests in flight finish for the
    /// grace period; those still in flight near its end are answered 503 (see [`Edge::shutdown`]). Slow and idle connections are closed, and connections capped, as the
    /// configuration says (`switchyard_kit::http_server`).
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel::<()>();
        let grace = self.shutdown_grace;
        let notice = self.edge.shutdown.clone();
        let serving = switchyard_kit::http_server::serve(self.listener, self.app, self.limits, async move {
            shutdown.await;
            let _ = stopped_tx.send(());
        });
        tokio::select! {
            () = serving => Ok(()),
            () = async {
                let _ = stopped_rx.await;
                notice.run_grace(grace).await;
            } => {
                tracing::warn!(grace = ?grace, "requests still in flight after the shutdown grace period; stopping");
                Ok(())
            }
        }
    }
}
