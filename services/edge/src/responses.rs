//! OpenAI's Responses API (`POST /v1/responses`, `GET /v1/responses/{id}`), the wire Codex and
//! the newer OpenAI SDKs speak: `input` items (messages, `function_call`,
//! `function_call_output`) become the router's history, as `/v1/chat/completions` does, and the
//! answer comes back as a `response` object or its event stream. Every answer is kept for the
//! retention period so that `previous_response_id` continues it (the client sends only the new
//! items) and `GET /v1/responses/{id}` returns it: in Redis when configured, else in memory.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use axum::{
    body::Body,
    extract::{Path, State},
    response::{Response, sse::Event},
};
use base64::{Engine, engine::general_purpose::STANDARD as BASE64};
use futures::StreamExt;
use http::HeaderMap;
use serde_json::{Map, Value, json};
use switchyard_proto::router::v1::{
    self as router, ToolChoiceMode, chat_stream_response::Event as ChatEvent, content_part, response_format,
    tool_choice,
};

use crate::{
    Edge,
    auth::Caller,
    chat::metadata_json,
    conversation::Conversation,
    error::{ApiError, axum_json},
    openai::{
        bool_field, check_name, message_text, number, openai_error_naming, part_kind, part_text, route_or_model,
        stream_request, string, system_text, u32_field,
    },
    rest::{self, parse_json, sse},
    upstream,
};
use switchyard_kit::{
    Secret,
    store::{KeyPrefix, REDIS_COMMAND_TIMEOUT, RedisConnection, StoreError, bounded},
};

/// Responses' errors name the caller's fields already (see [`caller_field`]).
fn responses_error(error: ApiError) -> Response {
    openai_error_naming(error, str::to_owned)
}

// ---------------------------------------------------------------------------------------------
// The store of answers.

/// An answer as kept: whose it is, the Switchyard session it continues, the conversation up to
/// and including it (without the instructions, which do not carry over, as in OpenAI's API),
/// and the response object `GET` returns.
#[derive(Debug, Clone)]
pub struct StoredResponse {
    tenant: String,
    user: Option<String>,
    session_id: String,
    conversation: Vec<router::ChatMessage>,
    response: Value,
}

impl StoredResponse {
    fn owned_by(&self, caller: &Caller) -> bool {
        let user = caller.user.as_ref().map(|u| u.as_str());
        self.tenant == caller.tenant.as_str() && self.user.as_deref() == user
    }

    /// As Redis keeps it: JSON, the conversation as the router's protobuf (a ChatRequest's
    /// history) in base64, so every part of it (images, calls, results) survives unchanged.
    fn to_json(&self) -> String {
        let history = router::ChatRequest { history: self.conversation.clone(), ..Default::default() };
        json!({
            "tenant": self.tenant,
            "user": self.user,
            "session_id": self.session_id,
            "conversation": BASE64.encode(prost::Message::encode_to_vec(&history)),
            "response": self.response,
        })
        .to_string()
    }

    fn from_json(text: &str) -> Result<Self, StoreError> {
        let corrupt = |what: &str| StoreError::Corrupt(format!("a stored response's {what}"));
        let value: Value = serde_json::from_str(text).map_err(|_| corrupt("JSON"))?;
        let text_of = |field: &str| value[field].as_str().map(str::to_owned).ok_or_else(|| corrupt(field));
        let bytes = BASE64.decode(text_of("conversation")?).map_err(|_| corrupt("conversation"))?;
        let history: router::ChatRequest =
            prost::Message::decode(bytes.as_slice()).map_err(|_| corrupt("conversation"))?;
        Ok(Self {
            tenant: text_of("tenant")?,
            user: value["user"].as_str().map(str::to_owned),
            session_id: text_of("session_id")?,
            conversation: history.history,
            response: value["response"].clone(),
        })
    }
}

/// Answers by id, for the retention period (`EDGE_RESPONSES_TTL`). In Redis when the edge has
/// one (`REDIS_URL`), so every replica finds every answer; otherwise in this replica's memory,
/// at most `EDGE_RESPONSES_MAX` answers, the oldest evicted first — there a
/// `previous_response_id` or `GET` that reaches another replica finds nothing and is told so.
pub struct ResponseStore {
    ttl: Duration,
    backend: Backend,
}

enum Backend {
    Memory { capacity: usize, entries: Mutex<Entries> },
    Redis { conn: RedisConnection, prefix: String },
}

#[derive(Default)]
struct Entries {
    by_id: HashMap<String, (Instant, StoredResponse)>,
    order: VecDeque<String>,
}

impl ResponseStore {
    /// In this replica's memory.
    pub fn memory(ttl: Duration, capacity: usize) -> Self {
        Self { ttl, backend: Backend::Memory { capacity: capacity.max(1), entries: Mutex::new(Entries::default()) } }
    }

    /// In Redis, under `<prefix>:edge:response:<id>`, each key expiring with its answer.
    pub async fn redis(url: &Secret, prefix: &str, ttl: Duration) -> Result<Self, StoreError> {
        let prefix = KeyPrefix::parse(prefix)?.as_str().to_owned();
        let conn = RedisConnection::connect(url).await?;
        Ok(Self { ttl, backend: Backend::Redis { conn, prefix } })
    }

