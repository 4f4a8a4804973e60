//! A message's content blocks (text, image, tool_use, tool_result) as the router's messages.

use serde_json::Value;
use switchyard_proto::router::v1::{self as router, content_part::Part};

use super::{
    fields::Origin,
    request::{Object, object, required_str},
};
use crate::{error::ApiError, llm_api::content::put_parts};

/// The `type` of a content block.
pub(super) fn block_type<'a>(block: &'a Value, field: &str) -> Result<(&'a Object, &'a str), ApiError> {
    let block = object(block, field)?;
    Ok((block, required_str(block, "type", &format!("{field}.type"))?))
}

pub(super) fn text_block(block: &Value, field: &str) -> Result<String, ApiError> {
    match block_type(block, field)? {
        (block, "text") => Ok(required_str(block, "text", &format!("{field}.text"))?.to_owned()),
        (_, other) => Err(ApiError::bad_request(format!("{field}.type"), format!("must be `text`, not `{other}`"))),
    }
}

/// An `image` block's source as the URL the router takes (`data:` for base64).
pub(super) fn image_part(block: &Object, field: &str) -> Result<router::ContentPart, ApiError> {
    let source_field = format!("{field}.source");
    let source = object(block.get("source").unwrap_or(&Value::Null), &source_field)?;
    let url = match required_str(source, "type", &format!("{source_field}.type"))? {
        "base64" => {
            let media_type = required_str(source, "media_type", &format!("{source_field}.media_type"))?;
            if !media_type.starts_with("image/") {
                return Err(ApiError::bad_request(format!("{source_field}.media_type"), "must be an image/ type"));
            }
            let data = required_str(source, "data", &format!("{source_field}.data"))?;
            if data.is_empty() {
                return Err(ApiError::bad_request(format!("{source_field}.data"), "must not be empty"));
            }
            format!("data:{media_type};base64,{data}")
        }
        "url" => required_str(source, "url", &format!("{source_field}.url"))?.to_owned(),
        other => {
            return Err(ApiError::bad_request(
                format!("{source_field}.type"),
                format!("must be `base64` or `url`, not `{other}`"),
            ));
        }
    };
    Ok(router::ContentPart { part: Some(Part::Image(router::ImagePart { url, detail: String::new() })) })
}

/// Text and image blocks as the router's parts (text alone as plain content).
pub(super) fn content_message(role: router::ChatRole, parts: Vec<router::ContentPart>) -> router::ChatMessage {
    let mut message = router::ChatMessage { role: role as i32, ..Default::default() };
    put_parts(&mut message, parts);
    message
}

