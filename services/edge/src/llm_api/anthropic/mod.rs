//! Anthropic's Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`), so the
//! Anthropic SDKs and agent CLIs such as Claude Code use Switchyard unchanged. A request maps
//! onto the router's chat: the last user message is the query (none when the conversation ends
//! in tool results: that continues the caller's tool loop), earlier messages are the history,
//! the caller's tools travel as client tools, and the model name picks a route or a model as
//! on `/v1/chat/completions`. Answers, streamed or not, come back as Anthropic's message object
//! and events; errors in Anthropic's error shape. The body is read by hand, not by serde
//! derive, so that every refusal names the field (`messages[2].content[0].source.data`).

mod answer;
mod content;
mod error;
mod fields;
mod request;

use std::sync::Arc;

use axum::{body::Body, extract::State, response::Response};
use http::HeaderMap;
use serde_json::{Value, json};
use switchyard_proto::router::v1::content_part::Part;

use self::{
    answer::{StreamEvents, message_json},
    error::{anthropic_error, error_event},
    request::MessagesRequest,
};
use crate::{
    Edge,
    auth::Caller,
    error::{ApiError, axum_json},
    llm_api::conversation::Conversation,
    rest::{self, parse_json, sse},
    turn,
};

/// Tokens counted for one image by `count_tokens`: Anthropic's own figure for an image at the
/// largest size it takes unscaled (about 1.15 megapixels, `width * height / 750`), since the
/// edge does not decode images to learn their size.
const IMAGE_TOKENS: u64 = 1_600;

pub async fn messages(State(edge): State<Arc<Edge>>, headers: HeaderMap, body: Body) -> Response {
    match answer(&edge, &headers, body).await {
        Ok(response) => response,
        Err(error) => anthropic_error(error),
    }
}

async fn read_request(edge: &Edge, headers: &HeaderMap, body: Body) -> Result<(Caller, MessagesRequest), ApiError> {
    let caller = edge.admit(headers).await?;
    let bytes = edge.read_json_body(headers, body).await?;
    let body: Value = parse_json(&bytes)?;
    Ok((caller, MessagesRequest::parse(&body)?))
}

async fn answer(edge: &Edge, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let (caller, request) = read_request(edge, headers, body).await?;
    let conversation = Conversation::identify(
        &caller,
        headers,
        "session_id",
        request.session_id.as_deref(),
        &request.system,
        &request.first_user_text(),
    )?;
    let (stream, model_name) = (request.stream, request.model.clone());
    let (mut chat, fields) = request.into_chat(conversation)?;
    chat.anthropic_version = vendor_header(headers, "anthropic-version")?;
    chat.anthropic_beta = vendor_header(headers, "anthropic-beta")?;
    let named = |status: tonic::Status| fields.rename(ApiError::from_status(&status));
    if !stream {
        let (response, warning) = turn::answer_warned(edge, &caller, chat).await.map_err(named)?;
        return Ok(turn::warned(axum_json(&message_json(&response, &model_name)), warning));
    }
    let (events, warning) = turn::stream(edge, &caller, chat).await.map_err(named)?;
    let mut relay = StreamEvents::new(model_name);
    let events = rest::client_stream(events, edge.shutdown.clone(), move |item| relay.next(item), error_event, None);
    Ok(turn::warned(sse(events), warning))
}

/// One of the caller's Anthropic headers, for the router to send on to an Anthropic-wire model
/// (it checks them and names the header it refuses). Several lines of it are one
/// comma-separated list, as HTTP reads them.
fn vendor_header(headers: &HeaderMap, name: &str) -> Result<Option<String>, ApiError> {
    let mut values = Vec::new();
    for value in headers.get_all(name) {
        let value = value.to_str().map_err(|_| ApiError::bad_request(name, "must be printable ASCII"))?;
        if !value.trim().is_empty() {
            values.push(value.trim());
        }
    }
    Ok((!values.is_empty()).then(|| values.join(",")))
}

pub async fn count_tokens(State(edge): State<Arc<Edge>>, headers: HeaderMap, body: Body) -> Response {
    match count(&edge, &headers, body).await {
        Ok(response) => response,
        Err(error) => anthropic_error(error),
    }
}

async fn count(edge: &Edge, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    edge.admit(headers).await?;
    let bytes = edge.read_json_body(headers, body).await?;
    let mut body: Value = parse_json(&bytes)?;
    // count_tokens takes a messages request without `max_tokens`.
    if let Some(object) = body.as_object_mut() {
        object.entry("max_tokens").or_insert(json!(1));
    }
    let request = MessagesRequest::parse(&body)?;
    Ok(axum_json(&json!({"input_tokens": estimate_tokens(&request)})))
}

/// An estimate of the input tokens: a quarter of the characters of the system prompt, the
/// messages' text, tool calls and results, and the tools' names, descriptions and schemas,
/// rounded up, plus [`IMAGE_TOKENS`] for each image. Vendors' tokenizers differ from model to
/// model; four characters a token is the rule of thumb they publish for English text and code.
fn estimate_tokens(request: &MessagesRequest) -> u64 {
    let mut chars = request.system.chars().count();
    let mut images = 0_u64;
    for message in &request.messages {
        chars += message.content.chars().count();
        for part in &message.parts {
            match &part.part {
                Some(Part::Text(text)) => chars += text.chars().count(),
                Some(Part::Image(_)) => images += 1,
                None => {}
            }
        }
        for call in &message.tool_calls {
            chars += call.name.chars().count() + call.arguments_json.chars().count();
        }
    }
    for tool in &request.tools {
        chars += tool.name.chars().count() + tool.description.chars().count() + tool.parameters_json.chars().count();
    }
    (chars as u64).div_ceil(4) + images * IMAGE_TOKENS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_estimates_count_a_quarter_of_the_characters_and_images_whole() {
        let request = MessagesRequest::parse(&json!({"model": "m", "max_tokens": 1, "system": "abcd", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "efgh"},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]}))
        .unwrap();
        assert_eq!(estimate_tokens(&request), 2 + IMAGE_TOKENS);
    }
}
