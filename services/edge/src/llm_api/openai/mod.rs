//! OpenAI's chat completions API, so OpenAI SDKs and agent frameworks use Switchyard unchanged:
//! the last user message is the query, earlier messages are the history (tool calls and tool
//! results included), the caller's function tools reach the model and its calls of them come
//! back in OpenAI's shape, and the model name picks a route (`switchyard-direct`,
//! `switchyard-mcp-agent`, `switchyard-multiagent`), lets the router decide (`switchyard`, or
//! anything unknown to us such as `gpt-4o`), or names a model the router knows
//! (`openai/gpt-4o-mini`, `local/smollm2-135m-instruct`). Routing metadata rides in
//! `_metadata`, which SDKs ignore. Errors come in OpenAI's error shape, `param` naming the field.

mod content;
mod error;
mod request;
mod stream;

use std::sync::Arc;

use axum::{
    body::Body,
    extract::State,
    response::{Response, sse::Event},
};
use http::HeaderMap;
use serde_json::{Value, json};
use switchyard_proto::router::v1 as router;

pub(crate) use self::error::{openai_error, openai_error_naming};
use self::{
    request::{Completion, to_completion},
    stream::{Chunks, error_chunk},
};
use super::{
    ROUTE_MODELS,
    content::{message_text, system_text},
};
use crate::{
    Edge,
    chat::completion_json,
    error::{ApiError, axum_json},
    llm_api::conversation::Conversation,
    rest::{self, parse_json, sse},
    turn::{self, ChatTurn},
};

pub async fn models(State(edge): State<Arc<Edge>>, headers: HeaderMap) -> Response {
    if let Err(error) = edge.admit(&headers).await {
        return openai_error(error);
    }
    let data: Vec<Value> = ROUTE_MODELS
        .iter()
        .map(|(id, _)| json!({"id": id, "object": "model", "created": 0, "owned_by": "switchyard"}))
        .collect();
    axum_json(&json!({"object": "list", "data": data}))
}

pub async fn chat_completions(State(edge): State<Arc<Edge>>, headers: HeaderMap, body: Body) -> Response {
    match complete(&edge, &headers, body).await {
        Ok(response) => response,
        Err(error) => openai_error(error),
    }
}

async fn complete(edge: &Edge, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let caller = edge.admit(headers).await?;
    let bytes = edge.read_json_body(headers, body).await?;
    let body: Value = parse_json(&bytes)?;
    let Completion { mut chat, model_name, stream, include_usage } = to_completion(&body)?;
    let conversation = Conversation::identify(
        &caller,
        headers,
        "session_id",
        Some(chat.session_id.as_str()),
        &system_text(&chat.history),
        &first_user_text(&chat),
    )?;
    chat.belongs_to(conversation);
    if !stream {
        let (response, warning) =
            turn::answer_warned(edge, &caller, chat).await.map_err(|status| ApiError::from_status(&status))?;
        return Ok(turn::warned(axum_json(&completion_json(&response, Some(&model_name))), warning));
    }
    let (events, warning) = turn::stream(edge, &caller, chat).await.map_err(|status| ApiError::from_status(&status))?;
    let mut chunks = Chunks::new(model_name, include_usage);
    // `[DONE]` only ends an answer that finished: after an error chunk the stream just ends,
    // as OpenAI's does (its SDKs raise on the error; a client reading up to `[DONE]` alone
    // would take a cut answer for a whole one).
    let done = Event::default().data("[DONE]");
    let events =
        rest::client_stream(events, edge.shutdown.clone(), move |item| chunks.next(item), error_chunk, Some(done));
    Ok(turn::warned(sse(events), warning))
}

/// The conversation's first user message's text, for its key (the query on a first request).
fn first_user_text(chat: &ChatTurn) -> String {
    chat.history.iter().find(|m| m.role() == router::ChatRole::User).map_or_else(|| chat.message.clone(), message_text)
}
