//! The request's validation, field by field.

use super::*;

fn raw(message: &str) -> RawTurn {
    RawTurn::from(pb::ChatRequest { message: message.to_owned(), ..Default::default() })
}

fn field_of(result: Result<TurnRequest, RouterError>) -> String {
    match result {
        Err(RouterError::Invalid { field, .. }) => field,
        other => panic!("expected an invalid-argument error, got {other:?}"),
    }
}

#[test]
fn a_plain_message_is_accepted() {
    let turn = TurnRequest::validate(raw("hello"), &Limits::default()).expect("valid");
    assert_eq!(turn.message, "hello");
    assert!(turn.session_id.is_none() && turn.force_route.is_none());
}

#[test]
fn each_bad_field_is_named() {
    let limits = Limits { max_message_bytes: 10, max_history: 1, ..Limits::default() };
    assert_eq!(field_of(TurnRequest::validate(raw("  "), &limits)), "message");
    assert_eq!(field_of(TurnRequest::validate(raw("much too long a message"), &limits)), "message");
    let mut r = raw("hi");
    r.model = Some("gpt-4o".into());
    assert_eq!(field_of(TurnRequest::validate(r, &limits)), "model");
    let mut r = raw("hi");
    r.force_route = 9;
    assert_eq!(field_of(TurnRequest::validate(r, &limits)), "force_route");
    let mut r = raw("hi");
    r.max_tokens = Some(0);
    assert_eq!(field_of(TurnRequest::validate(r, &limits)), "max_tokens");
    let mut r = raw("hi");
    r.temperature = Some(3.5);
    assert_eq!(field_of(TurnRequest::validate(r, &limits)), "temperature");
    let mut r = raw("hi");
    r.history = vec![pb::ChatMessage { role: 9, content: "x".into(), ..Default::default() }];
    assert_eq!(field_of(TurnRequest::validate(r, &limits)), "history[0].role");
    let mut r = raw("hi");
    r.history = vec![pb::ChatMessage::default(), pb::ChatMessage::default()];
    assert_eq!(field_of(TurnRequest::validate(r, &limits)), "history");
    let mut r = raw("hi");
    r.session_id = "not a session id!".into();
    assert_eq!(field_of(TurnRequest::validate(r, &limits)), "session_id");
}

fn tool(name: &str) -> pb::ClientTool {
    pb::ClientTool { name: name.into(), description: "a tool".into(), parameters_json: String::new() }
}

fn call(id: &str, name: &str) -> pb::ChatMessage {
    pb::ChatMessage {
        role: pb::ChatRole::Assistant as i32,
        tool_calls: vec![pb::ToolCall { id: id.into(), name: name.into(), arguments_json: "{}".into() }],
        ..Default::default()
    }
}

fn result(id: &str) -> pb::ChatMessage {
    pb::ChatMessage {
        role: pb::ChatRole::Tool as i32,
        tool_call_id: id.into(),
        content: "42".into(),
        ..Default::default()
    }
}

fn user(text: &str) -> pb::ChatMessage {
    pb::ChatMessage { role: pb::ChatRole::User as i32, content: text.into(), ..Default::default() }
}

#[test]
fn client_tools_and_a_tool_loop_are_accepted() {
    let mut r = raw("");
    r.tools = vec![tool("get_weather"), tool("run-shell")];
    r.tool_choice = Some(pb::ToolChoice { choice: Some(pb::tool_choice::Choice::Function("run-shell".into())) });
    r.history = vec![user("weather?"), call("call_1", "get_weather"), result("call_1")];
    let turn = TurnRequest::validate(r, &Limits::default()).expect("valid");
    assert!(turn.is_continuation() && turn.has_client_tools());
    assert_eq!(turn.tools[0].parameters, serde_json::json!({"type": "object"}));
    assert_eq!(turn.tool_choice, ToolChoice::Function("run-shell".into()));
    assert_eq!(turn.loop_user_text(), Some("weather?"));
}

