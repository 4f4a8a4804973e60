//! The OpenAPI 3 document at `/openapi.json`, generated from the same route table and
//! descriptors the transcoding layer serves (`proto`: comments in the protos become
//! descriptions), plus the few endpoints written by hand (`hand_written`): the client APIs'
//! (their bodies in `vendors`), the streamed processing of
//! docs/requirements.md#sessions-endpoints, and the probes.

mod hand_written;
mod proto;
mod vendors;

use std::{
    collections::{BTreeMap, VecDeque},
    sync::Arc,
};

use axum::{extract::State, response::Response};
use http::{HeaderValue, header};
use prost_reflect::{Kind, MessageDescriptor};
use serde_json::{Map, Value, json};

use self::{
    hand_written::hand_written,
    proto::{
        Comments, error_schema, field_schema, is_query_field, json_body, message_schema, reference, responses,
        scalar_schema, schema_name,
    },
    vendors::{
        anthropic_error_schema, anthropic_message_schema, chat_completion_schema, openai_error_schema,
        openai_response_schema,
    },
};
use crate::{
    Edge,
    transcode::rules::{BodyRule, RouteTable, field_at},
};

pub async fn document(State(edge): State<Arc<Edge>>) -> Response {
    let mut response = Response::new(axum::body::Body::from(edge.openapi.clone()));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
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
