//! The LLM chain: model calls as the router makes them, over the turn's model then
//! `UNIFIED_CHAT_FALLBACK_MODELS` in order, streaming text to the turn's events as it arrives.
//! (Not to be confused with `crates/models`, the sentence encoder the fast router embeds with.)

use std::collections::{HashMap, HashSet};

use futures::StreamExt;
use switchyard_llm::{ChatRequest, Completion, EventStream, ModelRef, Providers, StreamEvent};

use crate::{
    error::RouterError,
    events::{Events, ToolCallDelta, TurnEvent},
};

/// Which of the model's tool calls stream to the turn's events.
#[derive(Clone, Copy)]
enum Forward<'a> {
    None,
    All,
    /// All but calls of these tools.
    Except(&'a HashSet<String>),
}

impl From<bool> for Forward<'_> {
    fn from(all: bool) -> Self {
        if all { Self::All } else { Self::None }
    }
}

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
pub struct LlmChain {
    providers: Providers,
}

impl LlmChain {
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

    /// [`LlmChain::stream_answer`] for a turn with the caller's own tools: the model's calls of
    /// them go to `events` too, as their arguments stream.
    pub async fn stream_client_answer(
        &self,
        chain: &[ModelRef],
        request: ChatRequest,
        events: &Events,
    ) -> Result<Answered, RouterError> {
        self.drive(chain, request, events, true).await
    }

    /// [`LlmChain::stream_client_answer`] for a turn that offers the gateway's tools beside the
    /// caller's: only calls of tools not in `hidden` (the gateway's, which the router runs) go
    /// to `events`, numbered among themselves, as the answer returns them.
    pub async fn stream_client_answer_hiding(
        &self,
        chain: &[ModelRef],
        request: ChatRequest,
        events: &Events,
        hidden: &HashSet<String>,
    ) -> Result<Answered, RouterError> {
        self.drive(chain, request, events, Forward::Except(hidden)).await
    }

    async fn drive(
        &self,
        chain: &[ModelRef],
        request: ChatRequest,
        events: &Events,
        forward: impl Into<Forward<'_>>,
    ) -> Result<Answered, RouterError> {
        let forward = forward.into();
        let Opened { model, events: mut stream, fallbacks } = self.open(chain, request).await?;
        // The model's call index → the index among the forwarded calls (None: held back).
        let mut forwarded: HashMap<u32, Option<u32>> = HashMap::new();
        while let Some(event) = stream.next().await {
            match event.map_err(|err| RouterError::ModelsUnavailable(err.to_string()))? {
                StreamEvent::Text(text) => events.delta(text).await?,
                StreamEvent::ToolCallStarted { .. } => {}
                StreamEvent::ToolCallDelta { index, id, name, arguments } => {
                    let index = match forward {
                        Forward::None => None,
                        Forward::All => Some(index),
                        Forward::Except(hidden) => {
                            let next = forwarded.values().flatten().count() as u32;
                            *forwarded
                                .entry(index)
                                .or_insert_with(|| name.as_deref().filter(|name| !hidden.contains(*name)).map(|_| next))
                        }
                    };
                    if let Some(index) = index {
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
