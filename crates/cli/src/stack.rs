//! The whole suite wired once: triggers → sessions → MCP gateway → router → edge, each bound
//! on its own port from its in-memory defaults. `switchyard dev` and the edge's and router's
//! integration tests all start it here, changing only what they need through closures.
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

/// What to start and how; see [`Stack::builder`].
pub struct StackBuilder {
    ports: DevPorts,
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

    /// Every service on `ports`, in memory, with the gateway (no downstream servers) and an
    /// open edge, until told otherwise.
    pub fn builder(ports: DevPorts) -> StackBuilder {
        StackBuilder {
            ports,
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
        let ports = self.ports;
        let at = |port| SocketAddr::new(ports.host, port);
        let over_network = std::mem::take(&mut self.over_network);
        let in_process = |service| !over_network.contains(&service);

        let mut config = TriggersConfig::in_memory(at(ports.triggers));
        config.server.serve_in_process = in_process(GrpcService::Triggers);
        (self.triggers)(&mut config);
        let triggers = TriggersServer::bind(&config).await.context("starting triggers")?;
        let triggers_url = format!("http://{}", triggers.local_addr());

        let mut config = SessionsConfig::in_memory(at(ports.sessions), &triggers_url);
        config.server.serve_in_process = in_process(GrpcService::Sessions);
        (self.sessions)(&mut config);
        let sessions = SessionsServer::bind(&config).await.context("starting sessions")?;
        let sessions_url = format!("http://{}", sessions.local_addr());

        let gateway_in_process = in_process(GrpcService::McpGateway);
        let (gateway, mcp_gateway_url) = match self.gateway {
            Some(configure) => {
                let mut config = GatewayConfig::in_memory(at(ports.mcp_gateway), at(ports.mcp), Vec::new());
                config.server.serve_in_process = gateway_in_process;
                configure(&mut config);
                let gateway = GatewayServer::bind(&config).await.context("starting the MCP gateway")?;
                let url = format!("http://{}", gateway.local_addr());
                (Some(gateway), url)
            }
            None => (None, self.absent_gateway_url),
        };

        let mut router_config = RouterConfig::in_memory(at(ports.router), &sessions_url, &mcp_gateway_url);
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
                let mut config = EdgeConfig::open(at(ports.edge), &urls);
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
