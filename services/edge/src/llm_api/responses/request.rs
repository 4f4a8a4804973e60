//! A Responses request read: its input items as the router's messages, tools, `tool_choice`,
//! `text.format`, and what the response object repeats of it.

use serde_json::{Map, Value, json};
use switchyard_proto::router::v1::{self as router, content_part, response_format};

use crate::{
    error::ApiError,
    llm_api::{
        content::{image_detail, part_kind, part_text, put_parts},
        json::{bool_field, check_name, number, string, u32_field},
        tools::{RESPONSES, client_tools, tool_choice},
    },
};

/// Where an entry of the router's history came from: an input item (`input[3]`), the stored
/// conversation (`previous_response_id`) or `instructions`; an assistant entry gathers the
/// `function_call` items that follow one another, one per tool call.
#[derive(Debug, Clone, Default)]
pub(super) struct Origin {
    pub(super) path: String,
    pub(super) calls: Vec<String>,
}

impl Origin {
    pub(super) fn new(path: impl Into<String>) -> Self {
        Self { path: path.into(), calls: Vec::new() }
    }
}

/// A request as read, before it meets the stored conversation it may continue.
#[derive(Debug)]
pub(super) struct Parsed {
    pub(super) model_name: String,
    pub(super) instructions: String,
    pub(super) items: Vec<router::ChatMessage>,
    pub(super) origins: Vec<Origin>,
    pub(super) tools: Vec<router::ClientTool>,
    pub(super) tool_choice: Option<router::ToolChoice>,
    pub(super) parallel_tool_calls: Option<bool>,
    pub(super) response_format: Option<router::ResponseFormat>,
    pub(super) max_output_tokens: Option<u32>,
    pub(super) temperature: Option<f64>,
    pub(super) stream: bool,
    pub(super) store: bool,
    pub(super) previous_response_id: Option<String>,
    /// What the response object repeats of the request.
    pub(super) echo: Echo,
}

#[derive(Debug, Clone)]
pub(super) struct Echo {
    pub(super) instructions: Value,
    pub(super) metadata: Value,
    pub(super) tools: Value,
    pub(super) tool_choice: Value,
    pub(super) parallel_tool_calls: bool,
    pub(super) temperature: Value,
    pub(super) max_output_tokens: Value,
    pub(super) previous_response_id: Value,
    pub(super) text: Value,
}

/// The fields a request is read by; any other (`reasoning`, `include`, `user`, `top_p`,
/// `truncation`, `service_tier`, `prompt_cache_key`…) is ignored, as with chat completions.
pub(super) fn parse(body: &Value) -> Result<Parsed, ApiError> {
    let object = body.as_object().ok_or_else(|| ApiError::bad_request("body", "must be a JSON object"))?;
    let model_name = string(object, "model")?.ok_or_else(|| ApiError::bad_request("model", "is required"))?;
    let instructions = match object.get("instructions") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(_) => return Err(ApiError::bad_request("instructions", "must be a string")),
    };
    let (items, origins) = input(object)?;
    let tools = client_tools(object.get("tools"), &RESPONSES)?;
    let tool_choice = tool_choice(object.get("tool_choice"), &tools, &RESPONSES)?;
    let metadata = match object.get("metadata") {
        None | Some(Value::Null) => Value::Null,
        Some(Value::Object(entries)) => {
            if let Some((key, _)) = entries.iter().find(|(_, v)| !v.is_string()) {
                return Err(ApiError::bad_request(format!("metadata.{key}"), "must be a string"));
            }
            Value::Object(entries.clone())
        }
        Some(_) => return Err(ApiError::bad_request("metadata", "must be an object of strings")),
    };
    let response_format = text_format(object)?;
    let parallel_tool_calls = bool_field(object, "parallel_tool_calls", "")?;
    let temperature = number(object, "temperature")?;
    let max_output_tokens = u32_field(object, "max_output_tokens")?;
    let previous_response_id = string(object, "previous_response_id")?.filter(|id| !id.is_empty());
    let echo = Echo {
        instructions: if instructions.is_empty() { Value::Null } else { json!(instructions) },
        metadata: if metadata.is_null() { json!({}) } else { metadata },
        tools: object.get("tools").filter(|v| !v.is_null()).cloned().unwrap_or_else(|| json!([])),
        tool_choice: object.get("tool_choice").filter(|v| !v.is_null()).cloned().unwrap_or_else(|| json!("auto")),
        parallel_tool_calls: parallel_tool_calls.unwrap_or(true),
        temperature: json!(temperature),
        max_output_tokens: json!(max_output_tokens),
        previous_response_id: json!(previous_response_id),
        text: object
            .get("text")
            .filter(|v| !v.is_null())
            .cloned()
            .unwrap_or_else(|| json!({"format": {"type": "text"}})),
    };
    Ok(Parsed {
        model_name,
        instructions,
        items,
        origins,
        tools,
        tool_choice,
        parallel_tool_calls,
        response_format,
        max_output_tokens,
        temperature,
        stream: bool_field(object, "stream", "")?.unwrap_or(false),
        store: bool_field(object, "store", "")?.unwrap_or(true),
        previous_response_id,
        echo,
    })
}

