//! A chat turn's request, validated at the edge of the RPC: every field checked against the
//! named limits, errors naming the field.

use switchyard_kit::{SessionId, text::reject_nul};
use switchyard_llm::ModelRef;
use switchyard_proto::router::v1 as pb;

use crate::{
    error::RouterError,
    limits::{Limits, MAX_INSTRUCTIONS_BYTES, MAX_ROLE_ID_BYTES, MAX_TEMPERATURE},
    route::{Route, route_from_proto},
};

/// Who wrote an earlier message the caller sends along.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaker {
    User,
    Assistant,
    /// Caller-supplied instructions (an OpenAI-style client's system message).
    System,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HistoryMessage {
    pub speaker: Speaker,
    pub content: String,
}

/// One turn as the caller asked for it.
#[derive(Debug, Clone, Default)]
pub struct TurnRequest {
    pub message: String,
    pub session_id: Option<SessionId>,
    pub model: Option<ModelRef>,
    pub force_route: Option<Route>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub history: Vec<HistoryMessage>,
    pub force_role_id: Option<String>,
    pub custom_instructions: Option<String>,
}

/// The fields ChatRequest and ChatStreamRequest share.
pub struct RawTurn {
    pub message: String,
    pub session_id: String,
    pub model: Option<String>,
    pub force_route: i32,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub history: Vec<pb::ChatMessage>,
    pub force_role_id: Option<String>,
    pub custom_instructions: Option<String>,
}

/// ChatRequest and ChatStreamRequest carry the same fields under the same names.
macro_rules! raw_turn_from {
    ($($request:ty),+) => {$(
        impl From<$request> for RawTurn {
            fn from(r: $request) -> Self {
                Self {
                    message: r.message,
                    session_id: r.session_id,
                    model: r.model,
                    force_route: r.force_route,
                    max_tokens: r.max_tokens,
                    temperature: r.temperature,
                    history: r.history,
                    force_role_id: r.force_role_id,
                    custom_instructions: r.custom_instructions,
                }
            }
        }
    )+};
}

raw_turn_from!(pb::ChatRequest, pb::ChatStreamRequest);

impl TurnRequest {
    pub fn validate(raw: RawTurn, limits: &Limits) -> Result<Self, RouterError> {
        if raw.message.trim().is_empty() {
            return Err(RouterError::invalid("message", "must not be empty"));
        }
        if raw.message.len() > limits.max_message_bytes {
            return Err(RouterError::invalid(
                "message",
                format!("is {} bytes; at most {} are accepted", raw.message.len(), limits.max_message_bytes),
            ));
        }
        let session_id = match raw.session_id.as_str() {
            "" => None,
            id => Some(SessionId::parse_field(id, "session_id")?),
        };
        // Identifiers are recorded with the turn's decision and reused: a NUL is refused, while
        // the message, history and instructions go to the model as they are.
        reject_nul("model", raw.model.as_deref().unwrap_or_default())?;
        reject_nul("force_role_id", raw.force_role_id.as_deref().unwrap_or_default())?;
        let model = raw
            .model
            .filter(|m| !m.is_empty())
            .map(|m| m.parse::<ModelRef>().map_err(|reason| RouterError::invalid("model", reason)))
            .transpose()?;
        let force_route = match pb::RouteType::try_from(raw.force_route) {
            Ok(pb::RouteType::Unspecified) => None,
            Ok(route) => route_from_proto(route),
            Err(_) => return Err(RouterError::invalid("force_route", format!("unknown route {}", raw.force_route))),
        };
        if raw.max_tokens.is_some_and(|max| max == 0 || max > limits.max_tokens) {
            return Err(RouterError::invalid("max_tokens", format!("must be between 1 and {}", limits.max_tokens)));
        }
        if raw.temperature.is_some_and(|t| !(0.0..=MAX_TEMPERATURE).contains(&t)) {
            return Err(RouterError::invalid("temperature", format!("must be between 0 and {MAX_TEMPERATURE}")));
        }
        if raw.history.len() > limits.max_history {
            return Err(RouterError::invalid(
                "history",
                format!("has {} messages; at most {} are accepted", raw.history.len(), limits.max_history),
            ));
        }
        let history = raw
            .history
            .into_iter()
            .enumerate()
            .map(|(i, m)| history_message(i, m, limits))
            .collect::<Result<Vec<_>, _>>()?;
        let force_role_id = non_empty(raw.force_role_id);
        if force_role_id.as_ref().is_some_and(|role| role.len() > MAX_ROLE_ID_BYTES) {
            return Err(RouterError::invalid("force_role_id", format!("is longer than {MAX_ROLE_ID_BYTES} bytes")));
        }
        let custom_instructions = non_empty(raw.custom_instructions);
        if custom_instructions.as_ref().is_some_and(|c| c.len() > MAX_INSTRUCTIONS_BYTES) {
            return Err(RouterError::invalid(
                "custom_instructions",
                format!("is longer than {MAX_INSTRUCTIONS_BYTES} bytes"),
            ));
        }
        Ok(Self {
            message: raw.message,
            session_id,
            model,
            force_route,
            max_tokens: raw.max_tokens,
            temperature: raw.temperature,
            history,
            force_role_id,
            custom_instructions,
        })
    }
}

