//! OpenAI's Responses API (`POST /v1/responses`, `GET /v1/responses/{id}`), the wire Codex and
//! the newer OpenAI SDKs speak: `input` items (messages, `function_call`,
//! `function_call_output`) become the router's history, as `/v1/chat/completions` does, and the
//! answer comes back as a `response` object or its event stream. Every answer is kept for the
//! retention period so that `previous_response_id` continues it (the client sends only the new
//! items) and `GET /v1/responses/{id}` returns it: in Redis when configured, else in memory.

mod answer;
mod error;
mod request;
mod store;
mod turn;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, PoisonError},
};

use axum::{
    body::Body,
    extract::{Path, State},
    response::Response,
};
use futures::StreamExt;
use http::HeaderMap;
use serde_json::{Value, json};
use switchyard_proto::router::v1 as router;

pub use self::store::{ResponseStore, StoredResponse};
use self::{
    answer::{Relay, status_of, usage_json},
    error::{caller_field, responses_error, store_unavailable},
    request::parse,
    turn::Turn,
};
use crate::{
    Edge,
    chat::metadata_json,
    error::{ApiError, axum_json},
    llm_api::{
        content::{message_text, system_text},
        conversation::Conversation,
    },
    rest::{self, parse_json, sse},
    turn as chat_turn,
};

pub async fn create(State(edge): State<Arc<Edge>>, headers: HeaderMap, body: Body) -> Response {
    match respond(edge, &headers, body).await {
        Ok(response) => response,
        Err(error) => responses_error(error),
    }
}

pub async fn retrieve(State(edge): State<Arc<Edge>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let caller = match edge.admit(&headers).await {
        Ok(caller) => caller,
        Err(error) => return responses_error(error),
    };
    match edge.responses.get(&id, &caller).await {
        Ok(Some(stored)) => axum_json(&stored.response),
        Err(err) => responses_error(store_unavailable(&err)),
        Ok(None) => responses_error(ApiError::not_found(format!(
            "no response `{id}`: unknown, expired, stored without `store`, or another caller's"
        ))),
    }
}

async fn respond(edge: Arc<Edge>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let caller = edge.admit(headers).await?;
    let bytes = edge.read_json_body(headers, body).await?;
    let body: Value = parse_json(&bytes)?;
    let parsed = parse(&body)?;
    let previous = match &parsed.previous_response_id {
        Some(id) => {
            Some(edge.responses.get(id, &caller).await.map_err(|err| store_unavailable(&err))?.ok_or_else(|| {
                ApiError::bad_request(
                    "previous_response_id",
                    format!(
                        "no stored response `{id}` (unknown, expired, stored without `store`, or another caller's)"
                    ),
                )
            })?)
        }
        None => None,
    };
    let turn = Turn::assemble(parsed, previous)?;
    let mut chat = turn.chat.clone();
    if chat.session_id.is_empty() {
        let first_user = turn.conversation.iter().find(|m| m.role() == router::ChatRole::User);
        let conversation = Conversation::identify(
            &caller,
            headers,
            "previous_response_id",
            None,
            &system_text(&chat.history),
            &first_user.map(message_text).unwrap_or_default(),
        )?;
        chat.belongs_to(conversation);
    }
    let origins = turn.origins.clone();
    let named = move |status: tonic::Status| {
        let error = ApiError::from_status(&status);
        match error.field().map(|field| caller_field(field, &origins)) {
            Some(field) => error.with_field(field),
            None => error,
        }
    };
    let shell = turn.shell();
    if !turn.stream {
        let (response, warning) = chat_turn::answer_warned(&edge, &caller, chat).await.map_err(named)?;
        let message = response.message.clone().unwrap_or_default();
        let output = shell.output_items(&message.content, &message.tool_calls);
        let status = status_of(&response.finish_reason);
        let mut json = shell.json(status, output, Some(usage_json(response.usage.as_ref())));
        json["_metadata"] = response.metadata.as_ref().map(metadata_json).unwrap_or(Value::Null);
        json["session_id"] = json!(response.session_id);
        keep(&edge, turn.to_keep(&caller, &response.session_id, message, &json)).await;
        return Ok(chat_turn::warned(axum_json(&json), warning));
    }
    let (events, warning) = chat_turn::stream(&edge, &caller, chat).await.map_err(named)?;
    let relay = Arc::new(Mutex::new(Relay {
        shell,
        turn,
        caller,
        to_keep: None,
        sequence: 0,
        started: false,
        session_id: String::new(),
        text: None,
        calls: BTreeMap::new(),
        output: Vec::new(),
    }));
    let (failing, keeping) = (relay.clone(), relay.clone());
    let events = rest::client_stream(
        events,
        edge.shutdown.clone(),
        move |item| relay.lock().unwrap_or_else(PoisonError::into_inner).next(item),
        move |error| failing.lock().unwrap_or_else(PoisonError::into_inner).failed(error),
        None,
    )
    .then(move |event| {
        let entry = keeping.lock().unwrap_or_else(PoisonError::into_inner).to_keep.take();
        let edge = edge.clone();
        async move {
            keep(&edge, entry).await;
            event
        }
    });
    Ok(chat_turn::warned(sse(events), warning))
}

/// Keeps an answer. A store that fails loses only the continuation by `previous_response_id`
/// (the caller has its answer), so it is logged and the answer goes out.
async fn keep(edge: &Edge, entry: Option<(String, StoredResponse)>) {
    let Some((id, stored)) = entry else { return };
    if let Err(err) = edge.responses.put(id.clone(), stored).await {
        switchyard_kit::warn_throttled!("response store", response_id = %id, error = %err, "response not stored");
    }
}
