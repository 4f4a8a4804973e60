//! Property-based fuzzing of what the Messages API sends: whole response bodies and stream
//! events, as arbitrary text and as valid skeletons with hostile values.

use proptest::prelude::*;
use switchyard_testkit::fuzz::{
    array, config, hostile_text, json_leaf, json_number, json_string, json_value, member, object, one_of, small_index,
    timed,
};

use super::{parse_completion, stream::EventDecoder};
use crate::fuzz::{check, decode, output_bytes};

fn usage() -> BoxedStrategy<String> {
    object(vec![
        member("input_tokens", json_number()),
        member("output_tokens", json_number()),
        member("cache_creation_input_tokens", json_number()),
        member("cache_read_input_tokens", json_number()),
    ])
}

fn block() -> BoxedStrategy<String> {
    object(vec![
        member("type", one_of(&["text", "tool_use", "thinking"])),
        member("text", json_string()),
        member("id", one_of(&["t1", "t2"])),
        member("name", one_of(&["f", "answer"])),
        member("input", prop_oneof![json_value(), Just("{}".to_owned())].boxed()),
    ])
}

fn delta() -> BoxedStrategy<String> {
    object(vec![
        member("type", one_of(&["text_delta", "input_json_delta", "signature_delta"])),
        member("text", json_string()),
        member("partial_json", json_string()),
        member("stop_reason", one_of(&["end_turn", "tool_use", "max_tokens", "refusal"])),
    ])
}

/// One stream event's data, with its SSE name (usually the same as its `type`).
fn event() -> BoxedStrategy<(String, String)> {
    let kinds = &[
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
        "future_event",
    ];
    let message = object(vec![member("model", json_string()), member("usage", usage())]);
    let error = object(vec![
        member(
            "type",
            one_of(&["overloaded_error", "rate_limit_error", "authentication_error", "invalid_request_error"]),
        ),
        member("message", json_string()),
    ]);
    let data = prop_oneof![
        8 => object(vec![
            member("type", one_of(kinds)),
            member("index", small_index()),
            member("message", message),
            member("content_block", block()),
            member("delta", delta()),
            member("usage", usage()),
            member("error", error),
        ]),
        1 => hostile_text(),
    ];
    (prop_oneof![Just(String::new()), proptest::sample::select(kinds).prop_map(str::to_owned)], data).boxed()
}

fn body() -> BoxedStrategy<String> {
    object(vec![
        member("model", json_string()),
        member("content", array(block(), 4)),
        member("stop_reason", one_of(&["end_turn", "tool_use", "max_tokens"])),
        member("usage", usage()),
    ])
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn any_body_is_a_completion_or_an_error(
        body in prop_oneof![body(), json_leaf(), hostile_text()],
        answer_tool in proptest::option::of(Just("answer")),
    ) {
        let parsed = timed("a Messages body", || parse_completion(body.as_bytes(), answer_tool));
        if let Ok(completion) = parsed {
            let output = output_bytes(&completion);
            prop_assert!(output <= body.len() * 6, "{} bytes out of {} in", output, body.len());
        }
    }

    #[test]
    fn any_bytes_are_read_within_the_budget(body in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = timed("a Messages body", || parse_completion(&body, None));
    }

    #[test]
    fn any_stream_keeps_its_promises(
        events in proptest::collection::vec(event(), 0..16),
        answer_tool in proptest::option::of(Just("answer".to_owned())),
    ) {
        let input: usize = events.iter().map(|(name, data)| name.len() + data.len()).sum();
        let (out, ended) = timed("an event stream", || decode(EventDecoder::new("anthropic", 1, answer_tool), &events));
        check(&out, &ended, input)?;
    }
}

/// JSON nested far past serde_json's recursion limit is a protocol error, not a stack overflow.
#[test]
fn deeply_nested_values_are_refused() {
    for kind in 0..3 {
        let deep = switchyard_testkit::fuzz::deep_json(100_000, kind);
        assert!(parse_completion(deep.as_bytes(), None).is_err());
        let start = format!(
            r#"{{"type":"content_block_start","index":0,"content_block":{{"type":"tool_use","id":"t","name":"f","input":{deep}}}}}"#
        );
        let (_, ended) = decode(EventDecoder::new("anthropic", 1, None), &[("content_block_start".to_owned(), start)]);
        assert!(matches!(ended, crate::fuzz::Ended::Failed(error) if error.kind == crate::ErrorKind::Protocol));
    }
}

/// Thousands of tool calls, input pieces and stops are assembled within the budget: each
/// piece and each stop used to look through every call before it.
#[test]
fn many_tool_calls_pieces_and_stops_are_assembled_within_the_budget() {
    const CALLS: u32 = 5_000;
    let mut events: Vec<(String, String)> = (0..CALLS)
        .map(|index| {
            let data = format!(
                r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"tool_use","id":"t{index}","name":"f","input":{{}}}}}}"#
            );
            ("content_block_start".to_owned(), data)
        })
        .collect();
    let piece = r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":" "}}"#;
    events.extend((0..CALLS).map(|_| ("content_block_delta".to_owned(), piece.to_owned())));
    events.extend((0..CALLS).map(|_| ("content_block_stop".to_owned(), r#"{"type":"content_block_stop"}"#.to_owned())));
    events.push((
        "message_delta".to_owned(),
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"}}"#.to_owned(),
    ));
    events.push(("message_stop".to_owned(), r#"{"type":"message_stop"}"#.to_owned()));
    let (_, ended) = timed("5,000 tool calls", || decode(EventDecoder::new("anthropic", 1, None), &events));
    let crate::fuzz::Ended::Done(completion) = ended else { panic!("a whole answer") };
    assert_eq!(completion.tool_calls.len(), CALLS as usize);
    assert_eq!(completion.tool_calls[0].arguments.len(), CALLS as usize, "every piece reached call 0");
}

/// Input for a tool call's block after that block ended is a protocol error: read on, it made
/// the call's pieces (its whole input at the stop, then the late piece) differ from its
/// arguments (the late piece alone).
#[test]
fn tool_input_after_its_block_ended_is_a_protocol_error() {
    let events = [
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{"a":1}}}"#,
        ),
        ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"x"}}"#,
        ),
    ]
    .map(|(name, data)| (name.to_owned(), data.to_owned()));
    let (out, ended) = decode(EventDecoder::new("anthropic", 1, None), &events);
    let crate::fuzz::Ended::Failed(error) = ended else { panic!("a protocol error: {out:?}") };
    assert_eq!(error.kind, crate::ErrorKind::Protocol);
    assert!(error.message.contains("after the block ended"), "{}", error.message);
}
