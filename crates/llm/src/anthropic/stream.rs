//! Assembles a Messages API stream: `message_start` (model, prompt tokens), content blocks that
//! open with `content_block_start` and grow by `text_delta` or `input_json_delta` pieces,
//! `message_delta` (stop reason, output tokens) and `message_stop`. An `error` event ends the
//! stream with that error. A tool call's input pieces pass on as [`StreamEvent::ToolCallDelta`];
//! those of the answer tool (a JSON response format, see `AnswerTool`) as the answer's text.

use std::collections::{HashMap, VecDeque};

use super::{arguments_text, finish_reason, wire};
use crate::{Completion, ErrorKind, ProviderError, StreamEvent, ToolCall, Usage, sse::SseEvent, streaming::Decoder};

pub struct EventDecoder {
    provider: String,
    attempts: u32,
    model: String,
    content: String,
    calls: Vec<PartialToolUse>,
    /// The position in `calls` of each content block's latest call, for its input pieces, and
    /// of its calls not yet ended (one each, unless a server repeats an index): a stream may
    /// hold thousands of calls, pieces and stops, each found in one step.
    last_of_block: HashMap<u32, usize>,
    open_of_block: HashMap<u32, Vec<usize>>,
    /// The calls before this position have been ended by a stop naming no block.
    all_stopped_before: usize,
    stop_reason: Option<String>,
    usage: Usage,
    /// The answer tool's name, when the request asked for a JSON answer.
    answer_tool: Option<String>,
    /// The answer tool's call: its content block, its input pieces so far, its whole input.
    answer: Option<PartialToolUse>,
}

struct PartialToolUse {
    /// The content block the call is; its input pieces name it.
    block: u32,
    id: String,
    name: String,
    /// `partial_json` pieces joined.
    input_json: String,
    /// The input given whole in `content_block_start` (an empty object when it will stream).
    start_input: serde_json::Value,
    /// The block has ended.
    stopped: bool,
}

impl PartialToolUse {
    /// What no input piece said: the input given whole at the start, once the block ends with
    /// no pieces (a call without arguments), so that the pieces always add up to the arguments.
    fn unstreamed_input(&mut self) -> Option<String> {
        if self.stopped {
            return None;
        }
        self.stopped = true;
        let whole = arguments_text(&self.start_input);
        (self.input_json.is_empty() && !whole.is_empty()).then_some(whole)
    }

    fn arguments(self) -> String {
        if self.input_json.is_empty() { arguments_text(&self.start_input) } else { self.input_json }
    }
}

impl EventDecoder {
    pub fn new(provider: &str, attempts: u32, answer_tool: Option<String>) -> Self {
        Self {
            provider: provider.to_owned(),
            attempts,
            model: String::new(),
            content: String::new(),
            calls: Vec::new(),
            last_of_block: HashMap::new(),
            open_of_block: HashMap::new(),
            all_stopped_before: 0,
            stop_reason: None,
            usage: Usage::default(),
            answer_tool,
            answer: None,
        }
    }

    /// Ends the block `index`: a tool call's input given whole, if no piece streamed it.
    fn block_stopped(&mut self, index: Option<u32>, out: &mut VecDeque<StreamEvent>) {
        let ends = |call: &PartialToolUse| index.is_none_or(|index| call.block == index);
        if let Some(text) =
            self.answer.as_mut().filter(|answer| ends(answer)).and_then(PartialToolUse::unstreamed_input)
        {
            self.text(text, out);
        }
        let positions: Vec<usize> = match index {
            Some(index) => self.open_of_block.remove(&index).unwrap_or_default(),
            None => (std::mem::replace(&mut self.all_stopped_before, self.calls.len())..self.calls.len()).collect(),
        };
        for position in positions {
            if let Some(arguments) = self.calls[position].unstreamed_input() {
                out.push_back(StreamEvent::ToolCallDelta { index: position as u32, id: None, name: None, arguments });
            }
        }
    }

    fn error(&self, kind: ErrorKind, message: String) -> ProviderError {
        ProviderError::new(self.provider.clone(), kind, message)
    }

    fn text(&mut self, text: String, out: &mut VecDeque<StreamEvent>) {
        if !text.is_empty() {
            self.content.push_str(&text);
            out.push_back(StreamEvent::Text(text));
        }
    }

