//! The whole suite wired once: triggers → sessions → MCP gateway → router → edge, each bound
//! on its own port. `switchyard dev` and the edge's and router's integration tests start it
//! from the in-memory defaults, changing only what they need through closures; `switchyard
//! serve` starts it from each service's own configuration (its real stores).
//!
//! The services call each other in process (`switchyard_kit::in_process`): the same gRPC
//! contract without TCP and HTTP/2. Each still listens on its port for callers outside the
//! process; a test that cuts a service's connections has its callers use the network
//! ([`StackBuilder::over_network`]).

use std::{future::Future, net::SocketAddr, pin::Pin, sync::Arc};

use anyhow::Context;
use switchyard_edge::{EdgeConfig, EdgeServer, auth::Authenticator, clients::UpstreamUrls};
use switchyard_mcp_gateway::{Gateway, GatewayConfig, GatewayServer};
use switchyard_router::{RouterConfig, RouterServer};
use switchyard_sessions::{SessionsConfig, SessionsServer};
use switchyard_triggers::{TriggersConfig, TriggersServer};

use crate::DevPorts;

/// A change to one service's configuration, applied after its in-memory defaults.
pub type Configure<T> = Box<dyn FnOnce(&mut T) + Send>;

/// Binds the router from its final configuration (a test's own stores, say).
pub type BindRouter =
    Box<dyn FnOnce(RouterConfig) -> Pin<Box<dyn Future<Output = anyhow::Result<RouterServer>> + Send>> + Send>;

/// How to serve one bound service until the shutdown signal `D` completes.
pub type Serve<D> = Box<dyn FnOnce(D) -> Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>> + Send>;

/// `serve` as a [`Serve`].
fn serving<D, F>(serve: impl FnOnce(D) -> F + Send + 'static) -> Serve<D>
where
    F: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    Box::new(move |stop| -> Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>> { Box::pin(serve(stop)) })
}

/// The gRPC services the others call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrpcService {
    Triggers,
    Sessions,
    McpGateway,
    Router,
}

/// Every service's configuration before the stack wires them together: where each listens,
/// its stores and its own settings. [`StackBuilder::start`] sets what each is told of the others
/// (their URLs) and that it serves callers in this process.
#[derive(Debug, Clone)]
pub struct Configs {
    pub triggers: TriggersConfig,
    pub sessions: SessionsConfig,
    pub gateway: GatewayConfig,
    pub router: RouterConfig,
    pub edge: EdgeConfig,
}

impl Configs {
    /// Every service on `ports`, in memory, the gateway without downstream servers and the edge
    /// open (tests and `switchyard dev`).
    pub fn in_memory(ports: DevPorts) -> Self {
        let at = |port| SocketAddr::new(ports.host, port);
        // The URLs of the others are left empty: `start` sets them once each is bound.
        Self {
            triggers: TriggersConfig::in_memory(at(ports.triggers)),
            sessions: SessionsConfig::in_memory(at(ports.sessions), ""),
            gateway: GatewayConfig::in_memory(at(ports.mcp_gateway), at(ports.mcp), Vec::new()),
            router: RouterConfig::in_memory(at(ports.router), "", ""),
            edge: EdgeConfig::open(at(ports.edge), &UpstreamUrls::default()),
        }
    }

    /// What each service's own binary would read from this process's environment (the
    /// variables of its flags: `DATABASE_URL`, `REDIS_URL`, `ROUTER_LISTEN`, …), but for the
    /// URLs of the others, which the stack sets.
    pub fn from_env() -> anyhow::Result<Self> {
        use switchyard_kit::config::parse_env;
        Ok(Self {
            triggers: parse_env("switchyard-triggers")?,
            sessions: parse_env("switchyard-sessions")?,
            gateway: parse_env("switchyard-mcp-gateway")?,
            router: parse_env("switchyard-router")?,
            edge: parse_env("switchyard-edge")?,
        })
    }
}

/// What to start and how; see [`Stack::builder`].
pub struct StackBuilder {
    base: Configs,
    /// Services whose callers in this process go over loopback gRPC instead of in process.
    over_network: Vec<GrpcService>,
    triggers: Configure<TriggersConfig>,
    sessions: Configure<SessionsConfig>,
    /// `None`: no gateway; the router and the edge call `absent_gateway_url`.
    gateway: Option<Configure<GatewayConfig>>,
    absent_gateway_url: String,
    router: Configure<RouterConfig>,
    bind_router: Option<BindRouter>,
    /// `None`: no edge.
    edge: Option<Configure<EdgeConfig>>,
    edge_auth: Option<Authenticator>,
}

/// The services, bound and not yet serving: each is served (and stopped) on its own.
pub struct Stack {
    pub triggers: TriggersServer,
    pub sessions: SessionsServer,
    pub gateway: Option<GatewayServer>,
    pub router: RouterServer,
    pub edge: Option<EdgeServer>,
    /// The configuration the router was bound with (for a second replica).
    pub router_config: RouterConfig,
    /// The gRPC URLs of the services (the gateway's is the absent one's without a gateway).
    pub urls: UpstreamUrls,
}