#[test]
fn each_bad_tool_field_is_named() {
    let limits = Limits::default();
    let check = |edit: &dyn Fn(&mut RawTurn), field: &str| {
        let mut r = raw("hi");
        edit(&mut r);
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), field);
    };
    check(&|r| r.tools = vec![tool("has space")], "tools[0].name");
    check(&|r| r.tools = vec![tool("")], "tools[0].name");
    check(&|r| r.tools = vec![tool(&"x".repeat(65))], "tools[0].name");
    check(&|r| r.tools = vec![tool("a"), tool("a")], "tools[1].name");
    check(&|r| r.tools = (0..129).map(|i| tool(&format!("t{i}"))).collect(), "tools");
    check(
        &|r| r.tools = vec![pb::ClientTool { parameters_json: "[1]".into(), ..tool("a") }],
        "tools[0].parameters_json",
    );
    check(&|r| r.tools = vec![pb::ClientTool { parameters_json: "{".into(), ..tool("a") }], "tools[0].parameters_json");
    check(
        &|r| {
            r.tools = vec![tool("a")];
            r.tool_choice = Some(pb::ToolChoice { choice: Some(pb::tool_choice::Choice::Function("b".into())) });
        },
        "tool_choice.function",
    );
    check(&|r| r.tool_choice = Some(pb::ToolChoice { choice: Some(pb::tool_choice::Choice::Mode(3)) }), "tool_choice");
    check(&|r| r.history = vec![user("q"), result("call_9")], "history[1].tool_call_id");
    check(&|r| r.history = vec![user("q"), call("call_1", "a"), result("")], "history[2].tool_call_id");
    check(&|r| r.history = vec![pb::ChatMessage { tool_call_id: "x".into(), ..user("q") }], "history[0].tool_call_id");
    check(
        &|r| r.history = vec![pb::ChatMessage { role: pb::ChatRole::User as i32, ..call("c", "a") }],
        "history[0].tool_calls",
    );
    check(&|r| r.history = vec![call("c", "bad name")], "history[0].tool_calls[0].name");
    check(&|r| r.history = vec![call("", "a")], "history[0].tool_calls[0].id");
    check(&|r| r.history = vec![call("c\0", "a")], "history[0].tool_calls[0].id");
    let image = |url: &str| pb::ChatMessage {
        parts: vec![pb::ContentPart {
            part: Some(pb::content_part::Part::Image(pb::ImagePart { url: url.into(), detail: String::new() })),
        }],
        ..user("")
    };
    check(&|r| r.history = vec![image("http://example.com/a.png")], "history[0].parts[0].image.url");
    check(&|r| r.history = vec![image("data:text/plain;base64,aGk=")], "history[0].parts[0].image.url");
    check(
        &|r| r.history = vec![pb::ChatMessage { parts: image("https://x/a.png").parts, ..call("c", "a") }],
        "history[0].parts",
    );
    check(&|r| r.stop = vec![String::new()], "stop[0]");
    check(&|r| r.conversation_key = "a\0b".into(), "conversation_key");
    check(
        &|r| {
            r.response_format = Some(pb::ResponseFormat {
                format: Some(pb::response_format::Format::JsonSchema(pb::JsonSchemaFormat {
                    name: "answer".into(),
                    schema_json: "\"string\"".into(),
                    ..Default::default()
                })),
            })
        },
        "response_format.json_schema.schema_json",
    );
    // An empty message needs a tool result to continue.
    let mut r = raw("");
    r.history = vec![user("q"), call("c", "a")];
    assert_eq!(field_of(TurnRequest::validate(r, &limits)), "message");
    let mut r = raw("");
    r.history = vec![user("q")];
    assert_eq!(field_of(TurnRequest::validate(r, &limits)), "message");
}

#[test]
fn images_are_https_or_base64_data_urls() {
    let mut r = raw("what is this?");
    r.history = vec![pb::ChatMessage {
        content: "look".into(),
        parts: vec![
            pb::ContentPart {
                part: Some(pb::content_part::Part::Image(pb::ImagePart {
                    url: "data:image/png;base64,iVBORw0KGgo=".into(),
                    detail: "low".into(),
                })),
            },
            pb::ContentPart { part: Some(pb::content_part::Part::Text("and this".into())) },
        ],
        ..user("")
    }];
    let turn = TurnRequest::validate(r, &Limits::default()).expect("valid");
    let message = &turn.history[0];
    assert!(message.has_images());
    assert_eq!(message.content, "look\nand this");
    assert_eq!(message.parts.first(), Some(&ContentPart::Text("look".into())));
}

#[test]
fn max_tokens_above_the_limit_is_lowered_to_it() {
    let limits = Limits { max_tokens: 16_384, ..Limits::default() };
    let with = |max: Option<u32>| {
        let mut r = raw("hi");
        r.max_tokens = max;
        TurnRequest::validate(r, &limits).expect("valid").max_tokens
    };
    assert_eq!(with(Some(128_000)), Some(16_384));
    assert_eq!(with(Some(16_385)), Some(16_384));
    assert_eq!(with(Some(16_384)), Some(16_384));
    assert_eq!(with(Some(200)), Some(200));
    assert_eq!(with(None), None);
}

#[test]
fn anthropic_headers_are_printable_ascii_of_bounded_length() {
    let limits = Limits::default();
    let mut r = raw("hi");
    r.anthropic_version = Some(" 2023-06-01 ".into());
    r.anthropic_beta = Some("claude-code-20250219, interleaved-thinking-2025-05-14".into());
    let turn = TurnRequest::validate(r, &limits).expect("valid");
    assert_eq!(turn.anthropic_headers.version.as_deref(), Some("2023-06-01"));
    assert_eq!(turn.anthropic_headers.beta.as_deref(), Some("claude-code-20250219, interleaved-thinking-2025-05-14"));
    let mut r = raw("hi");
    r.anthropic_version = Some(String::new());
    assert_eq!(TurnRequest::validate(r, &limits).expect("valid").anthropic_headers, AnthropicHeaders::default());
    let check = |version: Option<&str>, beta: Option<&str>, field: &str| {
        let mut r = raw("hi");
        r.anthropic_version = version.map(str::to_owned);
        r.anthropic_beta = beta.map(str::to_owned);
        assert_eq!(field_of(TurnRequest::validate(r, &limits)), field);
    };
    check(Some("2023-06-01\r\nx-evil: 1"), None, "anthropic_version");
    check(Some("2023\0"), None, "anthropic_version");
    check(Some(&"9".repeat(65)), None, "anthropic_version");
    check(None, Some("a\nb"), "anthropic_beta");
    check(None, Some("caf\u{e9}"), "anthropic_beta");
    check(None, Some(&"b".repeat(1025)), "anthropic_beta");
}

#[test]
fn a_model_is_named_with_its_provider() {
    let mut r = raw("hi");
    r.model = Some("anthropic/claude-3-5-sonnet-20241022".into());
    let turn = TurnRequest::validate(r, &Limits::default()).expect("valid");
    assert_eq!(turn.model, Some(ModelRef::new("anthropic", "claude-3-5-sonnet-20241022")));
}
