//! The sessions service's own test setup: a triggers server and a sessions server on port 0,
//! over the real Redis and Postgres with a fresh key prefix and schema per test (the test
//! kit's guards, cleaned up however the test ends). Tests fail, never skip, when either is
//! unreachable.
#![allow(dead_code)]

use switchyard_testkit::{KeyPrefix, Schema, Served, database_url, redis_url};

/// A server of the suite, on its own task.
pub type Running = Served;

/// A triggers server and a sessions server on real Redis and Postgres, each on port 0.
pub struct Suite {
    pub triggers: Running,
    pub sessions: Running,
    pub switcher: std::sync::Arc<switchyard_sessions::ContextSwitcher>,
    // Dropped last, after the servers that use them.
    pub schema: Schema,
    pub prefix: KeyPrefix,
}

pub async fn start_triggers() -> Running {
    start_triggers_on("127.0.0.1:0".parse().expect("addr")).await
}

pub async fn start_triggers_on(addr: std::net::SocketAddr) -> Running {
    let config = switchyard_triggers::TriggersConfig::in_memory(addr);
    let server = switchyard_triggers::TriggersServer::bind(&config).await.expect("bind triggers");
    Served::spawn(server.local_addr(), |shutdown| server.serve(shutdown))
}

/// Sessions config on real Redis and Postgres (a fresh schema and key prefix, cleaned up when
/// the returned guards are dropped).
pub fn sessions_config(
    triggers_url: &str,
    database_url: &str,
) -> (switchyard_sessions::SessionsConfig, Schema, KeyPrefix) {
    let (schema, prefix) = (Schema::new("s"), KeyPrefix::new("sy"));
    let mut config = switchyard_sessions::SessionsConfig::in_memory("127.0.0.1:0".parse().expect("addr"), triggers_url);
    config.stores.in_memory = false;
    config.stores.database_url = Some(database_url.into());
    config.stores.redis_url = Some(redis_url().into());
    config.stores.db_schema = schema.to_string();
    config.stores.redis_prefix = prefix.to_string();
    (config, schema, prefix)
}

pub async fn start_sessions(
    config: &switchyard_sessions::SessionsConfig,
) -> (Running, std::sync::Arc<switchyard_sessions::ContextSwitcher>) {
    let server =
        switchyard_sessions::SessionsServer::bind(config).await.expect("bind sessions (Redis and Postgres reachable?)");
    let switcher = server.switcher();
    (Served::spawn(server.local_addr(), |shutdown| server.serve(shutdown)), switcher)
}

impl Suite {
    pub async fn start() -> Self {
        let triggers = start_triggers().await;
        let (config, schema, prefix) = sessions_config(&triggers.url(), &database_url());
        let (sessions, switcher) = start_sessions(&config).await;
        Self { triggers, sessions, schema, prefix, switcher }
    }

    pub async fn channel(&self) -> tonic::transport::Channel {
        tonic::transport::Endpoint::from_shared(self.sessions.url()).expect("url").connect().await.expect("connect")
    }

    /// Stops both servers; the schema and keys go with the guards.
    pub async fn stop(self) {
        self.sessions.stop().await;
        self.triggers.stop().await;
    }
}