    pub fn describe(&self) -> &'static str {
        match self.backend {
            Backend::Memory { .. } => "memory (per replica)",
            Backend::Redis { .. } => "redis",
        }
    }

    async fn put(&self, id: String, stored: StoredResponse) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Memory { capacity, entries } => {
                let mut entries = entries.lock().unwrap_or_else(PoisonError::into_inner);
                let now = Instant::now();
                entries.by_id.insert(id.clone(), (now + self.ttl, stored));
                entries.order.push_back(id);
                // Insertion order is expiry order (one TTL for all), so the front is always the
                // first to go, whether by age or by count.
                while let Some(front) = entries.order.front().cloned() {
                    let expired = entries.by_id.get(&front).is_none_or(|(expires, _)| *expires <= now);
                    if !expired && entries.by_id.len() <= *capacity {
                        break;
                    }
                    entries.order.pop_front();
                    entries.by_id.remove(&front);
                }
                Ok(())
            }
            Backend::Redis { conn, prefix } => {
                let mut conn = conn.clone();
                let millis = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX).max(1);
                let mut set = redis::cmd("SET");
                set.arg(format!("{prefix}:edge:response:{id}")).arg(stored.to_json()).arg("PX").arg(millis);
                bounded(REDIS_COMMAND_TIMEOUT, set.query_async::<()>(&mut conn)).await
            }
        }
    }

    /// The answer `id` when it is still kept and belongs to the caller's tenant and user.
    async fn get(&self, id: &str, caller: &Caller) -> Result<Option<StoredResponse>, StoreError> {
        let stored = match &self.backend {
            Backend::Memory { entries, .. } => {
                let entries = entries.lock().unwrap_or_else(PoisonError::into_inner);
                entries.by_id.get(id).filter(|(expires, _)| *expires > Instant::now()).map(|(_, s)| s.clone())
            }
            Backend::Redis { conn, prefix } => {
                let mut conn = conn.clone();
                let mut get = redis::cmd("GET");
                get.arg(format!("{prefix}:edge:response:{id}"));
                match bounded(REDIS_COMMAND_TIMEOUT, get.query_async::<Option<String>>(&mut conn)).await? {
                    Some(text) => Some(StoredResponse::from_json(&text)?),
                    None => None,
                }
            }
        };
        Ok(stored.filter(|stored| stored.owned_by(caller)))
    }
}

/// The store could not be read: the caller may retry.
fn store_unavailable(err: &StoreError) -> ApiError {
    ApiError::unavailable(format!("stored responses cannot be read now ({err}); retry"))
}

// ---------------------------------------------------------------------------------------------
// Handlers.

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
        chat.session_id = conversation.session_id;
        chat.conversation_key = conversation.conversation_key;
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
        let response = edge
            .upstreams
            .router()
            .chat(upstream::request(chat, &caller, Some(edge.request_timeout)))
            .await
            .map_err(named)?
            .into_inner();
        let message = response.message.clone().unwrap_or_default();
        let output = shell.output_items(&message.content, &message.tool_calls);
        let status = status_of(&response.finish_reason);
        let mut json = shell.json(status, output, Some(usage_json(response.usage.as_ref())));
        json["_metadata"] = response.metadata.as_ref().map(metadata_json).unwrap_or(Value::Null);
        json["session_id"] = json!(response.session_id);
        keep(&edge, turn.to_keep(&caller, &response.session_id, message, &json)).await;
        return Ok(axum_json(&json));
    }
    let events = edge
        .upstreams
        .router()
        .chat_stream(upstream::request(stream_request(chat), &caller, None))
        .await
        .map_err(named)?
        .into_inner();
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
    Ok(sse(events))
}

// ---------------------------------------------------------------------------------------------
// The request.

/// Where an entry of the router's history came from: an input item (`input[3]`), the stored
/// conversation (`previous_response_id`) or `instructions`; an assistant entry gathers the
/// `function_call` items that follow one another, one per tool call.
#[derive(Debug, Clone, Default)]
struct Origin {
    path: String,
    calls: Vec<String>,
}

impl Origin {
    fn new(path: impl Into<String>) -> Self {
        Self { path: path.into(), calls: Vec::new() }
    }
}

/// A request as read, before it meets the stored conversation it may continue.
#[derive(Debug)]
struct Parsed {
    model_name: String,
    instructions: String,
    items: Vec<router::ChatMessage>,
    origins: Vec<Origin>,
    tools: Vec<router::ClientTool>,
    tool_choice: Option<router::ToolChoice>,
    parallel_tool_calls: Option<bool>,
    response_format: Option<router::ResponseFormat>,
    max_output_tokens: Option<u32>,
    temperature: Option<f64>,
    stream: bool,
    store: bool,
    previous_response_id: Option<String>,
    /// What the response object repeats of the request.
    echo: Echo,
}

#[derive(Debug, Clone)]
struct Echo {
    instructions: Value,
    metadata: Value,
    tools: Value,
    tool_choice: Value,
    parallel_tool_calls: bool,
    temperature: Value,
    max_output_tokens: Value,
    previous_response_id: Value,
    text: Value,
}