    fn usage(&mut self, usage: wire::Usage) {
        if let Some(prompt) = usage.prompt_tokens() {
            self.usage.prompt_tokens = prompt;
        }
        if let Some(cached) = usage.cache_read_input_tokens {
            self.usage.cached_prompt_tokens = cached;
        }
        // Cumulative in `message_delta`: the last one counts.
        if let Some(output) = usage.output_tokens {
            self.usage.completion_tokens = output;
        }
    }

    fn completion(&mut self) -> Completion {
        self.last_of_block.clear();
        self.open_of_block.clear();
        self.all_stopped_before = 0;
        let tool_calls: Vec<ToolCall> = std::mem::take(&mut self.calls)
            .into_iter()
            .map(|call| ToolCall { id: call.id.clone(), name: call.name.clone(), arguments: call.arguments() })
            .collect();
        Completion {
            content: std::mem::take(&mut self.content),
            finish_reason: finish_reason(self.stop_reason.as_deref(), !tool_calls.is_empty()),
            tool_calls,
            usage: self.usage,
            model: std::mem::take(&mut self.model),
            attempts: self.attempts,
        }
    }
}

impl Decoder for EventDecoder {
    fn event(&mut self, event: SseEvent, out: &mut VecDeque<StreamEvent>) -> Result<bool, ProviderError> {
        let parsed: wire::StreamEvent = serde_json::from_str(&event.data).map_err(|err| {
            self.error(ErrorKind::Protocol, format!("a `{}` stream event is not understood: {err}", event.event))
        })?;
        match parsed {
            wire::StreamEvent::MessageStart { message } => {
                if let Some(model) = message.model {
                    self.model = model;
                }
                self.usage(message.usage.unwrap_or_default());
            }
            wire::StreamEvent::ContentBlockStart { index, content_block } => match content_block {
                wire::ResponseBlock::Text { text } => self.text(text, out),
                wire::ResponseBlock::ToolUse { id, name, input } => {
                    let call = PartialToolUse {
                        block: index,
                        id,
                        name,
                        input_json: String::new(),
                        start_input: input,
                        stopped: false,
                    };
                    if self.answer_tool.as_deref() == Some(call.name.as_str()) {
                        self.answer = Some(call);
                    } else {
                        out.push_back(StreamEvent::ToolCallStarted { id: call.id.clone(), name: call.name.clone() });
                        out.push_back(StreamEvent::ToolCallDelta {
                            index: self.calls.len() as u32,
                            id: Some(call.id.clone()),
                            name: Some(call.name.clone()),
                            arguments: String::new(),
                        });
                        self.last_of_block.insert(index, self.calls.len());
                        self.open_of_block.entry(index).or_default().push(self.calls.len());
                        self.calls.push(call);
                    }
                }
                wire::ResponseBlock::Other => {}
            },
            wire::StreamEvent::ContentBlockDelta { index, delta } => match delta {
                wire::BlockDelta::TextDelta { text } => self.text(text, out),
                wire::BlockDelta::InputJsonDelta { partial_json } => {
                    if let Some(answer) = self.answer.as_mut().filter(|answer| answer.block == index) {
                        answer.input_json.push_str(&partial_json);
                        self.text(partial_json, out);
                        return Ok(false);
                    }
                    let Some(position) = self.last_of_block.get(&index).copied() else {
                        return Err(self.error(
                            ErrorKind::Protocol,
                            format!("tool input for content block {index}, which is not a tool call"),
                        ));
                    };
                    // Past its end a piece would make the pieces differ from the arguments.
                    if self.calls[position].stopped {
                        return Err(self.error(
                            ErrorKind::Protocol,
                            format!("tool input for content block {index} after the block ended"),
                        ));
                    }
                    self.calls[position].input_json.push_str(&partial_json);
                    if !partial_json.is_empty() {
                        out.push_back(StreamEvent::ToolCallDelta {
                            index: position as u32,
                            id: None,
                            name: None,
                            arguments: partial_json,
                        });
                    }
                }
                wire::BlockDelta::Other => {}
            },
            wire::StreamEvent::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.and_then(|delta| delta.stop_reason) {
                    self.stop_reason = Some(reason);
                }
                self.usage(usage.unwrap_or_default());
            }
            wire::StreamEvent::ContentBlockStop { index } => self.block_stopped(index, out),
            wire::StreamEvent::MessageStop => {
                self.block_stopped(None, out);
                out.push_back(StreamEvent::Done(self.completion()));
                return Ok(true);
            }
            wire::StreamEvent::Error { error } => {
                let kind = match error.kind.as_str() {
                    "rate_limit_error" => ErrorKind::RateLimited,
                    "authentication_error" | "permission_error" => ErrorKind::Auth,
                    "invalid_request_error" | "not_found_error" | "request_too_large" => ErrorKind::Rejected,
                    _ => ErrorKind::Server, // `overloaded_error`, `api_error` and anything new.
                };
                return Err(self.error(kind, format!("the stream reported {}: {}", error.kind, error.message)));
            }
            wire::StreamEvent::Ping | wire::StreamEvent::Other => {}
        }
        Ok(false)
    }

    fn ended_early(&mut self) -> Result<Completion, ProviderError> {
        if self.stop_reason.is_some() {
            // Deltas still owed cannot be queued from here; `Done` carries the whole calls.
            Ok(self.completion())
        } else {
            Err(self.error(ErrorKind::Connect, "the stream ended before `message_stop`".to_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(data: &str) -> SseEvent {
        SseEvent { event: "test".to_owned(), data: data.to_owned() }
    }

    #[test]
    fn overloaded_mid_stream_is_a_server_error_after_the_text_so_far() {
        let mut decoder = EventDecoder::new("anthropic", 1, None);
        let mut out = VecDeque::new();
        decoder
            .event(
                event(r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"Hel"}}"#),
                &mut out,
            )
            .unwrap();
        let error = decoder
            .event(event(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#), &mut out)
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::Server);
        assert!(error.message.contains("Overloaded"), "{error}");
        assert_eq!(out, [StreamEvent::Text("Hel".into())]);
    }

    #[test]
    fn input_for_an_unknown_block_and_unknown_events_are_handled() {
        let mut decoder = EventDecoder::new("anthropic", 1, None);
        let mut out = VecDeque::new();
        assert!(!decoder.event(event(r#"{"type":"something_new","x":1}"#), &mut out).unwrap());
        let delta =
            r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{"}}"#;
        assert_eq!(decoder.event(event(delta), &mut out).unwrap_err().kind, ErrorKind::Protocol);
        assert_eq!(decoder.event(event("{"), &mut out).unwrap_err().kind, ErrorKind::Protocol);
    }

    #[test]
    fn the_answer_tool_streams_as_text_and_other_calls_as_deltas() {
        let mut decoder = EventDecoder::new("anthropic", 1, Some("place".to_owned()));
        let mut out = VecDeque::new();
        for data in [
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t0","name":"place","input":{}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"Oslo\"}"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t1","name":"now","input":{}}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#,
        ] {
            assert!(!decoder.event(event(data), &mut out).unwrap());
        }
        assert!(decoder.event(event(r#"{"type":"message_stop"}"#), &mut out).unwrap());
        let delta = |id: Option<&str>, name: Option<&str>, arguments: &str| StreamEvent::ToolCallDelta {
            index: 0,
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            arguments: arguments.to_owned(),
        };
        let Some(StreamEvent::Done(completion)) = out.pop_back() else { panic!("done last: {out:?}") };
        assert_eq!(
            out,
            [
                StreamEvent::Text(r#"{"city":"#.into()),
                StreamEvent::Text(r#""Oslo"}"#.into()),
                StreamEvent::ToolCallStarted { id: "t1".into(), name: "now".into() },
                delta(Some("t1"), Some("now"), ""),
                // No input pieces: the input given whole at the start, once the block ends.
                delta(None, None, "{}"),
            ]
        );
        assert_eq!(completion.content, r#"{"city":"Oslo"}"#);
        assert_eq!(completion.tool_calls, [ToolCall { id: "t1".into(), name: "now".into(), arguments: "{}".into() }]);
        assert_eq!(completion.finish_reason, crate::FinishReason::ToolCalls);
    }
}
