//! The REST API: every annotated RPC through one handler (the transcoding layer), server
//! streams as Server-Sent Events, and spec 000's `POST /api/context/process/stream`.

use std::{convert::Infallible, sync::Arc};

use axum::{
    body::Body,
    extract::State,
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use futures::{Stream, StreamExt};
use http::{HeaderMap, HeaderValue, Method, Uri, header};
use prost_reflect::{DynamicMessage, ReflectMessage, Value as ProtoValue};
use serde::Deserialize;
use serde_json::Value;
use switchyard_proto::router::v1::{self as router, chat_stream_response::Event as ChatEvent};

use crate::{
    Edge,
    chat::{completion_json, context_json},
    error::{ApiError, axum_json},
    transcode::{
        message::{self, to_json},
        rules::{HttpRoute, Lookup, ResponseShape},
    },
    upstream,
};

/// Any request the other routes did not take: an annotated RPC, or 404/405.
pub async fn transcode(
    State(edge): State<Arc<Edge>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match transcode_inner(&edge, &method, &uri, &headers, body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn transcode_inner(
    edge: &Edge,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (route, bindings) = match edge.routes.find(method, uri.path()) {
        Lookup::Found(route, bindings) => (route, bindings),
        Lookup::MethodNotAllowed(allowed) => {
            let mut response = ApiError::method_not_allowed(&allowed).into_response();
            let names: Vec<&str> = allowed.iter().map(Method::as_str).collect();
            if let Ok(value) = HeaderValue::from_str(&names.join(", ")) {
                response.headers_mut().insert(header::ALLOW, value);
            }
            return Ok(response);
        }
        Lookup::NotFound => return Err(ApiError::not_found(format!("no endpoint at {}", uri.path()))),
    };
    let caller = edge.admit(headers).await?;
    if route.rpc.admin_only && !caller.admin {
        return Err(ApiError::forbidden(format!("{} needs an administrator credential", route.rpc.full_name())));
    }
    let bytes = edge.read_json_body(headers, body).await?;
    let request = message::request(route, &bytes, &bindings, uri.query())?;
    if route.rpc.method.is_server_streaming() {
        let request = upstream::request(request, &caller, None);
        let stream = edge
            .upstreams
            .server_streaming(route.rpc.upstream, route.rpc.grpc_path.clone(), route.rpc.method.output(), request)
            .await
            .map_err(|status| ApiError::from_status(&status))?;
        return Ok(sse(stream.map(|item| match item {
            Ok(message) => event_of(&message),
            Err(status) => error_event(&ApiError::from_status(&status)),
        })));
    }
    let request = upstream::request(request, &caller, Some(edge.request_timeout));
    let response = edge
        .upstreams
        .unary(route.rpc.upstream, route.rpc.grpc_path.clone(), route.rpc.method.output(), request)
        .await
        .map_err(|status| ApiError::from_status(&status))?;
    Ok(axum_json(&shape(route, &response)?))
}

fn shape(route: &HttpRoute, response: &DynamicMessage) -> Result<Value, ApiError> {
    match route.shape {
        ResponseShape::Proto => Ok(to_json(response)),
        ResponseShape::ChatCompletion => {
            let chat: router::ChatResponse = response
                .transcode_to()
                .map_err(|err| ApiError::internal(format!("the chat response does not decode: {err}")))?;
            Ok(completion_json(&chat, None))
        }
    }
}

/// An SSE response that keeps idle connections alive through proxies.
pub fn sse(events: impl Stream<Item = Event> + Send + 'static) -> Response {
    let mut response = Sse::new(events.map(Ok::<_, Infallible>)).keep_alive(KeepAlive::default()).into_response();
    // Proxies such as nginx buffer responses unless told not to.
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// One stream message as an event: a message that is one `oneof` (ChatStreamResponse) is
/// named after its set member and carries that member; anything else is a `message` event.
fn event_of(message: &DynamicMessage) -> Event {
    let descriptor = message.descriptor();
    for oneof in descriptor.oneofs().filter(|o| !o.is_synthetic()) {
        for field in oneof.fields() {
            if message.has_field(&field) {
                let data = match message.get_field(&field).as_ref() {
                    ProtoValue::Message(inner) => to_json(inner),
                    _ => to_json(message),
                };
                return Event::default().event(field.name()).data(data.to_string());
            }
        }
    }
    Event::default().event("message").data(to_json(message).to_string())
}

pub fn error_event(error: &ApiError) -> Event {
    Event::default().event("error").data(error.body().to_string())
}

/// The body of `POST /api/context/process/stream`: ProcessQuery's fields, plus the chat
/// options a streamed answer takes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessStreamRequest {
    #[serde(default)]
    session_id: String,
    query: String,
    #[serde(default)]
    custom_instructions: Option<String>,
    #[serde(default)]
    force_role_id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f64>,
}

/// Spec 000's streamed processing: the context-switch decision first (`context`), then the
/// route (`route`), the answer in the chosen role (`delta`, `tool`) and `completed`, from the
/// router's ChatStream on that session.
pub async fn process_stream(State(edge): State<Arc<Edge>>, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        let caller = edge.admit(&headers).await?;
        let bytes = edge.read_json_body(&headers, body).await?;
        let body: ProcessStreamRequest = parse_json(&bytes)?;
        if body.query.trim().is_empty() {
            return Err(ApiError::bad_request("query", "must not be empty"));
        }
        let request = router::ChatStreamRequest {
            message: body.query,
            session_id: body.session_id,
            model: body.model,
            max_tokens: body.max_tokens,
            temperature: body.temperature,
            force_role_id: body.force_role_id,
            custom_instructions: body.custom_instructions,
            ..Default::default()
        };
        let stream = edge
            .upstreams
            .router()
            .chat_stream(upstream::request(request, &caller, None))
            .await
            .map_err(|status| ApiError::from_status(&status))?
            .into_inner();
        let mut sent_context = false;
        let events = stream.flat_map(move |item| {
            let events: Vec<Event> = match item {
                Ok(router::ChatStreamResponse { event: Some(event) }) => {
                    let mut out = Vec::new();
                    if let ChatEvent::Route(route) = &event
                        && !sent_context
                    {
                        sent_context = true;
                        out.push(Event::default().event("context").data(context_json(route).to_string()));
                    }
                    out.push(typed_event(&event));
                    out
                }
                Ok(router::ChatStreamResponse { event: None }) => Vec::new(),
                Err(status) => vec![error_event(&ApiError::from_status(&status))],
            };
            futures::stream::iter(events)
        });
        Ok::<_, ApiError>(sse(events))
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// A typed stream event in the same JSON as the transcoded stream.
pub fn typed_event(event: &ChatEvent) -> Event {
    let (name, data) = match event {
        ChatEvent::Route(route) => ("route", proto_json(route, "switchyard.router.v1.RouteDecided")),
        ChatEvent::Delta(delta) => ("delta", proto_json(delta, "switchyard.router.v1.ContentDelta")),
        ChatEvent::Tool(tool) => ("tool", proto_json(tool, "switchyard.router.v1.ToolActivity")),
        ChatEvent::Completed(done) => ("completed", proto_json(done, "switchyard.router.v1.ChatCompleted")),
    };
    Event::default().event(name).data(data.to_string())
}

/// A generated message in proto3 JSON, through its descriptor.
pub fn proto_json<M: prost::Message>(message: &M, full_name: &str) -> Value {
    static POOL: std::sync::OnceLock<Option<prost_reflect::DescriptorPool>> = std::sync::OnceLock::new();
    let pool = POOL.get_or_init(|| prost_reflect::DescriptorPool::decode(switchyard_proto::FILE_DESCRIPTOR_SET).ok());
    let Some(descriptor) = pool.as_ref().and_then(|p| p.get_message_by_name(full_name)) else { return Value::Null };
    DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice()).map_or(Value::Null, |m| to_json(&m))
}

/// A JSON body into a request struct, with errors that name the field.
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("body", "a JSON object is required"));
    }
    serde_json::from_slice(bytes).map_err(|err| {
        let text = err.to_string();
        let field = text.split('`').nth(1).filter(|f| f.chars().all(|c| c.is_alphanumeric() || c == '_'));
        ApiError::bad_request(field.unwrap_or("body"), text.clone())
    })
}
