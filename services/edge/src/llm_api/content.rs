//! Content parts as every API's request has them (`{"type", ...}` objects), and the text of a
//! router message, which routing and the conversation key read.

use serde_json::{Map, Value};
use switchyard_proto::router::v1::{self as router, content_part};

use crate::error::ApiError;

/// The system prompt a conversation opens with, for its key: every system message's text.
pub(crate) fn system_text(history: &[router::ChatMessage]) -> String {
    let system = history.iter().filter(|m| m.role() == router::ChatRole::System);
    system.map(message_text).collect::<Vec<_>>().join("\n")
}

pub(crate) fn message_text(message: &router::ChatMessage) -> String {
    if message.parts.is_empty() {
        return message.content.clone();
    }
    let texts = message.parts.iter().filter_map(|part| match &part.part {
        Some(content_part::Part::Text(text)) if !text.is_empty() => Some(text.as_str()),
        _ => None,
    });
    texts.collect::<Vec<_>>().join("\n")
}

pub(crate) fn part_kind<'a>(part: &'a Value, field: &str) -> Result<(&'a str, &'a Map<String, Value>), ApiError> {
    let object = part.as_object().ok_or_else(|| ApiError::bad_request(field, "must be a content part object"))?;
    match object.get("type") {
        Some(Value::String(kind)) => Ok((kind.as_str(), object)),
        _ => Err(ApiError::bad_request(format!("{field}.type"), "is required (a string)")),
    }
}

pub(crate) fn part_text(part: &Map<String, Value>, field: &str) -> Result<String, ApiError> {
    match part.get("text") {
        Some(Value::String(text)) => Ok(text.clone()),
        _ => Err(ApiError::bad_request(field, "is required (a string)")),
    }
}

/// An image part's `detail` (`auto`, `low` or `high`; empty when absent), as both of OpenAI's
/// APIs take it; `field` names it as the caller's API has it.
pub(crate) fn image_detail(detail: Option<&Value>, field: &str) -> Result<String, ApiError> {
    match detail {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(detail)) if matches!(detail.as_str(), "auto" | "low" | "high") => Ok(detail.clone()),
        Some(_) => Err(ApiError::bad_request(field, "must be `auto`, `low` or `high`")),
    }
}

/// Content parts as a message's content: text alone as plain content (the parts joined by
/// newlines), anything with an image as the parts themselves, in order.
pub(crate) fn put_parts(message: &mut router::ChatMessage, parts: Vec<router::ContentPart>) {
    if parts.iter().all(|p| matches!(p.part, Some(content_part::Part::Text(_)))) {
        let texts = parts.into_iter().filter_map(|p| match p.part {
            Some(content_part::Part::Text(text)) => Some(text),
            _ => None,
        });
        message.content = texts.collect::<Vec<_>>().join("\n");
    } else {
        message.parts = parts;
    }
}
