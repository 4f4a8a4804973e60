//! `/healthz` (the process answers) and `/readyz` (the services behind it answer): readiness
//! asks each service's gRPC health endpoint, at most once every two seconds however often
//! Kubernetes probes. The router and sessions are required; the triggers service and the MCP
//! gateway are reported but do not take the edge out of rotation (the REST calls that reach
//! them fail on their own, chat degrades).
//!
//! The API key table counts as it lets callers in: while it is unreachable but keys it
//! accepted recently are still served (see `auth::keys`), the edge is ready and reports
//! `api_keys` as degraded; when it is unreachable and no key is left to serve, the edge is not
//! ready unless tokens (or open mode) still let callers in. Taking every replica out of
//! rotation for a shared store's outage would refuse the callers it can still serve.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    extract::State,
    response::{IntoResponse, Response},
};
use http::StatusCode;
use serde_json::{Map, Value, json};
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};

use crate::{
    Edge,
    auth::{KeyStore, KeyStoreHealth},
    clients::Upstreams,
    error::axum_json,
    transcode::rules::Upstream,
};

const CACHE_FOR: Duration = Duration::from_secs(2);
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub struct Readiness {
    upstreams: Upstreams,
    keys: Option<Arc<KeyStore>>,
    /// Callers get in without the key table too (tokens, open mode).
    keyless: bool,
    last: Arc<Mutex<Option<(Instant, Check)>>>,
}

/// One readiness answer.
#[derive(Debug, Clone)]
pub struct Check {
    pub ready: bool,
    /// Each dependency's state.
    pub detail: Value,
    /// The dependencies that work only in part (the edge still serves).
    pub degraded: Vec<String>,
}

impl Readiness {
    pub fn new(upstreams: Upstreams, keys: Option<Arc<KeyStore>>, keyless: bool) -> Self {
        Self { upstreams, keys, keyless, last: Arc::default() }
    }

    /// Ready or not, each dependency's state, and which are degraded.
    pub async fn check(&self) -> Check {
        if let Ok(last) = self.last.lock()
            && let Some((at, check)) = last.as_ref()
            && at.elapsed() < CACHE_FOR
        {
            return check.clone();
        }
        let all = [Upstream::Router, Upstream::Sessions, Upstream::Triggers, Upstream::McpGateway];
        let states = futures::future::join_all(all.map(|u| self.serving(u))).await;
        let mut detail = Map::new();
        let mut ready = true;
        for (upstream, state) in all.iter().zip(states) {
            if matches!(upstream, Upstream::Router | Upstream::Sessions) && state != "SERVING" {
                ready = false;
            }
            detail.insert(upstream.name().to_owned(), Value::String(state));
        }
        let mut degraded = Vec::new();
        if let Some(keys) = &self.keys {
            let state = match keys.health(CHECK_TIMEOUT).await {
                KeyStoreHealth::Up => "SERVING".to_owned(),
                KeyStoreHealth::Down { down_for, error, servable, max_staleness } => {
                    let outage = format!("unreachable for {}s ({error})", down_for.as_secs());
                    if servable > 0 {
                        degraded.push("api_keys".to_owned());
                        format!(
                            "DEGRADED: {outage}; serving {servable} keys accepted within the last {}s, 503 for others",
                            max_staleness.as_secs()
                        )
                    } else {
                        ready &= self.keyless;
                        format!("UNAVAILABLE: {outage}; no key accepted recently enough to serve")
                    }
                }
            };
            detail.insert("api_keys".to_owned(), Value::String(state));
        }
        let check = Check { ready, detail: Value::Object(detail), degraded };
        if let Ok(mut last) = self.last.lock() {
            *last = Some((Instant::now(), check.clone()));
        }
        check
    }

    async fn serving(&self, upstream: Upstream) -> String {
        let mut client = HealthClient::new(self.upstreams.channel(upstream));
        let call = client.check(HealthCheckRequest { service: String::new() });
        match tokio::time::timeout(CHECK_TIMEOUT, call).await {
            Ok(Ok(response)) => match response.into_inner().status() {
                ServingStatus::Serving => "SERVING".to_owned(),
                other => other.as_str_name().to_owned(),
            },
            Ok(Err(status)) => format!("UNAVAILABLE: {}", status.message()),
            Err(_) => "UNAVAILABLE: timed out".to_owned(),
        }
    }
}

pub async fn healthz() -> Response {
    axum_json(&json!({"status": "ok"}))
}

pub async fn readyz(State(edge): State<Arc<Edge>>) -> Response {
    let Check { ready, detail, degraded } = edge.readiness.check().await;
    let body = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "degraded": degraded,
        "dependencies": detail,
    });
    if ready { axum_json(&body) } else { (StatusCode::SERVICE_UNAVAILABLE, axum_json(&body)).into_response() }
}
