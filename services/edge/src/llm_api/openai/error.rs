//! OpenAI's error shape, `param` naming the field as the caller sent it.

use axum::{
    body::Body,
    response::{IntoResponse, Response},
};
use serde_json::json;

use crate::error::ApiError;

/// OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`.
pub(crate) fn openai_error(error: ApiError) -> Response {
    openai_error_naming(error, param)
}

/// OpenAI's error shape with `param` as `param_of` names the error's field (the Responses API
/// names its fields itself).
pub(crate) fn openai_error_naming(error: ApiError, param_of: fn(&str) -> String) -> Response {
    let kind = match error.status() {
        400 | 404 | 405 | 409 | 413 | 415 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        429 => "rate_limit_exceeded",
        _ => "api_error",
    };
    let body = json!({"error": {
        "message": error.message(),
        "type": kind,
        "param": error.field().map(param_of),
        "code": crate::error::code_name(error.code()).to_ascii_lowercase(),
    }});
    // The edge's own error response (its status, `retry-after`, `www-authenticate`, and what
    // the failure log reads, so each error is logged once) with OpenAI's body.
    let mut response = error.into_response();
    *response.body_mut() = Body::from(body.to_string());
    response
}

/// A field as the caller sent it: the router names the gRPC request's fields, whose `history`
/// and `message` are this API's `messages` (same indexes: the history is the messages up to
/// the query, or all of them when the last one travels in the history; a user message's
/// `parts` are its content parts, in order), and whose tools and calls are flat.
pub(super) fn param(field: &str) -> String {
    if field == "message" {
        return "messages".to_owned();
    }
    let field = field.strip_prefix("history").map_or_else(|| field.to_owned(), |rest| format!("messages{rest}"));
    let mut out = String::with_capacity(field.len() + 16);
    for (index, segment) in field.split('.').enumerate() {
        let within = |prefix: &str| field.starts_with(prefix);
        let renamed = match segment {
            _ if segment.starts_with("parts[") => format!("content[{}", &segment["parts[".len()..]),
            "image" if within("messages[") => "image_url.url".to_owned(),
            "name" | "description" if within("tools[") && index == 1 => format!("function.{segment}"),
            "parameters_json" if within("tools[") => "function.parameters".to_owned(),
            "name" if within("messages[") && field.contains(".tool_calls[") => "function.name".to_owned(),
            "arguments_json" => "function.arguments".to_owned(),
            "function" if field == "tool_choice.function" => "function.name".to_owned(),
            "schema_json" => "schema".to_owned(),
            _ => segment.to_owned(),
        };
        if index > 0 {
            out.push('.');
        }
        out.push_str(&renamed);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_fields_are_named_as_the_caller_sent_them() {
        assert_eq!(param("history[3].tool_call_id"), "messages[3].tool_call_id");
        assert_eq!(param("message"), "messages");
        assert_eq!(param("history[1].parts[2].image"), "messages[1].content[2].image_url.url");
        assert_eq!(param("history[1].parts[0]"), "messages[1].content[0]");
        assert_eq!(param("history[2].tool_calls[1].name"), "messages[2].tool_calls[1].function.name");
        assert_eq!(param("history[2].tool_calls[1].arguments_json"), "messages[2].tool_calls[1].function.arguments");
        assert_eq!(param("tools[0].name"), "tools[0].function.name");
        assert_eq!(param("tools[3].parameters_json"), "tools[3].function.parameters");
        assert_eq!(param("tool_choice.function"), "tool_choice.function.name");
        assert_eq!(param("response_format.json_schema.schema_json"), "response_format.json_schema.schema");
        assert_eq!(param("response_format.json_schema.schema"), "response_format.json_schema.schema");
        assert_eq!(param("stop[1]"), "stop[1]");
        assert_eq!(param("session_id"), "session_id");
    }
}
