//! The OpenAPI 3 document at `/openapi.json`, generated from the same route table and
//! descriptors the transcoding layer serves (comments in the protos become descriptions), plus
//! the few endpoints written by hand: OpenAI's, the streamed processing of
//! docs/requirements.md#sessions-endpoints, and the probes.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::Arc,
};

use axum::{extract::State, response::Response};
use http::{HeaderValue, header};
use prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{Map, Value, json};

use crate::{
    Edge,
    transcode::rules::{BodyRule, ResponseShape, RouteTable, field_at},
};

pub async fn document(State(edge): State<Arc<Edge>>) -> Response {
    let mut response = Response::new(axum::body::Body::from(edge.openapi.clone()));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Leading comments by (file, descriptor path).
struct Comments(HashMap<(String, Vec<i32>), String>);

impl Comments {
    fn new(pool: &DescriptorPool) -> Self {
        let mut map = HashMap::new();
        for file in pool.files() {
            let Some(info) = &file.file_descriptor_proto().source_code_info else { continue };
            for location in &info.location {
                if let Some(text) = location.leading_comments.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
                    let text = text.lines().map(str::trim).collect::<Vec<_>>().join(" ");
                    map.insert((file.name().to_owned(), location.path.clone()), text);
                }
            }
        }
        Self(map)
    }

    fn get(&self, file: &str, path: &[i32]) -> Option<&str> {
        self.0.get(&(file.to_owned(), path.to_vec())).map(String::as_str)
    }
}

pub fn generate(routes: &RouteTable) -> Value {
    let comments = Comments::new(routes.pool());
    let mut paths: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let mut wanted: VecDeque<MessageDescriptor> = VecDeque::new();
    for route in routes.routes() {
        let method = &route.rpc.method;
        let input = method.input();
        let output = method.output();
        let mut parameters = Vec::new();
        let mut bound = Vec::new();
        for variable in route.template.variables() {
            let name = variable.join(".");
            let schema =
                field_at(&input, variable).map_or(json!({"type": "string"}), |f| scalar_schema(&f, &mut wanted));
            parameters.push(json!({"name": name, "in": "path", "required": true, "schema": schema}));
            bound.push(variable.first().cloned().unwrap_or_default());
        }
        if matches!(route.body, BodyRule::None) {
            for field in input.fields().filter(|f| !bound.contains(&f.name().to_owned())) {
                if is_query_field(&field) {
                    let mut parameter = json!({"name": field.name(), "in": "query", "required": false, "schema": field_schema(&field, &mut wanted)});
                    if let Some(text) = comments.get(field.parent_file().name(), field.path()) {
                        parameter["description"] = json!(text);
                    }
                    if field.is_list() {
                        parameter["explode"] = json!(true);
                    }
                    parameters.push(parameter);
                }
            }
        }
        let mut operation = json!({
            "operationId": format!("{}_{}", method.parent_service().name(), method.name()),
            "tags": [method.parent_service().name()],
            "summary": comments.get(method.parent_file().name(), method.path()).unwrap_or(method.name()),
            "parameters": parameters,
            "responses": responses(route.shape, method.is_server_streaming(), &output, &mut wanted),
        });
        match &route.body {
            BodyRule::All => {
                operation["requestBody"] = json_body(reference(&input, &mut wanted));
            }
            BodyRule::Field(field) => {
                if let Kind::Message(message) = field.kind() {
                    operation["requestBody"] = json_body(reference(&message, &mut wanted));
                }
            }
            BodyRule::None => {}
        }
        if route.rpc.operator_only {
            operation["description"] =
                json!("Needs an administrator credential of the `default` tenant (403 otherwise).");
        } else if route.rpc.admin_only {
            operation["description"] = json!("Needs an administrator credential (403 otherwise).");
        }
        paths
            .entry(route.template.as_str().to_owned())
            .or_default()
            .insert(route.method.as_str().to_ascii_lowercase(), operation);
    }
    let mut schemas = Map::new();
    while let Some(message) = wanted.pop_front() {
        let name = schema_name(&message);
        if schemas.contains_key(&name) {
            continue;
        }
        schemas.insert(name.clone(), Value::Null);
        let schema = message_schema(&message, &comments, &mut wanted);
        schemas.insert(name, schema);
    }
    schemas.insert("Error".into(), error_schema());
    schemas.insert("ChatCompletion".into(), chat_completion_schema());
    schemas.insert("AnthropicError".into(), anthropic_error_schema());
    schemas.insert("AnthropicMessage".into(), anthropic_message_schema());
    schemas.insert("OpenAIError".into(), openai_error_schema());
    schemas.insert("Response".into(), openai_response_schema());
    let mut paths: Map<String, Value> = paths.into_iter().map(|(k, v)| (k, Value::Object(v))).collect();
    hand_written(&mut paths);
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Switchyard",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Context-aware routing for LLM applications: sessions that switch expert roles, \
                            one chat endpoint routed by the LLM, MCP tools. Generated from the protos' \
                            google.api.http rules; JSON uses proto field names, enums by name and \
                            64-bit integers as strings (proto3 JSON).",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "A Switchyard API key (sy_…) or a JWT."},
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
            },
        },
        "security": [{"bearer": []}, {"apiKey": []}],
    })
}

