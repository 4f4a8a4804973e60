//! The whole suite in one process: `switchyard dev`, every service on its own port with
//! in-memory stores in place of Postgres and Redis, and `switchyard serve`, every service from
//! its own production configuration; in both the services call each other in process.

pub mod budgets;
pub mod chat;
pub mod keys;
pub mod stack;

use std::net::{IpAddr, SocketAddr};

use switchyard_edge::EdgeServer;
use switchyard_llm::{ModelRef, ProviderArgs};
use switchyard_mcp_gateway::GatewayServer;
use switchyard_router::RouterServer;
use switchyard_sessions::SessionsServer;
use switchyard_triggers::TriggersServer;

pub use crate::stack::Stack;

/// Where the dev services listen; port 0 picks a free port.
#[derive(Debug, Clone, Copy)]
pub struct DevPorts {
    pub host: IpAddr,
    pub triggers: u16,
    pub sessions: u16,
    /// gRPC port of the MCP gateway.
    pub mcp_gateway: u16,
    /// Port of the MCP gateway's `/mcp` endpoint.
    pub mcp: u16,
    pub router: u16,
    /// HTTP port of the edge (REST, OpenAI-compatible chat, console).
    pub edge: u16,
}

impl DevPorts {
    /// Every service on a free port of loopback (tests).
    pub fn loopback() -> Self {
        let host = IpAddr::from([127, 0, 0, 1]);
        Self { host, triggers: 0, sessions: 0, mcp_gateway: 0, mcp: 0, router: 0, edge: 0 }
    }
}

/// The router's LLM providers and models in `switchyard dev` (from the same flags and
/// environment variables as `switchyard-router`).
#[derive(Debug, Clone, Default)]
pub struct DevChat {
    pub providers: ProviderArgs,
    /// The model that routes and answers; when not given, see [`DevChat::model`].
    pub default_model: Option<ModelRef>,
    pub fallback_models: Vec<ModelRef>,
    /// The MiniLM folder of the fast router and the gateway (default: `models/all-MiniLM-L6-v2`
    /// under the current directory, where `scripts/dev` runs).
    pub embedding_model_dir: Option<std::path::PathBuf>,
    /// The router's model price table (`ROUTER_MODEL_PRICES`); the shipped one when absent.
    pub model_prices: Option<std::path::PathBuf>,
}

impl DevChat {
    /// The model given, else a vendor's when one is configured (OpenAI's first), else the
    /// local model: with no key and no network, `switchyard dev` still answers.
    pub fn model(&self) -> ModelRef {
        if let Some(model) = &self.default_model {
            return model.clone();
        }
        let p = &self.providers;
        if p.openai_api_key.is_some() || p.openai_base_url.is_some() {
            ModelRef::new("openai", "gpt-4o-mini")
        } else if p.anthropic_api_key.is_some() || p.anthropic_base_url.is_some() {
            ModelRef::new("anthropic", "claude-3-5-sonnet-20241022")
        } else {
            ModelRef::new(switchyard_router::turn::LOCAL_PROVIDER, switchyard_local_llm::MODEL_NAME)
        }
    }
}

/// The MCP gateway's downstream servers in `switchyard dev`.
#[derive(Debug, Clone, Default)]
pub struct DevMcp {
    /// `--server NAME=COMMAND|URL` values.
    pub servers: Vec<String>,
    /// A servers file (TOML or JSON).
    pub config_file: Option<std::path::PathBuf>,
}

/// How the services of `switchyard dev` call each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ServiceCalls {
    /// Straight to the called service's server stack, without TCP and HTTP/2 (same contract).
    #[default]
    InProcess,
    /// Over loopback gRPC, as separate processes would (to compare, or to watch the traffic).
    Network,
}

/// How `switchyard dev` serves: how its services call each other, and the edge's rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevServing {
    pub calls: ServiceCalls,
    /// Requests a second the edge allows each credential (0: no limit). The edge is open, so
    /// every caller without a key shares one allowance.
    pub edge_rate_limit: u32,
    /// Requests a credential may make at once above its rate.
    pub edge_rate_burst: u32,
}

