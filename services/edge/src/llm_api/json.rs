//! A request's JSON fields read one at a time, each refusal naming the field.

use serde_json::{Map, Value};

use crate::error::ApiError;

/// OpenAI's limit on a function's (and a JSON schema format's) name.
pub(crate) const MAX_NAME_LEN: usize = 64;

/// OpenAI's rule for function names: 1 to 64 characters of `[A-Za-z0-9_-]`.
pub(crate) fn check_name(name: &str, field: &str) -> Result<(), ApiError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(ApiError::bad_request(field, format!("must be 1 to {MAX_NAME_LEN} characters")));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(ApiError::bad_request(field, "may hold only letters, digits, `_` and `-`"));
    }
    Ok(())
}

pub(crate) fn string(object: &Map<String, Value>, field: &str) -> Result<Option<String>, ApiError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(ApiError::bad_request(field, "must be a string")),
    }
}

pub(crate) fn bool_field(object: &Map<String, Value>, field: &str, prefix: &str) -> Result<Option<bool>, ApiError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(value)) => Ok(Some(*value)),
        Some(_) => Err(ApiError::bad_request(format!("{prefix}{field}"), "must be true or false")),
    }
}

pub(crate) fn u32_field(object: &Map<String, Value>, field: &str) -> Result<Option<u32>, ApiError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => number
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| ApiError::bad_request(field, "must be a whole number from 0 to 4294967295")),
        Some(_) => Err(ApiError::bad_request(field, "must be a number")),
    }
}

pub(crate) fn number(object: &Map<String, Value>, field: &str) -> Result<Option<f64>, ApiError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => Ok(number.as_f64()),
        Some(_) => Err(ApiError::bad_request(field, "must be a number")),
    }
}
