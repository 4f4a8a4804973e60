//! Model calls as the router makes them: over the model chain (the turn's model, then
//! `UNIFIED_CHAT_FALLBACK_MODELS` in order), streaming text to the turn's events as it arrives.

use futures::StreamExt;
use switchyard_llm::{ChatRequest, Completion, EventStream, ModelRef, Providers, StreamEvent};

use crate::{
    error::RouterError,
    events::{Events, ToolCallDelta, TurnEvent},
};

/// A model call that answered.
pub struct Answered {
    pub model: ModelRef,
    pub completion: Completion,
    /// Models of the chain that failed before this one.
    pub fallbacks: u32,
}

/// An opened stream and the model behind it.
pub struct Opened {
    pub model: ModelRef,
    pub events: EventStream,
    pub fallbacks: u32,
}

#[derive(Clone)]
pub struct Models {
    providers: Providers,
}

impl Models {
    pub fn new(providers: Providers) -> Self {
        Self { providers }
    }

    pub fn providers(&self) -> &Providers {
        &self.providers
    }

    /// Opens a stream on the first model of `chain` that answers; every failure is named in
    /// the error when none does.
    pub async fn open(&self, chain: &[ModelRef], request: ChatRequest) -> Result<Opened, RouterError> {
        let opened = self
            .providers
            .stream_with_fallback(chain, request)
            .await
            .map_err(|err| RouterError::ModelsUnavailable(err.to_string()))?;
        Ok(Opened { model: opened.model, events: opened.output, fallbacks: opened.failed.len() as u32 })
    }

    /// One whole answer without streaming (experts).
    pub async fn complete(&self, chain: &[ModelRef], request: ChatRequest) -> Result<Answered, RouterError> {
        let answered = self
            .providers
            .complete_with_fallback(chain, request)
            .await
            .map_err(|err| RouterError::ModelsUnavailable(err.to_string()))?;
        Ok(Answered { model: answered.model, completion: answered.output, fallbacks: answered.failed.len() as u32 })
    }

    /// Opens a stream and drives it to the end, sending text to `events` as it arrives.
    pub async fn stream_answer(
        &self,
        chain: &[ModelRef],
        request: ChatRequest,
        events: &Events,
    ) -> Result<Answered, RouterError> {
        self.drive(chain, request, events, false).await
    }

    /// [`Models::stream_answer`] for a turn with the caller's own tools: the model's calls of
    /// them go to `events` too, as their arguments stream.
    pub async fn stream_client_answer(
        &self,
        chain: &[ModelRef],
        request: ChatRequest,
        events: &Events,
    ) -> Result<Answered, RouterError> {
        self.drive(chain, request, events, true).await
    }

    async fn drive(
        &self,
        chain: &[ModelRef],
        request: ChatRequest,
        events: &Events,
        forward_tool_calls: bool,
    ) -> Result<Answered, RouterError> {
        let Opened { model, events: mut stream, fallbacks } = self.open(chain, request).await?;
        while let Some(event) = stream.next().await {
            match event.map_err(|err| RouterError::ModelsUnavailable(err.to_string()))? {
                StreamEvent::Text(text) => events.delta(text).await?,
                StreamEvent::ToolCallStarted { .. } => {}
                StreamEvent::ToolCallDelta { index, id, name, arguments } => {
                    if forward_tool_calls {
                        let delta = ToolCallDelta {
                            index,
                            id: id.unwrap_or_default(),
                            name: name.unwrap_or_default(),
                            arguments_delta: arguments,
                        };
                        events.send(TurnEvent::ToolCall(delta)).await?;
                    }
                }
                StreamEvent::Done(completion) => return Ok(Answered { model, completion, fallbacks }),
            }
        }
        Err(RouterError::ModelsUnavailable(format!("{}: the stream ended without a final message", model.provider)))
    }
}
