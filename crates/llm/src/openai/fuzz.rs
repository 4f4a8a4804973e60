//! Property-based fuzzing of what an OpenAI-compatible server sends: whole response bodies and
//! stream chunks, as arbitrary text and as valid skeletons with hostile values.

use proptest::prelude::*;
use switchyard_testkit::fuzz::{
    array, config, hostile_text, json_leaf, json_number, json_string, json_value, member, object, one_of, small_index,
    timed,
};

use super::{parse_completion, stream::ChunkDecoder};
use crate::fuzz::{check, decode, output_bytes};

fn usage() -> BoxedStrategy<String> {
    let details = object(vec![member("cached_tokens", json_number())]);
    object(vec![
        member("prompt_tokens", json_number()),
        member("completion_tokens", json_number()),
        member("prompt_tokens_details", details),
    ])
}

fn function() -> BoxedStrategy<String> {
    object(vec![
        member("name", one_of(&["f", "g", ""])),
        member("arguments", prop_oneof![json_string(), json_value()].boxed()),
    ])
}

fn tool_call() -> BoxedStrategy<String> {
    object(vec![
        member("index", small_index()),
        member("id", one_of(&["a", "b", ""])),
        member("type", one_of(&["function"])),
        member("function", function()),
    ])
}

fn finish_reason() -> BoxedStrategy<String> {
    one_of(&["stop", "length", "tool_calls", "function_call", "content_filter"])
}

/// One `chat.completion.chunk`, `[DONE]`, an error object or any text.
fn chunk() -> BoxedStrategy<String> {
    let delta = object(vec![
        member("role", one_of(&["assistant"])),
        member("content", json_string()),
        member("refusal", json_string()),
        member("tool_calls", array(tool_call(), 4)),
    ]);
    let choice =
        object(vec![member("index", small_index()), member("delta", delta), member("finish_reason", finish_reason())]);
    prop_oneof![
        8 => object(vec![member("model", json_string()), member("choices", array(choice, 3)), member("usage", usage())]),
        1 => Just("[DONE]".to_owned()),
        1 => object(vec![member("error", json_value())]),
        1 => hostile_text(),
    ]
    .boxed()
}

/// A whole (non-streamed) chat completion.
fn body() -> BoxedStrategy<String> {
    let message = object(vec![
        member("content", json_string()),
        member("refusal", json_string()),
        member("tool_calls", array(tool_call(), 4)),
    ]);
    let choice = object(vec![member("message", message), member("finish_reason", finish_reason())]);
    object(vec![member("model", json_string()), member("choices", array(choice, 3)), member("usage", usage())])
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn any_body_is_a_completion_or_an_error(body in prop_oneof![body(), json_leaf(), hostile_text()]) {
        let parsed = timed("a completion body", || parse_completion(body.as_bytes()));
        if let Ok(completion) = parsed {
            let output = output_bytes(&completion);
            prop_assert!(output <= body.len() * 6, "{} bytes out of {} in", output, body.len());
        }
    }

    #[test]
    fn any_bytes_are_read_within_the_budget(body in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = timed("a completion body", || parse_completion(&body));
    }

    #[test]
    fn any_stream_keeps_its_promises(chunks in proptest::collection::vec(chunk(), 0..12)) {
        let events: Vec<(String, String)> = chunks.iter().map(|data| (String::new(), data.clone())).collect();
        let input: usize = chunks.iter().map(String::len).sum();
        let (out, ended) = timed("a chunk stream", || decode(ChunkDecoder::new("openai", 1), &events));
        check(&out, &ended, input)?;
    }
}

/// JSON nested far past serde_json's recursion limit is a protocol error, not a stack overflow.
#[test]
fn deeply_nested_values_are_refused() {
    for kind in 0..3 {
        let deep = switchyard_testkit::fuzz::deep_json(100_000, kind);
        assert!(parse_completion(deep.as_bytes()).is_err());
        let chunk = format!(
            r#"{{"choices":[{{"delta":{{"tool_calls":[{{"function":{{"name":"f","arguments":{deep}}}}}]}}}}]}}"#
        );
        let (_, ended) = decode(ChunkDecoder::new("openai", 1), &[(String::new(), chunk)]);
        assert!(matches!(ended, crate::fuzz::Ended::Failed(error) if error.kind == crate::ErrorKind::Protocol));
    }
}

/// A chunk with twenty thousand tool calls, each of its own index, is assembled within the
/// budget: each piece used to look for its call among all the calls before it.
#[test]
fn many_tool_calls_are_assembled_within_the_budget() {
    let calls: Vec<String> = (0..20_000)
        .map(|index| format!(r#"{{"index":{index},"id":"c{index}","function":{{"name":"f","arguments":"{{}}"}}}}"#))
        .collect();
    let chunk =
        format!(r#"{{"choices":[{{"delta":{{"tool_calls":[{}]}},"finish_reason":"tool_calls"}}]}}"#, calls.join(","));
    let (out, ended) = timed("20,000 tool calls", || decode(ChunkDecoder::new("openai", 1), &[(String::new(), chunk)]));
    let crate::fuzz::Ended::Done(completion) = ended else { panic!("a whole answer") };
    assert_eq!(completion.tool_calls.len(), 20_000);
    assert_eq!(out.len(), 40_000, "one ToolCallStarted and one ToolCallDelta per call");
}
