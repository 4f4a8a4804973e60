//! `process-query`: SessionService.ProcessQuery on sessions that do not switch role — the
//! per-message path of context switching (a live-session read, trigger detection with
//! hysteresis, a conditional update).

use anyhow::Context;
use switchyard_proto::sessions::v1::{
    CreateSessionRequest, ProcessQueryRequest, session_service_client::SessionServiceClient,
};
use tonic::Status;

use super::Scenario;
use crate::connections::Connections;

/// A technology question: sessions start with the technology expert, so nothing switches.
const DEFAULT_QUERY: &str = "How do I fix a segfault in my Rust program when calling a C library through FFI?";

#[derive(clap::Args)]
pub struct Args {
    /// gRPC URL of the sessions service.
    #[arg(long, default_value = "http://127.0.0.1:50052")]
    pub target: String,

    /// Query sent on every call.
    #[arg(long, default_value = DEFAULT_QUERY)]
    pub query: String,

    /// Role the sessions start with (the query should keep it).
    #[arg(long, default_value = "tech-expert")]
    pub role: String,

    /// Sessions created before the run; workers share them round-robin.
    #[arg(long, default_value_t = 64)]
    pub sessions: usize,
}

pub struct ProcessQuery {
    connections: Connections,
    args: Args,
    session_ids: Vec<String>,
}

impl ProcessQuery {
    pub fn new(args: Args, connections: Connections) -> Self {
        Self { connections, args, session_ids: Vec::new() }
    }
}

impl Scenario for ProcessQuery {
    const NAME: &'static str = "process-query";

    async fn setup(&mut self) -> anyhow::Result<()> {
        let mut client = SessionServiceClient::new(self.connections.for_worker(0));
        let run = std::process::id();
        for index in 0..self.args.sessions.max(1) {
            let request = CreateSessionRequest {
                session_id: String::new(),
                initial_role_id: self.args.role.clone(),
                metadata: [("loadgen-run".to_owned(), format!("{run}-{index}"))].into(),
                ttl: None,
            };
            let created = client.create_session(request).await.context("creating a benchmark session")?.into_inner();
            let id = created.session.map(|s| s.session_id).context("CreateSession returned no session")?;
            self.session_ids.push(id);
        }
        // The query must not switch: a run that switches measures something else.
        let probe = ProcessQueryRequest {
            session_id: self.session_ids[0].clone(),
            query: self.args.query.clone(),
            ..Default::default()
        };
        let turn = client.process_query(probe).await.context("probe ProcessQuery")?.into_inner();
        anyhow::ensure!(
            !turn.switched,
            "the query switched the session to `{}`; pick a query that keeps `{}`",
            turn.role_id,
            self.args.role
        );
        Ok(())
    }

    fn call(&self, worker: usize, _seq: u64) -> impl Future<Output = Result<(), Status>> + Send {
        let mut client = SessionServiceClient::new(self.connections.for_worker(worker));
        let request = ProcessQueryRequest {
            session_id: self.session_ids[worker % self.session_ids.len()].clone(),
            query: self.args.query.clone(),
            ..Default::default()
        };
        async move { client.process_query(request).await.map(drop) }
    }
}
