//! `detect-triggers`: TriggerService.DetectTriggers, the hot path of role detection.

use anyhow::Context;
use switchyard_proto::triggers::v1::{
    DetectTriggersRequest, RegisterRoleTriggersRequest, trigger_service_client::TriggerServiceClient,
};
use tonic::Status;

use super::Scenario;
use crate::connections::Connections;

/// A query of typical length that draws on both the finance and the technology packs, so that
/// registered roles match and the service does its full scoring work.
const DEFAULT_QUERY: &str = "Our fintech startup is migrating its payment microservices to \
Kubernetes on AWS. How should we budget the cloud costs against revenue, and which Python or \
Rust libraries would you use to build a real-time portfolio risk API on a Postgres database, \
while keeping cash flow healthy and our investors happy ahead of the Series A round?";

/// Roles registered by `--register`: one expert per built-in domain pack.
const ROLES: [(&str, &str); 7] = [
    ("finance-expert", "finance"),
    ("tech-expert", "technology"),
    ("healthcare-expert", "healthcare"),
    ("marketing-expert", "marketing"),
    ("legal-expert", "legal"),
    ("education-expert", "education"),
    ("creative-expert", "creative"),
];

#[derive(clap::Args)]
pub struct Args {
    /// gRPC URL of the triggers service.
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub target: String,

    /// Query to send; repeat to rotate through several. Defaults to a ~300-character
    /// finance and technology question.
    #[arg(long = "query", value_name = "TEXT")]
    pub queries: Vec<String>,

    /// Before the run, register one expert role per built-in domain (finance-expert,
    /// tech-expert, …), replacing any existing ones, so that the queries have something to match.
    #[arg(long)]
    pub register: bool,
}

pub struct DetectTriggers {
    connections: Connections,
    queries: Vec<String>,
    register: bool,
}

impl DetectTriggers {
    pub fn new(args: Args, connections: Connections) -> Self {
        let queries = if args.queries.is_empty() { vec![DEFAULT_QUERY.to_owned()] } else { args.queries };
        Self { connections, queries, register: args.register }
    }

    /// Query for a call. Workers start at different queries so that every query is in flight
    /// at once rather than all workers sending the same one in lockstep.
    fn query(&self, worker: usize, seq: u64) -> &str {
        let count = self.queries.len().max(1) as u64;
        let index = (worker as u64).wrapping_add(seq) % count;
        self.queries.get(index as usize).map_or(DEFAULT_QUERY, String::as_str)
    }
}

impl Scenario for DetectTriggers {
    const NAME: &'static str = "detect-triggers";

    async fn setup(&mut self) -> anyhow::Result<()> {
        let mut client = TriggerServiceClient::new(self.connections.for_worker(0));
        if self.register {
            for (role_id, domain) in ROLES {
                let request = RegisterRoleTriggersRequest {
                    role_id: role_id.to_owned(),
                    domains: vec![domain.to_owned()],
                    custom_triggers: Vec::new(),
                    ..RegisterRoleTriggersRequest::default()
                };
                client
                    .register_role_triggers(request)
                    .await
                    .with_context(|| format!("registering role `{role_id}` (domain {domain})"))?;
            }
        }
        // One call per query before the clock starts: a query the service rejects (empty, too
        // long) or a target that is not a triggers service fails here, not 100k times.
        for query in &self.queries {
            client
                .detect_triggers(DetectTriggersRequest { query: query.clone() })
                .await
                .with_context(|| format!("probe DetectTriggers with query `{}`", abbreviate(query)))?;
        }
        Ok(())
    }

    fn call(&self, worker: usize, seq: u64) -> impl Future<Output = Result<(), Status>> + Send {
        let mut client = TriggerServiceClient::new(self.connections.for_worker(worker));
        let request = DetectTriggersRequest { query: self.query(worker, seq).to_owned() };
        async move { client.detect_triggers(request).await.map(drop) }
    }
}

/// The start of a query, for error messages.
fn abbreviate(query: &str) -> String {
    const SHOWN: usize = 40;
    match query.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}…", &query[..cut]),
        None => query.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_query_is_about_300_characters() {
        let length = DEFAULT_QUERY.chars().count();
        assert!((250..=350).contains(&length), "{length} characters");
    }

    #[test]
    fn long_queries_are_abbreviated_on_a_character_boundary() {
        assert_eq!(abbreviate("short"), "short");
        let long = "é".repeat(50);
        assert_eq!(abbreviate(&long), format!("{}…", "é".repeat(40)));
    }
}