/// The fields a request is read by; any other (`reasoning`, `include`, `user`, `top_p`,
/// `truncation`, `service_tier`, `prompt_cache_key`…) is ignored, as with chat completions.
fn parse(body: &Value) -> Result<Parsed, ApiError> {
    let object = body.as_object().ok_or_else(|| ApiError::bad_request("body", "must be a JSON object"))?;
    let model_name = string(object, "model")?.ok_or_else(|| ApiError::bad_request("model", "is required"))?;
    let instructions = match object.get("instructions") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(_) => return Err(ApiError::bad_request("instructions", "must be a string")),
    };
    let (items, origins) = input(object)?;
    let tools = tools(object)?;
    let tool_choice = choice(object, &tools)?;
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
fn input(object: &Map<String, Value>) -> Result<(Vec<router::ChatMessage>, Vec<Origin>), ApiError> {
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

fn required_string(item: &Map<String, Value>, field: &str, at: &str) -> Result<String, ApiError> {
    match item.get(field) {
        Some(Value::String(value)) if !value.is_empty() => Ok(value.clone()),
        Some(Value::String(_)) => Err(ApiError::bad_request(format!("{at}.{field}"), "must not be empty")),
        None | Some(Value::Null) => Err(ApiError::bad_request(format!("{at}.{field}"), "is required")),
        Some(_) => Err(ApiError::bad_request(format!("{at}.{field}"), "must be a string")),
    }
}

/// A message item: a user's text and images, or the text of the other roles.
fn input_message(item: &Map<String, Value>, at: &str) -> Result<router::ChatMessage, ApiError> {
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
                let detail = match part.get("detail") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(detail)) if matches!(detail.as_str(), "auto" | "low" | "high") => detail.clone(),
                    Some(_) => {
                        return Err(ApiError::bad_request(
                            format!("{field}.detail"),
                            "must be `auto`, `low` or `high`",
                        ));
                    }
                };
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
    if content.iter().all(|p| matches!(p.part, Some(content_part::Part::Text(_)))) {
        let texts = content.into_iter().filter_map(|p| match p.part {
            Some(content_part::Part::Text(text)) => Some(text),
            _ => None,
        });
        message.content = texts.collect::<Vec<_>>().join("\n");
    } else {
        message.parts = content;
    }
    Ok(message)
}

/// Text-only content: input_text / output_text parts (a refusal's text too), joined by newlines.
fn text_parts(parts: &[Value], field: &str) -> Result<String, ApiError> {
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

/// `tools`: function tools in Responses' flat shape, `{"type": "function", "name",
/// "description", "parameters", "strict"}`; the built-in tools (web_search, file_search…) are
/// OpenAI's own and refused.
fn tools(object: &Map<String, Value>) -> Result<Vec<router::ClientTool>, ApiError> {
    let tools = match object.get("tools") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(ApiError::bad_request("tools", "must be an array of tools")),
    };
    let mut out: Vec<router::ClientTool> = Vec::with_capacity(tools.len());
    for (index, tool) in tools.iter().enumerate() {
        let at = |field: &str| format!("tools[{index}]{field}");
        let tool = tool.as_object().ok_or_else(|| ApiError::bad_request(at(""), "must be a tool object"))?;
        match tool.get("type") {
            Some(Value::String(kind)) if kind == "function" => {}
            Some(Value::String(kind)) => {
                return Err(ApiError::bad_request(
                    at(".type"),
                    format!("tools of type `{kind}` are not supported; send `function` tools"),
                ));
            }
            _ => return Err(ApiError::bad_request(at(".type"), "is required (`function`)")),
        }
        let name = match tool.get("name") {
            Some(Value::String(name)) => name.clone(),
            _ => return Err(ApiError::bad_request(at(".name"), "is required (a string)")),
        };
        check_name(&name, &at(".name"))?;
        if out.iter().any(|t| t.name == name) {
            return Err(ApiError::bad_request(at(".name"), format!("`{name}` is defined twice")));
        }
        let description = match tool.get("description") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(description)) => description.clone(),
            Some(_) => return Err(ApiError::bad_request(at(".description"), "must be a string")),
        };
        let parameters_json = match tool.get("parameters") {
            None | Some(Value::Null) => String::new(),
            Some(parameters @ Value::Object(_)) => parameters.to_string(),
            Some(_) => return Err(ApiError::bad_request(at(".parameters"), "must be a JSON Schema object")),
        };
        bool_field(tool, "strict", &at("."))?;
        out.push(router::ClientTool { name, description, parameters_json });
    }
    Ok(out)
}

/// `tool_choice`: `auto`, `none`, `required`, or `{"type": "function", "name"}` naming one of
/// the request's tools.
fn choice(object: &Map<String, Value>, tools: &[router::ClientTool]) -> Result<Option<router::ToolChoice>, ApiError> {
    let mode = |mode: ToolChoiceMode| tool_choice::Choice::Mode(mode as i32);
    let choice = match object.get("tool_choice") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(choice)) => match choice.as_str() {
            "auto" => mode(ToolChoiceMode::Auto),
            "none" => mode(ToolChoiceMode::None),
            "required" if tools.is_empty() => {
                return Err(ApiError::bad_request("tool_choice", "`required` needs `tools`"));
            }
            "required" => mode(ToolChoiceMode::Required),
            other => {
                return Err(ApiError::bad_request(
                    "tool_choice",
                    format!("`{other}` is not `auto`, `none`, `required` or a function"),
                ));
            }
        },
        Some(Value::Object(choice)) => {
            if choice.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ApiError::bad_request("tool_choice.type", "must be `function`"));
            }
            let name = choice.get("name").and_then(Value::as_str);
            let name = name.ok_or_else(|| ApiError::bad_request("tool_choice.name", "is required (a string)"))?;
            if !tools.iter().any(|tool| tool.name == name) {
                return Err(ApiError::bad_request(
                    "tool_choice.name",
                    format!("`{name}` is not one of the request's tools"),
                ));
            }
            tool_choice::Choice::Function(name.to_owned())
        }
        Some(_) => return Err(ApiError::bad_request("tool_choice", "must be a string or an object")),
    };
    Ok(Some(router::ToolChoice { choice: Some(choice) }))
}

