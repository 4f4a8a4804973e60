//! The REST API: every annotated RPC through one handler (the transcoding layer), server
//! streams as Server-Sent Events, and `POST /api/context/process/stream`
//! (docs/requirements.md#sessions-endpoints).

use std::{convert::Infallible, pin::Pin, sync::Arc};

use axum::{
    body::Body,
    extract::State,
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::{HeaderMap, HeaderValue, Method, Uri, header};
use prost_reflect::{DynamicMessage, ReflectMessage, Value as ProtoValue};
use serde::Deserialize;
use serde_json::Value;
use switchyard_kit::ShutdownNotice;
use switchyard_kit::TenantId;
use switchyard_proto::router::v1 as router;

use crate::{
    Edge,
    chat::{completion_json, context_json},
    clients,
    error::{ApiError, json_text_response},
    transcode::{
        message::{self, to_json, to_json_text},
        rules::{HttpRoute, Lookup, ResponseShape},
    },
    turn::{self, ChatTurn},
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
    if route.rpc.operator_only && !(caller.admin && caller.tenant.as_str() == TenantId::DEFAULT) {
        return Err(ApiError::forbidden(format!(
            "{} works on the trigger registry every tenant shares: it needs an administrator of the `{}` tenant",
            route.rpc.full_name(),
            TenantId::DEFAULT
        )));
    }
    let bytes = edge.read_json_body(headers, body).await?;
    let request = message::request(route, &bytes, &bindings, uri.query())?;
    if route.rpc.method.is_server_streaming() {
        let request = clients::request(request, &caller, None);
        let stream = edge
            .upstreams
            .server_streaming(route.rpc.upstream, route.rpc.grpc_path.clone(), route.rpc.method.output(), request)
            .await
            .map_err(|status| ApiError::from_status(&status))?;
        // A chat stream's budget warning is in its initial metadata.
        let warning = turn::budget_warning(stream.metadata());
        let events = client_stream(
            stream.into_inner(),
            edge.shutdown.clone(),
            |message| vec![event_of(&message)],
            error_event,
            None,
        );
        return Ok(turn::warned(sse(events), warning));
    }
    let request = clients::request(request, &caller, Some(edge.request_timeout));
    let response = edge
        .upstreams
        .unary_wire(route.rpc.upstream, route.rpc.grpc_path.clone(), request)
        .await
        .map_err(|status| ApiError::from_status(&status))?;
    let warning = turn::budget_warning(response.metadata());
    Ok(turn::warned(json_text_response(shape(route, response.get_ref())?), warning))
}

/// The response body, from the answer's wire bytes: the message as proto JSON, or an OpenAI
/// chat completion. Bytes that are not the RPC's output message are the edge's internal error,
/// as a client decoding them would report it.
fn shape(route: &HttpRoute, response: &Bytes) -> Result<Vec<u8>, ApiError> {
    let undecodable = |err: prost::DecodeError| {
        ApiError::from_status(&tonic::Status::internal(format!("decoding the response: {err}")))
    };
    match route.shape {
        ResponseShape::Proto => message::wire_to_json_text(&route.rpc.method.output(), response).map_err(undecodable),
        ResponseShape::ChatCompletion => {
            let chat = <router::ChatResponse as prost::Message>::decode(response.as_ref()).map_err(undecodable)?;
            Ok(serde_json::to_vec(&completion_json(&chat, None)).unwrap_or_default())
        }
    }
}

/// A client's events from an upstream gRPC stream: each message as `event` makes it, then
/// `end` once the upstream finishes. An upstream error ends the stream with one `failed` event
/// (an upstream that stopped mid-stream may report more than one error; the client hears the
/// first); so does the edge's shutdown grace running out, rather than the connection being cut
/// mid-event.
pub fn client_stream<T: Send + 'static>(
    upstream: impl Stream<Item = Result<T, tonic::Status>> + Send + 'static,
    shutdown: ShutdownNotice,
    event: impl FnMut(T) -> Vec<Event> + Send + 'static,
    failed: impl FnMut(&ApiError) -> Event + Send + 'static,
    end: Option<Event>,
) -> impl Stream<Item = Event> + Send + 'static {
    struct Relay<T, F, E> {
        upstream: Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send>>,
        shutdown: ShutdownNotice,
        event: F,
        failed: E,
        end: Option<Event>,
    }
    let relay = Relay { upstream: Box::pin(upstream), shutdown, event, failed, end };
    // The stream outlives the handler: its failures are logged here, with the request's id.
    let request_id = switchyard_kit::failures::request_id().unwrap_or_default();
    futures::stream::unfold(Some(relay), move |relay| {
        let request_id = request_id.clone();
        async move {
            let mut relay = relay?;
            let item = tokio::select! {
                biased;
                () = relay.shutdown.cut() => {
                    tracing::warn!(request_id, "stream ended early: the edge is shutting down");
                    return Some((vec![(relay.failed)(&ApiError::shutting_down())], None));
                }
                item = relay.upstream.next() => item,
            };
            match item {
                Some(Ok(message)) => {
                    let events = (relay.event)(message);
                    Some((events, Some(relay)))
                }
                Some(Err(status)) => {
                    // A status the service answered was logged there; one the connection made
                    // (the service gone mid-stream) is the edge's to log.
                    if !switchyard_kit::failures::logged_upstream(&status) {
                        let code = crate::error::code_name(status.code());
                        tracing::error!(request_id, code, error = status.message(), "stream failed");
                    }
                    Some((vec![(relay.failed)(&ApiError::from_status(&status))], None))
                }
                None => Some((relay.end.take().into_iter().collect(), None)),
            }
        }
    })
    .flat_map(futures::stream::iter)
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
                    ProtoValue::Message(inner) => to_json_text(inner),
                    _ => to_json_text(message),
                };
                return Event::default().event(field.name()).data(json_event_data(data));
            }
        }
    }
    Event::default().event("message").data(json_event_data(to_json_text(message)))
}

