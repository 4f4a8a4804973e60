//! Property-based fuzzing of a chat turn's request validation (`TurnRequest::validate`), in
//! process: requests decoded from arbitrary protobuf bytes, and requests whose every field is
//! hostile (wrong enums, huge and NaN numbers, NUL and control characters, oversize lists, tool
//! schemas and arguments that are not JSON or are nested deep). No panic; a request or an
//! INVALID_ARGUMENT error naming its field; each case within the budget.

use proptest::prelude::*;
use prost::Message;
use switchyard_kit::{ErrorCode, ServiceError};
use switchyard_llm::types::Usage;
use switchyard_proto::router::v1 as pb;
use switchyard_router::{
    cost::Prices,
    error::RouterError,
    limits::Limits,
    request::{RawTurn, TurnRequest},
};
use switchyard_testkit::fuzz::{config, hostile_text, json_value, timed};

fn text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => hostile_text(),
        1 => Just("ok".to_owned()),
        1 => "[a-z0-9_-]{1,70}",
    ]
    .boxed()
}

fn json_text() -> BoxedStrategy<String> {
    prop_oneof![
        2 => Just(r#"{"type":"object","properties":{"q":{"type":"string"}}}"#.to_owned()),
        3 => json_value(),
        1 => hostile_text(),
    ]
    .boxed()
}

fn chat_message() -> impl Strategy<Value = pb::ChatMessage> {
    let call =
        (text(), text(), json_text()).prop_map(|(id, name, arguments_json)| pb::ToolCall { id, name, arguments_json });
    let part = prop_oneof![
        text().prop_map(pb::content_part::Part::Text),
        (text(), text()).prop_map(|(url, detail)| pb::content_part::Part::Image(pb::ImagePart { url, detail })),
    ]
    .prop_map(|part| pb::ContentPart { part: Some(part) });
    (
        prop_oneof![0i32..5, any::<i32>()],
        text(),
        proptest::collection::vec(call, 0..3),
        text(),
        any::<bool>(),
        proptest::collection::vec(part, 0..3),
    )
        .prop_map(|(role, content, tool_calls, tool_call_id, is_error, parts)| pb::ChatMessage {
            role,
            content,
            tool_calls,
            tool_call_id,
            is_error,
            parts,
        })
}

fn tool_choice() -> impl Strategy<Value = Option<pb::ToolChoice>> {
    proptest::option::of(
        prop_oneof![
            prop_oneof![0i32..4, any::<i32>()].prop_map(pb::tool_choice::Choice::Mode),
            text().prop_map(pb::tool_choice::Choice::Function),
        ]
        .prop_map(|choice| pb::ToolChoice { choice: Some(choice) }),
    )
}

fn response_format() -> impl Strategy<Value = Option<pb::ResponseFormat>> {
    proptest::option::of(
        prop_oneof![
            any::<bool>().prop_map(pb::response_format::Format::JsonObject),
            (text(), text(), json_text(), any::<bool>()).prop_map(|(name, description, schema_json, strict)| {
                pb::response_format::Format::JsonSchema(pb::JsonSchemaFormat { name, description, schema_json, strict })
            }),
        ]
        .prop_map(|format| pb::ResponseFormat { format: Some(format) }),
    )
}

fn temperature() -> impl Strategy<Value = Option<f64>> {
    proptest::option::of(prop_oneof![0.0f64..=2.0, any::<f64>(), Just(f64::NAN), Just(f64::INFINITY), Just(-0.0)])
}

fn chat_request() -> impl Strategy<Value = pb::ChatRequest> {
    let tool = (text(), text(), json_text()).prop_map(|(name, description, parameters_json)| pb::ClientTool {
        name,
        description,
        parameters_json,
    });
    let head = (
        text(),
        prop_oneof![Just(String::new()), Just("3f2a9c1e-0000-4000-8000-000000000001".to_owned()), text()],
        proptest::option::of(prop_oneof![Just("openai/gpt-4o".to_owned()), text()]),
        prop_oneof![0i32..6, any::<i32>()],
        proptest::option::of(any::<u32>()),
        temperature(),
        proptest::collection::vec(chat_message(), 0..6),
    );
    let tail = (
        (proptest::option::of(text()), proptest::option::of(text())),
        proptest::collection::vec(tool, 0..4),
        tool_choice(),
        proptest::option::of(any::<bool>()),
        response_format(),
        proptest::collection::vec(text(), 0..20),
        text(),
        (proptest::option::of(text()), proptest::option::of(text())),
    );
    (head, tail).prop_map(
        |(
            (message, session_id, model, force_route, max_tokens, temperature, history),
            (
                (force_role_id, custom_instructions),
                tools,
                tool_choice,
                parallel_tool_calls,
                response_format,
                stop,
                conversation_key,
                (anthropic_version, anthropic_beta),
            ),
        )| pb::ChatRequest {
            message,
            session_id,
            model,
            force_route,
            max_tokens,
            temperature,
            history,
            force_role_id,
            custom_instructions,
            tools,
            tool_choice,
            parallel_tool_calls,
            response_format,
            stop,
            conversation_key,
            anthropic_version,
            anthropic_beta,
        },
    )
}

/// The promises of `validate`: INVALID_ARGUMENT with a field that exists, or a request within
/// the limits.
fn check(outcome: Result<TurnRequest, RouterError>, limits: &Limits) -> Result<(), TestCaseError> {
    match outcome {
        Err(error) => {
            prop_assert_eq!(error.code(), ErrorCode::InvalidArgument, "{}", error);
            let field = error.field().map(str::to_owned).unwrap_or_default();
            prop_assert!(!field.is_empty(), "no field named: {}", error);
            let known = [
                "message",
                "session_id",
                "model",
                "force_route",
                "max_tokens",
                "temperature",
                "history",
                "tools",
                "tool_choice",
                "response_format",
                "stop",
                "conversation_key",
                "anthropic_version",
                "anthropic_beta",
                "force_role_id",
                "custom_instructions",
            ];
            prop_assert!(known.iter().any(|name| field.starts_with(name)), "unknown field `{}`: {}", field, error);
        }
        Ok(turn) => {
            prop_assert!(turn.message.len() <= limits.max_message_bytes);
            prop_assert!(turn.history.len() <= limits.max_history);
            prop_assert!(turn.max_tokens.is_none_or(|max| (1..=limits.max_tokens).contains(&max)));
            prop_assert!(turn.temperature.is_none_or(|t| (0.0..=2.0).contains(&t)));
        }
    }
    Ok(())
}

/// A model price table (`ROUTER_MODEL_PRICES`): tables per model with hostile names, keys and
/// numbers, or any text.
fn price_table() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        Just("1.5".to_owned()),
        Just("0".to_owned()),
        Just("-1".to_owned()),
        Just("nan".to_owned()),
        Just("inf".to_owned()),
        Just("1e308".to_owned()),
        Just("9223372036854775807".to_owned()),
        Just("1000000".to_owned()),
        Just("\"3\"".to_owned()),
        Just("[1]".to_owned()),
        any::<f64>().prop_filter("finite", |x| x.is_finite()).prop_map(|x| format!("{x:?}")),
    ];
    let key =
        prop_oneof![Just("input_per_mtok"), Just("output_per_mtok"), Just("cached_input_per_mtok"), Just("other")];
    let model = prop_oneof![Just("openai/gpt-4o".to_owned()), Just("nope".to_owned()), "[a-z]{1,6}/[a-z0-9.-]{1,10}"];
    let entry = (model, proptest::collection::vec((key, number), 0..4)).prop_map(|(model, fields)| {
        let fields: Vec<String> = fields.into_iter().map(|(key, value)| format!("{key} = {value}")).collect();
        format!("[\"{model}\"]\n{}\n", fields.join("\n"))
    });
    prop_oneof![4 => proptest::collection::vec(entry, 0..4).prop_map(|entries| entries.concat()), 1 => hostile_text()]
}

