//! The operations written by hand: the streamed processing, the client APIs (OpenAI's chat
//! completions, models and Responses, Anthropic's Messages and token count) and the probes.

use serde_json::{Map, Value, json};

use super::{
    proto::{errors, json_body},
    vendors::{
        anthropic_messages_request_schema, anthropic_responses, openai_chat_request_schema, openai_responses,
        openai_responses_request_schema,
    },
};

pub(super) fn hand_written(paths: &mut Map<String, Value>) {
    let sse = |description: &str| {
        errors(json!({"description": description, "content": {"text/event-stream": {"schema": {"type": "string"}}}}))
    };
    paths.insert(
        "/api/context/process/stream".into(),
        json!({"post": {
            "operationId": "ProcessQueryStream",
            "tags": ["SessionService"],
            "summary": "Process a query with context switching and stream the response.",
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