impl Default for DevServing {
    /// In process, with the edge's own rate-limit defaults.
    fn default() -> Self {
        use switchyard_edge::config::{DEFAULT_RATE_BURST, DEFAULT_RATE_LIMIT};
        Self {
            calls: ServiceCalls::default(),
            edge_rate_limit: DEFAULT_RATE_LIMIT,
            edge_rate_burst: DEFAULT_RATE_BURST,
        }
    }
}

/// The services of `switchyard dev`, bound and ready to serve.
pub struct DevStack {
    triggers: TriggersServer,
    sessions: SessionsServer,
    gateway: GatewayServer,
    router: RouterServer,
    edge: EdgeServer,
    router_config: switchyard_router::RouterConfig,
    urls: switchyard_edge::clients::UpstreamUrls,
}

impl DevStack {
    pub async fn start(ports: DevPorts, mcp: DevMcp, chat: DevChat) -> anyhow::Result<Self> {
        Self::start_with(ports, mcp, chat, DevServing::default()).await
    }

    /// [`DevStack::start`], served as `serving` says.
    pub async fn start_with(ports: DevPorts, mcp: DevMcp, chat: DevChat, serving: DevServing) -> anyhow::Result<Self> {
        let model_dir = chat.embedding_model_dir.clone();
        let (triggers_model_dir, gateway_model_dir) = (model_dir.clone(), model_dir.clone());
        let mut builder = Stack::builder(ports);
        if serving.calls == ServiceCalls::Network {
            builder = builder.all_over_network();
        }
        let stack = builder
            .triggers(move |config| {
                if let Some(dir) = triggers_model_dir {
                    // The same MiniLM as the gateway and the router, for the semantic signal.
                    config.model_dir = dir;
                }
            })
            .gateway(move |config| {
                config.servers = mcp.servers;
                config.config_file = mcp.config_file;
                if let Some(dir) = gateway_model_dir {
                    config.model_dir = dir;
                }
            })
            .router(move |config| {
                config.default_model = chat.model();
                if let Some(dir) = model_dir {
                    config.model_dir = dir;
                }
                // One process, one user: the routing cache and learning from corrections are on.
                config.cache_routing = true;
                config.providers = chat.providers;
                config.fallback_models = chat.fallback_models;
                config.model_prices = chat.model_prices;
            })
            .edge(move |config| {
                config.rate_limit = serving.edge_rate_limit;
                config.rate_burst = serving.edge_rate_burst;
            })
            .start()
            .await?;
        let Stack { triggers, sessions, gateway: Some(gateway), router, edge: Some(edge), router_config, urls } = stack
        else {
            anyhow::bail!("the dev stack runs every service");
        };
        Ok(Self { triggers, sessions, gateway, router, edge, router_config, urls })
    }

    pub fn mcp_gateway_addr(&self) -> SocketAddr {
        self.gateway.local_addr()
    }

    pub fn mcp_addr(&self) -> SocketAddr {
        self.gateway.mcp_addr()
    }

    pub fn gateway(&self) -> std::sync::Arc<switchyard_mcp_gateway::Gateway> {
        self.gateway.gateway()
    }

    pub fn router_addr(&self) -> SocketAddr {
        self.router.local_addr()
    }

    /// The router itself (tests wait for its fast router to load).
    pub fn router(&self) -> std::sync::Arc<switchyard_router::Router> {
        self.router.router()
    }

    /// The edge's HTTP address.
    pub fn edge_addr(&self) -> SocketAddr {
        self.edge.local_addr()
    }

    pub fn triggers_addr(&self) -> SocketAddr {
        self.triggers.local_addr()
    }

    pub fn sessions_addr(&self) -> SessionsAddr {
        SessionsAddr(self.sessions.local_addr())
    }

    /// Serves every service until `shutdown` completes; each drains its own in-flight calls.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let Self { triggers, sessions, gateway, router, edge, router_config, urls } = self;
        Stack { triggers, sessions, gateway: Some(gateway), router, edge: Some(edge), router_config, urls }
            .serve(shutdown)
            .await
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
