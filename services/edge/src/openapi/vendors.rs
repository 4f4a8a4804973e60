//! The bodies of the client APIs written by hand rather than generated from the protos:
//! OpenAI's chat completions and Responses, Anthropic's Messages, their answers and their
//! error shapes — the fields the edge reads and fills, no more.

use serde_json::{Value, json};

use super::proto::errors;

/// `POST /api/v1/chat`'s answer (docs/requirements.md#router-response), also the body of
/// OpenAI's non-streaming chat completion.
pub(super) fn chat_completion_schema() -> Value {
    json!({
        "type": "object",
        "description": "The unified chat's response: an OpenAI-style chat.completion with routing metadata in `_metadata`.",
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
pub(super) fn openai_chat_request_schema() -> Value {
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

pub(super) fn anthropic_error_schema() -> Value {
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

pub(super) fn anthropic_message_schema() -> Value {
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
pub(super) fn anthropic_messages_request_schema(count_tokens: bool) -> Value {
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

/// OpenAI's error shape, as the Responses API answers errors.
pub(super) fn openai_error_schema() -> Value {
    json!({"type": "object", "description": "OpenAI's error shape; `param` names the request field at fault.",
    "properties": {"error": {"type": "object", "properties": {
        "message": {"type": "string"},
        "type": {"type": "string"},
        "param": {"type": "string", "nullable": true},
        "code": {"type": "string", "nullable": true},
    }}}})
}

/// A `response` object of OpenAI's Responses API (the fields the edge fills).
pub(super) fn openai_response_schema() -> Value {
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
pub(super) fn openai_responses_request_schema() -> Value {
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
pub(super) fn openai_responses(ok: Value) -> Value {
    responses_with_errors(ok, "OpenAIError")
}

/// Responses of the Anthropic API's operations: errors in Anthropic's shape.
pub(super) fn anthropic_responses(ok: Value) -> Value {
    responses_with_errors(ok, "AnthropicError")
}

/// The transcoded operations' responses, every error answered in the vendor's `schema` instead.
fn responses_with_errors(ok: Value, schema: &str) -> Value {
    let mut responses = errors(ok);
    let error = json!({"$ref": format!("#/components/schemas/{schema}")});
    if let Some(responses) = responses.as_object_mut() {
        for (code, response) in responses.iter_mut() {
            if code != "200" {
                response["content"] = json!({"application/json": {"schema": error}});
            }
        }
    }
    responses
}
