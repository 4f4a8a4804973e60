//! `sessions-redis-floor`: the Redis round trip a ProcessQuery without a switch makes in steady
//! state — the conditional turn update (the service knows the session's role from its previous
//! turn, so it does not read first) — made directly on sessions laid out as the sessions
//! service's Redis store keeps them: no gRPC, no trigger detection. Run beside `process-query`
//! it is the floor that ProcessQuery is compared with.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use tonic::Status;

use super::Scenario;
use crate::redis_floor::{FloorClient, FloorSession};

/// The role every floor session keeps (a role the sessions service registers).
const ROLE: &str = "tech-expert";
/// Floor sessions outlive any run and are then removed by Redis.
const SESSION_TTL: Duration = Duration::from_secs(3600);

#[derive(clap::Args)]
pub struct Args {
    /// Redis holding live sessions.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,

    /// Key prefix for the floor's own sessions (deleted by TTL after an hour).
    #[arg(long, default_value = "sy-loadgen")]
    pub prefix: String,

    /// Sessions created before the run; workers share them round-robin.
    #[arg(long, default_value_t = 64)]
    pub sessions: usize,
}

pub struct SessionsRedisFloor {
    args: Args,
    client: Option<Arc<FloorClient>>,
    sessions: Vec<FloorSession>,
}

impl SessionsRedisFloor {
    pub fn new(args: Args) -> Self {
        Self { args, client: None, sessions: Vec::new() }
    }
}

impl Scenario for SessionsRedisFloor {
    const NAME: &'static str = "sessions-redis-floor";

    async fn setup(&mut self) -> anyhow::Result<()> {
        let client = FloorClient::connect(&self.args.redis_url).await.context("connecting to Redis")?;
        // Unique per run, so runs sharing a prefix never share a session.
        let run = format!("{}-{}", std::process::id(), chrono::Utc::now().timestamp_millis());
        for index in 0..self.args.sessions.max(1) {
            let id = format!("floor-{run}-{index}");
            let session =
                client.create(&self.args.prefix, &id, ROLE, SESSION_TTL).await.context("creating a floor session")?;
            self.sessions.push(session);
        }
        self.client = Some(Arc::new(client));
        Ok(())
    }

    fn call(&self, worker: usize, _seq: u64) -> impl Future<Output = Result<(), Status>> + Send {
        let client = self.client.clone();
        let session = self.sessions[worker % self.sessions.len()].clone();
        async move {
            let client = client.ok_or_else(|| Status::failed_precondition("setup did not run"))?;
            let outcome =
                client.keep_role_turn(&session, ROLE).await.map_err(|err| Status::unavailable(format!("{err:#}")))?;
            match outcome.as_str() {
                "ok" => Ok(()),
                other => Err(Status::aborted(other.to_owned())),
            }
        }
    }
}
