//! JSON ↔ protobuf for one route: the request message from the body, the path variables and
//! the query string (proto3 JSON mapping: proto or lowerCamelCase names, enums by name or
//! number, 64-bit integers as numbers or strings, well-known types in their JSON forms), and
//! the response message back to JSON with proto field names — the names the requirements' examples
//! use (docs/requirements.md) — every field present, and enums by name.

use prost_reflect::{DeserializeOptions, DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, SerializeOptions};
use serde_json::{Map, Value};

use super::{
    rules::{BodyRule, HttpRoute, field_at},
    template::{Binding, percent_decode},
    wire_json,
};
use crate::error::ApiError;

const SERIALIZE: SerializeOptions =
    SerializeOptions::new().use_proto_field_name(true).skip_default_fields(false).stringify_64_bit_integers(true);

/// The request message of `route`.
pub fn request(
    route: &HttpRoute,
    body: &[u8],
    bindings: &[Binding],
    query: Option<&str>,
) -> Result<DynamicMessage, ApiError> {
    let input = route.rpc.method.input();
    let mut json = match &route.body {
        BodyRule::All => body_object(body, "")?,
        BodyRule::Field(field) => {
            let mut object = Map::new();
            object.insert(field.name().to_owned(), Value::Object(body_object(body, field.name())?));
            object
        }
        BodyRule::None => {
            // `{}` is what many clients send for "nothing"; anything more is a mistake.
            if !is_blank(body) && !body_object(body, "")?.is_empty() {
                return Err(ApiError::bad_request("body", "this endpoint takes no request body"));
            }
            Map::new()
        }
    };
    let inferred_mask = infer_update_mask(route, &json);
    for binding in bindings {
        let field = field_at(&input, &binding.field_path)
            .ok_or_else(|| ApiError::bad_request(binding.field_path.join("."), "is not a request field"))?;
        set_path(&mut json, &binding.field_path, scalar(&field, &binding.value, &binding.field_path.join("."))?);
    }
    if let Some(query) = query.filter(|q| !q.is_empty()) {
        // Fields in the body cannot also come from the query: grpc-gateway's rule, and it keeps
        // one request from meaning two things.
        if !matches!(route.body, BodyRule::None | BodyRule::Field(_)) {
            return Err(ApiError::bad_request("query", "this endpoint takes its fields in the JSON body"));
        }
        apply_query(&mut json, &input, query, bindings)?;
    }
    if let Some(mask) = inferred_mask
        && !json.contains_key("update_mask")
        && !json.contains_key("updateMask")
    {
        json.insert("update_mask".to_owned(), Value::String(mask));
    }
    from_json(&input, Value::Object(json))
}

/// A message from a JSON value, with errors that name the field.
pub fn from_json(descriptor: &MessageDescriptor, json: Value) -> Result<DynamicMessage, ApiError> {
    let options = DeserializeOptions::new().deny_unknown_fields(true);
    DynamicMessage::deserialize_with_options(descriptor.clone(), json, &options)
        .map_err(|err| json_error(&err.to_string()))
}

/// A message as JSON text (proto field names, defaults present, enums by name), written
/// straight from the message: building a [`Value`] tree first and writing that out cost the
/// REST path more than decoding the message did (BENCHMARKS.md, the edge against gRPC).
/// Members come in the proto's field order.
pub fn to_json_text(message: &DynamicMessage) -> Vec<u8> {
    let mut text = Vec::with_capacity(256);
    // Nothing here can fail: the writer is memory, and every proto value has a JSON form
    // (non-finite doubles become strings).
    match message.serialize_with_options(&mut serde_json::Serializer::new(&mut text), &SERIALIZE) {
        Ok(()) => text,
        Err(_) => b"null".to_vec(),
    }
}

/// A unary answer's JSON text, from its wire bytes: written straight from them
/// ([`wire_json`]), or, for what that does not take on, from the decoded message by
/// [`to_json_text`] (the same text). The error is the decoder's, for bytes that are not a
/// message of this type.
pub fn wire_to_json_text(descriptor: &MessageDescriptor, bytes: &[u8]) -> Result<Vec<u8>, prost::DecodeError> {
    let mut text = Vec::with_capacity(bytes.len() * 2 + 64);
    if wire_json::write_message(descriptor, bytes, &mut text).is_ok() {
        return Ok(text);
    }
    DynamicMessage::decode(descriptor.clone(), bytes).map(|message| to_json_text(&message))
}