/// JSON text as an event's data. serde_json writes valid UTF-8 with no raw line breaks (they
/// are escaped in strings), so it is one `data:` line.
fn json_event_data(text: Vec<u8>) -> String {
    String::from_utf8(text).unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned())
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

/// Streamed processing (docs/requirements.md#sessions-endpoints): the context-switch decision
/// first (`context`), then the route (`route`), the answer in the chosen role (`delta`,
/// `tool`) and `completed`, from the router's ChatStream on that session.
pub async fn process_stream(State(edge): State<Arc<Edge>>, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        let caller = edge.admit(&headers).await?;
        let bytes = edge.read_json_body(&headers, body).await?;
        let body: ProcessStreamRequest = parse_json(&bytes)?;
        if body.query.trim().is_empty() {
            return Err(ApiError::bad_request("query", "must not be empty"));
        }
        let turn = ChatTurn {
            message: body.query,
            session_id: body.session_id,
            model: body.model,
            max_tokens: body.max_tokens,
            temperature: body.temperature,
            force_role_id: body.force_role_id,
            custom_instructions: body.custom_instructions,
            ..Default::default()
        };
        // Through the same call and event mapping as the transcoded ChatStream, so the two
        // streams' events cannot differ: the request goes out as the router's own message and
        // each answer is decoded once, into the dynamic message both mappings read.
        let rpc = edge
            .routes
            .rpc("switchyard.router.v1.RouterService.ChatStream")
            .ok_or_else(|| ApiError::internal("the protos have no HTTP rule for ChatStream"))?;
        let stream = edge
            .upstreams
            .server_streaming(
                rpc.upstream,
                rpc.grpc_path.clone(),
                rpc.method.output(),
                clients::request(router::ChatStreamRequest::from(turn), &caller, None),
            )
            .await
            .map_err(|status| ApiError::from_status(&status))?;
        let warning = turn::budget_warning(stream.metadata());
        let stream = stream.into_inner();
        let mut sent_context = false;
        let event = move |message: DynamicMessage| {
            let mut out = Vec::new();
            if !sent_context && let Some(route) = route_decided(&message) {
                sent_context = true;
                out.push(Event::default().event("context").data(context_json(&route).to_string()));
            }
            out.push(event_of(&message));
            out
        };
        Ok::<_, ApiError>(turn::warned(
            sse(client_stream(stream, edge.shutdown.clone(), event, error_event, None)),
            warning,
        ))
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// The route decision a ChatStream message carries, if it is one, as JSON (proto field names,
/// every field present).
fn route_decided(message: &DynamicMessage) -> Option<Value> {
    match message.get_field_by_name("route")?.as_ref() {
        ProtoValue::Message(route) if message.has_field_by_name("route") => Some(to_json(route)),
        _ => None,
    }
}

/// A JSON body into a request struct, with errors that name the field.
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("body", "a JSON object is required"));
    }
    serde_json::from_slice(bytes).map_err(|err| message::json_error(&err.to_string()))
}