fn history_message(index: usize, message: pb::ChatMessage, limits: &Limits) -> Result<HistoryMessage, RouterError> {
    let speaker = match pb::ChatRole::try_from(message.role) {
        Ok(pb::ChatRole::User) => Speaker::User,
        Ok(pb::ChatRole::Assistant) => Speaker::Assistant,
        Ok(pb::ChatRole::System) => Speaker::System,
        _ => {
            return Err(RouterError::invalid(
                format!("history[{index}].role"),
                "must be CHAT_ROLE_USER, CHAT_ROLE_ASSISTANT or CHAT_ROLE_SYSTEM",
            ));
        }
    };
    if message.content.len() > limits.max_message_bytes {
        return Err(RouterError::invalid(
            format!("history[{index}].content"),
            format!("is longer than {} bytes", limits.max_message_bytes),
        ));
    }
    Ok(HistoryMessage { speaker, content: message.content })
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(message: &str) -> RawTurn {
        RawTurn::from(pb::ChatRequest { message: message.to_owned(), ..Default::default() })
    }

    fn field_of(result: Result<TurnRequest, RouterError>) -> String {
        match result {
            Err(RouterError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid-argument error, got {other:?}"),
        }
    }

    #[test]
    fn a_plain_message_is_accepted() {
        let turn = TurnRequest::validate(raw("hello"), &Limits::default()).expect("valid");
        assert_eq!(turn.message, "hello");
        assert!(turn.session_id.is_none() && turn.force_route.is_none());
    }

    #[test]
    fn each_bad_field_is_named() {
        let limits = Limits { max_message_bytes: 10, max_history: 1, ..Limits::default() };
        assert_eq!(field_of(TurnRequest::validate(raw("  "), &limits)), "message");
        assert_eq!(field_of(TurnRequest::validate(raw("much too long a message"), &limits)), "message");
        let mut r = raw("hi");
        r.model = Some("gpt-4o".into());
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "model");
        let mut r = raw("hi");
        r.force_route = 9;
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "force_route");
        let mut r = raw("hi");
        r.max_tokens = Some(0);
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "max_tokens");
        let mut r = raw("hi");
        r.temperature = Some(3.5);
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "temperature");
        let mut r = raw("hi");
        r.history = vec![pb::ChatMessage { role: pb::ChatRole::Tool as i32, content: "x".into() }];
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "history[0].role");
        let mut r = raw("hi");
        r.history = vec![pb::ChatMessage::default(), pb::ChatMessage::default()];
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "history");
        let mut r = raw("hi");
        r.session_id = "not a session id!".into();
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), "session_id");
    }

    #[test]
    fn a_model_is_named_with_its_provider() {
        let mut r = raw("hi");
        r.model = Some("anthropic/claude-3-5-sonnet-20241022".into());
        let turn = TurnRequest::validate(r, &Limits::default()).expect("valid");
        assert_eq!(turn.model, Some(ModelRef::new("anthropic", "claude-3-5-sonnet-20241022")));
    }
}
