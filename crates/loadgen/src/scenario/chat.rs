//! `chat`: RouterService.Chat (or ChatStream) on sessions that continue — a whole turn through
//! the router: the session's context switching, the routing call to the LLM, the answer
//! recorded in the session. With `--stream --first-token`, a call ends at the first content
//! delta: the time to first token through the router.

use anyhow::Context;
use switchyard_proto::{
    router::v1::{
        ChatRequest, ChatStreamRequest, chat_stream_response::Event, router_service_client::RouterServiceClient,
    },
    sessions::v1::{CreateSessionRequest, session_service_client::SessionServiceClient},
};
use tonic::{
    Request, Status,
    metadata::{Ascii, MetadataValue},
};

use super::Scenario;
use crate::connections::Connections;

/// A greeting: answered directly, and it keeps the general assistant (no role switch).
pub const DEFAULT_MESSAGE: &str = "Hello, how are you today?";

#[derive(clap::Args)]
pub struct Args {
    /// gRPC URL of the router.
    #[arg(long, default_value = "http://127.0.0.1:50053")]
    pub target: String,

    /// gRPC URL of the sessions service (the benchmark's sessions are created there).
    #[arg(long, default_value = "http://127.0.0.1:50052")]
    pub sessions_url: String,

    /// Message sent on every call.
    #[arg(long, default_value = DEFAULT_MESSAGE)]
    pub message: String,

    /// Sessions created before the run; workers share them round-robin.
    #[arg(long, default_value_t = 64)]
    pub sessions: usize,

    /// Call ChatStream instead of Chat.
    #[arg(long)]
    pub stream: bool,

    /// With --stream: a call ends at the first content delta (time to first token).
    #[arg(long, requires = "stream")]
    pub first_token: bool,

    /// The tenant the sessions and calls belong to (`x-tenant-id`); the default tenant when
    /// absent. Two runs with different tenants compare what a tenant's settings (a budget, say)
    /// cost on one router.
    #[arg(long)]
    pub tenant: Option<String>,
}

pub struct Chat {
    connections: Connections,
    args: Args,
    session_ids: Vec<String>,
}

impl Chat {
    pub fn new(args: Args, connections: Connections) -> Self {
        Self { connections, args, session_ids: Vec::new() }
    }

    /// The run's tenant as a header value.
    fn tenant(&self) -> anyhow::Result<Option<MetadataValue<Ascii>>> {
        self.args
            .tenant
            .as_deref()
            .map(|tenant| MetadataValue::try_from(tenant).context("--tenant is not a valid header value"))
            .transpose()
    }

    fn request<T>(&self, message: T) -> anyhow::Result<Request<T>> {
        Ok(for_tenant(message, self.tenant()?))
    }
}

fn for_tenant<T>(message: T, tenant: Option<MetadataValue<Ascii>>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(tenant) = tenant {
        request.metadata_mut().insert("x-tenant-id", tenant);
    }
    request
}

impl Scenario for Chat {
    const NAME: &'static str = "chat";

    async fn setup(&mut self) -> anyhow::Result<()> {
        let mut sessions = SessionServiceClient::connect(self.args.sessions_url.clone())
            .await
            .with_context(|| format!("connecting to the sessions service at {}", self.args.sessions_url))?;
        for _ in 0..self.args.sessions.max(1) {
            let created = sessions
                .create_session(self.request(CreateSessionRequest::default())?)
                .await
                .context("creating a benchmark session")?
                .into_inner();
            self.session_ids.push(created.session.map(|s| s.session_id).context("CreateSession returned no session")?);
        }
        // The router answers: a provider is configured and the message is routed.
        let mut router = RouterServiceClient::new(self.connections.for_worker(0));
        let probe = ChatRequest {
            message: self.args.message.clone(),
            session_id: self.session_ids[0].clone(),
            ..Default::default()
        };
        router.chat(self.request(probe)?).await.context("probe Chat")?;
        Ok(())
    }

    fn call(&self, worker: usize, _seq: u64) -> impl Future<Output = Result<(), Status>> + Send {
        let mut client = RouterServiceClient::new(self.connections.for_worker(worker));
        let session_id = self.session_ids[worker % self.session_ids.len()].clone();
        let message = self.args.message.clone();
        let (stream, first_token) = (self.args.stream, self.args.first_token);
        // Checked in setup, so it is valid here.
        let tenant = self.tenant().ok().flatten();
        async move {
            if !stream {
                let request = for_tenant(ChatRequest { message, session_id, ..Default::default() }, tenant);
                return client.chat(request).await.map(drop);
            }
            let request = ChatStreamRequest { message, session_id, ..Default::default() };
            let mut events = client.chat_stream(for_tenant(request, tenant)).await?.into_inner();
            while let Some(item) = events.message().await? {
                match item.event {
                    Some(Event::Delta(_)) if first_token => return Ok(()),
                    Some(Event::Completed(_)) => return Ok(()),
                    _ => {}
                }
            }
            Err(Status::data_loss("the stream ended without a completion"))
        }
    }
}
