//! `/healthz` (the process answers) and `/readyz` (the services behind it answer): readiness
//! asks each service's gRPC health endpoint, at most once every two seconds however often
//! Kubernetes probes. The router and sessions are required; the triggers service and the MCP
//! gateway are reported but do not take the edge out of rotation (the REST calls that reach
//! them fail on their own, chat degrades).

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

use crate::{Edge, auth::KeyStore, error::axum_json, transcode::rules::Upstream, upstream::Upstreams};

const CACHE_FOR: Duration = Duration::from_secs(2);
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub struct Readiness {
    upstreams: Upstreams,
    keys: Option<Arc<KeyStore>>,
    last: Arc<Mutex<Option<(Instant, bool, Value)>>>,
}

impl Readiness {
    pub fn new(upstreams: Upstreams, keys: Option<Arc<KeyStore>>) -> Self {
        Self { upstreams, keys, last: Arc::default() }
    }

    /// Ready or not, and each dependency's state.
    pub async fn check(&self) -> (bool, Value) {
        if let Ok(last) = self.last.lock()
            && let Some((at, ready, detail)) = last.as_ref()
            && at.elapsed() < CACHE_FOR
        {
            return (*ready, detail.clone());
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
        if let Some(keys) = &self.keys {
            let state = match tokio::time::timeout(CHECK_TIMEOUT, keys.ping()).await {
                Ok(Ok(())) => "SERVING".to_owned(),
                Ok(Err(err)) => format!("UNAVAILABLE: {err}"),
                Err(_) => "UNAVAILABLE: timed out".to_owned(),
            };
            ready &= state == "SERVING";
            detail.insert("api_keys".to_owned(), Value::String(state));
        }
        let detail = Value::Object(detail);
        if let Ok(mut last) = self.last.lock() {
            *last = Some((Instant::now(), ready, detail.clone()));
        }
        (ready, detail)
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
    let (ready, detail) = edge.readiness.check().await;
    let body = json!({"status": if ready { "ready" } else { "not_ready" }, "dependencies": detail});
    if ready { axum_json(&body) } else { (StatusCode::SERVICE_UNAVAILABLE, axum_json(&body)).into_response() }
}
