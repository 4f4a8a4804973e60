//! What a run sends. A scenario prepares the target once, then makes one call at a time for
//! whichever worker asks; the runner decides when, measures, and counts.
//!
//! Adding a scenario is one module here that implements [`Scenario`], plus its subcommand in
//! `cli.rs` and its arm in `main.rs`.

use tonic::Status;

pub mod chat;
pub mod detect_triggers;
pub mod health_check;
pub mod http_chat;
pub mod llm_direct;
pub mod process_query;
pub mod routing_stats;
pub mod sessions_redis_floor;

pub trait Scenario: Send + Sync + 'static {
    /// The scenario's name in the report (its subcommand).
    const NAME: &'static str;

    /// Runs once before any load: registers data the calls need, checks the target answers.
    /// A failure here aborts the run.
    async fn setup(&mut self) -> anyhow::Result<()>;

    /// Makes the `seq`-th call of `worker`. Only the status matters: the runner times the
    /// call and counts failures by code.
    fn call(&self, worker: usize, seq: u64) -> impl Future<Output = Result<(), Status>> + Send;
}