/// `text.format`: `text` (the default), `json_object`, or `json_schema` with its `name`,
/// `schema`, `description` and `strict` beside the type.
fn text_format(object: &Map<String, Value>) -> Result<Option<router::ResponseFormat>, ApiError> {
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

/// A field the router named, as the caller's request has it: `history[i]` is the input item
/// (or `previous_response_id`, or `instructions`) it came from, `message` is `input`.
fn caller_field(field: &str, origins: &[Origin]) -> String {
    if field == "message" {
        return "input".to_owned();
    }
    if let Some(rest) = field.strip_prefix("history[")
        && let Some((index, rest)) = rest.split_once(']')
        && let Some(origin) = index.parse::<usize>().ok().and_then(|i| origins.get(i))
    {
        if origin.path == "previous_response_id" || origin.path == "instructions" {
            return origin.path.clone();
        }
        if let Some(call) = rest.strip_prefix(".tool_calls[")
            && let Some((k, tail)) = call.split_once(']')
            && let Some(path) = k.parse::<usize>().ok().and_then(|k| origin.calls.get(k))
        {
            let tail = match tail {
                ".id" => ".call_id",
                ".arguments_json" => ".arguments",
                other => other,
            };
            return format!("{path}{tail}");
        }
        let rest = rest.replace(".parts[", ".content[").replace(".image.url", ".image").replace(".image", ".image_url");
        let rest = match rest.as_str() {
            ".tool_call_id" => ".call_id".to_owned(),
            ".content" if origin.path.starts_with("input[") && !origin.calls.is_empty() => String::new(),
            _ => rest,
        };
        return format!("{}{rest}", origin.path);
    }
    if let Some(rest) = field.strip_prefix("response_format") {
        let rest = rest.replace(".json_schema", "").replace("schema_json", "schema");
        return format!("text.format{rest}");
    }
    match field {
        "tool_choice.function" => "tool_choice.name".to_owned(),
        "max_tokens" => "max_output_tokens".to_owned(),
        _ => field.replace("parameters_json", "parameters"),
    }
}

/// One turn: the router's request, the conversation it continues (to be kept with the answer)
/// and how to answer.
struct Turn {
    chat: router::ChatRequest,
    origins: Vec<Origin>,
    conversation: Vec<router::ChatMessage>,
    model_name: String,
    stream: bool,
    store: bool,
    echo: Echo,
}

impl Turn {
    /// The stored conversation (when the request continues one) and the new items; the
    /// instructions first. A conversation that ends in function_call_output items continues the
    /// caller's tool loop (an empty query); one that ends in a user message asks it.
    fn assemble(parsed: Parsed, previous: Option<StoredResponse>) -> Result<Self, ApiError> {
        let (session_id, mut conversation) = previous.map(|p| (p.session_id, p.conversation)).unwrap_or_default();
        let mut origins = vec![Origin::new("previous_response_id"); conversation.len()];
        conversation.extend(parsed.items);
        origins.extend(parsed.origins);
        let mut history = conversation.clone();
        if !parsed.instructions.is_empty() {
            history.insert(
                0,
                router::ChatMessage {
                    role: router::ChatRole::System as i32,
                    content: parsed.instructions.clone(),
                    ..Default::default()
                },
            );
            origins.insert(0, Origin::new("instructions"));
        }
        let last = history.len() - 1;
        let message = match history[last].role() {
            router::ChatRole::Tool => String::new(),
            router::ChatRole::User if history[last].parts.is_empty() => {
                origins.pop();
                history.pop().unwrap_or_default().content
            }
            router::ChatRole::User => message_text(&history[last]),
            _ => {
                let at = origins.get(last).map_or("input", |o| o.path.as_str());
                let at = if at.starts_with("input[") { format!("{at}.role") } else { "input".to_owned() };
                return Err(ApiError::bad_request(
                    at,
                    "the last input item must be a user message or a function_call_output",
                ));
            }
        };
        let (force_route, model) = route_or_model(&parsed.model_name);
        let chat = router::ChatRequest {
            message,
            session_id,
            model,
            force_route: force_route as i32,
            max_tokens: parsed.max_output_tokens,
            temperature: parsed.temperature,
            history,
            tools: parsed.tools,
            tool_choice: parsed.tool_choice,
            parallel_tool_calls: parsed.parallel_tool_calls,
            response_format: parsed.response_format,
            ..Default::default()
        };
        Ok(Self {
            chat,
            origins,
            conversation,
            model_name: parsed.model_name,
            stream: parsed.stream,
            store: parsed.store,
            echo: parsed.echo,
        })
    }

    fn shell(&self) -> Shell {
        Shell {
            id: format!("resp_{}", uuid::Uuid::new_v4().simple()),
            created_at: chrono::Utc::now().timestamp(),
            model: self.model_name.clone(),
            echo: self.echo.clone(),
        }
    }

    /// The answer to keep, with the conversation up to it, when the request asked to store it.
    fn to_keep(
        &self,
        caller: &Caller,
        session_id: &str,
        answer: router::ChatMessage,
        response: &Value,
    ) -> Option<(String, StoredResponse)> {
        if !self.store {
            return None;
        }
        let mut conversation = self.conversation.clone();
        conversation.push(router::ChatMessage { role: router::ChatRole::Assistant as i32, ..answer });
        let id = response["id"].as_str().unwrap_or_default().to_owned();
        let stored = StoredResponse {
            tenant: caller.tenant.as_str().to_owned(),
            user: caller.user.as_ref().map(|u| u.as_str().to_owned()),
            session_id: session_id.to_owned(),
            conversation,
            response: response.clone(),
        };
        Some((id, stored))
    }
}

/// Keeps an answer. A store that fails loses only the continuation by `previous_response_id`
/// (the caller has its answer), so it is logged and the answer goes out.
async fn keep(edge: &Edge, entry: Option<(String, StoredResponse)>) {
    let Some((id, stored)) = entry else { return };
    if let Err(err) = edge.responses.put(id.clone(), stored).await {
        tracing::warn!(response_id = %id, error = %err, "response not stored");
    }
}

// ---------------------------------------------------------------------------------------------
// The answer.

/// What every state of one response object shares.
struct Shell {
    id: String,
    created_at: i64,
    model: String,
    echo: Echo,
}

impl Shell {
    fn json(&self, status: &str, output: Vec<Value>, usage: Option<Value>) -> Value {
        let echo = &self.echo;
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": null,
            "incomplete_details": if status == "incomplete" { json!({"reason": "max_output_tokens"}) } else { Value::Null },
            "instructions": echo.instructions,
            "max_output_tokens": echo.max_output_tokens,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": echo.parallel_tool_calls,
            "previous_response_id": echo.previous_response_id,
            "temperature": echo.temperature,
            "text": echo.text,
            "tool_choice": echo.tool_choice,
            "tools": echo.tools,
            "metadata": echo.metadata,
            "usage": usage,
        })
    }

    /// The output items of a finished answer: its text as a message item, then its calls.
    fn output_items(&self, text: &str, calls: &[router::ToolCall]) -> Vec<Value> {
        let mut items = Vec::new();
        if !text.is_empty() || calls.is_empty() {
            items.push(message_item(&item_id("msg"), text, "completed"));
        }
        items.extend(calls.iter().map(|c| call_item(&item_id("fc"), &c.id, &c.name, &c.arguments_json, "completed")));
        items
    }
}

fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if status == "completed" { json!([output_text(text)]) } else { json!([]) };
    json!({"type": "message", "id": id, "role": "assistant", "status": status, "content": content})
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": arguments, "status": status})
}

/// A turn cut by the token limit is `incomplete`; anything else the router finished is
/// `completed`.
fn status_of(finish_reason: &str) -> &'static str {
    if finish_reason == "length" { "incomplete" } else { "completed" }
}

fn usage_json(usage: Option<&router::Usage>) -> Value {
    let usage = usage.cloned().unwrap_or_default();
    json!({
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    })
}

/// The text item being streamed.
struct TextItem {
    id: String,
    output_index: usize,
    text: String,
}

/// A call of the caller's tools being streamed.
struct CallItem {
    id: String,
    output_index: usize,
    call_id: String,
    name: String,
    arguments: String,
}

/// Turns the router's stream into the Responses events, each with its `sequence_number`:
/// `response.created` and `response.in_progress`; per text item `output_item.added`,
/// `content_part.added`, `output_text.delta`…, `output_text.done`, `content_part.done`,
/// `output_item.done`; per call `output_item.added`, `function_call_arguments.delta`…,
/// `.done`, `output_item.done`; then `response.completed` (or `response.failed`).
struct Relay {
    shell: Shell,
    turn: Turn,
    caller: Caller,
    /// The answer to keep, once complete: kept before the client hears `response.completed`,
    /// so that its next request finds it.
    to_keep: Option<(String, StoredResponse)>,
    sequence: u64,
    started: bool,
    session_id: String,
    text: Option<TextItem>,
    calls: BTreeMap<u32, CallItem>,
    /// The finished items, by output index.
    output: Vec<(usize, Value)>,
}

impl Relay {
    fn event(&mut self, kind: &str, mut data: Value) -> Event {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        Event::default().event(kind).data(data.to_string())
    }

    fn next_index(&self) -> usize {
        self.output.len() + usize::from(self.text.is_some()) + self.calls.len()
    }

    fn start(&mut self, out: &mut Vec<Event>) {
        if self.started {
            return;
        }
        self.started = true;
        let response = self.shell.json("in_progress", Vec::new(), None);
        out.push(self.event("response.created", json!({"response": response})));
        out.push(self.event("response.in_progress", json!({"response": response})));
    }

    fn close_text(&mut self, out: &mut Vec<Event>) {
        let Some(item) = self.text.take() else { return };
        let at = json!({"item_id": item.id, "output_index": item.output_index, "content_index": 0});
        let mut done = at.clone();
        done["text"] = json!(item.text);
        done["logprobs"] = json!([]);
        out.push(self.event("response.output_text.done", done));
        let mut part = at;
        part["part"] = output_text(&item.text);
        out.push(self.event("response.content_part.done", part));
        let whole = message_item(&item.id, &item.text, "completed");
        out.push(self.event("response.output_item.done", json!({"output_index": item.output_index, "item": whole})));
        self.output.push((item.output_index, whole));
    }

    fn text_delta(&mut self, delta: &str, out: &mut Vec<Event>) {
        if self.text.is_none() {
            let item = TextItem { id: item_id("msg"), output_index: self.next_index(), text: String::new() };
            let added = json!({"output_index": item.output_index, "item": message_item(&item.id, "", "in_progress")});
            out.push(self.event("response.output_item.added", added));
            let part = json!({"item_id": item.id, "output_index": item.output_index, "content_index": 0,
                "part": output_text("")});
            out.push(self.event("response.content_part.added", part));
            self.text = Some(item);
        }
        let Some(item) = self.text.as_mut() else { return };
        item.text.push_str(delta);
        let data = json!({"item_id": item.id, "output_index": item.output_index, "content_index": 0,
            "delta": delta, "logprobs": []});
        out.push(self.event("response.output_text.delta", data));
    }

