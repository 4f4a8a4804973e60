//! Responses' errors: OpenAI's error shape, naming the caller's fields.

use axum::response::Response;
use switchyard_kit::store::StoreError;

use super::request::Origin;
use crate::{error::ApiError, llm_api::openai::openai_error_naming};

/// Responses' errors name the caller's fields already (see [`caller_field`]).
pub(super) fn responses_error(error: ApiError) -> Response {
    openai_error_naming(error, str::to_owned)
}

/// The store could not be read: the caller may retry.
pub(super) fn store_unavailable(err: &StoreError) -> ApiError {
    ApiError::unavailable(format!("stored responses cannot be read now ({err}); retry"))
}

/// A field the router named, as the caller's request has it: `history[i]` is the input item
/// (or `previous_response_id`, or `instructions`) it came from, `message` is `input`.
pub(super) fn caller_field(field: &str, origins: &[Origin]) -> String {
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