/// One Anthropic message as the router's messages: a user message's `tool_result` blocks are
/// tool messages of their own (before its text, as Anthropic orders them); an assistant
/// message's `tool_use` blocks are its tool calls.
pub(super) fn conversation_message(
    message: &Value,
    index: usize,
) -> Result<Vec<(router::ChatMessage, Origin)>, ApiError> {
    let field = format!("messages[{index}]");
    let message = object(message, &field)?;
    let role = required_str(message, "role", &format!("{field}.role"))?;
    let content_field = format!("{field}.content");
    if role == "system" {
        // A system message in the conversation (Anthropic's mid-conversation system messages,
        // which Claude Code sends): instructions, as the top-level `system` is.
        let content = match message.get("content") {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(blocks)) => blocks
                .iter()
                .enumerate()
                .map(|(b, block)| text_block(block, &format!("{content_field}[{b}]")))
                .collect::<Result<Vec<_>, _>>()?
                .join("\n"),
            None | Some(Value::Null) => return Err(ApiError::bad_request(content_field, "is required")),
            Some(_) => return Err(ApiError::bad_request(content_field, "must be a string or an array of text blocks")),
        };
        let message = router::ChatMessage { role: router::ChatRole::System as i32, content, ..Default::default() };
        return Ok(vec![(message, Origin::new(field))]);
    }
    let blocks = match message.get("content") {
        Some(Value::String(text)) => {
            let role = match role {
                "user" => router::ChatRole::User,
                "assistant" => router::ChatRole::Assistant,
                other => return Err(unknown_role(&field, other)),
            };
            let message = router::ChatMessage { role: role as i32, content: text.clone(), ..Default::default() };
            return Ok(vec![(message, Origin::new(field))]);
        }
        Some(Value::Array(blocks)) => blocks,
        None | Some(Value::Null) => return Err(ApiError::bad_request(content_field, "is required")),
        Some(_) => return Err(ApiError::bad_request(content_field, "must be a string or an array of blocks")),
    };
    match role {
        "user" => {
            let mut out = Vec::new();
            let mut parts = Vec::new();
            let mut origin = Origin::new(field.clone());
            for (b, block) in blocks.iter().enumerate() {
                let block_field = format!("{content_field}[{b}]");
                match block_type(block, &block_field)? {
                    (block, "text") => parts.push(router::ContentPart {
                        part: Some(Part::Text(required_str(block, "text", &format!("{block_field}.text"))?.to_owned())),
                    }),
                    (block, "image") => parts.push(image_part(block, &block_field)?),
                    (block, "tool_result") => {
                        out.push(tool_result(block, &block_field)?);
                        continue;
                    }
                    (_, other) => {
                        return Err(ApiError::bad_request(
                            format!("{block_field}.type"),
                            format!("a user message takes text, image and tool_result blocks, not `{other}`"),
                        ));
                    }
                }
                origin.parts.push(block_field);
            }
            if !parts.is_empty() || out.is_empty() {
                out.push((content_message(router::ChatRole::User, parts), origin));
            }
            Ok(out)
        }
        "assistant" => {
            let mut texts = Vec::new();
            let mut tool_calls = Vec::new();
            let mut origin = Origin::new(field.clone());
            for (b, block) in blocks.iter().enumerate() {
                let block_field = format!("{content_field}[{b}]");
                match block_type(block, &block_field)? {
                    (block, "text") => texts.push(required_str(block, "text", &format!("{block_field}.text"))?),
                    (block, "tool_use") => {
                        let id = required_str(block, "id", &format!("{block_field}.id"))?.to_owned();
                        let name = required_str(block, "name", &format!("{block_field}.name"))?.to_owned();
                        let input = match block.get("input") {
                            Some(input @ Value::Object(_)) => input.to_string(),
                            None | Some(Value::Null) => "{}".to_owned(),
                            Some(_) => {
                                return Err(ApiError::bad_request(format!("{block_field}.input"), "must be an object"));
                            }
                        };
                        tool_calls.push(router::ToolCall { id, name, arguments_json: input });
                        origin.tool_calls.push(block_field);
                    }
                    // Extended thinking the client hands back: the model's own notes, which
                    // no other vendor reads; dropped from the history.
                    (_, "thinking" | "redacted_thinking") => {}
                    (_, other) => {
                        return Err(ApiError::bad_request(
                            format!("{block_field}.type"),
                            format!("an assistant message takes text and tool_use blocks, not `{other}`"),
                        ));
                    }
                }
            }
            let message = router::ChatMessage {
                role: router::ChatRole::Assistant as i32,
                content: texts.join("\n"),
                tool_calls,
                ..Default::default()
            };
            Ok(vec![(message, origin)])
        }
        other => Err(unknown_role(&field, other)),
    }
}

pub(super) fn unknown_role(field: &str, role: &str) -> ApiError {
    ApiError::bad_request(format!("{field}.role"), format!("must be `user`, `assistant` or `system`, not `{role}`"))
}

pub(super) fn tool_result(block: &Object, field: &str) -> Result<(router::ChatMessage, Origin), ApiError> {
    let tool_use_id = required_str(block, "tool_use_id", &format!("{field}.tool_use_id"))?.to_owned();
    let is_error = match block.get("is_error") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(is_error)) => *is_error,
        Some(_) => return Err(ApiError::bad_request(format!("{field}.is_error"), "must be true or false")),
    };
    let content_field = format!("{field}.content");
    let mut origin = Origin::new(field.to_owned());
    let parts = match block.get("content") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(text)) => {
            origin.parts.push(content_field.clone());
            vec![router::ContentPart { part: Some(Part::Text(text.clone())) }]
        }
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .map(|(b, inner)| {
                let inner_field = format!("{content_field}[{b}]");
                origin.parts.push(inner_field.clone());
                match block_type(inner, &inner_field)? {
                    (inner, "text") => Ok(router::ContentPart {
                        part: Some(Part::Text(required_str(inner, "text", &format!("{inner_field}.text"))?.to_owned())),
                    }),
                    (inner, "image") => image_part(inner, &inner_field),
                    (_, other) => Err(ApiError::bad_request(
                        format!("{inner_field}.type"),
                        format!("a tool result takes text and image blocks, not `{other}`"),
                    )),
                }
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ApiError::bad_request(content_field, "must be a string or an array of blocks")),
    };
    let mut message = content_message(router::ChatRole::Tool, parts);
    message.tool_call_id = tool_use_id;
    message.is_error = is_error;
    Ok((message, origin))
}
