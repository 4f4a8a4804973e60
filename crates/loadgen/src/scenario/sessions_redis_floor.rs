//! `sessions-redis-floor`: the Redis round trip a ProcessQuery without a switch makes in steady
//! state — the conditional turn update (the service knows the session's role from its previous
//! turn, so it does not read first) — made directly with the sessions service's own Redis
//! store: no gRPC, no trigger detection. Run beside `process-query` it is the floor that
//! ProcessQuery is compared with.

use std::sync::Arc;

use anyhow::Context;
use switchyard_sessions::{
    domain::{LiveSession, RoleId, SessionId, SessionKey, SessionStatus, TenantId},
    store::{LiveStore, TurnOutcome, TurnUpdate, redis::RedisLiveStore},
};
use tonic::Status;

use super::Scenario;

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
    store: Option<Arc<RedisLiveStore>>,
    keys: Vec<SessionKey>,
    role: RoleId,
}

impl SessionsRedisFloor {
    pub fn new(args: Args) -> Self {
        // A constant, valid slug.
        let role = RoleId::parse("tech-expert").unwrap_or_else(|_| unreachable!("valid role id"));
        Self { args, store: None, keys: Vec::new(), role }
    }
}

fn status(err: impl std::fmt::Display) -> Status {
    Status::unavailable(err.to_string())
}

impl Scenario for SessionsRedisFloor {
    const NAME: &'static str = "sessions-redis-floor";

    async fn setup(&mut self) -> anyhow::Result<()> {
        let store = Arc::new(
            RedisLiveStore::connect(&self.args.redis_url, &self.args.prefix).await.context("connecting to Redis")?,
        );
        let role = self.role.clone();
        let now = chrono::Utc::now();
        for _ in 0..self.args.sessions.max(1) {
            let key = SessionKey { tenant: TenantId::default_tenant(), id: SessionId::generate() };
            let session = LiveSession {
                key: key.clone(),
                role_id: role.clone(),
                status: SessionStatus::Active,
                turn_count: 0,
                switch_count: 0,
                message_count: 0,
                created_at: now,
                updated_at: now,
                ttl: std::time::Duration::from_secs(3600),
                metadata: Default::default(),
                recent: Vec::new(),
            };
            store.create(&session).await.context("creating a floor session")?;
            self.keys.push(key);
        }
        self.store = Some(store);
        Ok(())
    }

    fn call(&self, worker: usize, _seq: u64) -> impl Future<Output = Result<(), Status>> + Send {
        let store = self.store.clone();
        let key = self.keys[worker % self.keys.len()].clone();
        let role = self.role.clone();
        async move {
            let store = store.ok_or_else(|| Status::failed_precondition("setup did not run"))?;
            let update = TurnUpdate {
                expected_role: role,
                expected_switch_count: 0,
                new_role: None,
                count_turn: true,
                now: chrono::Utc::now(),
            };
            match store.apply_turn(&key, &update).await.map_err(status)? {
                TurnOutcome::Applied(_) => Ok(()),
                other => Err(Status::aborted(format!("{other:?}"))),
            }
        }
    }
}
