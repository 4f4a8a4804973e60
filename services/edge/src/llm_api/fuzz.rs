//! Request bodies for the fuzz suites of the three LLM APIs' request readers (each in its
//! `request.rs`): one skeleton holding the fields of chat completions, Messages and Responses
//! alike (each reader ignores the others' fields), with hostile values in every place.

use proptest::prelude::*;
use serde_json::Value;
use switchyard_testkit::fuzz::{array, json_leaf, json_number, json_string, json_value, member, object, one_of};

use crate::error::ApiError;

fn image() -> BoxedStrategy<String> {
    let url = prop_oneof![
        one_of(&["https://example.com/a.png", "data:image/png;base64,iVBORw0KGgo=", "data:,", "file:///etc/passwd"]),
        json_string(),
    ]
    .boxed();
    let source = object(vec![
        member("type", one_of(&["base64", "url"])),
        member("media_type", one_of(&["image/png", "text/html"])),
        member("data", json_string()),
        member("url", url.clone()),
    ]);
    object(vec![
        member("url", url),
        member("detail", one_of(&["auto", "low", "high", "ultra"])),
        member("source", source),
    ])
}

/// A content part or block of any of the three APIs.
fn part() -> BoxedStrategy<String> {
    let kinds = &[
        "text",
        "image_url",
        "image",
        "tool_use",
        "tool_result",
        "input_text",
        "input_image",
        "output_text",
        "refusal",
        "thinking",
    ];
    object(vec![
        member("type", one_of(kinds)),
        member("text", json_string()),
        member("image_url", prop_oneof![image(), json_string()].boxed()),
        member("source", image()),
        member("id", one_of(&["call_1", "toolu_1", ""])),
        member("name", one_of(&["lookup", "", "bad name!"])),
        member("input", json_value()),
        member("tool_use_id", one_of(&["toolu_1", "missing"])),
        member("content", prop_oneof![json_string(), array(json_leaf(), 3)].boxed()),
        member("is_error", json_leaf()),
    ])
}

fn tool_call() -> BoxedStrategy<String> {
    let function = object(vec![
        member("name", one_of(&["lookup", "", "bad name!"])),
        member("arguments", prop_oneof![json_string(), json_value()].boxed()),
    ]);
    object(vec![
        member("id", one_of(&["call_1", "call_2"])),
        member("type", one_of(&["function"])),
        member("function", function),
    ])
}

/// A message (chat completions, Messages) or an input item (Responses).
fn message() -> BoxedStrategy<String> {
    let roles = &["system", "developer", "user", "assistant", "tool", "function"];
    let types = &["message", "function_call", "function_call_output", "item_reference", "reasoning"];
    object(vec![
        member("role", one_of(roles)),
        member("type", one_of(types)),
        member("content", prop_oneof![json_string(), array(part(), 4)].boxed()),
        member("tool_calls", array(tool_call(), 3)),
        member("tool_call_id", one_of(&["call_1", "call_2"])),
        member("call_id", one_of(&["call_1", "call_2"])),
        member("name", one_of(&["lookup", ""])),
        member("arguments", prop_oneof![json_string(), json_value()].boxed()),
        member("output", prop_oneof![json_string(), array(part(), 2)].boxed()),
    ])
}

fn tool() -> BoxedStrategy<String> {
    let function = object(vec![
        member(
            "name",
            one_of(&["lookup", "", "bad name!", "a_very_long_name_a_very_long_name_a_very_long_name_a_very_long_name"]),
        ),
        member("description", json_string()),
        member("parameters", json_value()),
        member("strict", json_leaf()),
    ]);
    object(vec![
        member("type", one_of(&["function", "custom", "web_search", "computer_20250124"])),
        member("function", function),
        member("name", one_of(&["lookup", ""])),
        member("description", json_string()),
        member("parameters", json_value()),
        member("input_schema", json_value()),
    ])
}

/// A request body of any of the three APIs, as JSON text.
pub(crate) fn body() -> BoxedStrategy<String> {
    let models = &["switchyard", "switchyard-direct", "openai/gpt-4o", "gpt-4o", "claude-sonnet-4-5", "nope/x", ""];
    let format = object(vec![
        member("type", one_of(&["text", "json_object", "json_schema"])),
        member(
            "json_schema",
            object(vec![
                member("name", one_of(&["answer", ""])),
                member("schema", json_value()),
                member("strict", json_leaf()),
            ]),
        ),
        member("name", one_of(&["answer"])),
        member("schema", json_value()),
    ]);
    let choice = prop_oneof![
        one_of(&["auto", "none", "required", "any"]),
        object(vec![
            member("type", one_of(&["function", "tool", "auto", "any", "none"])),
            member("name", one_of(&["lookup", "missing"])),
            member("function", object(vec![member("name", one_of(&["lookup", "missing"]))]))
        ]),
    ]
    .boxed();
    let first = vec![
        member("model", one_of(models)),
        member("messages", array(message(), 6)),
        member("input", prop_oneof![json_string(), array(message(), 6)].boxed()),
        member("system", prop_oneof![json_string(), array(part(), 3)].boxed()),
        member("instructions", json_string()),
        member("tools", array(tool(), 4)),
        member("tool_choice", choice),
        member("response_format", format.clone()),
        member("text", object(vec![member("format", format)])),
    ];
    let second = vec![
        member("stop", prop_oneof![json_string(), array(json_string(), 6)].boxed()),
        member("stop_sequences", array(json_string(), 6)),
        member("max_tokens", json_number()),
        member("max_completion_tokens", json_number()),
        member("max_output_tokens", json_number()),
        member("temperature", json_number()),
        member("n", json_number()),
        member("stream", json_leaf()),
        member("stream_options", object(vec![member("include_usage", json_leaf())])),
        member("parallel_tool_calls", json_leaf()),
        member("previous_response_id", one_of(&["resp_1", ""])),
        member("store", json_leaf()),
        member("metadata", json_value()),
        member("session_id", json_string()),
        member("functions", json_value()),
    ];
    (object(first), object(second))
        .prop_map(|(first, second)| {
            // Two objects' members in one.
            match (first.strip_suffix('}'), second.strip_prefix('{')) {
                (Some(head), Some("}")) => format!("{head}}}"),
                (Some("{"), Some(tail)) => format!("{{{tail}"),
                (Some(head), Some(tail)) => format!("{head},{tail}"),
                _ => first,
            }
        })
        .boxed()
}

/// A body as the handlers read it: JSON text to a value (deeper than serde_json's recursion
/// limit is refused there, before any reader).
pub(crate) fn parsed(body: &str) -> Option<Value> {
    serde_json::from_str(body).ok()
}

/// What a refusal of a request reader must be: a 400 naming a field.
pub(crate) fn check_refusal(error: &ApiError) -> Result<(), TestCaseError> {
    prop_assert_eq!(error.status(), 400, "{:?}", error);
    prop_assert!(error.field().is_some_and(|field| !field.is_empty()), "no field: {:?}", error);
    Ok(())
}
