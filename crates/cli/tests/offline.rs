//! `switchyard dev` with no key and no network answers chat: the fast router routes, the local
//! SmolLM2 model answers (and streams), the MCP agent runs through the gateway's reference
//! server, and experts answer through the local model. Every route end to end over gRPC, with
//! the real models from `scripts/fetch-models.sh` (a missing model fails these tests).

use std::time::Duration;

use switchyard_cli::{DevChat, DevMcp, DevPorts, DevStack};
use switchyard_proto::router::v1::{
    ChatRequest, ChatResponse, ChatStreamRequest, RouteType, chat_stream_response::Event,
    router_service_client::RouterServiceClient,
};
use switchyard_testkit::{eventually, model_dir, peer_tool};
use tonic::transport::Channel;

struct Offline {
    client: RouterServiceClient<Channel>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    serving: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Offline {
    async fn start() -> Self {
        let loopback = "127.0.0.1".parse().expect("ip");
        let everything = peer_tool("mcp-server-everything");
        let mcp = DevMcp { servers: vec![format!("everything={everything} stdio")], config_file: None };
        let ports = DevPorts { host: loopback, triggers: 0, sessions: 0, mcp_gateway: 0, mcp: 0, router: 0, edge: 0 };
        // No provider flags at all: what a fresh machine without a key has.
        let chat = DevChat { embedding_model_dir: Some(model_dir()), ..DevChat::default() };
        assert_eq!(chat.model().to_string(), "local/smollm2-135m-instruct");
        let stack = DevStack::start(ports, mcp, chat).await.expect("dev stack starts offline");
        let router = stack.router();
        let gateway = stack.gateway();
        let url = format!("http://{}", stack.router_addr());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(stack.serve(async move {
            let _ = stopped.await;
        }));
        eventually(Duration::from_secs(180), "the fast router loads", || {
            let ready = router.fast_path().is_ready();
            async move { if ready { Ok(()) } else { Err("loading".to_owned()) } }
        })
        .await;
        eventually(Duration::from_secs(60), "the gateway lists server-everything's tools", || async {
            let catalog = gateway.catalog();
            if catalog.tools().iter().any(|t| t.name.ends_with("get-sum")) && catalog.embedded {
                Ok(())
            } else {
                Err("listing".to_owned())
            }
        })
        .await;
        let client = RouterServiceClient::new(Channel::from_shared(url).expect("url").connect().await.expect("up"));
        Self { client, stop: Some(stop), serving }
    }

    async fn chat(&mut self, message: &str) -> ChatResponse {
        let request = ChatRequest { message: message.to_owned(), max_tokens: Some(48), ..Default::default() };
        self.client.chat(request).await.unwrap_or_else(|status| panic!("chat `{message}`: {status}")).into_inner()
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.serving.await.expect("dev stack task").expect("dev stack stops cleanly");
    }
}

fn route(response: &ChatResponse) -> RouteType {
    response.metadata.as_ref().expect("metadata").route_type()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_offline_with_the_local_model() {
    let mut dev = Offline::start().await;

    // Direct: the fast router routes (no routing call), the local model answers.
    let hello = dev.chat("Hello, how are you today?").await;
    let meta = hello.metadata.clone().expect("metadata");
    assert_eq!(route(&hello), RouteType::Direct, "{meta:?}");
    assert_eq!(hello.model, "local/smollm2-135m-instruct");
    assert_eq!(meta.routing_model, "switchyard/fast-router");
    assert!(!meta.fallback_used, "the fast router is the router here, not a fallback");
    assert!(!hello.message.expect("message").content.trim().is_empty());
    assert!(hello.usage.expect("usage").completion_tokens > 0);

    // The MCP agent: the local model calls a tool of the reference server through the gateway.
    let sum = dev.chat("Use the calculator tool to add 17 and 25").await;
    let meta = sum.metadata.clone().expect("metadata");
    assert_eq!(route(&sum), RouteType::McpAgent, "{meta:?}");
    assert!(meta.tools_used.iter().any(|t| t.ends_with("get-sum")), "{meta:?}");
    let answer = sum.message.expect("message").content;
    assert!(!answer.trim().is_empty());

    // Experts: several roles answer through the local model, then a synthesis.
    let analysis =
        dev.chat("Analyze the technical architecture and business implications of migrating to microservices").await;
    let meta = analysis.metadata.clone().expect("metadata");
    assert_eq!(route(&analysis), RouteType::Multiagent, "{meta:?}");
    assert!(meta.expert_role_ids.len() >= 2, "{meta:?}");
    assert!(meta.degraded.is_empty(), "{:?}", meta.degraded);
    assert!(!analysis.message.expect("message").content.trim().is_empty());

    // Streaming: the route first, then several deltas, then the completion.
    let request = ChatStreamRequest {
        message: "Tell me a short story about a lighthouse.".to_owned(),
        max_tokens: Some(40),
        ..Default::default()
    };
    let mut stream = dev.client.chat_stream(request).await.expect("stream opens").into_inner();
    let mut events = Vec::new();
    while let Some(item) = stream.message().await.expect("stream item") {
        events.push(item.event.expect("event"));
    }
    assert!(matches!(events.first(), Some(Event::Route(_))), "{events:?}");
    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::Delta(d) => Some(d.content.as_str()),
            _ => None,
        })
        .collect();
    assert!(deltas.len() >= 3, "streamed token by token: {deltas:?}");
    assert!(!deltas.concat().trim().is_empty());
    assert!(matches!(events.last(), Some(Event::Completed(_))), "{events:?}");

    dev.stop().await;
}