/// `input`: a string (one user message) or a non-empty list of items.
pub(super) fn input(object: &Map<String, Value>) -> Result<(Vec<router::ChatMessage>, Vec<Origin>), ApiError> {
    let items = match object.get("input") {
        Some(Value::String(text)) => {
            let message = router::ChatMessage {
                role: router::ChatRole::User as i32,
                content: text.clone(),
                ..Default::default()
            };
            return Ok((vec![message], vec![Origin::new("input")]));
        }
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => return Err(ApiError::bad_request("input", "must not be empty")),
        None | Some(Value::Null) => return Err(ApiError::bad_request("input", "is required")),
        Some(_) => return Err(ApiError::bad_request("input", "must be a string or an array of input items")),
    };
    let mut messages: Vec<router::ChatMessage> = Vec::new();
    let mut origins: Vec<Origin> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let at = format!("input[{index}]");
        let item = item.as_object().ok_or_else(|| ApiError::bad_request(at.clone(), "must be an object"))?;
        let kind = match item.get("type") {
            Some(Value::String(kind)) => kind.as_str(),
            // The short form of a message: `{"role", "content"}`.
            None | Some(Value::Null) if item.contains_key("role") => "message",
            None | Some(Value::Null) => return Err(ApiError::bad_request(format!("{at}.type"), "is required")),
            Some(_) => return Err(ApiError::bad_request(format!("{at}.type"), "must be a string")),
        };
        match kind {
            "message" => {
                messages.push(input_message(item, &at)?);
                origins.push(Origin::new(at));
            }
            "function_call" => {
                let call = router::ToolCall {
                    id: required_string(item, "call_id", &at)?,
                    name: required_string(item, "name", &at)?,
                    arguments_json: match item.get("arguments") {
                        Some(Value::String(arguments)) => arguments.clone(),
                        None | Some(Value::Null) => "{}".to_owned(),
                        Some(arguments @ Value::Object(_)) => arguments.to_string(),
                        Some(_) => {
                            return Err(ApiError::bad_request(format!("{at}.arguments"), "must be a string of JSON"));
                        }
                    },
                };
                // Calls that follow an assistant message (or one another) belong to that turn.
                let joins = messages.last().is_some_and(|m| m.role() == router::ChatRole::Assistant);
                if !joins {
                    messages
                        .push(router::ChatMessage { role: router::ChatRole::Assistant as i32, ..Default::default() });
                    origins.push(Origin::new(at.clone()));
                }
                if let (Some(message), Some(origin)) = (messages.last_mut(), origins.last_mut()) {
                    message.tool_calls.push(call);
                    origin.calls.push(at);
                }
            }
            "function_call_output" => {
                let tool_call_id = required_string(item, "call_id", &at)?;
                let content = match item.get("output") {
                    Some(Value::String(output)) => output.clone(),
                    Some(Value::Array(parts)) => text_parts(parts, &format!("{at}.output"))?,
                    None | Some(Value::Null) => {
                        return Err(ApiError::bad_request(format!("{at}.output"), "is required"));
                    }
                    Some(_) => {
                        return Err(ApiError::bad_request(
                            format!("{at}.output"),
                            "must be a string or an array of input_text parts",
                        ));
                    }
                };
                messages.push(router::ChatMessage {
                    role: router::ChatRole::Tool as i32,
                    content,
                    tool_call_id,
                    ..Default::default()
                });
                origins.push(Origin::new(at));
            }
            // A reasoning model's reasoning, which clients send back with its calls; no model
            // behind the router takes it back, and dropping it loses nothing it would read.
            "reasoning" => {}
            other => {
                return Err(ApiError::bad_request(
                    format!("{at}.type"),
                    format!(
                        "input items of type `{other}` are not supported; send `message`, `function_call` and \
                         `function_call_output` items"
                    ),
                ));
            }
        }
    }
    if messages.is_empty() {
        return Err(ApiError::bad_request("input", "holds no message, function_call or function_call_output"));
    }
    Ok((messages, origins))
}

