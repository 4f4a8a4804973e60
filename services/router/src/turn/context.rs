//! What every call of a turn is built from: the role's persona, the recent conversation (the
//! session's messages and any history the caller sent) and the message itself.

use switchyard_kit::Identity;
use switchyard_llm::Message;
use switchyard_proto::sessions::v1 as sessions;

use crate::{
    clients::SessionTurn,
    limits::Limits,
    request::{Speaker, TurnRequest},
    route::RoutingContext,
};

pub struct TurnContext {
    /// The active role's system prompt (with the turn's custom instructions and any system
    /// messages the caller sent).
    pub persona: String,
    /// The most recent turns, oldest first.
    pub conversation: Vec<Message>,
    pub message: String,
    pub routing: RoutingContext,
}

impl TurnContext {
    pub fn new(identity: &Identity, request: &TurnRequest, session: &SessionTurn, limits: &Limits) -> Self {
        // A caller running its own tool loop sends its whole conversation (calls and results
        // must stay paired, so none of it is cut); the session's memory stands in only when
        // the caller sent none.
        let callers_loop = request.has_client_tools() || request.history.iter().any(|m| m.speaker == Speaker::Tool);
        let mut turns: Vec<Message> = if callers_loop && !request.history.is_empty() {
            Vec::new()
        } else {
            session
                .recent
                .iter()
                .filter_map(|m| match sessions::MessageRole::try_from(m.role) {
                    Ok(sessions::MessageRole::User) => Some(Message::user(&m.content)),
                    Ok(sessions::MessageRole::Assistant) => Some(Message::assistant(&m.content)),
                    _ => None,
                })
                .collect()
        };
        let mut caller_instructions = Vec::new();
        let mut from_caller = Vec::new();
        for m in &request.history {
            match m.speaker {
                Speaker::User if m.has_images() => from_caller.push(Message::user_parts(m.parts.clone())),
                Speaker::User => from_caller.push(Message::user(&m.content)),
                Speaker::Assistant => from_caller
                    .push(Message::Assistant { content: m.content.clone(), tool_calls: m.tool_calls.clone() }),
                Speaker::Tool => from_caller.push(Message::Tool {
                    call_id: m.tool_call_id.clone(),
                    content: if m.has_images() { String::new() } else { m.content.clone() },
                    is_error: m.is_error,
                    parts: if m.has_images() { m.parts.clone() } else { Vec::new() },
                }),
                Speaker::System => caller_instructions.push(m.content.as_str()),
            }
        }
        turns.extend(from_caller);
        let skip = if callers_loop { 0 } else { turns.len().saturating_sub(limits.context_turns) };
        let conversation: Vec<Message> = turns.into_iter().skip(skip).collect();

        let mut persona = session.system_prompt.clone();
        for instructions in caller_instructions {
            persona.push_str("\n\n");
            persona.push_str(instructions);
        }
        let message_count = u64::from(session.turn_count) * 2 + request.history.len() as u64;
        let routing = RoutingContext {
            user_id: identity.user.as_ref().map_or_else(|| "anonymous".to_owned(), |u| u.as_str().to_owned()),
            conversation_id: session.session_id.to_string(),
            message_count,
            role_id: session.role_id.clone(),
            transition_context: session.transition_context.clone(),
        };
        Self { persona, conversation, message: request.message.clone(), routing }
    }

    /// The user's previous message, for short follow-ups.
    pub fn last_user_turn(&self) -> Option<&str> {
        self.conversation.iter().rev().find_map(|m| match m {
            Message::User { content, .. } => Some(content.as_str()),
            _ => None,
        })
    }

    /// The conversation followed by the user's message (a tool loop's continuation may have
    /// none).
    pub fn messages_with_user(&self) -> Vec<Message> {
        let mut messages = self.conversation.clone();
        // A user message with images comes as the history's last entry with its text in
        // `message` too (router.proto, ChatRequest.message): that entry is the message.
        let sent_with_images = messages.last().is_some_and(|last| {
            matches!(last, Message::User { parts, .. } if !parts.is_empty()) && last.text() == self.message
        });
        if !self.message.trim().is_empty() && !sent_with_images {
            messages.push(Message::user(&self.message));
        }
        messages
    }
}