/// The services as a caller serves them (see [`Stack::serve_each`]).
pub struct Serving<S> {
    pub triggers: S,
    pub sessions: S,
    /// The gateway itself (its catalog) and its serving.
    pub gateway: Option<(Arc<Gateway>, S)>,
    pub router: S,
    pub edge: Option<S>,
    pub router_config: RouterConfig,
    pub urls: UpstreamUrls,
}

impl Stack {
    /// Hands each service to `spawn` with its address and how to serve it, so each can be
    /// stopped on its own (a test's outage).
    pub fn serve_each<S, D, F>(self, mut spawn: F) -> Serving<S>
    where
        D: Future<Output = ()> + Send + 'static,
        F: FnMut(SocketAddr, Serve<D>) -> S,
    {
        let Self { triggers, sessions, gateway, router, edge, router_config, urls } = self;
        let triggers = spawn(triggers.local_addr(), serving(|stop| triggers.serve(stop)));
        let sessions = spawn(sessions.local_addr(), serving(|stop| sessions.serve(stop)));
        let gateway = gateway.map(|server| {
            let catalog = server.gateway();
            (catalog, spawn(server.local_addr(), serving(|stop| server.serve(stop))))
        });
        let router = spawn(router.local_addr(), serving(|stop| router.serve(stop)));
        let edge = edge.map(|edge| spawn(edge.local_addr(), serving(|stop| edge.serve(stop))));
        Serving { triggers, sessions, gateway, router, edge, router_config, urls }
    }

    /// Serves every service until `shutdown` completes, then stops them one after the other,
    /// callers first (the edge, the router, the gateway, sessions, triggers): each drains its
    /// in-flight calls while the services those calls need still answer. A service that fails
    /// stops the others the same way, and the first error is returned.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        type Stopped = Pin<Box<dyn Future<Output = ()> + Send>>;
        let serving = self.serve_each(|addr, serve: Serve<Stopped>| {
            let (stop, mut stopping) = tokio::sync::watch::channel(false);
            let stopped: Stopped = Box::pin(async move {
                let _ = stopping.wait_for(|stop| *stop).await;
            });
            let served =
                tokio::spawn(async move { serve(stopped).await.with_context(|| format!("serving on {addr}")) });
            (stop, served)
        });
        let Serving { triggers, sessions, gateway, router, edge, .. } = serving;
        let mut in_order: Vec<_> = edge
            .map(|served| ("the edge", served))
            .into_iter()
            .chain([("the router", router)])
            .chain(gateway.map(|(_, served)| ("the MCP gateway", served)))
            .chain([("sessions", sessions), ("triggers", triggers)])
            .collect();

        let ended_early = {
            let any_ended = futures::future::select_all(in_order.iter_mut().map(|(_, (_, served))| served));
            tokio::select! {
                () = shutdown => None,
                (ended, index, _) = any_ended => Some((index, ended)),
            }
        };
        let mut first = Ok(());
        if let Some((index, ended)) = &ended_early {
            let name = in_order.get(*index).map_or("a service", |(name, _)| *name);
            first = match ended {
                Ok(Ok(())) => Err(anyhow::anyhow!("{name} stopped before the shutdown signal")),
                Ok(Err(err)) => Err(anyhow::anyhow!("{name}: {err:#}")),
                Err(err) => Err(anyhow::anyhow!("{name}'s task: {err}")),
            };
        }
        for (index, (name, (stop, served))) in in_order.into_iter().enumerate() {
            if ended_early.as_ref().is_some_and(|(ended, _)| *ended == index) {
                continue;
            }
            stop.send_replace(true);
            let ended = served.await.with_context(|| format!("{name}'s task")).and_then(|served| served);
            if first.is_ok() {
                first = ended.with_context(|| format!("stopping {name}"));
            }
        }
        first
    }

    /// Every service on `ports`, in memory, with the gateway (no downstream servers) and an
    /// open edge, until told otherwise.
    pub fn builder(ports: DevPorts) -> StackBuilder {
        Self::from_configs(Configs::in_memory(ports))
    }

    /// Every service from `base` (each one's own configuration: `switchyard serve`).
    pub fn from_configs(base: Configs) -> StackBuilder {
        StackBuilder {
            base,
            over_network: Vec::new(),
            triggers: Box::new(|_| {}),
            sessions: Box::new(|_| {}),
            gateway: Some(Box::new(|_| {})),
            absent_gateway_url: String::new(),
            router: Box::new(|_| {}),
            bind_router: None,
            edge: Some(Box::new(|_| {})),
            edge_auth: None,
        }
    }
}

/// `first`, then `then`.
fn chain<T: 'static>(first: Configure<T>, then: impl FnOnce(&mut T) + Send + 'static) -> Configure<T> {
    Box::new(move |config| {
        first(config);
        then(config);
    })
}

impl StackBuilder {
    /// Callers in this process reach `service` over loopback gRPC, as callers in another
    /// process do (a test that cuts its connections with a proxy, say).
    pub fn over_network(mut self, service: GrpcService) -> Self {
        self.over_network.push(service);
        self
    }

