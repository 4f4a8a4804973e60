//! Text Postgres can store. Rust strings are valid UTF-8 (prost and serde refuse anything
//! else), so the one character left that Postgres `text` and `jsonb` refuse is NUL (U+0000).
//! Two rules, decided per field by the services:
//! - identifiers and catalog text (ids, names, prompts, patterns: stored as-is and reused)
//!   are refused with a [`FieldError`] naming the field, through [`reject_nul`];
//! - conversation content (messages, tool arguments and results: only recorded) is accepted,
//!   passed on unchanged, and stored with each NUL replaced by U+FFFD, through [`scrub_nul`]
//!   and [`scrub_nul_json`] in the record writers.

use std::borrow::Cow;

use serde_json::Value;

use crate::identity::FieldError;

/// Refuses `text` holding a NUL character, naming `field`.
pub fn reject_nul(field: &str, text: &str) -> Result<(), FieldError> {
    match text.find('\0') {
        None => Ok(()),
        Some(at) => Err(FieldError::new(field, format!("must not contain a NUL character (found at byte {at})"))),
    }
}

/// [`reject_nul`] over every item of a list field, naming the item (`field[2]`).
pub fn reject_nul_in<'a>(field: &str, items: impl IntoIterator<Item = &'a str>) -> Result<(), FieldError> {
    items.into_iter().enumerate().try_for_each(|(index, item)| reject_nul(&format!("{field}[{index}]"), item))
}

/// `text` with every NUL replaced by U+FFFD; borrowed (no copy) when there is none.
pub fn scrub_nul(text: &str) -> Cow<'_, str> {
    if text.contains('\0') { Cow::Owned(text.replace('\0', "\u{FFFD}")) } else { Cow::Borrowed(text) }
}

/// `value` with every NUL in its strings and object keys replaced by U+FFFD (`jsonb` refuses
/// `\u0000`); borrowed when there is none.
pub fn scrub_nul_json(value: &Value) -> Cow<'_, Value> {
    if holds_nul(value) { Cow::Owned(scrubbed(value)) } else { Cow::Borrowed(value) }
}

fn holds_nul(value: &Value) -> bool {
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(fields) => fields.iter().any(|(key, value)| key.contains('\0') || holds_nul(value)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

fn scrubbed(value: &Value) -> Value {
    match value {
        Value::String(text) => Value::String(scrub_nul(text).into_owned()),
        Value::Array(items) => Value::Array(items.iter().map(scrubbed).collect()),
        Value::Object(fields) => {
            Value::Object(fields.iter().map(|(key, value)| (scrub_nul(key).into_owned(), scrubbed(value))).collect())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nul_is_refused_naming_the_field() {
        assert!(reject_nul("name", "finance expert").is_ok());
        let err = reject_nul("system_prompt", "you are\0 an expert").expect_err("nul");
        assert_eq!(err.field, "system_prompt");
        assert!(err.reason.contains("NUL"), "{err}");
        let err = reject_nul_in("keywords", ["loan", "rate\0"]).expect_err("nul");
        assert_eq!(err.field, "keywords[1]");
    }

    #[test]
    fn scrubbing_replaces_nul_and_copies_only_when_needed() {
        assert!(matches!(scrub_nul("plain"), Cow::Borrowed("plain")));
        assert_eq!(scrub_nul("a\0b\0"), "a\u{FFFD}b\u{FFFD}");
        let clean = json!({"a": [1, "x"]});
        assert!(matches!(scrub_nul_json(&clean), Cow::Borrowed(_)));
        let dirty = json!({"k\u{0}": ["ok", {"deep": "v\u{0}"}], "n": 1});
        assert_eq!(scrub_nul_json(&dirty).into_owned(), json!({"k\u{FFFD}": ["ok", {"deep": "v\u{FFFD}"}], "n": 1}));
    }
}