proptest! {
    #![proptest_config(config(256))]

    /// A price table is read or refused; an accepted one prices any usage without overflow.
    #[test]
    fn any_price_table_is_read_or_refused_and_prices_any_usage(
        table in price_table(),
        usage in (any::<u32>(), any::<u32>(), any::<u32>()),
    ) {
        let usage = Usage { prompt_tokens: usage.0, completion_tokens: usage.1, cached_prompt_tokens: usage.2 };
        timed("reading a price table", || -> Result<(), TestCaseError> {
            match Prices::parse(&table) {
                Ok(prices) => {
                    for model in ["openai/gpt-4o", "nope"] {
                        prop_assert!(prices.cost(model, &usage).is_none_or(|cost| cost >= 0));
                    }
                }
                Err(error) => prop_assert!(!error.to_string().is_empty()),
            }
            Ok(())
        })?;
    }

    #[test]
    fn any_chat_request_is_a_turn_or_a_named_error(request in chat_request()) {
        let limits = Limits::default();
        let outcome = timed("validating a turn", || TurnRequest::validate(RawTurn::from(request), &limits));
        check(outcome, &limits)?;
    }

    /// What arrives on the wire: arbitrary bytes, and valid requests with bytes flipped, that
    /// protobuf decoding lets through.
    #[test]
    fn any_decoded_bytes_are_a_turn_or_a_named_error(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..512),
            (chat_request(), proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)).prop_map(|(request, flips)| {
                let mut bytes = request.encode_to_vec();
                for (at, byte) in flips {
                    if !bytes.is_empty() {
                        let at = at % bytes.len();
                        bytes[at] = byte;
                    }
                }
                bytes
            }),
        ],
    ) {
        let limits = Limits::default();
        if let Ok(request) = pb::ChatStreamRequest::decode(bytes.as_slice()) {
            let outcome = timed("validating a turn", || TurnRequest::validate(RawTurn::from(request), &limits));
            check(outcome, &limits)?;
        }
    }
}

/// Oversize lists and texts are refused by their limits, quickly.
#[test]
fn oversize_requests_are_refused_quickly() {
    let limits = Limits::default();
    let many =
        vec![pb::ChatMessage { role: pb::ChatRole::User as i32, content: "x".into(), ..Default::default() }; 100_000];
    let deep_schema = switchyard_testkit::fuzz::deep_json(50_000, 1);
    let cases = [
        pb::ChatRequest { message: "x".repeat(limits.max_message_bytes + 1), ..Default::default() },
        pb::ChatRequest { message: "hi".into(), history: many, ..Default::default() },
        pb::ChatRequest {
            message: "hi".into(),
            tools: vec![pb::ClientTool { name: "f".into(), description: String::new(), parameters_json: deep_schema }],
            ..Default::default()
        },
        pb::ChatRequest { message: "hi".into(), stop: vec!["s".into(); 10_000], ..Default::default() },
    ];
    for request in cases {
        let error =
            timed("an oversize request", || TurnRequest::validate(RawTurn::from(request), &limits)).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error}");
    }
}