/// A message as JSON (proto field names, defaults present, enums by name).
pub fn to_json(message: &DynamicMessage) -> Value {
    // Serialising a well-formed dynamic message into a `serde_json::Value` cannot fail: every
    // proto value has a JSON form (non-finite doubles become strings).
    message.serialize_with_options(serde_json::value::Serializer, &SERIALIZE).unwrap_or(Value::Null)
}

/// A PATCH whose body is one message field and whose request has an `update_mask` updates
/// just the fields the body names, unless the query gives a mask (grpc-gateway's rule, so a
/// partial update never blanks the fields it left out).
fn infer_update_mask(route: &HttpRoute, json: &Map<String, Value>) -> Option<String> {
    let BodyRule::Field(field) = &route.body else { return None };
    if route.method != http::Method::PATCH {
        return None;
    }
    let mask = route.rpc.method.input().get_field_by_name("update_mask")?;
    if !matches!(mask.kind(), Kind::Message(m) if m.full_name() == "google.protobuf.FieldMask") {
        return None;
    }
    let Kind::Message(body_type) = field.kind() else { return None };
    let Some(Value::Object(body)) = json.get(field.name()) else { return None };
    let names: Vec<String> = body
        .keys()
        .filter_map(|key| body_type.get_field_by_name(key).or_else(|| body_type.get_field_by_json_name(key)))
        .map(|f| f.json_name().to_owned())
        .collect();
    Some(names.join(","))
}

fn is_blank(body: &[u8]) -> bool {
    body.iter().all(u8::is_ascii_whitespace)
}

fn body_object(body: &[u8], field: &str) -> Result<Map<String, Value>, ApiError> {
    let name = if field.is_empty() { "body" } else { field };
    if is_blank(body) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(ApiError::bad_request(name, "must be a JSON object")),
        Err(err) => Err(ApiError::bad_request(name, format!("is not valid JSON: {err}"))),
    }
}

/// A JSON error as a 400 naming the field: the JSON mapping's messages name it in quotes
/// ("unrecognized field name 'foo'", serde's "unknown field `foo`", "missing field `query`"),
/// so the first quoted name that looks like a field is taken; `body` otherwise.
pub fn json_error(message: &str) -> ApiError {
    let field = [message.split('`').nth(1), message.split('\'').nth(1)]
        .into_iter()
        .flatten()
        .find(|name| !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '.'));
    ApiError::bad_request(field.unwrap_or("body"), message.to_owned())
}

/// The JSON value of a path or query string for a field of `field`'s kind: proto3 JSON takes
/// numbers and well-known types as strings already, so only bools, enum numbers and lists
/// need converting.
fn scalar(field: &FieldDescriptor, text: &str, name: &str) -> Result<Value, ApiError> {
    Ok(match field.kind() {
        Kind::Bool => match text {
            "true" | "1" => Value::Bool(true),
            "false" | "0" => Value::Bool(false),
            _ => return Err(ApiError::bad_request(name, format!("`{text}` is not true or false"))),
        },
        Kind::Enum(_) if text.parse::<i32>().is_ok() => Value::from(text.parse::<i32>().unwrap_or_default()),
        Kind::Message(message)
            if !matches!(
                message.full_name(),
                "google.protobuf.Timestamp"
                    | "google.protobuf.Duration"
                    | "google.protobuf.FieldMask"
                    | "google.protobuf.StringValue"
                    | "google.protobuf.Int64Value"
                    | "google.protobuf.UInt64Value"
                    | "google.protobuf.Int32Value"
                    | "google.protobuf.UInt32Value"
                    | "google.protobuf.DoubleValue"
                    | "google.protobuf.FloatValue"
            ) =>
        {
            return Err(ApiError::bad_request(name, "a message field cannot be set from the path or query"));
        }
        _ => Value::String(text.to_owned()),
    })
}

fn set_path(object: &mut Map<String, Value>, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut current = object;
    for name in parents {
        let entry = current.entry(name.clone()).or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        let Value::Object(next) = entry else { return };
        current = next;
    }
    current.insert(last.clone(), value);
}

