//! The triggers service (docs/requirements.md#triggers-detection): detects which expert role
//! a query belongs to from domain trigger packs and custom patterns, scores roles (priorities
//! summed plus a diversity bonus) and picks the best one with hysteresis. A semantic signal
//! (`semantic`: MiniLM similarity to each role's exemplar questions) decides when no trigger
//! matches and breaks near ties (`blend`).
//!
//! `TriggerRegistry` is the service; `grpc` adapts it to `switchyard.triggers.v1`.

pub mod blend;
pub mod config;
pub mod domain;
pub mod error;
pub mod grpc;
pub mod hysteresis;
pub mod matcher;
pub mod packs;
pub mod regexes;
pub mod registry;
pub mod semantic;
pub mod store;
pub mod text;

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use switchyard_kit::{GrpcServer, store::StorePlan};
use switchyard_proto::triggers::v1::trigger_service_server::TriggerServiceServer;

pub use config::TriggersConfig;
pub use registry::TriggerRegistry;

use crate::{
    packs::DomainPacks,
    semantic::{ModelState, SemanticModel},
    store::{MemoryStore, PostgresStore, TriggerStore},
};

/// The health name under which the semantic signal reports (SERVING once its model is
/// loaded); the service's own readiness does not depend on it.
pub const SEMANTIC_HEALTH: &str = "switchyard.triggers.v1.TriggerService.semantic";

/// The health name under which the registry's store (Postgres) reports: NOT_SERVING while it
/// is unreachable. Matching goes on from the registry in memory meanwhile, so the service's
/// own readiness does not depend on it either.
pub const STORE_HEALTH: &str = "switchyard.triggers.v1.TriggerService.store";

/// Whether the registry's store answers, as the health probe last found it: the transitions
/// are logged once each, and the state is the `triggers.store_reachable` gauge.
#[derive(Clone)]
struct StoreWatch {
    reachable: Arc<std::sync::atomic::AtomicBool>,
    _gauge: Arc<opentelemetry::metrics::ObservableGauge<u64>>,
}

impl StoreWatch {
    fn new() -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let reachable = Arc::new(AtomicBool::new(true));
        let observed = reachable.clone();
        let gauge = opentelemetry::global::meter("switchyard-triggers")
            .u64_observable_gauge("triggers.store_reachable")
            .with_description("1 while the trigger registry's store (Postgres) answers; matching goes on without it")
            .with_callback(move |observer| observer.observe(u64::from(observed.load(Ordering::Relaxed)), &[]))
            .build();
        Self { reachable, _gauge: Arc::new(gauge) }
    }

    fn observe(&self, ping: Result<(), error::TriggersError>) -> bool {
        let now = ping.is_ok();
        let was = self.reachable.swap(now, std::sync::atomic::Ordering::Relaxed);
        match ping {
            Err(err) if was => tracing::warn!(
                error = %err,
                "trigger store unreachable: matching from the registry in memory, registrations refused until it returns"
            ),
            Ok(()) if !was => tracing::info!("trigger store reachable again"),
            _ => {}
        }
        now
    }
}

/// A triggers server bound to its port, ready to serve.
pub struct TriggersServer {
    server: GrpcServer,
    registry: Arc<TriggerRegistry>,
}

impl TriggersServer {
    /// Opens the store named by `config` (Postgres, or memory), loads the registry and binds.
    pub async fn bind(config: &TriggersConfig) -> anyhow::Result<Self> {
        let args = config.stores.store_args();
        let store: Arc<dyn TriggerStore> = match args.plan("triggers", false).map_err(anyhow::Error::msg)? {
            StorePlan::InMemory => Arc::new(MemoryStore::default()),
            StorePlan::Durable { database_url, .. } => Arc::new(
                PostgresStore::connect(database_url.expose(), &args.db_schema, config.sync_interval)
                    .await
                    .with_context(|| {
                        format!(
                            "opening the trigger registry in Postgres at {}",
                            database_url.url_without_credentials()
                        )
                    })?,
            ),
        };
        Self::bind_with_store(config, store).await
    }

    /// Binds with a given store (tests, and `switchyard dev`).
    pub async fn bind_with_store(config: &TriggersConfig, store: Arc<dyn TriggerStore>) -> anyhow::Result<Self> {
        let registry_config = config.registry_config().map_err(anyhow::Error::msg)?;
        let packs = Arc::new(DomainPacks::builtin()?);
        let (model_ready, when_ready) = tokio::sync::oneshot::channel();
        let model = if config.no_semantic {
            SemanticModel::off()
        } else {
            SemanticModel::load_in_background(
                config.model_dir.clone(),
                config.recent_queries,
                semantic::SemanticIndex::pack_texts(&packs),
                config.embedding_cache_path(),
                move || {
                    let _ = model_ready.send(());
                },
            )
        };
        tracing::info!(model_dir = %config.model_dir.display(), "{}", model.state().describe());
        let registry = TriggerRegistry::open(store, packs, registry_config, model).await?;
        registry.spawn_follower(config.sync_interval);
        registry.index_when_ready(when_ready, config.sync_interval);

        let mut server = GrpcServer::bind(config.listen, config.server.clone()).await?;
        let max = config.server.max_message_bytes;
        server.add_service(
            TriggerServiceServer::new(grpc::TriggersGrpc::new(registry.clone()))
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        );
        // Ready whenever it can answer, which is always once the registry is loaded (bind
        // fails otherwise): matching runs on the compiled registry in memory. A Postgres
        // outage only holds back registrations and other replicas' changes, so it shows under
        // STORE_HEALTH, in a log line when it starts and ends, and in a gauge — pulling a
        // replica that answers would only move its traffic onto others in the same state.
        let (probe_registry, health) = (registry.clone(), server.health());
        let store = StoreWatch::new();
        server.health().spawn_probe(Duration::from_secs(2), move || {
            let (registry, health, store) = (probe_registry.clone(), health.clone(), store.clone());
            async move {
                // The semantic signal is a detail: the service serves (by triggers) without it.
                health.set_component(SEMANTIC_HEALTH, registry.model().state() == ModelState::Ready).await;
                let reachable = store.observe(registry.ping().await);
                health.set_component(STORE_HEALTH, reachable).await;
                Ok(())
            }
        });
        Ok(Self { server, registry })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    pub fn registry(&self) -> Arc<TriggerRegistry> {
        self.registry.clone()
    }

    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send) -> anyhow::Result<()> {
        self.server.serve(shutdown).await
    }
}