pub(super) fn required_string(item: &Map<String, Value>, field: &str, at: &str) -> Result<String, ApiError> {
    match item.get(field) {
        Some(Value::String(value)) if !value.is_empty() => Ok(value.clone()),
        Some(Value::String(_)) => Err(ApiError::bad_request(format!("{at}.{field}"), "must not be empty")),
        None | Some(Value::Null) => Err(ApiError::bad_request(format!("{at}.{field}"), "is required")),
        Some(_) => Err(ApiError::bad_request(format!("{at}.{field}"), "must be a string")),
    }
}

/// A message item: a user's text and images, or the text of the other roles.
pub(super) fn input_message(item: &Map<String, Value>, at: &str) -> Result<router::ChatMessage, ApiError> {
    let role = match item.get("role") {
        Some(Value::String(role)) => match role.as_str() {
            "user" => router::ChatRole::User,
            "assistant" => router::ChatRole::Assistant,
            "system" | "developer" => router::ChatRole::System,
            other => {
                return Err(ApiError::bad_request(
                    format!("{at}.role"),
                    format!("unknown role `{other}`; send user, assistant, system or developer"),
                ));
            }
        },
        None | Some(Value::Null) => return Err(ApiError::bad_request(format!("{at}.role"), "is required")),
        Some(_) => return Err(ApiError::bad_request(format!("{at}.role"), "must be a string")),
    };
    let mut message = router::ChatMessage { role: role as i32, ..Default::default() };
    let parts = match item.get("content") {
        Some(Value::String(text)) => {
            message.content = text.clone();
            return Ok(message);
        }
        Some(Value::Array(parts)) => parts,
        None | Some(Value::Null) => return Err(ApiError::bad_request(format!("{at}.content"), "is required")),
        Some(_) => {
            return Err(ApiError::bad_request(
                format!("{at}.content"),
                "must be a string or an array of content parts",
            ));
        }
    };
    if role != router::ChatRole::User {
        message.content = text_parts(parts, &format!("{at}.content"))?;
        return Ok(message);
    }
    let mut content = Vec::with_capacity(parts.len());
    for (index, part) in parts.iter().enumerate() {
        let field = format!("{at}.content[{index}]");
        let (kind, part) = part_kind(part, &field)?;
        let piece = match kind {
            "input_text" | "output_text" => content_part::Part::Text(part_text(part, &format!("{field}.text"))?),
            "input_image" => {
                // The router checks the URL (https, or a base64 data URL) and names the part.
                let url = match part.get("image_url") {
                    Some(Value::String(url)) if !url.is_empty() => url.clone(),
                    _ if part.get("file_id").is_some_and(|v| !v.is_null()) => {
                        return Err(ApiError::bad_request(
                            format!("{field}.file_id"),
                            "uploaded files are not supported; send the image as `image_url`",
                        ));
                    }
                    _ => return Err(ApiError::bad_request(format!("{field}.image_url"), "is required (a string)")),
                };
                let detail = image_detail(part.get("detail"), &format!("{field}.detail"))?;
                content_part::Part::Image(router::ImagePart { url, detail })
            }
            other => {
                return Err(ApiError::bad_request(
                    format!("{field}.type"),
                    format!("content parts of type `{other}` are not supported; send input_text and input_image"),
                ));
            }
        };
        content.push(router::ContentPart { part: Some(piece) });
    }
    put_parts(&mut message, content);
    Ok(message)
}