    fn call_piece(&mut self, index: u32, call_id: &str, name: &str, delta: &str, out: &mut Vec<Event>) {
        // A call begins a new item: the text before it is finished.
        self.close_text(out);
        if !self.calls.contains_key(&index) {
            let call = CallItem {
                id: item_id("fc"),
                output_index: self.next_index(),
                call_id: call_id.to_owned(),
                name: name.to_owned(),
                arguments: String::new(),
            };
            let item = call_item(&call.id, &call.call_id, &call.name, "", "in_progress");
            out.push(
                self.event("response.output_item.added", json!({"output_index": call.output_index, "item": item})),
            );
            self.calls.insert(index, call);
        }
        if delta.is_empty() {
            return;
        }
        let Some(call) = self.calls.get_mut(&index) else { return };
        call.arguments.push_str(delta);
        let data = json!({"item_id": call.id, "output_index": call.output_index, "delta": delta});
        out.push(self.event("response.function_call_arguments.delta", data));
    }

    fn next(&mut self, item: router::ChatStreamResponse) -> Vec<Event> {
        let mut out = Vec::new();
        let Some(event) = item.event else { return out };
        self.start(&mut out);
        match event {
            ChatEvent::Route(route) => self.session_id = route.session_id,
            ChatEvent::Delta(delta) if !delta.content.is_empty() => self.text_delta(&delta.content, &mut out),
            ChatEvent::Delta(_) | ChatEvent::Tool(_) => {}
            ChatEvent::ToolCall(piece) => {
                self.call_piece(piece.index, &piece.id, &piece.name, &piece.arguments_delta, &mut out);
            }
            ChatEvent::Completed(done) => self.complete(done, &mut out),
        }
        out
    }

    fn complete(&mut self, done: router::ChatCompleted, out: &mut Vec<Event>) {
        // Calls reported only whole, at the end, are streamed whole now.
        for (index, call) in (0u32..).zip(&done.tool_calls) {
            if !self.calls.contains_key(&index) {
                self.call_piece(index, &call.id, &call.name, &call.arguments_json, out);
            }
        }
        let text = self.text.as_ref().map(|t| t.text.clone()).unwrap_or_default();
        if self.text.is_none() && self.calls.is_empty() {
            // An empty answer is still one (empty) message.
            self.text_delta("", out);
        }
        self.close_text(out);
        for (index, call) in std::mem::take(&mut self.calls) {
            let whole = done.tool_calls.get(index as usize);
            let arguments = whole.map_or(call.arguments.clone(), |w| w.arguments_json.clone());
            let call_id = whole.map_or(call.call_id.clone(), |w| w.id.clone());
            let data = json!({"item_id": call.id, "output_index": call.output_index, "arguments": arguments});
            out.push(self.event("response.function_call_arguments.done", data));
            let item = call_item(&call.id, &call_id, &call.name, &arguments, "completed");
            out.push(self.event("response.output_item.done", json!({"output_index": call.output_index, "item": item})));
            self.output.push((call.output_index, item));
        }
        self.output.sort_by_key(|(index, _)| *index);
        let output: Vec<Value> = self.output.iter().map(|(_, item)| item.clone()).collect();
        let mut response =
            self.shell.json(status_of(&done.finish_reason), output, Some(usage_json(done.usage.as_ref())));
        response["_metadata"] = done.metadata.as_ref().map(metadata_json).unwrap_or(Value::Null);
        response["session_id"] = json!(self.session_id);
        let answer = router::ChatMessage { content: text, tool_calls: done.tool_calls, ..Default::default() };
        self.to_keep = self.turn.to_keep(&self.caller, &self.session_id, answer, &response);
        out.push(self.event("response.completed", json!({"response": response})));
    }

