//! What the provider tests share: a provider of either vendor pointed at a scripted server,
//! and one way to ask it, streaming or not.

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use switchyard_kit::Secret;
use switchyard_llm::{
    Anthropic, ChatRequest, Completion, Message, OpenAi, Provider, ProviderConfig, ProviderError, StreamEvent, ToolSpec,
};
use switchyard_testkit::llm::ScriptedLlm;

/// A key no response or log may ever show.
pub const KEY: &str = "sk-test-RECOGNISABLE-d41d8cd98f";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    OpenAi,
    Anthropic,
}

impl Vendor {
    pub fn name(self) -> &'static str {
        match self {
            Vendor::OpenAi => "openai",
            Vendor::Anthropic => "anthropic",
        }
    }

    /// The vendor's base URL on `server`, with the test key and quick backoff.
    pub fn config(self, server: &ScriptedLlm) -> ProviderConfig {
        let url = match self {
            Vendor::OpenAi => server.openai_base_url(),
            Vendor::Anthropic => server.anthropic_base_url(),
        };
        ProviderConfig {
            backoff_initial: Duration::from_millis(10),
            backoff_max: Duration::from_millis(40),
            ..ProviderConfig::new(url).with_api_key(Some(Secret::new(KEY)))
        }
    }

    pub fn provider(self, config: ProviderConfig) -> Arc<dyn Provider> {
        match self {
            Vendor::OpenAi => Arc::new(OpenAi::new(config).expect("an OpenAI provider")),
            Vendor::Anthropic => Arc::new(Anthropic::new(config).expect("an Anthropic provider")),
        }
    }

    pub fn on(self, server: &ScriptedLlm) -> Arc<dyn Provider> {
        self.provider(self.config(server))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Complete,
    Stream,
}

pub const MODES: [Mode; 2] = [Mode::Complete, Mode::Stream];

/// The completion, and for a stream every event before `Done` (checked to be last and single).
pub async fn ask(
    provider: &dyn Provider,
    request: ChatRequest,
    mode: Mode,
) -> Result<(Completion, Vec<StreamEvent>), ProviderError> {
    match mode {
        Mode::Complete => Ok((provider.complete(request).await?, Vec::new())),
        Mode::Stream => {
            let mut stream = provider.stream(request).await?;
            let mut events = Vec::new();
            while let Some(event) = stream.next().await {
                match event? {
                    StreamEvent::Done(completion) => {
                        assert!(stream.next().await.is_none(), "nothing may follow Done");
                        return Ok((completion, events));
                    }
                    other => events.push(other),
                }
            }
            panic!("the stream ended without Done after {events:?}");
        }
    }
}

pub fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Current weather for a city".into(),
        parameters: serde_json::json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        }),
    }
}

pub fn question(text: &str) -> ChatRequest {
    ChatRequest {
        model: "test-model".into(),
        messages: vec![Message::user(text)],
        tools: vec![weather_tool()],
        ..ChatRequest::default()
    }
}

/// The text events of a stream, joined.
pub fn streamed_text(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}
