//! `switchyard`: the whole suite in one process, for development and demos (`dev`, in-memory
//! stores) and for production (`serve`, the real stores); plus the operator commands.

use clap::{Parser, Subcommand};
use switchyard_cli::{DevChat, DevMcp, DevPorts, DevServing, DevStack, ServiceCalls, Stack};
use switchyard_kit::{TelemetryArgs, shutdown_signal, telemetry};
use switchyard_llm::{ModelRef, ProviderArgs};

#[derive(Parser)]
#[command(name = "switchyard", version, about = "Context-aware routing for LLM applications")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    telemetry: TelemetryArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run every service in this process on its default port, with in-memory stores in place
    /// of Postgres and Redis (nothing survives exit).
    // Boxed: its provider settings make it several times the size of the other commands.
    Dev(Box<DevArgs>),
    /// Run every service in this process as in production, with the real stores: each service
    /// reads the environment variables its own binary reads (DATABASE_URL, REDIS_URL,
    /// TRIGGERS_LISTEN, SESSIONS_LISTEN, MCP_GATEWAY_LISTEN, MCP_GATEWAY_MCP_LISTEN,
    /// ROUTER_LISTEN, EDGE_LISTEN, …; see each binary's --help). The services call each other
    /// in process, so the variables naming another service's URL are not read.
    Serve,
    /// Send one message to a running suite through the edge and stream the answer; the route,
    /// role and tools follow on stderr.
    Chat(switchyard_cli::chat::ChatArgs),
    /// Create, list and revoke the edge's API keys (in its Postgres).
    #[command(subcommand)]
    Keys(switchyard_cli::keys::KeysCommand),
    /// Set, list and delete spend budgets per tenant (or API key), through the router.
    #[command(subcommand)]
    Budgets(switchyard_cli::budgets::BudgetsCommand),
}

#[derive(clap::Args)]
struct DevArgs {
    /// Host the services listen on (0.0.0.0 to accept other machines).
    #[arg(long, env = "SWITCHYARD_DEV_HOST", default_value = "127.0.0.1")]
    host: std::net::IpAddr,

    /// gRPC port of the triggers service.
    #[arg(long, default_value_t = 50051)]
    triggers_port: u16,

    /// gRPC port of the sessions service.
    #[arg(long, default_value_t = 50052)]
    sessions_port: u16,

    /// gRPC port of the MCP gateway.
    #[arg(long, default_value_t = 50054)]
    mcp_gateway_port: u16,

    /// Port of the MCP gateway's streamable HTTP endpoint (`/mcp`).
    #[arg(long, default_value_t = 8081)]
    mcp_port: u16,

    /// gRPC port of the router (the unified chat endpoint).
    #[arg(long, default_value_t = 50053)]
    router_port: u16,

    /// HTTP port of the edge: REST API, OpenAI-compatible chat, console.
    #[arg(long, default_value_t = 8080)]
    edge_port: u16,

    /// How the services call each other: in process (the same gRPC contract without the
    /// network), or over loopback gRPC as separate processes would.
    #[arg(long, env = "SWITCHYARD_DEV_SERVICE_CALLS", value_enum, default_value = "in-process")]
    service_calls: ServiceCalls,

    /// Requests a second the edge allows each credential (0: no limit). The dev edge is open,
    /// so every caller without a key shares this one allowance (raise it to load-test).
    #[arg(long, env = "EDGE_RATE_LIMIT", default_value_t = switchyard_edge::config::DEFAULT_RATE_LIMIT)]
    edge_rate_limit: u32,

    /// Requests a credential may make at once above its rate.
    #[arg(long, env = "EDGE_RATE_BURST", default_value_t = switchyard_edge::config::DEFAULT_RATE_BURST)]
    edge_rate_burst: u32,

    /// LLM vendors for the router (the same flags and variables as switchyard-router).
    #[command(flatten)]
    providers: ProviderArgs,

    /// The model that routes and answers (`openai/<model>`, `anthropic/<model>`,
    /// `local/smollm2-135m-instruct`). Default: `openai/gpt-4o-mini` when an OpenAI key or base
    /// URL is set, else Anthropic's when one is, else the local model (no key, no network).
    #[arg(long, env = "UNIFIED_CHAT_DEFAULT_MODEL")]
    default_model: Option<ModelRef>,

    /// Models tried in order when a model fails (comma-separated).
    #[arg(long, env = "UNIFIED_CHAT_FALLBACK_MODELS", value_delimiter = ',')]
    fallback_models: Vec<ModelRef>,

    /// The router's model price table (TOML, USD per million tokens per model; the same as
    /// switchyard-router's). Default: the shipped table.
    #[arg(long, env = "ROUTER_MODEL_PRICES")]
    model_prices: Option<std::path::PathBuf>,

