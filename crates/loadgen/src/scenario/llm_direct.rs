//! `llm-direct`: one chat completion straight from an OpenAI-compatible server, through the
//! same provider client the router uses — the baseline the router's overhead is measured
//! against. With `--first-token`, a call ends at the first text (time to first token).

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use switchyard_llm::{ChatRequest, Message, OpenAi, Provider, ProviderConfig, StreamEvent};
use tonic::Status;

use super::{Scenario, chat::DEFAULT_MESSAGE};

#[derive(clap::Args)]
pub struct Args {
    /// The server's API root, with `/v1`.
    #[arg(long, default_value = "http://127.0.0.1:8090/v1")]
    pub base_url: String,

    /// Model named in the request.
    #[arg(long, default_value = "gpt-4o-mini")]
    pub model: String,

    #[arg(long, default_value = DEFAULT_MESSAGE)]
    pub message: String,

    /// A call ends at the first text delta (time to first token).
    #[arg(long)]
    pub first_token: bool,
}

pub struct LlmDirect {
    provider: Arc<OpenAi>,
    args: Args,
}

impl LlmDirect {
    pub fn new(args: Args) -> anyhow::Result<Self> {
        let config = ProviderConfig::new(&args.base_url).with_timeout(Duration::from_secs(30)).with_max_retries(0);
        Ok(Self { provider: Arc::new(OpenAi::new(config)?), args })
    }
}

fn unavailable(err: impl std::fmt::Display) -> Status {
    Status::unavailable(err.to_string())
}

impl Scenario for LlmDirect {
    const NAME: &'static str = "llm-direct";

    async fn setup(&mut self) -> anyhow::Result<()> {
        self.call(0, 0).await.map_err(|status| anyhow::anyhow!("probe call: {}", status.message()))
    }

    fn call(&self, _worker: usize, _seq: u64) -> impl Future<Output = Result<(), Status>> + Send {
        let provider = self.provider.clone();
        let request = ChatRequest {
            model: self.args.model.clone(),
            messages: vec![Message::user(&self.args.message)],
            ..ChatRequest::default()
        };
        let first_token = self.args.first_token;
        async move {
            let mut events = provider.stream(request).await.map_err(unavailable)?;
            while let Some(event) = events.next().await {
                match event.map_err(unavailable)? {
                    StreamEvent::Text(_) if first_token => return Ok(()),
                    StreamEvent::Done(_) => return Ok(()),
                    _ => {}
                }
            }
            Err(Status::data_loss("the stream ended without a final message"))
        }
    }
}
