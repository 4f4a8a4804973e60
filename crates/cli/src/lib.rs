//! The whole suite in one process (`switchyard dev`): every service on its own port, with
//! in-memory stores in place of Postgres and Redis.

use std::net::{IpAddr, SocketAddr};

use anyhow::Context;
use switchyard_sessions::{SessionsConfig, SessionsServer};
use switchyard_triggers::{TriggersConfig, TriggersServer};

/// Where the dev services listen; port 0 picks a free port.
#[derive(Debug, Clone, Copy)]
pub struct DevPorts {
    pub host: IpAddr,
    pub triggers: u16,
    pub sessions: u16,
}

/// The services of `switchyard dev`, bound and ready to serve.
pub struct DevStack {
    triggers: TriggersServer,
    sessions: SessionsServer,
}

impl DevStack {
    pub async fn start(ports: DevPorts) -> anyhow::Result<Self> {
        let triggers = TriggersServer::bind(&TriggersConfig::in_memory(SocketAddr::new(ports.host, ports.triggers)))
            .await
            .context("starting triggers")?;
        let triggers_url = format!("http://{}", triggers.local_addr());
        let sessions_config = SessionsConfig::in_memory(SocketAddr::new(ports.host, ports.sessions), &triggers_url);
        let sessions = SessionsServer::bind(&sessions_config).await.context("starting sessions")?;
        Ok(Self { triggers, sessions })
    }

    pub fn triggers_addr(&self) -> SocketAddr {
        self.triggers.local_addr()
    }

    pub fn sessions_addr(&self) -> SessionsAddr {
        SessionsAddr(self.sessions.local_addr())
    }

    /// Serves every service until `shutdown` completes; each drains its own in-flight calls.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let (stop, _) = tokio::sync::broadcast::channel::<()>(1);
        let stopped = |mut rx: tokio::sync::broadcast::Receiver<()>| async move {
            let _ = rx.recv().await;
        };
        let (a, b) = (stop.subscribe(), stop.subscribe());
        let servers =
            tokio::spawn(
                async move { tokio::try_join!(self.triggers.serve(stopped(a)), self.sessions.serve(stopped(b))) },
            );
        shutdown.await;
        let _ = stop.send(());
        servers.await.context("dev servers")??;
        Ok(())
    }
}

/// The sessions service's address (a distinct type so the two addresses cannot be swapped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionsAddr(pub SocketAddr);

impl std::fmt::Display for SessionsAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
