//! The earlier messages a caller sends along: each checked and read into a [`HistoryMessage`],
//! and every tool result matched to a call an earlier assistant message made.

use std::collections::HashSet;

use switchyard_kit::text::reject_nul;
use switchyard_llm::{ContentPart, Image, ToolCall};
use switchyard_proto::router::v1 as pb;

use super::{HistoryMessage, Speaker, tools::check_tool_name};
use crate::{error::RouterError, limits::Limits};

pub(super) fn history_message(
    index: usize,
    message: pb::ChatMessage,
    limits: &Limits,
) -> Result<HistoryMessage, RouterError> {
    let field = |name: &str| format!("history[{index}].{name}");
    let speaker = match pb::ChatRole::try_from(message.role) {
        Ok(pb::ChatRole::User) => Speaker::User,
        Ok(pb::ChatRole::Assistant) => Speaker::Assistant,
        Ok(pb::ChatRole::System) => Speaker::System,
        Ok(pb::ChatRole::Tool) => Speaker::Tool,
        _ => {
            return Err(RouterError::invalid(
                field("role"),
                "must be CHAT_ROLE_USER, CHAT_ROLE_ASSISTANT, CHAT_ROLE_SYSTEM or CHAT_ROLE_TOOL",
            ));
        }
    };
    if !message.tool_calls.is_empty() && speaker != Speaker::Assistant {
        return Err(RouterError::invalid(field("tool_calls"), "only a CHAT_ROLE_ASSISTANT message makes tool calls"));
    }
    if !message.parts.is_empty() && !matches!(speaker, Speaker::User | Speaker::Tool) {
        return Err(RouterError::invalid(
            field("parts"),
            "only a CHAT_ROLE_USER message or a CHAT_ROLE_TOOL result comes in parts",
        ));
    }
    match speaker {
        Speaker::Tool if message.tool_call_id.trim().is_empty() => {
            return Err(RouterError::invalid(field("tool_call_id"), "is required on a CHAT_ROLE_TOOL result"));
        }
        Speaker::Tool => reject_nul(&field("tool_call_id"), &message.tool_call_id)?,
        _ if !message.tool_call_id.is_empty() => {
            return Err(RouterError::invalid(field("tool_call_id"), "only a CHAT_ROLE_TOOL result answers a call"));
        }
        _ => {}
    }
    let tool_calls = message
        .tool_calls
        .into_iter()
        .enumerate()
        .map(|(j, call)| {
            let call_field = |name: &str| format!("history[{index}].tool_calls[{j}].{name}");
            if call.id.trim().is_empty() {
                return Err(RouterError::invalid(call_field("id"), "is required"));
            }
            reject_nul(&call_field("id"), &call.id)?;
            check_tool_name(&call_field("name"), &call.name)?;
            Ok(ToolCall { id: call.id, name: call.name, arguments: call.arguments_json })
        })
        .collect::<Result<Vec<_>, RouterError>>()?;
    let mut parts = Vec::with_capacity(message.parts.len());
    for (k, part) in message.parts.into_iter().enumerate() {
        match part.part {
            Some(pb::content_part::Part::Text(text)) => parts.push(ContentPart::Text(text)),
            Some(pb::content_part::Part::Image(image)) => {
                parts.push(image_part(&format!("history[{index}].parts[{k}].image"), image)?)
            }
            None => return Err(RouterError::invalid(format!("history[{index}].parts[{k}]"), "is empty")),
        }
    }
    // The message's own text comes first; with parts it is their first text part too, so a
    // model that takes images gets the parts alone in order.
    if !parts.is_empty() && !message.content.is_empty() {
        parts.insert(0, ContentPart::Text(message.content.clone()));
    }
    let mut content = String::new();
    for part in &parts {
        if let ContentPart::Text(text) = part {
            if !content.is_empty() {
                content.push('\n');
            }
            content.push_str(text);
        }
    }
    if parts.is_empty() {
        content = message.content;
    }
    if content.len() > limits.max_message_bytes {
        return Err(RouterError::invalid(
            field("content"),
            format!("is longer than {} bytes", limits.max_message_bytes),
        ));
    }
    Ok(HistoryMessage {
        speaker,
        content,
        tool_calls,
        tool_call_id: message.tool_call_id,
        is_error: speaker == Speaker::Tool && message.is_error,
        parts,
    })
}

/// An image part: an `https:` URL the vendor fetches or a `data:image/…;base64,` URL.
fn image_part(field: &str, image: pb::ImagePart) -> Result<ContentPart, RouterError> {
    let url = image.url.trim();
    let data = url.strip_prefix("data:");
    let acceptable = match data {
        Some(rest) => {
            rest.starts_with("image/") && rest.split_once(',').is_some_and(|(meta, _)| meta.ends_with(";base64"))
        }
        None => url.starts_with("https://") && url.len() > "https://".len(),
    };
    if !acceptable {
        return Err(RouterError::invalid(
            format!("{field}.url"),
            "must be an https: URL or a data:image/…;base64, URL",
        ));
    }
    reject_nul(&format!("{field}.url"), url)?;
    let detail = match image.detail.as_str() {
        "" => None,
        "auto" | "low" | "high" => Some(image.detail.clone()),
        _ => return Err(RouterError::invalid(format!("{field}.detail"), "must be auto, low or high")),
    };
    Ok(ContentPart::Image(Image { url: url.to_owned(), detail }))
}

/// Every tool result answers a call an earlier assistant message made.
pub(super) fn check_tool_results(history: &[HistoryMessage]) -> Result<(), RouterError> {
    let mut calls: HashSet<&str> = HashSet::new();
    for (index, message) in history.iter().enumerate() {
        calls.extend(message.tool_calls.iter().map(|c| c.id.as_str()));
        if message.speaker == Speaker::Tool && !calls.contains(message.tool_call_id.as_str()) {
            return Err(RouterError::invalid(
                format!("history[{index}].tool_call_id"),
                format!("`{}` answers no tool call made earlier in history", message.tool_call_id),
            ));
        }
    }
    Ok(())
}