    /// A stream that fails after it began ends with `response.failed`, the response's `error`
    /// saying why.
    fn failed(&mut self, error: &ApiError) -> Event {
        let code = match error.status() {
            429 => "rate_limit_exceeded",
            400..=499 => "invalid_prompt",
            _ => "server_error",
        };
        let mut response = self.shell.json("failed", Vec::new(), None);
        response["error"] = json!({"code": code, "message": error.message()});
        self.event("response.failed", json!({"response": response}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(body: Value) -> Result<Turn, ApiError> {
        Turn::assemble(parse(&body)?, None)
    }

    fn field(body: Value) -> String {
        match turn(body) {
            Ok(_) => String::new(),
            Err(error) => error.field().unwrap_or_default().to_owned(),
        }
    }

    #[test]
    fn a_string_input_is_the_query_and_instructions_the_system_prompt() {
        let turn = turn(json!({"model": "switchyard", "input": "Hi", "instructions": "Be brief."})).unwrap();
        assert_eq!(turn.chat.message, "Hi");
        assert_eq!(turn.chat.history.len(), 1);
        assert_eq!(turn.chat.history[0].role(), router::ChatRole::System);
        assert_eq!(turn.chat.history[0].content, "Be brief.");
        assert_eq!(turn.conversation.len(), 1, "the instructions are not part of the kept conversation");
        assert_eq!(caller_field("history[0].content", &turn.origins), "instructions");
    }

    #[test]
    fn items_become_history_and_a_function_call_output_continues_the_loop() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
        let turn = turn(json!({
            "model": "switchyard-direct",
            "input": [
                {"role": "developer", "content": "Use tools."},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
                {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
            ],
            "tools": [{"type": "function", "name": "get_weather", "parameters": schema, "strict": true},
                      {"type": "function", "name": "get_time"}],
            "tool_choice": {"type": "function", "name": "get_time"},
            "parallel_tool_calls": false,
            "max_output_tokens": 50,
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
            "reasoning": {"effort": "low"}, "include": [], "store": false,
        }))
        .unwrap();
        assert_eq!(turn.chat.message, "");
        assert!(!turn.store);
        let history = &turn.chat.history;
        assert_eq!(history.len(), 5);
        assert_eq!(history[0].role(), router::ChatRole::System);
        assert_eq!(history[1].content, "Weather?");
        assert_eq!(history[2].role(), router::ChatRole::Assistant);
        assert_eq!(history[2].tool_calls.len(), 2);
        assert_eq!(history[2].tool_calls[0].id, "call_1");
        assert_eq!(history[3].role(), router::ChatRole::Tool);
        assert_eq!((history[4].tool_call_id.as_str(), history[4].content.as_str()), ("call_2", "noon"));
        assert_eq!(turn.chat.tools.len(), 2);
        assert_eq!(serde_json::from_str::<Value>(&turn.chat.tools[0].parameters_json).unwrap(), schema);
        assert_eq!(
            turn.chat.tool_choice.clone().unwrap().choice,
            Some(tool_choice::Choice::Function("get_time".into()))
        );
        assert_eq!(turn.chat.parallel_tool_calls, Some(false));
        assert_eq!(turn.chat.max_tokens, Some(50));
        assert_eq!(turn.chat.force_route(), router::RouteType::Direct);
        assert!(matches!(
            turn.chat.response_format.and_then(|f| f.format),
            Some(response_format::Format::JsonSchema(router::JsonSchemaFormat { ref name, .. })) if name == "w"
        ));
        // A router field is named as the caller sent it.
        assert_eq!(caller_field("history[2].tool_calls[1].name", &turn.origins), "input[4].name");
        assert_eq!(caller_field("history[2].tool_calls[0].arguments_json", &turn.origins), "input[3].arguments");
        assert_eq!(caller_field("history[4].tool_call_id", &turn.origins), "input[6].call_id");
        assert_eq!(caller_field("history[0].content", &turn.origins), "input[0].content");
        assert_eq!(caller_field("tools[1].parameters_json", &turn.origins), "tools[1].parameters");
        assert_eq!(caller_field("response_format.json_schema.schema_json", &turn.origins), "text.format.schema");
        assert_eq!(caller_field("message", &turn.origins), "input");
    }

    #[test]
    fn a_previous_response_continues_its_conversation_and_session() {
        let first = turn(json!({"model": "s", "input": "Weather?"})).unwrap();
        let mut conversation = first.conversation.clone();
        conversation.push(router::ChatMessage {
            role: router::ChatRole::Assistant as i32,
            tool_calls: vec![router::ToolCall {
                id: "c1".into(),
                name: "get_weather".into(),
                arguments_json: "{}".into(),
            }],
            ..Default::default()
        });
        let previous = StoredResponse {
            tenant: "acme".into(),
            user: None,
            session_id: "s-9".into(),
            conversation,
            response: json!({}),
        };
        let body = json!({"model": "s", "previous_response_id": "resp_1",
            "input": [{"type": "function_call_output", "call_id": "c1", "output": "18C"}]});
        let next = Turn::assemble(parse(&body).unwrap(), Some(previous)).unwrap();
        assert_eq!(next.chat.session_id, "s-9");
        assert_eq!(next.chat.message, "");
        assert_eq!(next.chat.history.len(), 3);
        assert_eq!(next.chat.history[1].tool_calls[0].id, "c1");
        assert_eq!(caller_field("history[1].tool_calls[0].id", &next.origins), "previous_response_id");
        assert_eq!(caller_field("history[2].tool_call_id", &next.origins), "input[0].call_id");
    }

    #[test]
    fn images_travel_with_the_last_user_message() {
        let turn = turn(json!({"model": "s", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "low"},
        ]}]}))
        .unwrap();
        assert_eq!(turn.chat.message, "What is this?");
        assert_eq!(turn.chat.history.len(), 1);
        assert_eq!(turn.chat.history[0].parts.len(), 2);
        assert_eq!(caller_field("history[0].parts[1].image", &turn.origins), "input[0].content[1].image_url");
        assert_eq!(caller_field("history[0].parts[1].image.url", &turn.origins), "input[0].content[1].image_url");
    }

    #[test]
    fn bad_requests_name_the_field() {
        let with = |extra: Value| {
            let mut body = json!({"model": "s", "input": "x"});
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            field(body)
        };
        assert_eq!(field(json!({"input": "x"})), "model");
        assert_eq!(field(json!({"model": "s"})), "input");
        assert_eq!(field(json!({"model": "s", "input": []})), "input");
        assert_eq!(field(json!({"model": "s", "input": 5})), "input");
        assert_eq!(field(json!({"model": "s", "input": [7]})), "input[0]");
        assert_eq!(field(json!({"model": "s", "input": [{"type": "item_reference", "id": "x"}]})), "input[0].type");
        assert_eq!(field(json!({"model": "s", "input": [{"role": "robot", "content": "x"}]})), "input[0].role");
        assert_eq!(field(json!({"model": "s", "input": [{"role": "user"}]})), "input[0].content");
        assert_eq!(
            field(json!({"model": "s", "input": [{"role": "user", "content": [{"type": "input_file"}]}]})),
            "input[0].content[0].type"
        );
        assert_eq!(
            field(
                json!({"model": "s", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]})
            ),
            "input[0].content[0].file_id"
        );
        assert_eq!(
            field(
                json!({"model": "s", "input": [{"role": "user", "content": "a"}, {"type": "function_call", "name": "f"}]})
            ),
            "input[1].call_id"
        );
        assert_eq!(
            field(json!({"model": "s", "input": [{"type": "function_call_output", "call_id": "c", "output": 3}]})),
            "input[0].output"
        );
        assert_eq!(field(json!({"model": "s", "input": [{"role": "assistant", "content": "a"}]})), "input[0].role");
        assert_eq!(with(json!({"instructions": 3})), "instructions");
        assert_eq!(with(json!({"tools": [{"type": "web_search"}]})), "tools[0].type");
        assert_eq!(with(json!({"tools": [{"type": "function", "name": "a b"}]})), "tools[0].name");
        assert_eq!(
            with(json!({"tools": [{"type": "function", "name": "a"}, {"type": "function", "name": "a"}]})),
            "tools[1].name"
        );
        assert_eq!(
            with(json!({"tools": [{"type": "function", "name": "a", "parameters": []}]})),
            "tools[0].parameters"
        );
        assert_eq!(with(json!({"tool_choice": "required"})), "tool_choice");
        assert_eq!(with(json!({"tool_choice": {"type": "function", "name": "b"}})), "tool_choice.name");
        assert_eq!(with(json!({"tool_choice": {"type": "allowed_tools"}})), "tool_choice.type");
        assert_eq!(with(json!({"text": {"format": {"type": "yaml"}}})), "text.format.type");
        assert_eq!(with(json!({"text": {"format": {"type": "json_schema", "schema": {}}}})), "text.format.name");
        assert_eq!(with(json!({"max_output_tokens": -1})), "max_output_tokens");
        assert_eq!(with(json!({"metadata": {"a": 1}})), "metadata.a");
        assert_eq!(with(json!({"stream": "yes"})), "stream");
        assert_eq!(with(json!({"store": 1})), "store");
        assert_eq!(with(json!({"previous_response_id": 4})), "previous_response_id");
    }

    fn caller(tenant: &str, user: Option<&str>) -> Caller {
        use switchyard_kit::identity::{TenantId, UserId};
        Caller {
            tenant: TenantId::parse(tenant).unwrap(),
            user: user.map(|u| UserId::parse(u).unwrap()),
            principal: "key".into(),
            admin: false,
        }
    }

    fn stored(tenant: &str, user: Option<&str>) -> StoredResponse {
        let image = router::ContentPart {
            part: Some(content_part::Part::Image(router::ImagePart {
                url: "data:image/png;base64,iVBO".into(),
                detail: "low".into(),
            })),
        };
        StoredResponse {
            tenant: tenant.into(),
            user: user.map(str::to_owned),
            session_id: "s-1".into(),
            conversation: vec![
                router::ChatMessage { role: router::ChatRole::User as i32, parts: vec![image], ..Default::default() },
                router::ChatMessage {
                    role: router::ChatRole::Assistant as i32,
                    tool_calls: vec![router::ToolCall {
                        id: "c".into(),
                        name: "f".into(),
                        arguments_json: "{}".into(),
                    }],
                    ..Default::default()
                },
            ],
            response: json!({"id": "resp_1", "output": []}),
        }
    }

    /// What every backend does: an answer is found by its owner alone, whole, until it expires.
    async fn store_suite(store: ResponseStore, short: ResponseStore) {
        let ann = caller("acme", Some("ann"));
        store.put("resp_a".into(), stored("acme", Some("ann"))).await.unwrap();
        let found = store.get("resp_a", &ann).await.unwrap().expect("kept");
        assert_eq!(found.session_id, "s-1");
        assert_eq!(found.conversation, stored("acme", None).conversation, "the conversation survives whole");
        assert_eq!(found.response["id"], "resp_1");
        assert!(store.get("resp_a", &caller("acme", Some("bob"))).await.unwrap().is_none(), "another user");
        assert!(store.get("resp_a", &caller("acme", None)).await.unwrap().is_none(), "no user is another user");
        assert!(store.get("resp_a", &caller("globex", Some("ann"))).await.unwrap().is_none(), "another tenant");
        assert!(store.get("resp_b", &ann).await.unwrap().is_none(), "unknown");
        short.put("resp_a".into(), stored("acme", Some("ann"))).await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(short.get("resp_a", &ann).await.unwrap().is_none(), "past the retention");
    }

    #[tokio::test]
    async fn the_memory_store_keeps_answers_for_their_owner_within_the_retention_and_the_count() {
        store_suite(
            ResponseStore::memory(Duration::from_secs(60), 10),
            ResponseStore::memory(Duration::from_millis(20), 10),
        )
        .await;
        let store = ResponseStore::memory(Duration::from_secs(60), 2);
        for id in ["a", "b", "c"] {
            store.put(id.into(), stored("acme", None)).await.unwrap();
        }
        let acme = caller("acme", None);
        assert!(store.get("a", &acme).await.unwrap().is_none(), "the oldest went past the count");
        assert!(store.get("c", &acme).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn the_redis_store_keeps_answers_for_their_owner_within_the_retention() {
        let url = Secret::new(switchyard_testkit::redis_url());
        let prefix = switchyard_testkit::KeyPrefix::new("edge_responses");
        let store = ResponseStore::redis(&url, &prefix, Duration::from_secs(60)).await.expect("REDIS_URL reachable");
        let short = ResponseStore::redis(&url, &prefix, Duration::from_millis(20)).await.unwrap();
        store_suite(store, short).await;
    }
}
