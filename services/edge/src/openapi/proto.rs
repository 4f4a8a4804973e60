//! JSON schemas of the protos' messages for the generated part of the document: messages,
//! fields and well-known types as proto3 JSON prints them, with the protos' leading comments
//! as descriptions, and the responses and errors every transcoded operation shares.

use std::collections::{HashMap, VecDeque};

use prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{Map, Value, json};

use crate::transcode::rules::ResponseShape;

/// Leading comments by (file, descriptor path).
pub(super) struct Comments(HashMap<(String, Vec<i32>), String>);

impl Comments {
    pub(super) fn new(pool: &DescriptorPool) -> Self {
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

    pub(super) fn get(&self, file: &str, path: &[i32]) -> Option<&str> {
        self.0.get(&(file.to_owned(), path.to_vec())).map(String::as_str)
    }
}

pub(super) fn is_query_field(field: &FieldDescriptor) -> bool {
    match field.kind() {
        Kind::Message(message) => {
            !field.is_list() && matches!(message.full_name(), "google.protobuf.Timestamp" | "google.protobuf.Duration")
        }
        _ => !field.is_map(),
    }
}

pub(super) fn json_body(schema: Value) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": schema}}})
}

pub(super) fn responses(
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

pub(super) fn errors(ok: Value) -> Value {
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

pub(super) fn schema_name(message: &MessageDescriptor) -> String {
    message.full_name().to_owned()
}

pub(super) fn reference(message: &MessageDescriptor, wanted: &mut VecDeque<MessageDescriptor>) -> Value {
    if let Some(schema) = well_known(message) {
        return schema;
    }
    wanted.push_back(message.clone());
    json!({"$ref": format!("#/components/schemas/{}", schema_name(message))})
}

pub(super) fn well_known(message: &MessageDescriptor) -> Option<Value> {
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

pub(super) fn message_schema(
    message: &MessageDescriptor,
    comments: &Comments,
    wanted: &mut VecDeque<MessageDescriptor>,
) -> Value {
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

pub(super) fn field_schema(field: &FieldDescriptor, wanted: &mut VecDeque<MessageDescriptor>) -> Value {
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

pub(super) fn scalar_schema(field: &FieldDescriptor, wanted: &mut VecDeque<MessageDescriptor>) -> Value {
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

pub(super) fn error_schema() -> Value {
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
