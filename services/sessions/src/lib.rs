//! The sessions service (docs/requirements.md#sessions-switching, and the `/api/context/*`
//! endpoints of docs/requirements.md#sessions-endpoints): expert roles, live sessions in
//! Redis, context switching with hysteresis through the triggers service, and the switch
//! history in Postgres.
//!
//! `ContextSwitcher` (the context-switching core) and `RoleCatalog` are the service; `grpc`
//! adapts them to `switchyard.sessions.v1`.

pub mod clients;
pub mod config;
pub mod defaults;
pub mod domain;
pub mod error;
pub mod grpc;
pub mod paging;
pub mod recorder;
pub mod roles;
pub mod store;
pub mod switching;
pub mod transition;

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use switchyard_kit::{GrpcServer, store::StorePlan};
use switchyard_proto::sessions::v1::{
    role_service_server::RoleServiceServer, session_service_server::SessionServiceServer,
};

pub use config::SessionsConfig;
pub use switching::ContextSwitcher;

use crate::{
    clients::TriggersClient,
    roles::RoleCatalog,
    store::{
        LiveStore, RecordStore, RoleStore,
        memory::{MemoryLiveStore, MemoryRecordStore, MemoryRoleStore},
        postgres::PostgresStore,
        redis::RedisLiveStore,
    },
};

/// The three stores the service runs on.
pub struct Stores {
    pub live: Arc<dyn LiveStore>,
    pub records: Arc<dyn RecordStore>,
    pub roles: Arc<dyn RoleStore>,
}

impl Stores {
    /// Redis and Postgres as configured, or memory with `--in-memory`.
    pub async fn open(config: &SessionsConfig) -> anyhow::Result<Self> {
        let args = config.stores.store_args();
        let (database_url, redis_url) = match args.plan("sessions", true).map_err(anyhow::Error::msg)? {
            StorePlan::InMemory => {
                return Ok(Self {
                    live: Arc::new(MemoryLiveStore::default()),
                    records: Arc::new(MemoryRecordStore::default()),
                    roles: Arc::new(MemoryRoleStore::default()),
                });
            }
            StorePlan::Durable { database_url, redis_url } => (database_url, redis_url.context("redis url")?),
        };
        let postgres = Arc::new(
            PostgresStore::connect(database_url.expose(), &args.db_schema)
                .await
                .with_context(|| format!("opening Postgres at {}", database_url.url_without_credentials()))?,
        );
        let live = Arc::new(
            RedisLiveStore::connect(&redis_url, &args.redis_prefix)
                .await
                .with_context(|| format!("opening Redis at {}", redis_url.url_without_credentials()))?,
        );
        Ok(Self { live, records: postgres.clone(), roles: postgres })
    }
}

/// How often the history's partitions are made ahead and its retention applied.
const HISTORY_UPKEEP_EVERY: Duration = Duration::from_secs(3600);

/// The history's upkeep at start and hourly, until the record store is dropped with the
/// server.
fn spawn_history_upkeep(records: std::sync::Weak<dyn RecordStore>, retention: Option<Duration>) {
    let retention = match retention.map(chrono::Duration::from_std).transpose() {
        Ok(retention) => retention,
        Err(_) => {
            tracing::warn!("--history-retention is too long to compute a cut; history is kept for ever");
            None
        }
    };
    tokio::spawn(async move {
        let mut every = tokio::time::interval(HISTORY_UPKEEP_EVERY);
        loop {
            every.tick().await;
            let Some(records) = records.upgrade() else { return };
            let cut = retention.and_then(|retention| chrono::Utc::now().checked_sub_signed(retention));
            match records.keep_history(cut).await {
                Ok(0) => {}
                Ok(removed) => tracing::info!(removed, "history past the retention dropped"),
                Err(err) => tracing::warn!(error = %err, "history upkeep failed; retrying next hour"),
            }
        }
    });
}

/// A sessions server bound to its port, ready to serve.
pub struct SessionsServer {
    server: GrpcServer,
    switcher: Arc<ContextSwitcher>,
    drain_timeout: Duration,
}

impl SessionsServer {
    pub async fn bind(config: &SessionsConfig) -> anyhow::Result<Self> {
        let stores = Stores::open(config).await?;
        Self::bind_with(config, stores).await
    }

    pub async fn bind_with(config: &SessionsConfig, stores: Stores) -> anyhow::Result<Self> {
        let triggers = TriggersClient::new(&config.triggers_url)?;
        let roles = RoleCatalog::open(stores.roles, triggers.clone()).await?;
        roles.spawn_refresh(config.role_refresh);
        let recorder = recorder::start(stores.records.clone(), config.recorder());
        spawn_history_upkeep(Arc::downgrade(&stores.records), config.history_retention);
        let live = stores.live.clone();
        let switcher = Arc::new(ContextSwitcher::new(
            stores.live,
            stores.records,
            recorder,
            roles.clone(),
            triggers,
            config.limits(),
        ));

        let mut server = GrpcServer::bind(config.listen, config.server.clone()).await?;
        let max = config.server.max_message_bytes;
        server.add_service(
            SessionServiceServer::new(grpc::SessionsGrpc::new(switcher.clone()))
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        );
        server.add_service(
            RoleServiceServer::new(grpc::RolesGrpc::new(roles.clone()))
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        );
        // Ready once the roles are registered with the triggers service, and while live
        // sessions can be served. A Postgres outage degrades (records are buffered) rather
        // than taking the service out of rotation.
        server.health().spawn_probe(Duration::from_millis(500), move || {
            let (live, catalog) = (live.clone(), roles.clone());
            async move {
                if !catalog.is_registered() {
                    return Err("roles not yet registered with the triggers service".to_owned());
                }
                live.ping().await.map_err(|err| err.to_string())
            }
        });
        Ok(Self { server, switcher, drain_timeout: config.record_drain_timeout })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    pub fn switcher(&self) -> Arc<ContextSwitcher> {
        self.switcher.clone()
    }

    /// Serves until `shutdown`, drains in-flight calls, then writes the records still held
    /// (buffered during an outage, or coalesced turn counts) within the drain timeout.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send) -> anyhow::Result<()> {
        let served = self.server.serve(shutdown).await;
        self.switcher.recorder().drain(self.drain_timeout).await;
        served
    }
}