fn apply_query(
    json: &mut Map<String, Value>,
    input: &MessageDescriptor,
    query: &str,
    bindings: &[Binding],
) -> Result<(), ApiError> {
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |text: &str| {
            percent_decode(&text.replace('+', " "))
                .ok_or_else(|| ApiError::bad_request("query", format!("`{text}` is not valid percent-encoding")))
        };
        let (key, value) = (decode(key)?, decode(value)?);
        if key.is_empty() {
            return Err(ApiError::bad_request("query", format!("`{pair}` has no parameter name")));
        }
        let path = field_path(input, &key)
            .ok_or_else(|| ApiError::bad_request(key.clone(), "is not a field of this request"))?;
        if bindings.iter().any(|b| b.field_path == path) {
            return Err(ApiError::bad_request(key, "is already given in the path"));
        }
        let field = field_at(input, &path).ok_or_else(|| ApiError::bad_request(key.clone(), "is not a field"))?;
        let value = scalar(&field, &value, &key)?;
        if field.is_list() {
            let mut list = match take_path(json, &path) {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            };
            list.push(value);
            set_path(json, &path, Value::Array(list));
        } else {
            set_path(json, &path, value);
        }
    }
    Ok(())
}

/// A dotted query key (proto or JSON names) as a path of proto names.
fn field_path(input: &MessageDescriptor, key: &str) -> Option<Vec<String>> {
    let mut current = input.clone();
    let mut path = Vec::new();
    let mut parts = key.split('.').peekable();
    while let Some(part) = parts.next() {
        let field = current.get_field_by_name(part).or_else(|| current.get_field_by_json_name(part))?;
        path.push(field.name().to_owned());
        if parts.peek().is_some() {
            match field.kind() {
                Kind::Message(inner) if !field.is_list() => current = inner,
                _ => return None,
            }
        }
    }
    Some(path)
}

fn take_path(object: &mut Map<String, Value>, path: &[String]) -> Option<Value> {
    let (last, parents) = path.split_last()?;
    let mut current = object;
    for name in parents {
        current = current.get_mut(name)?.as_object_mut()?;
    }
    current.remove(last)
}

#[cfg(test)]
mod tests {
    use http::Method;
    use switchyard_proto::{router::v1 as router, sessions::v1 as sessions};

    use super::*;
    use crate::transcode::rules::{Lookup, RouteTable};

    fn build(method: Method, path_and_query: &str, body: &str) -> Result<DynamicMessage, ApiError> {
        let table = RouteTable::switchyard().unwrap();
        let (path, query) = path_and_query.split_once('?').map_or((path_and_query, None), |(p, q)| (p, Some(q)));
        let Lookup::Found(route, bindings) = table.find(&method, path) else { panic!("{path} not routed") };
        request(route, body.as_bytes(), &bindings, query)
    }