    /// Every service is called over loopback gRPC (the suite as separate processes would run
    /// it, in one process).
    pub fn all_over_network(self) -> Self {
        [GrpcService::Triggers, GrpcService::Sessions, GrpcService::McpGateway, GrpcService::Router]
            .into_iter()
            .fold(self, Self::over_network)
    }

    pub fn triggers(mut self, configure: impl FnOnce(&mut TriggersConfig) + Send + 'static) -> Self {
        self.triggers = chain(self.triggers, configure);
        self
    }

    pub fn sessions(mut self, configure: impl FnOnce(&mut SessionsConfig) + Send + 'static) -> Self {
        self.sessions = chain(self.sessions, configure);
        self
    }

    /// Changes to the gateway's configuration (its servers, say); starts it if it was off.
    pub fn gateway(mut self, configure: impl FnOnce(&mut GatewayConfig) + Send + 'static) -> Self {
        self.gateway = Some(chain(self.gateway.unwrap_or_else(|| Box::new(|_| {})), configure));
        self
    }

    /// No gateway: the router and the edge call `url` instead (a closed port, say).
    pub fn without_gateway(mut self, url: impl Into<String>) -> Self {
        self.gateway = None;
        self.absent_gateway_url = url.into();
        self
    }

    pub fn router(mut self, configure: impl FnOnce(&mut RouterConfig) + Send + 'static) -> Self {
        self.router = chain(self.router, configure);
        self
    }

    /// Binds the router with `bind` instead of [`RouterServer::bind`].
    pub fn bind_router<F>(mut self, bind: impl FnOnce(RouterConfig) -> F + Send + 'static) -> Self
    where
        F: Future<Output = anyhow::Result<RouterServer>> + Send + 'static,
    {
        self.bind_router = Some(Box::new(move |config| Box::pin(bind(config))));
        self
    }

    /// Changes to the edge's configuration; starts it if it was off.
    pub fn edge(mut self, configure: impl FnOnce(&mut EdgeConfig) + Send + 'static) -> Self {
        self.edge = Some(chain(self.edge.unwrap_or_else(|| Box::new(|_| {})), configure));
        self
    }

    /// The edge authenticates with `auth` instead of what its configuration names.
    pub fn edge_auth(mut self, auth: Authenticator) -> Self {
        self.edge_auth = Some(auth);
        self
    }

    pub fn without_edge(mut self) -> Self {
        self.edge = None;
        self
    }

    /// Binds every service in order, each given the addresses of those it calls.
    pub async fn start(mut self) -> anyhow::Result<Stack> {
        let over_network = std::mem::take(&mut self.over_network);
        let in_process = |service| !over_network.contains(&service);
        let Configs { triggers: mut config, sessions, gateway, router, edge } = self.base;

        config.server.serve_in_process = in_process(GrpcService::Triggers);
        (self.triggers)(&mut config);
        let triggers = TriggersServer::bind(&config).await.context("starting triggers")?;
        let triggers_url = format!("http://{}", triggers.local_addr());

        let mut config = sessions;
        config.triggers_url.clone_from(&triggers_url);
        config.server.serve_in_process = in_process(GrpcService::Sessions);
        (self.sessions)(&mut config);
        let sessions = SessionsServer::bind(&config).await.context("starting sessions")?;
        let sessions_url = format!("http://{}", sessions.local_addr());

        let (gateway, mcp_gateway_url) = match self.gateway {
            Some(configure) => {
                let mut config = gateway;
                config.server.serve_in_process = in_process(GrpcService::McpGateway);
                configure(&mut config);
                let gateway = GatewayServer::bind(&config).await.context("starting the MCP gateway")?;
                let url = format!("http://{}", gateway.local_addr());
                (Some(gateway), url)
            }
            None => (None, self.absent_gateway_url),
        };

        let mut router_config = router;
        router_config.sessions_url.clone_from(&sessions_url);
        router_config.mcp_gateway_url.clone_from(&mcp_gateway_url);
        router_config.server.serve_in_process = in_process(GrpcService::Router);
        (self.router)(&mut router_config);
        let router = match self.bind_router {
            Some(bind) => bind(router_config.clone()).await,
            None => RouterServer::bind(&router_config).await,
        }
        .context("starting the router")?;

        let urls = UpstreamUrls {
            router: format!("http://{}", router.local_addr()),
            sessions: sessions_url,
            triggers: triggers_url,
            mcp_gateway: mcp_gateway_url,
        };
        let edge = match self.edge {
            Some(configure) => {
                let mut config = edge;
                config.set_upstreams(&urls);
                configure(&mut config);
                let edge = match self.edge_auth {
                    Some(auth) => EdgeServer::bind_with_auth(&config, auth).await,
                    None => EdgeServer::bind(&config).await,
                };
                Some(edge.context("starting the edge")?)
            }
            None => None,
        };
        Ok(Stack { triggers, sessions, gateway, router, edge, router_config, urls })
    }
}
