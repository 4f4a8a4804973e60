//! What the vendor fuzz suites (`openai/fuzz.rs`, `anthropic/fuzz.rs`) share: feeding a
//! decoder stream events as a hostile server might send them, and the promises its output keeps
//! whatever came in.

use std::collections::VecDeque;

use proptest::{prelude::*, test_runner::TestCaseError};

use crate::{Completion, ErrorKind, ProviderError, StreamEvent, sse::SseEvent, streaming::Decoder};

/// The bytes a completion holds: its content and each tool call's id, name and arguments (what
/// must stay bounded by the body it was read from).
pub(crate) fn output_bytes(completion: &Completion) -> usize {
    completion.content.len()
        + completion.tool_calls.iter().map(|call| call.id.len() + call.name.len() + call.arguments.len()).sum::<usize>()
}

/// How a decoded stream ended.
pub(crate) enum Ended {
    /// The end marker came, or the body ended on a whole answer.
    Done(Completion),
    Failed(ProviderError),
}

/// Feeds `events` (SSE name and data) until the decoder is done or fails, then ends the body.
pub(crate) fn decode(mut decoder: impl Decoder, events: &[(String, String)]) -> (VecDeque<StreamEvent>, Ended) {
    let mut out = VecDeque::new();
    for (event, data) in events {
        match decoder.event(SseEvent { event: event.clone(), data: data.clone() }, &mut out) {
            Ok(false) => {}
            Ok(true) => match out.pop_back() {
                Some(StreamEvent::Done(completion)) => return (out, Ended::Done(completion)),
                other => panic!("the end marker came without `Done` last: {other:?}"),
            },
            Err(error) => return (out, Ended::Failed(error)),
        }
    }
    match decoder.ended_early() {
        Ok(completion) => (out, Ended::Done(completion)),
        Err(error) => (out, Ended::Failed(error)),
    }
}

/// What holds of any decoded stream: no `Done` before the end, errors of the kinds a stream can
/// report, the text events joined are the answer's content, and each announced call's argument
/// pieces joined are its arguments; nothing grows past what came in.
pub(crate) fn check(out: &VecDeque<StreamEvent>, ended: &Ended, input_bytes: usize) -> Result<(), TestCaseError> {
    prop_assert!(!out.iter().any(|event| matches!(event, StreamEvent::Done(_))), "`Done` before the end");
    let completion = match ended {
        Ended::Failed(error) => {
            let expected = [
                ErrorKind::Protocol,
                ErrorKind::Server,
                ErrorKind::Connect,
                ErrorKind::RateLimited,
                ErrorKind::Auth,
                ErrorKind::Rejected,
            ];
            prop_assert!(expected.contains(&error.kind), "unexpected kind {:?}", error.kind);
            prop_assert!(!error.message.is_empty());
            return Ok(());
        }
        Ended::Done(completion) => completion,
    };
    let text: String = out
        .iter()
        .filter_map(|event| match event {
            StreamEvent::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    prop_assert_eq!(&text, &completion.content);
    let mut pieces: Vec<Option<String>> = vec![None; completion.tool_calls.len()];
    for event in out {
        if let StreamEvent::ToolCallDelta { index, arguments, .. } = event {
            let calls = completion.tool_calls.len();
            let Some(joined) = pieces.get_mut(*index as usize) else {
                return Err(TestCaseError::fail(format!("a delta for call {index} of {calls}")));
            };
            joined.get_or_insert_with(String::new).push_str(arguments);
        }
    }
    for (call, joined) in completion.tool_calls.iter().zip(&pieces) {
        if let Some(joined) = joined {
            prop_assert_eq!(joined, &call.arguments, "call {}'s pieces", call.id);
        }
    }
    let output = completion.content.len()
        + completion
            .tool_calls
            .iter()
            .map(|call| call.id.len() + call.name.len() + call.arguments.len())
            .sum::<usize>();
    // Arguments given as JSON values are re-serialized (NUL as `\u0000`: 6 bytes for 1).
    prop_assert!(output <= input_bytes * 6 + 16, "{} bytes out of {} in", output, input_bytes);
    Ok(())
}