    #[test]
    fn the_requirements_examples_build_their_requests() {
        let message = build(Method::POST, "/api/context/sessions", r#"{"initial_role_id": "tech-expert"}"#).unwrap();
        let create: sessions::CreateSessionRequest = message.transcode_to().unwrap();
        assert_eq!(create.initial_role_id, "tech-expert");

        let message = build(
            Method::POST,
            "/api/context/process",
            r#"{"sessionId": "3fa85f64-5717-4562-b3fc-2c963f66afa6", "query": "What are the best investment strategies?"}"#,
        )
        .unwrap();
        let process: sessions::ProcessQueryRequest = message.transcode_to().unwrap();
        assert_eq!(process.session_id, "3fa85f64-5717-4562-b3fc-2c963f66afa6");
        assert!(process.query.starts_with("What are"));
    }

    #[test]
    fn path_and_query_fill_fields() {
        let message = build(Method::GET, "/api/context/sessions/s%201/history", "").unwrap();
        let history: sessions::GetHistoryRequest = message.transcode_to().unwrap();
        assert_eq!(history.session_id, "s 1");

        let message = build(Method::GET, "/api/v1/chat/stats?since=2026-01-02T03:04:05Z", "").unwrap();
        let stats: router::GetRoutingStatsRequest = message.transcode_to().unwrap();
        assert_eq!(stats.since.unwrap().seconds, 1_767_323_045);

        let message = build(Method::PATCH, "/api/context/roles/tech-expert", r#"{"name": "Tech"}"#).unwrap();
        let update: sessions::UpdateRoleRequest = message.transcode_to().unwrap();
        let role = update.role.unwrap();
        assert_eq!((role.id.as_str(), role.name.as_str()), ("tech-expert", "Tech"));
    }

    #[test]
    fn enums_by_name_or_number() {
        for force in [r#""ROUTE_TYPE_MULTIAGENT""#, "3"] {
            let body = format!(r#"{{"message": "hi", "force_route": {force}}}"#);
            let chat: router::ChatRequest = build(Method::POST, "/api/v1/chat", &body).unwrap().transcode_to().unwrap();
            assert_eq!(chat.force_route(), router::RouteType::Multiagent);
        }
    }

    /// Found by the fuzz suite: a query parameter without a name (`?=x`) was refused naming an
    /// empty field.
    #[test]
    fn a_query_parameter_without_a_name_is_refused_naming_the_query() {
        let error = build(Method::GET, "/api/context/sessions/s1/history?=%2B", "").unwrap_err();
        assert_eq!(error.field(), Some("query"), "{error:?}");
    }

    #[test]
    fn bad_input_names_the_field() {
        let err = build(Method::POST, "/api/context/sessions", r#"{"initial_role": "x"}"#).unwrap_err();
        assert_eq!(err.status(), 400);
        assert_eq!(err.field(), Some("initial_role"), "{}", err.message());

        let err = build(Method::POST, "/api/context/sessions", "[1]").unwrap_err();
        assert_eq!(err.field(), Some("body"));
        let err = build(Method::POST, "/api/context/sessions", "{").unwrap_err();
        assert_eq!(err.field(), Some("body"));
        let err = build(Method::GET, "/api/v1/chat/stats?nope=1", "").unwrap_err();
        assert_eq!(err.field(), Some("nope"));
        let err = build(Method::GET, "/api/v1/chat/stats?since=yesterday", "").unwrap_err();
        assert_eq!(err.status(), 400);
        let err = build(Method::GET, "/api/context/sessions/a?session_id=b", "").unwrap_err();
        assert_eq!(err.field(), Some("session_id"));
        let err = build(Method::GET, "/api/context/sessions/a", r#"{"x": 1}"#).unwrap_err();
        assert_eq!(err.field(), Some("body"));
    }

    #[test]
    fn responses_use_proto_names_and_show_every_field() {
        let response = router::ChatCompleted { finish_reason: "stop".into(), ..Default::default() };
        let table = RouteTable::switchyard().unwrap();
        let descriptor = table.pool().get_message_by_name("switchyard.router.v1.ChatCompleted").unwrap();
        let json =
            to_json(&DynamicMessage::decode(descriptor, prost::Message::encode_to_vec(&response).as_slice()).unwrap());
        assert_eq!(json["finish_reason"], "stop");
        assert_eq!(json["model"], "");
        assert!(json.get("finishReason").is_none());
    }

    /// The text the REST path writes says what the `Value` form says (enums by name, nested
    /// messages, maps, timestamps, escapes), members in the proto's field order.
    #[test]
    fn json_text_is_the_json_value_written_in_field_order() {
        use switchyard_proto::sessions::v1 as sessions;
        let response = sessions::ProcessQueryResponse {
            session_id: "s1".into(),
            role_id: "finance-expert".into(),
            switched: true,
            reason: sessions::SwitchReason::Triggered.into(),
            reason_detail: "line one\nline \"two\" \u{0}".into(),
            session: Some(sessions::Session {
                session_id: "s1".into(),
                turn_count: 7,
                created_at: Some(prost_types::Timestamp { seconds: 1_700_000_000, nanos: 5 }),
                metadata: [("team".to_owned(), "ops".to_owned())].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let table = RouteTable::switchyard().unwrap();
        let descriptor = table.pool().get_message_by_name("switchyard.sessions.v1.ProcessQueryResponse").unwrap();
        let message = DynamicMessage::decode(descriptor, prost::Message::encode_to_vec(&response).as_slice()).unwrap();
        let text = to_json_text(&message);
        let parsed: Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(parsed, to_json(&message));
        assert_eq!(parsed["reason"], "SWITCH_REASON_TRIGGERED");
        assert_eq!(parsed["session"]["metadata"]["team"], "ops");
        assert_eq!(parsed["session"]["turn_count"], 7);
        let text = String::from_utf8(text).unwrap();
        assert!(!text.contains('\n'), "one line, fit for an SSE data field: {text}");
        let at = |member: &str| text.find(&format!("\"{member}\":")).unwrap_or_else(|| panic!("{member} in {text}"));
        assert!(at("session_id") < at("role_id") && at("role_id") < at("switched") && at("switched") < at("session"));
    }
}
