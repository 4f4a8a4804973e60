//! What a turn reports as it goes: the route decision, content deltas, tool activity and the
//! model's calls of the caller's own tools.
//! `ChatStream` forwards them to the client; `Chat` ignores them and answers once at the end.
//! Either way the text answered so far is kept, so a turn cut short records what it had.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;

use crate::{error::RouterError, outcome::Metadata};

#[derive(Debug, Clone)]
pub enum TurnEvent {
    Route {
        id: String,
        session_id: String,
        metadata: Box<Metadata>,
    },
    Delta(String),
    Tool(ToolActivity),
    /// A piece of a call of one of the caller's tools.
    ToolCall(ToolCallDelta),
}

/// A piece of a call of the caller's tools as the model streams it: the first piece of a call
/// carries its id and name, the following ones only argument text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCallDelta {
    /// The call's position among the answer's tool calls, from 0.
    pub index: u32,
    pub id: String,
    pub name: String,
    pub arguments_delta: String,
}

#[derive(Debug, Clone, Default)]
pub struct ToolActivity {
    pub tool: String,
    pub server: String,
    pub finished: bool,
    pub is_error: bool,
    pub duration_ms: u64,
    pub error: String,
}

/// Where a turn's events go: a client stream, or nowhere.
#[derive(Clone, Default)]
pub struct Events {
    sender: Option<mpsc::Sender<TurnEvent>>,
    /// The answer's text so far (every delta, streamed or not).
    answered: Arc<Mutex<String>>,
}

impl Events {
    pub fn to(sender: mpsc::Sender<TurnEvent>) -> Self {
        Self { sender: Some(sender), answered: Arc::default() }
    }

    pub fn none() -> Self {
        Self::default()
    }

    pub fn is_streaming(&self) -> bool {
        self.sender.is_some()
    }

    /// Sends an event; fails once the client has gone away, which ends the turn.
    pub async fn send(&self, event: TurnEvent) -> Result<(), RouterError> {
        match &self.sender {
            None => Ok(()),
            Some(sender) => sender.send(event).await.map_err(|_| RouterError::Cancelled),
        }
    }

    pub async fn delta(&self, text: String) -> Result<(), RouterError> {
        if text.is_empty() {
            return Ok(());
        }
        if self.sender.is_some() {
            self.send(TurnEvent::Delta(text.clone())).await?;
        }
        self.answered.lock().unwrap_or_else(PoisonError::into_inner).push_str(&text);
        Ok(())
    }

    /// The answer's text so far: what a client of the stream has been sent.
    pub fn answered(&self) -> String {
        self.answered.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}