/// Text-only content: input_text / output_text parts (a refusal's text too), joined by newlines.
pub(super) fn text_parts(parts: &[Value], field: &str) -> Result<String, ApiError> {
    let mut texts = Vec::with_capacity(parts.len());
    for (index, part) in parts.iter().enumerate() {
        let at = format!("{field}[{index}]");
        let (kind, part) = part_kind(part, &at)?;
        match kind {
            "input_text" | "output_text" => texts.push(part_text(part, &format!("{at}.text"))?),
            "refusal" => match part.get("refusal") {
                Some(Value::String(text)) => texts.push(text.clone()),
                _ => return Err(ApiError::bad_request(format!("{at}.refusal"), "is required (a string)")),
            },
            other => {
                return Err(ApiError::bad_request(
                    format!("{at}.type"),
                    format!("content parts of type `{other}` are not supported here; send text"),
                ));
            }
        }
    }
    Ok(texts.join("\n"))
}

/// `text.format`: `text` (the default), `json_object`, or `json_schema` with its `name`,
/// `schema`, `description` and `strict` beside the type.
pub(super) fn text_format(object: &Map<String, Value>) -> Result<Option<router::ResponseFormat>, ApiError> {
    let text = match object.get("text") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(text)) => text,
        Some(_) => return Err(ApiError::bad_request("text", "must be an object")),
    };
    let format = match text.get("format") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(format)) => format,
        Some(_) => return Err(ApiError::bad_request("text.format", "must be an object")),
    };
    let format = match format.get("type").and_then(Value::as_str) {
        Some("text") => return Ok(None),
        Some("json_object") => response_format::Format::JsonObject(true),
        Some("json_schema") => {
            let name = match format.get("name") {
                Some(Value::String(name)) => name.clone(),
                _ => return Err(ApiError::bad_request("text.format.name", "is required (a string)")),
            };
            check_name(&name, "text.format.name")?;
            let description = match format.get("description") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(description)) => description.clone(),
                Some(_) => return Err(ApiError::bad_request("text.format.description", "must be a string")),
            };
            let schema_json = match format.get("schema") {
                Some(schema @ Value::Object(_)) => schema.to_string(),
                None | Some(Value::Null) => {
                    return Err(ApiError::bad_request("text.format.schema", "is required (a JSON Schema object)"));
                }
                Some(_) => return Err(ApiError::bad_request("text.format.schema", "must be a JSON Schema object")),
            };
            let strict = bool_field(format, "strict", "text.format.")?.unwrap_or(false);
            response_format::Format::JsonSchema(router::JsonSchemaFormat { name, description, schema_json, strict })
        }
        _ => {
            return Err(ApiError::bad_request("text.format.type", "must be `text`, `json_object` or `json_schema`"));
        }
    };
    Ok(Some(router::ResponseFormat { format: Some(format) }))
}

/// Property-based fuzzing of the Responses reader: bodies with every field hostile.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use switchyard_testkit::fuzz::{config, timed};

    use super::*;
    use crate::llm_api::fuzz::{body, check_refusal, parsed};

    proptest! {
        #![proptest_config(config(96))]

        #[test]
        fn any_body_is_a_request_or_refused_by_field(body in body()) {
            let Some(body) = parsed(&body) else { return Ok(()) };
            if let Err(error) = timed("reading a Responses request", || parse(&body)) {
                check_refusal(&error)?;
            }
        }
    }
}
