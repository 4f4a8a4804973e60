//! Answers come through whole: text, tool calls assembled from many pieces, usage, finish reason.

use switchyard_llm::{FinishReason, StreamEvent, Usage};
use switchyard_testkit::llm::{Reply, ScriptedLlm};

use crate::support::{MODES, Mode, Vendor, ask, question, streamed_text};

for_each_vendor!(
    text_answer,
    tool_call_split_across_many_chunks,
    two_tool_calls_after_text,
    malformed_tool_arguments_come_through_verbatim,
    usage_and_finish_reason
);

async fn text_answer(vendor: Vendor) {
    let answer = "Paris is sunny today, with a light breeze from the west.";
    let server = ScriptedLlm::start(move |_| Reply::text(answer).model("scripted-1")).await;
    let provider = vendor.on(&server);
    for mode in MODES {
        let (completion, events) = ask(provider.as_ref(), question("Weather in Paris?"), mode).await.unwrap();
        assert_eq!(completion.content, answer, "{mode:?}");
        assert!(completion.tool_calls.is_empty());
        assert_eq!(completion.finish_reason, FinishReason::Stop);
        assert_eq!(completion.model, "scripted-1");
        assert_eq!(completion.attempts, 1);
        if mode == Mode::Stream {
            assert_eq!(streamed_text(&events), answer);
            assert!(events.len() > 10, "text arrives in many deltas (3 characters each): {events:?}");
            assert!(events.iter().all(|event| matches!(event, StreamEvent::Text(text) if !text.is_empty())));
        }
    }
    assert_eq!(server.requests().len(), 2);
}

async fn tool_call_split_across_many_chunks(vendor: Vendor) {
    let arguments = r#"{"city": "Saint-Rémy-de-Provence", "units": "celsius", "days": [1, 2, 3], "detail": {"hourly": true, "note": "a \"quoted\" word"}}"#;
    let server = ScriptedLlm::start(move |_| Reply::tool_call("get_weather", arguments).chunk_size(2)).await;
    let provider = vendor.on(&server);
    for mode in MODES {
        let (completion, events) = ask(provider.as_ref(), question("Weather?"), mode).await.unwrap();
        assert_eq!(completion.tool_calls.len(), 1, "{mode:?}");
        let call = &completion.tool_calls[0];
        assert_eq!(call.name, "get_weather");
        assert!(!call.id.is_empty());
        assert_eq!(completion.finish_reason, FinishReason::ToolCalls);
        let parsed = call.parsed_arguments().unwrap();
        assert_eq!(parsed["city"], "Saint-Rémy-de-Provence");
        assert_eq!(parsed["detail"]["note"], "a \"quoted\" word");
        match mode {
            // Non-streaming Anthropic answers carry the input as an object: its text is re-serialised.
            Mode::Complete if vendor == Vendor::Anthropic => {
                assert_eq!(
                    serde_json::from_str::<serde_json::Value>(&call.arguments).unwrap(),
                    serde_json::from_str::<serde_json::Value>(arguments).unwrap()
                );
            }
            _ => assert_eq!(call.arguments, arguments, "{mode:?}: assembled exactly"),
        }
        if mode == Mode::Stream {
            assert_eq!(events[0], StreamEvent::ToolCallStarted { id: call.id.clone(), name: "get_weather".into() });
            // Then the argument text as it streams: id and name on the first piece only, the
            // pieces adding up to the arguments exactly.
            let mut joined = String::new();
            for (position, event) in events[1..].iter().enumerate() {
                let StreamEvent::ToolCallDelta { index: 0, id, name, arguments } = event else {
                    panic!("{mode:?}: a delta of call 0, got {event:?}")
                };
                let first = position == 0;
                assert_eq!(id.as_deref(), first.then_some(call.id.as_str()), "{event:?}");
                assert_eq!(name.as_deref(), first.then_some("get_weather"), "{event:?}");
                joined.push_str(arguments);
            }
            assert_eq!(joined, arguments);
            assert!(events.len() > 20, "the arguments arrive in many pieces (2 characters each): {events:?}");
        }
    }
}

async fn two_tool_calls_after_text(vendor: Vendor) {
    let server = ScriptedLlm::start(|_| {
        Reply::text("Let me check both.")
            .and_tool_call("get_weather", r#"{"city":"Paris"}"#)
            .and_tool_call("get_time", r#"{"zone":"Europe/Paris"}"#)
    })
    .await;
    let provider = vendor.on(&server);
    for mode in MODES {
        let (completion, events) = ask(provider.as_ref(), question("Weather and time?"), mode).await.unwrap();
        assert_eq!(completion.content, "Let me check both.", "{mode:?}");
        let calls: Vec<_> =
            completion.tool_calls.iter().map(|call| (call.name.as_str(), call.arguments.as_str())).collect();
        assert_eq!(calls, [("get_weather", r#"{"city":"Paris"}"#), ("get_time", r#"{"zone":"Europe/Paris"}"#)]);
        assert_ne!(completion.tool_calls[0].id, completion.tool_calls[1].id);
        assert_eq!(completion.finish_reason, FinishReason::ToolCalls);
        if mode == Mode::Stream {
            let started: Vec<_> = events
                .iter()
                .filter_map(|event| match event {
                    StreamEvent::ToolCallStarted { id, name } => Some((id.clone(), name.clone())),
                    _ => None,
                })
                .collect();
            let expected: Vec<_> =
                completion.tool_calls.iter().map(|call| (call.id.clone(), call.name.clone())).collect();
            assert_eq!(started, expected);
            // The text came before the first tool call started.
            assert!(matches!(events.first(), Some(StreamEvent::Text(_))));
        }
    }
}

async fn malformed_tool_arguments_come_through_verbatim(vendor: Vendor) {
    let broken = r#"{"city": "Par"#;
    let server = ScriptedLlm::start(move |_| Reply::tool_call("get_weather", broken)).await;
    let provider = vendor.on(&server);
    for mode in MODES {
        let (completion, _) = ask(provider.as_ref(), question("Weather?"), mode).await.unwrap();
        let call = &completion.tool_calls[0];
        match mode {
            // The Messages API's JSON body cannot hold malformed JSON as `input`; the scripted
            // server sends it as a JSON string, which comes through as its JSON text.
            Mode::Complete if vendor == Vendor::Anthropic => {
                assert_eq!(call.arguments, serde_json::to_string(broken).unwrap())
            }
            _ => assert_eq!(call.arguments, broken, "{mode:?}"),
        }
        let error = call.parsed_arguments().unwrap_err();
        assert!(error.contains("tool-call arguments"), "{mode:?}: {error}");
    }
}

async fn usage_and_finish_reason(vendor: Vendor) {
    let server =
        ScriptedLlm::start(|_| Reply::text("It was a dark and stormy").usage(123, 45).cached(100).finish("length"))
            .await;
    let provider = vendor.on(&server);
    for mode in MODES {
        let (completion, _) = ask(provider.as_ref(), question("Tell me a story"), mode).await.unwrap();
        // OpenAI's `prompt_tokens_details.cached_tokens`, Anthropic's `cache_read_input_tokens`
        // (beside the other 23 as `input_tokens`), from the JSON answer and from the stream.
        let expected = Usage { prompt_tokens: 123, completion_tokens: 45, cached_prompt_tokens: 100 };
        assert_eq!(completion.usage, expected, "{mode:?}");
        assert_eq!(completion.finish_reason, FinishReason::Length, "{mode:?}");
        assert_eq!(completion.model, "test-model", "the model asked for is echoed");
    }
}