fn is_query_field(field: &FieldDescriptor) -> bool {
    match field.kind() {
        Kind::Message(message) => {
            !field.is_list() && matches!(message.full_name(), "google.protobuf.Timestamp" | "google.protobuf.Duration")
        }
        _ => !field.is_map(),
    }
}

fn json_body(schema: Value) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": schema}}})
}

fn responses(
    shape: ResponseShape,
    streaming: bool,
    output: &MessageDescriptor,
    wanted: &mut VecDeque<MessageDescriptor>,
) -> Value {
    let ok = if streaming {
        json!({
            "description": "Server-Sent Events: each event is named after the member of the message's \
                            oneof that is set (`route`, `delta`, `tool`, `completed`) and carries that \
                            member as JSON; an `error` event carries an Error.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        })
    } else {
        let schema = match shape {
            ResponseShape::Proto => reference(output, wanted),
            ResponseShape::ChatCompletion => json!({"$ref": "#/components/schemas/ChatCompletion"}),
        };
        json!({"description": "OK", "content": {"application/json": {"schema": schema}}})
    };
    errors(ok)
}

fn errors(ok: Value) -> Value {
    let error = json!({"$ref": "#/components/schemas/Error"});
    let mut responses = json!({"200": ok});
    for (code, text) in [
        ("400", "Invalid request; the Error names the field"),
        ("401", "Missing or invalid credential"),
        ("403", "Not allowed for this credential"),
        ("404", "Not found (or another tenant's)"),
        ("409", "Conflict or wrong state"),
        ("413", "Request body too large"),
        ("415", "Not JSON"),
        ("429", "Rate limit reached; see Retry-After"),
        ("503", "A service behind the edge is unavailable"),
    ] {
        responses[code] = json!({"description": text, "content": {"application/json": {"schema": error}}});
    }
    responses
}

fn schema_name(message: &MessageDescriptor) -> String {
    message.full_name().to_owned()
}

fn reference(message: &MessageDescriptor, wanted: &mut VecDeque<MessageDescriptor>) -> Value {
    if let Some(schema) = well_known(message) {
        return schema;
    }
    wanted.push_back(message.clone());
    json!({"$ref": format!("#/components/schemas/{}", schema_name(message))})
}

fn well_known(message: &MessageDescriptor) -> Option<Value> {
    Some(match message.full_name() {
        "google.protobuf.Timestamp" => json!({"type": "string", "format": "date-time"}),
        "google.protobuf.Duration" => json!({"type": "string", "example": "1.5s"}),
        "google.protobuf.Struct" => json!({"type": "object", "additionalProperties": true}),
        "google.protobuf.Value" => json!({}),
        "google.protobuf.ListValue" => json!({"type": "array", "items": {}}),
        "google.protobuf.Empty" => json!({"type": "object"}),
        "google.protobuf.StringValue" => json!({"type": "string"}),
        "google.protobuf.BoolValue" => json!({"type": "boolean"}),
        "google.protobuf.DoubleValue" | "google.protobuf.FloatValue" => json!({"type": "number"}),
        "google.protobuf.Int32Value" | "google.protobuf.UInt32Value" => json!({"type": "integer"}),
        "google.protobuf.Int64Value" | "google.protobuf.UInt64Value" => json!({"type": "string", "format": "int64"}),
        _ => return None,
    })
}

fn message_schema(message: &MessageDescriptor, comments: &Comments, wanted: &mut VecDeque<MessageDescriptor>) -> Value {
    let mut properties = Map::new();
    for field in message.fields() {
        let mut schema = field_schema(&field, wanted);
        if let Some(text) = comments.get(field.parent_file().name(), field.path()) {
            // `$ref` siblings are ignored in OpenAPI 3.0: wrap to keep the description.
            if schema.get("$ref").is_some() {
                schema = json!({"allOf": [schema], "description": text});
            } else {
                schema["description"] = json!(text);
            }
        }
        properties.insert(field.name().to_owned(), schema);
    }
    let mut schema = json!({"type": "object", "properties": properties});
    if let Some(text) = comments.get(message.parent_file().name(), message.path()) {
        schema["description"] = json!(text);
    }
    schema
}

fn field_schema(field: &FieldDescriptor, wanted: &mut VecDeque<MessageDescriptor>) -> Value {
    if field.is_map() {
        let Kind::Message(entry) = field.kind() else { return json!({"type": "object"}) };
        let value = entry.map_entry_value_field();
        return json!({"type": "object", "additionalProperties": scalar_schema(&value, wanted)});
    }
    let item = scalar_schema(field, wanted);
    if field.is_list() {
        json!({"type": "array", "items": item})
    } else if field.supports_presence() && !matches!(field.kind(), Kind::Message(_)) {
        let mut item = item;
        item["nullable"] = json!(true);
        item
    } else {
        item
    }
}

fn scalar_schema(field: &FieldDescriptor, wanted: &mut VecDeque<MessageDescriptor>) -> Value {
    match field.kind() {
        Kind::Double | Kind::Float => json!({"type": "number"}),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => json!({"type": "integer", "format": "int32"}),
        Kind::Uint32 | Kind::Fixed32 => {
            json!({"type": "integer", "format": "int64", "minimum": 0, "maximum": 4_294_967_295_u64})
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => json!({"type": "string", "format": "int64"}),
        Kind::Uint64 | Kind::Fixed64 => json!({"type": "string", "format": "uint64"}),
        Kind::Bool => json!({"type": "boolean"}),
        Kind::String => json!({"type": "string"}),
        Kind::Bytes => json!({"type": "string", "format": "byte"}),
        Kind::Enum(e) => json!({"type": "string", "enum": e.values().map(|v| v.name().to_owned()).collect::<Vec<_>>()}),
        Kind::Message(message) => {
            let mut schema = reference(&message, wanted);
            if schema.get("$ref").is_some() {
                schema = json!({"allOf": [schema], "nullable": true});
            }
            schema
        }
    }
}

fn error_schema() -> Value {
    json!({
        "type": "object",
        "description": "Google's JSON error format (as gRPC-JSON transcoders use).",
        "properties": {"error": {"type": "object", "properties": {
            "code": {"type": "integer", "description": "The HTTP status."},
            "status": {"type": "string", "description": "The gRPC status name, e.g. INVALID_ARGUMENT."},
            "message": {"type": "string"},
            "details": {"type": "array", "items": {"type": "object", "properties": {
                "@type": {"type": "string"},
                "field_violations": {"type": "array", "items": {"type": "object", "properties": {
                    "field": {"type": "string"}, "description": {"type": "string"}}}},
            }}},
        }}},
    })
}

fn chat_completion_schema() -> Value {
    json!({
        "type": "object",
        "description": "Spec 002's response: an OpenAI-style chat.completion with routing metadata in `_metadata`.",
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["chat.completion"]},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {"type": "array", "items": {"type": "object", "properties": {
                "index": {"type": "integer"},
                "message": {"type": "object", "properties": {
                    "role": {"type": "string"},
                    "content": {"type": "string", "nullable": true, "description": "Null when the answer is only tool calls."},
                    "tool_calls": {"type": "array", "items": {"type": "object", "properties": {
                        "id": {"type": "string"},
                        "type": {"type": "string", "enum": ["function"]},
                        "function": {"type": "object", "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}}},
                    }}},
                }},
                "finish_reason": {"type": "string"},
            }}},
            "usage": {"type": "object", "properties": {
                "prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}}},
            "_metadata": {"type": "object", "additionalProperties": true, "properties": {
                "route_type": {"type": "string", "enum": ["direct", "mcp_agent", "multiagent", "unspecified"]},
                "execution_time_ms": {"type": "integer"},
                "reasoning": {"type": "string", "nullable": true},
                "tools_used": {"type": "array", "items": {"type": "string"}},
                "domains": {"type": "array", "items": {"type": "string"}},
            }},
            "session_id": {"type": "string"},
        },
    })
}

/// The body of `POST /v1/chat/completions`: the fields the edge reads (others are ignored).
fn openai_chat_request_schema() -> Value {
    let name = json!({"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"});
    let text_part = json!({"type": "object", "required": ["type", "text"], "properties": {
        "type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}});
    let image_part = json!({"type": "object", "required": ["type", "image_url"], "properties": {
        "type": {"type": "string", "enum": ["image_url"]},
        "image_url": {"type": "object", "required": ["url"], "properties": {
            "url": {"type": "string", "description": "An `https:` URL or a `data:image/…;base64,` URL."},
            "detail": {"type": "string", "enum": ["auto", "low", "high"]}}},
    }});
    let tool_call = json!({"type": "object", "required": ["id", "type", "function"], "properties": {
        "id": {"type": "string", "minLength": 1},
        "type": {"type": "string", "enum": ["function"]},
        "function": {"type": "object", "required": ["name", "arguments"], "properties": {
            "name": {"type": "string", "minLength": 1}, "arguments": {"type": "string", "description": "JSON text."}}},
    }});
    json!({"type": "object", "required": ["model", "messages"], "properties": {
        "model": {"type": "string", "description": "`switchyard` (the router decides), `switchyard-direct`, `switchyard-mcp-agent`, `switchyard-multiagent`, or `provider/model`."},
        "messages": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["role"], "properties": {
            "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool"]},
            "content": {"nullable": true, "oneOf": [
                {"type": "string"},
                {"type": "array", "items": {"oneOf": [text_part, image_part]}},
            ], "description": "Image parts in user messages only; null in an assistant message with tool_calls."},
            "tool_calls": {"type": "array", "items": tool_call, "description": "An assistant message's calls of the request's tools."},
            "tool_call_id": {"type": "string", "description": "The call a `tool` message answers (required there)."},
            "name": {"type": "string", "description": "Ignored."},
        }}},
        "tools": {"type": "array", "items": {"type": "object", "required": ["type", "function"], "properties": {
            "type": {"type": "string", "enum": ["function"]},
            "function": {"type": "object", "required": ["name"], "properties": {
                "name": name,
                "description": {"type": "string"},
                "parameters": {"type": "object", "additionalProperties": true, "description": "JSON Schema of the arguments."},
                "strict": {"type": "boolean"},
            }},
        }}},
        "tool_choice": {"oneOf": [
            {"type": "string", "enum": ["auto", "none", "required"]},
            {"type": "object", "required": ["type", "function"], "properties": {
                "type": {"type": "string", "enum": ["function"]},
                "function": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
            }},
        ]},
        "parallel_tool_calls": {"type": "boolean"},
        "stop": {"oneOf": [{"type": "string", "minLength": 1}, {"type": "array", "maxItems": 4, "items": {"type": "string", "minLength": 1}}]},
        "response_format": {"type": "object", "required": ["type"], "properties": {
            "type": {"type": "string", "enum": ["text", "json_object", "json_schema"]},
            "json_schema": {"type": "object", "required": ["name"], "properties": {
                "name": name,
                "description": {"type": "string"},
                "schema": {"type": "object", "additionalProperties": true},
                "strict": {"type": "boolean"},
            }},
        }},
        "stream": {"type": "boolean"},
        "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
        "max_tokens": {"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64},
        "max_completion_tokens": {"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64},
        "temperature": {"type": "number"},
        "n": {"type": "integer"},
        "session_id": {"type": "string", "description": "Switchyard's own: continue this session (also the `x-session-id` header)."},
    }})
}

fn anthropic_error_schema() -> Value {
    json!({
        "type": "object",
        "description": "Anthropic's error shape.",
        "properties": {
            "type": {"type": "string", "enum": ["error"]},
            "error": {"type": "object", "properties": {
                "type": {"type": "string", "enum": ["invalid_request_error", "authentication_error", "permission_error",
                    "not_found_error", "request_too_large", "rate_limit_error", "api_error", "overloaded_error"]},
                "message": {"type": "string", "description": "Names the field for an invalid request."},
            }},
        },
    })
}

fn anthropic_message_schema() -> Value {
    json!({
        "type": "object",
        "description": "Anthropic's message object, with routing metadata in `_metadata` and the session in `session_id`.",
        "properties": {
            "id": {"type": "string"},
            "type": {"type": "string", "enum": ["message"]},
            "role": {"type": "string", "enum": ["assistant"]},
            "content": {"type": "array", "items": {"type": "object", "properties": {
                "type": {"type": "string", "enum": ["text", "tool_use"]},
                "text": {"type": "string"},
                "id": {"type": "string"},
                "name": {"type": "string"},
                "input": {"type": "object", "additionalProperties": true},
            }}},
            "model": {"type": "string"},
            "stop_reason": {"type": "string", "enum": ["end_turn", "max_tokens", "tool_use", "stop_sequence"]},
            "stop_sequence": {"type": "string", "nullable": true},
            "usage": {"type": "object", "properties": {
                "input_tokens": {"type": "integer"}, "output_tokens": {"type": "integer"}}},
            "_metadata": {"type": "object", "additionalProperties": true},
            "session_id": {"type": "string"},
        },
    })
}

/// The body of `POST /v1/messages`: the fields the edge reads (others are ignored).
/// `count_tokens` takes the same without `max_tokens` and `stream`.
fn anthropic_messages_request_schema(count_tokens: bool) -> Value {
    let text_block = json!({"type": "object", "required": ["type", "text"], "properties": {
        "type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}});
    let image_block = json!({"type": "object", "required": ["type", "source"], "properties": {
        "type": {"type": "string", "enum": ["image"]},
        "source": {"oneOf": [
            {"type": "object", "required": ["type", "media_type", "data"], "properties": {
                "type": {"type": "string", "enum": ["base64"]},
                "media_type": {"type": "string", "enum": ["image/jpeg", "image/png", "image/gif", "image/webp"]},
                "data": {"type": "string", "minLength": 1}}},
            {"type": "object", "required": ["type", "url"], "properties": {
                "type": {"type": "string", "enum": ["url"]}, "url": {"type": "string"}}},
        ]},
    }});
    let tool_use_block = json!({"type": "object", "required": ["type", "id", "name", "input"], "properties": {
        "type": {"type": "string", "enum": ["tool_use"]},
        "id": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
        "input": {"type": "object", "additionalProperties": true},
    }});
    let tool_result_block = json!({"type": "object", "required": ["type", "tool_use_id"], "properties": {
        "type": {"type": "string", "enum": ["tool_result"]},
        "tool_use_id": {"type": "string", "minLength": 1, "description": "A tool_use id of an earlier assistant message."},
        "content": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"oneOf": [text_block, image_block]}}]},
        "is_error": {"type": "boolean"},
    }});
    let mut schema = json!({"type": "object", "required": ["model", "messages", "max_tokens"], "properties": {
        "model": {"type": "string", "description": "A route model (`switchyard`, `switchyard-direct`, `switchyard-mcp-agent`, `switchyard-multiagent`), `provider/model`, or any other name (the router's own model answers)."},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 4_294_967_295_u64},
        "system": {"oneOf": [{"type": "string"}, {"type": "array", "items": text_block}]},
        "messages": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["role", "content"], "properties": {
            "role": {"type": "string", "enum": ["user", "assistant", "system"]},
            "content": {"oneOf": [
                {"type": "string"},
                {"type": "array", "items": {"oneOf": [text_block, image_block, tool_use_block, tool_result_block]}},
            ], "description": "User messages take text, image and tool_result blocks; assistant messages text and tool_use (thinking blocks are dropped); system messages (instructions, as the top-level system) text."},
        }}},
        "tools": {"type": "array", "items": {"type": "object", "required": ["name", "input_schema"], "properties": {
            "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
            "description": {"type": "string"},
            "input_schema": {"type": "object", "additionalProperties": true},
        }}},
        "tool_choice": {"type": "object", "required": ["type"], "properties": {
            "type": {"type": "string", "enum": ["auto", "any", "tool", "none"]},
            "name": {"type": "string", "description": "The tool to call, with type `tool`."},
            "disable_parallel_tool_use": {"type": "boolean"},
        }},
        "temperature": {"type": "number", "minimum": 0, "maximum": 1},
        "stop_sequences": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "metadata": {"type": "object", "properties": {"user_id": {"type": "string"}}},
        "stream": {"type": "boolean"},
        "session_id": {"type": "string", "description": "Switchyard's own: continue this session (also the `x-session-id` header)."},
    }});
    if count_tokens {
        schema["required"] = json!(["model", "messages"]);
        if let Some(properties) = schema["properties"].as_object_mut() {
            properties.remove("max_tokens");
            properties.remove("stream");
        }
    }
    schema
}

/// Responses of the Anthropic API's operations: errors in Anthropic's shape.
/// OpenAI's error shape, as the Responses API answers errors.
fn openai_error_schema() -> Value {
    json!({"type": "object", "description": "OpenAI's error shape; `param` names the request field at fault.",
    "properties": {"error": {"type": "object", "properties": {
        "message": {"type": "string"},
        "type": {"type": "string"},
        "param": {"type": "string", "nullable": true},
        "code": {"type": "string", "nullable": true},
    }}}})
}

/// A `response` object of OpenAI's Responses API (the fields the edge fills).
fn openai_response_schema() -> Value {
    json!({"type": "object", "description": "A Responses API `response`, with routing metadata in `_metadata` and the Switchyard session in `session_id`.",
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string", "enum": ["response"]},
        "created_at": {"type": "integer"},
        "status": {"type": "string", "enum": ["completed", "incomplete", "failed", "in_progress"]},
        "model": {"type": "string"},
        "instructions": {"type": "string", "nullable": true},
        "previous_response_id": {"type": "string", "nullable": true},
        "output": {"type": "array", "items": {"type": "object", "properties": {
            "type": {"type": "string", "enum": ["message", "function_call"]},
            "id": {"type": "string"},
            "status": {"type": "string"},
            "role": {"type": "string", "enum": ["assistant"]},
            "content": {"type": "array", "items": {"type": "object", "properties": {
                "type": {"type": "string", "enum": ["output_text"]}, "text": {"type": "string"},
                "annotations": {"type": "array", "items": {}}}}},
            "call_id": {"type": "string"},
            "name": {"type": "string"},
            "arguments": {"type": "string"},
        }}},
        "usage": {"type": "object", "nullable": true, "properties": {
            "input_tokens": {"type": "integer"}, "output_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}}},
        "session_id": {"type": "string"},
    }})
}

/// The body of `POST /v1/responses`: the fields the edge reads (others are ignored).
fn openai_responses_request_schema() -> Value {
    let text_part = json!({"type": "object", "required": ["type", "text"], "properties": {
        "type": {"type": "string", "enum": ["input_text", "output_text"]}, "text": {"type": "string"}}});
    let image_part = json!({"type": "object", "required": ["type", "image_url"], "properties": {
        "type": {"type": "string", "enum": ["input_image"]},
        "image_url": {"type": "string", "description": "An https: URL or a data:image/…;base64, URL."},
        "detail": {"type": "string", "enum": ["auto", "low", "high"]}}});
    let item = json!({"oneOf": [
        {"type": "object", "required": ["role", "content"], "properties": {
            "type": {"type": "string", "enum": ["message"]},
            "role": {"type": "string", "enum": ["user", "assistant", "system", "developer"]},
            "content": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"oneOf": [text_part, image_part]}}],
                "description": "Images in user messages only."},
        }},
        {"type": "object", "required": ["type", "call_id", "name"], "properties": {
            "type": {"type": "string", "enum": ["function_call"]},
            "call_id": {"type": "string"}, "name": {"type": "string"}, "arguments": {"type": "string"},
        }},
        {"type": "object", "required": ["type", "call_id", "output"], "properties": {
            "type": {"type": "string", "enum": ["function_call_output"]},
            "call_id": {"type": "string"}, "output": {"type": "string"},
        }},
    ]});
    json!({"type": "object", "required": ["model", "input"], "properties": {
        "model": {"type": "string", "description": "A route model (`switchyard`, `switchyard-direct`…), a `provider/model` name, or any other name (the router decides)."},
        "input": {"oneOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": item}],
            "description": "A user message, or items: messages, function_call and function_call_output (`reasoning` items are skipped)."},
        "instructions": {"type": "string", "nullable": true},
        "tools": {"type": "array", "items": {"type": "object", "required": ["type", "name"], "properties": {
            "type": {"type": "string", "enum": ["function"], "description": "Built-in tools (web_search, file_search…) are refused."},
            "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
            "description": {"type": "string"},
            "parameters": {"type": "object"},
            "strict": {"type": "boolean"},
        }}},
        "tool_choice": {"oneOf": [
            {"type": "string", "enum": ["auto", "none", "required"]},
            {"type": "object", "required": ["type", "name"], "properties": {
                "type": {"type": "string", "enum": ["function"]}, "name": {"type": "string"}}},
        ]},
        "parallel_tool_calls": {"type": "boolean"},
        "max_output_tokens": {"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64},
        "temperature": {"type": "number"},
        "stream": {"type": "boolean"},
        "store": {"type": "boolean", "description": "Keep the answer for previous_response_id and GET (default true)."},
        "previous_response_id": {"type": "string"},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        "text": {"type": "object", "properties": {"format": {"type": "object", "required": ["type"], "properties": {
            "type": {"type": "string", "enum": ["text", "json_object", "json_schema"]},
            "name": {"type": "string"}, "schema": {"type": "object"}, "description": {"type": "string"}, "strict": {"type": "boolean"},
        }}}},
    }})
}