    /// A downstream MCP server for the gateway: `NAME=COMMAND [ARGS…]` or `NAME=http(s)://…`.
    /// Repeatable.
    #[arg(long = "mcp-server", value_name = "NAME=COMMAND|URL")]
    mcp_servers: Vec<String>,

    /// A downstream MCP servers file for the gateway (TOML, or JSON in the `mcpServers` shape).
    #[arg(long, env = "MCP_GATEWAY_CONFIG")]
    mcp_config: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _telemetry = telemetry::init("switchyard", &cli.telemetry)?;
    switchyard_kit::tls::install_crypto_provider();
    match cli.command {
        Command::Dev(args) => dev(*args).await,
        Command::Serve => serve().await,
        Command::Chat(args) => switchyard_cli::chat::run(args).await,
        Command::Keys(command) => switchyard_cli::keys::run(command).await,
        Command::Budgets(command) => switchyard_cli::budgets::run(command).await,
    }
}

async fn dev(args: DevArgs) -> anyhow::Result<()> {
    let ports = DevPorts {
        host: args.host,
        triggers: args.triggers_port,
        sessions: args.sessions_port,
        mcp_gateway: args.mcp_gateway_port,
        mcp: args.mcp_port,
        router: args.router_port,
        edge: args.edge_port,
    };
    let chat = DevChat {
        providers: args.providers,
        default_model: args.default_model,
        fallback_models: args.fallback_models,
        embedding_model_dir: None,
        model_prices: args.model_prices,
    };
    let model = chat.model();
    let stack = DevStack::start_with(
        ports,
        DevMcp { servers: args.mcp_servers, config_file: args.mcp_config },
        chat,
        DevServing {
            calls: args.service_calls,
            edge_rate_limit: args.edge_rate_limit,
            edge_rate_burst: args.edge_rate_burst,
        },
    )
    .await?;
    tracing::info!(triggers = %stack.triggers_addr(), sessions = %stack.sessions_addr(), "switchyard dev: services up");
    println!("switchyard dev is running (in-memory stores; nothing survives exit):");
    println!("  triggers  grpc://{}  switchyard.triggers.v1.TriggerService", stack.triggers_addr());
    println!("  sessions  grpc://{}  switchyard.sessions.v1.SessionService, RoleService", stack.sessions_addr());
    println!("  mcp-gateway  grpc://{}  switchyard.mcp.v1.McpGatewayService", stack.mcp_gateway_addr());
    println!("  mcp-gateway  http://{}/mcp  (MCP streamable HTTP)", stack.mcp_addr());
    println!("  router    grpc://{}  switchyard.router.v1.RouterService", stack.router_addr());
    let edge = stack.edge_addr();
    println!("  console   http://{edge}/");
    println!("  REST      http://{edge}/api/…  (OpenAPI: http://{edge}/openapi.json)");
    println!("  OpenAI    http://{edge}/v1/chat/completions, http://{edge}/v1/responses");
    println!("  Anthropic http://{edge}/v1/messages  (ANTHROPIC_BASE_URL=http://{edge})");
    println!("  The edge is open (no credential needed) and listens on {}.", edge.ip());
    if model.provider == "local" {
        println!("  chat      {model} on this machine's CPU (no API key set), routed by the fast router");
    } else {
        println!("  chat      {model}");
    }
    println!("Press Ctrl-C to stop.");
    stack.serve(shutdown_signal()).await
}

async fn serve() -> anyhow::Result<()> {
    let configs = switchyard_cli::stack::Configs::from_env()?;
    if configs.gateway.stdio {
        anyhow::bail!(
            "MCP_GATEWAY_STDIO is set: switchyard serve serves the MCP gateway over gRPC and /mcp; \
             run switchyard-mcp-gateway alone for stdio"
        );
    }
    let stack = Stack::from_configs(configs).start().await?;
    let edge = stack.edge.as_ref().map(|edge| edge.local_addr());
    let gateway = stack.gateway.as_ref().map(|gateway| (gateway.local_addr(), gateway.mcp_addr()));
    println!("switchyard serve is running (each service in this process, calling the others in process):");
    println!("  triggers  grpc://{}", stack.triggers.local_addr());
    println!("  sessions  grpc://{}", stack.sessions.local_addr());
    if let Some((grpc, mcp)) = gateway {
        println!("  mcp-gateway  grpc://{grpc}  http://{mcp}/mcp");
    }
    println!("  router    grpc://{}", stack.router.local_addr());
    if let Some(edge) = edge {
        println!("  edge      http://{edge}/");
    }
    tracing::info!(edge = ?edge, router = %stack.router.local_addr(), "switchyard serve: services up");
    stack.serve(shutdown_signal()).await
}