/// Errors in OpenAI's shape.
fn openai_responses(ok: Value) -> Value {
    let mut responses = errors(ok);
    let error = json!({"$ref": "#/components/schemas/OpenAIError"});
    if let Some(responses) = responses.as_object_mut() {
        for (code, response) in responses.iter_mut() {
            if code != "200" {
                response["content"] = json!({"application/json": {"schema": error}});
            }
        }
    }
    responses
}

fn anthropic_responses(ok: Value) -> Value {
    let mut responses = errors(ok);
    let error = json!({"$ref": "#/components/schemas/AnthropicError"});
    if let Some(responses) = responses.as_object_mut() {
        for (code, response) in responses.iter_mut() {
            if code != "200" {
                response["content"] = json!({"application/json": {"schema": error}});
            }
        }
    }
    responses
}

fn hand_written(paths: &mut Map<String, Value>) {
    let sse = |description: &str| {
        errors(json!({"description": description, "content": {"text/event-stream": {"schema": {"type": "string"}}}}))
    };
    paths.insert(
        "/api/context/process/stream".into(),
        json!({"post": {
            "operationId": "ProcessQueryStream",
            "tags": ["SessionService"],
            "summary": "Process a query with context switching and stream the response (spec 000).",
            "description": "Events: `context` (the session's role after switching), `route`, `delta`, `tool`, `completed`; `error` on failure.",
            "requestBody": json_body(json!({"type": "object", "required": ["query"], "additionalProperties": false, "properties": {
                "session_id": {"type": "string", "description": "The session; a new one when empty."},
                "query": {"type": "string"},
                "custom_instructions": {"type": "string"},
                "force_role_id": {"type": "string"},
                "model": {"type": "string"},
                "max_tokens": {"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64},
                "temperature": {"type": "number"},
            }})),
            "responses": sse("The switch decision, then the answer."),
        }}),
    );
    paths.insert(
        "/v1/chat/completions".into(),
        json!({"post": {
            "operationId": "OpenAIChatCompletions",
            "tags": ["OpenAI"],
            "summary": "OpenAI-compatible chat completions (JSON, or SSE chunks ending with `data: [DONE]` when `stream` is true).",
            "description": "The caller's function tools reach the model; its calls come back in `message.tool_calls` (streamed as `delta.tool_calls`) with finish_reason `tool_calls`. A conversation ending in `tool` messages continues the tool loop. Fields not listed here are ignored. Without `session_id` or an `x-session-id` header, the conversation is keyed by tenant, user, system prompt and first user message.",
            "requestBody": json_body(openai_chat_request_schema()),
            "responses": errors(json!({"description": "A chat.completion (or chunks)", "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletion"}},
                "text/event-stream": {"schema": {"type": "string"}},
            }})),
        }}),
    );
    paths.insert(
        "/v1/messages".into(),
        json!({"post": {
            "operationId": "AnthropicMessages",
            "tags": ["Anthropic"],
            "summary": "Anthropic's Messages API (a message object, or Anthropic's SSE events when `stream` is true).",
            "description": "The caller's tools reach the model; its calls come back as `tool_use` blocks (streamed as `input_json_delta`) with stop_reason `tool_use`. A conversation ending in `tool_result` blocks continues the tool loop. `anthropic-version` and `anthropic-beta` headers and a `?beta=true` query are accepted. Fields not listed here are ignored. Without `session_id` or an `x-session-id` header, the conversation is keyed by tenant, user, system prompt and first user message.",
            "parameters": [{"name": "beta", "in": "query", "required": false, "schema": {"type": "string"}, "description": "Sent by Anthropic's beta clients; not read."}],
            "requestBody": json_body(anthropic_messages_request_schema(false)),
            "responses": anthropic_responses(json!({"description": "A message (or its events)", "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/AnthropicMessage"}},
                "text/event-stream": {"schema": {"type": "string"}},
            }})),
        }}),
    );
    paths.insert(
        "/v1/messages/count_tokens".into(),
        json!({"post": {
            "operationId": "AnthropicCountTokens",
            "tags": ["Anthropic"],
            "summary": "An estimate of a messages request's input tokens: a quarter of its characters (text, tool calls and results, tool definitions), rounded up, plus 1600 for each image.",
            "requestBody": json_body(anthropic_messages_request_schema(true)),
            "responses": anthropic_responses(json!({"description": "OK", "content": {"application/json": {"schema": {
                "type": "object", "properties": {"input_tokens": {"type": "integer"}}}}}})),
        }}),
    );
    paths.insert(
        "/v1/responses".into(),
        json!({"post": {
            "operationId": "OpenAIResponsesCreate",
            "tags": ["OpenAI"],
            "summary": "OpenAI's Responses API (a response object, or the Responses events when `stream` is true).",
            "description": "The caller's function tools reach the model; its calls come back as `function_call` output items (streamed as `response.function_call_arguments.delta`). A conversation ending in `function_call_output` items continues the tool loop. `previous_response_id` continues a stored response's conversation and session; without it or an `x-session-id` header, the conversation is keyed by tenant, user, instructions and first user message. Fields not listed here are ignored.",
            "requestBody": json_body(openai_responses_request_schema()),
            "responses": openai_responses(json!({"description": "A response (or its events)", "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/Response"}},
                "text/event-stream": {"schema": {"type": "string"}},
            }})),
        }}),
    );
    paths.insert(
        "/v1/responses/{id}".into(),
        json!({"get": {
            "operationId": "OpenAIResponsesRetrieve",
            "tags": ["OpenAI"],
            "summary": "A stored response, to its own tenant and user, within its retention (EDGE_RESPONSES_TTL).",
            "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
            "responses": openai_responses(json!({"description": "The response", "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/Response"}}}})),
        }}),
    );
    paths.insert(
        "/v1/models".into(),
        json!({"get": {
            "operationId": "OpenAIListModels",
            "tags": ["OpenAI"],
            "summary": "The model names that pick a route.",
            "responses": errors(json!({"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}})),
        }}),
    );
    for (path, summary) in [
        ("/healthz", "The edge process answers."),
        (
            "/readyz",
            "The services behind the edge answer and callers can be let in; `degraded` names what works only in part.",
        ),
    ] {
        paths.insert(
            path.into(),
            json!({"get": {
                "operationId": if path == "/healthz" { "Healthz" } else { "Readyz" },
                "tags": ["Probes"],
                "summary": summary,
                "security": [],
                "responses": {
                    "200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}},
                    "503": {"description": "Not ready", "content": {"application/json": {"schema": {"type": "object"}}}},
                },
            }}),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_covers_every_route_with_resolvable_schemas() {
        let table = RouteTable::switchyard().unwrap();
        let doc = generate(&table);
        for route in table.routes() {
            let operation = &doc["paths"][route.template.as_str()][route.method.as_str().to_ascii_lowercase()];
            assert!(operation.is_object(), "{} {} is missing", route.method, route.template);
        }
        // Every $ref points at a schema that exists.
        let text = doc.to_string();
        for piece in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = piece.split('"').next().unwrap();
            assert!(doc["components"]["schemas"][name].is_object(), "dangling $ref {name}");
        }
        let process = &doc["paths"]["/api/context/process"]["post"];
        assert_eq!(
            process["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/switchyard.sessions.v1.ProcessQueryRequest"
        );
        let request = &doc["components"]["schemas"]["switchyard.sessions.v1.ProcessQueryRequest"];
        assert!(request["properties"]["query"]["description"].as_str().unwrap().contains("Not empty"));
        let stats = &doc["paths"]["/api/v1/chat/stats"]["get"]["parameters"];
        assert!(stats.as_array().unwrap().iter().any(|p| p["name"] == "since" && p["in"] == "query"));
    }
}
