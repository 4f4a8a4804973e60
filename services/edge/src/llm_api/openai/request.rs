//! A chat completions request read into the router's turn.

use serde_json::{Map, Value};
use switchyard_proto::router::v1::{self as router, response_format};

use super::content::{text_content, user_content};
use crate::{
    error::ApiError,
    llm_api::{
        content::{message_text, put_parts},
        json::{bool_field, check_name, number, string, u32_field},
        route_or_model,
        tools::{CHAT_COMPLETIONS, client_tools, tool_choice},
    },
    turn::ChatTurn,
};

/// OpenAI takes at most four stop sequences.
pub(super) const MAX_STOP: usize = 4;

/// The turn the request asks for, with what the answer needs from the request.
#[derive(Debug)]
pub(super) struct Completion {
    pub(super) chat: ChatTurn,
    pub(super) model_name: String,
    pub(super) stream: bool,
    pub(super) include_usage: bool,
}

/// The fields a request is read by. Any other field is ignored, as OpenAI's own SDKs send
/// fields a given model does not take (`user`, `seed`, `top_p`, `logprobs`, `metadata`,
/// `store`, `service_tier`, `reasoning_effort`, penalties…); README lists them.
pub(super) fn to_completion(body: &Value) -> Result<Completion, ApiError> {
    let object = body.as_object().ok_or_else(|| ApiError::bad_request("body", "must be a JSON object"))?;
    let model_name = string(object, "model")?.ok_or_else(|| ApiError::bad_request("model", "is required"))?;
    if u32_field(object, "n")?.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request("n", "only one choice is generated"));
    }
    // The deprecated functions API: its answers (`message.function_call`, finish_reason
    // "function_call") differ from tools', and every current SDK sends tools.
    for legacy in ["functions", "function_call"] {
        if object.get(legacy).is_some_and(|v| !v.is_null()) {
            return Err(ApiError::bad_request(
                legacy,
                "the deprecated functions API is not supported; send `tools` and `tool_choice`",
            ));
        }
    }
    let (force_route, model) = route_or_model(&model_name);
    let tools = client_tools(object.get("tools"), &CHAT_COMPLETIONS)?;
    let (message, history) = conversation(object)?;
    let include_usage = match object.get("stream_options").filter(|v| !v.is_null()) {
        None => false,
        Some(Value::Object(options)) => bool_field(options, "include_usage", "stream_options.")?.unwrap_or(false),
        Some(_) => return Err(ApiError::bad_request("stream_options", "must be an object")),
    };
    let chat = ChatTurn {
        message,
        session_id: string(object, "session_id")?.unwrap_or_default(),
        model,
        force_route,
        max_tokens: u32_field(object, "max_completion_tokens")?.or(u32_field(object, "max_tokens")?),
        temperature: number(object, "temperature")?,
        history,
        tool_choice: tool_choice(object.get("tool_choice"), &tools, &CHAT_COMPLETIONS)?,
        parallel_tool_calls: bool_field(object, "parallel_tool_calls", "")?,
        response_format: response_format(object)?,
        stop: stop(object)?,
        tools,
        ..Default::default()
    };
    Ok(Completion { chat, model_name, stream: bool_field(object, "stream", "")?.unwrap_or(false), include_usage })
}

/// The query and the history. A conversation that ends in tool results continues the caller's
/// tool loop: the query is empty and every message is history. A last user message with images
/// is the query by its text (what routing reads) and travels whole, images included, as the
/// last history entry, since the query is text only.
pub(super) fn conversation(object: &Map<String, Value>) -> Result<(String, Vec<router::ChatMessage>), ApiError> {
    let messages = match object.get("messages") {
        Some(Value::Array(messages)) if !messages.is_empty() => messages,
        Some(Value::Array(_)) => return Err(ApiError::bad_request("messages", "must not be empty")),
        None | Some(Value::Null) => return Err(ApiError::bad_request("messages", "is required")),
        Some(_) => return Err(ApiError::bad_request("messages", "must be an array of messages")),
    };
    let mut history =
        messages.iter().enumerate().map(|(index, m)| chat_message(m, index)).collect::<Result<Vec<_>, _>>()?;
    let last_index = history.len() - 1;
    let last = &history[last_index];
    match last.role() {
        router::ChatRole::Tool => Ok((String::new(), history)),
        router::ChatRole::User if last.parts.is_empty() => {
            let last = history.pop().unwrap_or_default();
            Ok((last.content, history))
        }
        router::ChatRole::User => {
            let text = message_text(last);
            Ok((text, history))
        }
        _ => Err(ApiError::bad_request(
            format!("messages[{last_index}].role"),
            "the last message must come from the user, or be a tool result",
        )),
    }
}

pub(super) fn chat_message(message: &Value, index: usize) -> Result<router::ChatMessage, ApiError> {
    let at = |field: &str| format!("messages[{index}].{field}");
    let object =
        message.as_object().ok_or_else(|| ApiError::bad_request(format!("messages[{index}]"), "must be an object"))?;
    let role = match object.get("role") {
        Some(Value::String(role)) => role.as_str(),
        None | Some(Value::Null) => return Err(ApiError::bad_request(at("role"), "is required")),
        Some(_) => return Err(ApiError::bad_request(at("role"), "must be a string")),
    };
    let content = object.get("content").filter(|v| !v.is_null());
    let mut chat = router::ChatMessage::default();
    match role {
        "system" | "developer" => {
            chat.role = router::ChatRole::System as i32;
            chat.content = text_content(content, &at("content"))?;
        }
        "user" => {
            chat.role = router::ChatRole::User as i32;
            let parts = user_content(content, &at("content"))?;
            put_parts(&mut chat, parts);
        }
        "assistant" => {
            chat.role = router::ChatRole::Assistant as i32;
            chat.content = text_content(content, &at("content"))?;
            chat.tool_calls = match object.get("tool_calls").filter(|v| !v.is_null()) {
                None => Vec::new(),
                Some(Value::Array(calls)) => calls
                    .iter()
                    .enumerate()
                    .map(|(call, value)| tool_call(value, &format!("messages[{index}].tool_calls[{call}]")))
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(ApiError::bad_request(at("tool_calls"), "must be an array")),
            };
        }
        "tool" => {
            chat.role = router::ChatRole::Tool as i32;
            chat.content = text_content(content, &at("content"))?;
            chat.tool_call_id = match object.get("tool_call_id") {
                Some(Value::String(id)) if !id.is_empty() => id.clone(),
                Some(Value::String(_)) | None | Some(Value::Null) => {
                    return Err(ApiError::bad_request(at("tool_call_id"), "is required in a tool message"));
                }
                Some(_) => return Err(ApiError::bad_request(at("tool_call_id"), "must be a string")),
            };
        }
        "function" => {
            return Err(ApiError::bad_request(
                at("role"),
                "`function` messages belong to the deprecated functions API; send `tool` messages",
            ));
        }
        other => return Err(ApiError::bad_request(at("role"), format!("unknown role `{other}`"))),
    }
    Ok(chat)
}

/// An assistant message's tool call: `{"id", "type": "function", "function": {"name", "arguments"}}`.
pub(super) fn tool_call(value: &Value, field: &str) -> Result<router::ToolCall, ApiError> {
    let call = value.as_object().ok_or_else(|| ApiError::bad_request(field, "must be a tool call object"))?;
    let id = match call.get("id") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        _ => return Err(ApiError::bad_request(format!("{field}.id"), "is required (a string)")),
    };
    if let Some(kind) = call.get("type").filter(|v| !v.is_null())
        && kind != "function"
    {
        return Err(ApiError::bad_request(format!("{field}.type"), "must be `function`"));
    }
    let function = match call.get("function") {
        Some(Value::Object(function)) => function,
        _ => return Err(ApiError::bad_request(format!("{field}.function"), "is required (an object)")),
    };
    let name = match function.get("name") {
        Some(Value::String(name)) if !name.is_empty() => name.clone(),
        _ => return Err(ApiError::bad_request(format!("{field}.function.name"), "is required (a string)")),
    };
    let arguments_json = match function.get("arguments") {
        Some(Value::String(arguments)) => arguments.clone(),
        None | Some(Value::Null) => "{}".to_owned(),
        // OpenAI sends the arguments as JSON text; some clients echo them back parsed.
        Some(arguments @ Value::Object(_)) => arguments.to_string(),
        Some(_) => {
            return Err(ApiError::bad_request(format!("{field}.function.arguments"), "must be a string of JSON"));
        }
    };
    Ok(router::ToolCall { id, name, arguments_json })
}

/// `response_format`: `text` (the default), `json_object`, or `json_schema`.
pub(super) fn response_format(object: &Map<String, Value>) -> Result<Option<router::ResponseFormat>, ApiError> {
    let format = match object.get("response_format") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(format)) => format,
        Some(_) => return Err(ApiError::bad_request("response_format", "must be an object")),
    };
    let format = match format.get("type").and_then(Value::as_str) {
        Some("text") => return Ok(None),
        Some("json_object") => response_format::Format::JsonObject(true),
        Some("json_schema") => {
            let schema = match format.get("json_schema") {
                Some(Value::Object(schema)) => schema,
                _ => return Err(ApiError::bad_request("response_format.json_schema", "is required (an object)")),
            };
            let name = match schema.get("name") {
                Some(Value::String(name)) => name.clone(),
                _ => return Err(ApiError::bad_request("response_format.json_schema.name", "is required (a string)")),
            };
            check_name(&name, "response_format.json_schema.name")?;
            let description = match schema.get("description") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(description)) => description.clone(),
                Some(_) => {
                    return Err(ApiError::bad_request("response_format.json_schema.description", "must be a string"));
                }
            };
            let schema_json = match schema.get("schema") {
                None | Some(Value::Null) => String::new(),
                Some(schema @ Value::Object(_)) => schema.to_string(),
                Some(_) => {
                    return Err(ApiError::bad_request(
                        "response_format.json_schema.schema",
                        "must be a JSON Schema object",
                    ));
                }
            };
            let strict = bool_field(schema, "strict", "response_format.json_schema.")?.unwrap_or(false);
            response_format::Format::JsonSchema(router::JsonSchemaFormat { name, description, schema_json, strict })
        }
        _ => {
            return Err(ApiError::bad_request(
                "response_format.type",
                "must be `text`, `json_object` or `json_schema`",
            ));
        }
    };
    Ok(Some(router::ResponseFormat { format: Some(format) }))
}

/// `stop`: a string or up to four strings.
pub(super) fn stop(object: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let stops = match object.get("stop") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(stop)) => vec![stop.clone()],
        Some(Value::Array(stops)) => stops
            .iter()
            .enumerate()
            .map(|(index, stop)| {
                stop.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| ApiError::bad_request(format!("stop[{index}]"), "must be a string"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ApiError::bad_request("stop", "must be a string or an array of strings")),
    };
    if stops.len() > MAX_STOP {
        return Err(ApiError::bad_request("stop", format!("at most {MAX_STOP} stop sequences")));
    }
    if let Some(index) = stops.iter().position(String::is_empty) {
        return Err(ApiError::bad_request(format!("stop[{index}]"), "must not be empty"));
    }
    Ok(stops)
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use switchyard_proto::router::v1::{RouteType, ToolChoiceMode, content_part, tool_choice};

    use super::*;

    fn request(json: Value) -> Result<ChatTurn, ApiError> {
        to_completion(&json).map(|completion| completion.chat)
    }

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }

    #[test]
    fn messages_become_query_and_history() {
        let chat = request(json!({"model": "switchyard", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "Rust?"}]},
        ]}))
        .unwrap();
        assert_eq!(chat.message, "What is\nRust?");
        assert_eq!(chat.history.len(), 3);
        assert_eq!(chat.history[0].role(), router::ChatRole::System);
        assert_eq!(chat.history[2].content, "Hello!");
        assert_eq!(chat.force_route, RouteType::Unspecified);
        assert_eq!(chat.model, None);
        assert!(chat.tools.is_empty() && chat.tool_choice.is_none() && chat.response_format.is_none());
    }

    #[test]
    fn model_names_pick_routes_or_models() {
        let one = |model: &str| request(json!({"model": model, "messages": [user("x")]})).unwrap();
        assert_eq!(one("switchyard-multiagent").force_route, RouteType::Multiagent);
        assert_eq!(one("switchyard-mcp-agent").force_route, RouteType::McpAgent);
        assert_eq!(one("openai/gpt-4o").model.as_deref(), Some("openai/gpt-4o"));
        assert_eq!(one("gpt-4o").model, None);
    }

    #[test]
    fn tools_and_their_options_reach_the_router_unchanged() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
        let chat = request(json!({
            "model": "switchyard",
            "messages": [user("Weather in Paris?")],
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": schema}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": false,
            "stop": "END",
            "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": {"type": "object"}, "strict": true}},
            "seed": 7, "user": "ann", "top_p": 0.5,
        }))
        .unwrap();
        assert_eq!(chat.tools.len(), 1);
        assert_eq!(chat.tools[0].name, "get_weather");
        assert_eq!(chat.tools[0].description, "Weather now");
        assert_eq!(serde_json::from_str::<Value>(&chat.tools[0].parameters_json).unwrap(), schema);
        assert_eq!(chat.tool_choice.unwrap().choice, Some(tool_choice::Choice::Function("get_weather".into())));
        assert_eq!(chat.parallel_tool_calls, Some(false));
        assert_eq!(chat.stop, ["END"]);
        let Some(response_format::Format::JsonSchema(format)) = chat.response_format.unwrap().format else {
            panic!("a json_schema format")
        };
        assert_eq!(
            (format.name.as_str(), format.schema_json.as_str(), format.strict),
            ("weather", "{\"type\":\"object\"}", true)
        );
        let chat = request(json!({"model": "s", "messages": [user("x")], "tool_choice": "none", "stop": ["a", "b"],
            "response_format": {"type": "json_object"}}))
        .unwrap();
        assert_eq!(chat.tool_choice.unwrap().choice, Some(tool_choice::Choice::Mode(ToolChoiceMode::None as i32)));
        assert_eq!(chat.stop, ["a", "b"]);
        assert_eq!(chat.response_format.unwrap().format, Some(response_format::Format::JsonObject(true)));
    }

    #[test]
    fn a_tool_round_trip_is_history_and_ends_in_a_continuation() {
        let chat = request(json!({"model": "switchyard", "messages": [
            {"role": "system", "content": "Use tools."},
            user("Weather in Paris?"),
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "noon"}]},
        ]}))
        .unwrap();
        assert_eq!(chat.message, "", "a conversation ending in tool results continues the loop");
        assert_eq!(chat.history.len(), 5);
        let assistant = &chat.history[2];
        assert_eq!(assistant.role(), router::ChatRole::Assistant);
        assert_eq!(assistant.content, "");
        assert_eq!(assistant.tool_calls[0].id, "call_1");
        assert_eq!(assistant.tool_calls[0].name, "get_weather");
        assert_eq!(assistant.tool_calls[0].arguments_json, "{\"city\":\"Paris\"}");
        assert_eq!(assistant.tool_calls[1].name, "get_time");
        assert_eq!(chat.history[3].role(), router::ChatRole::Tool);
        assert_eq!(chat.history[3].tool_call_id, "call_1");
        assert_eq!(chat.history[3].content, "18C, sunny");
        assert_eq!(chat.history[4].content, "noon");
    }

    #[test]
    fn image_parts_travel_in_order_with_the_last_user_message_in_the_history() {
        let chat = request(json!({"model": "switchyard", "messages": [
            user("Hi"),
            {"role": "user", "content": [
                {"type": "text", "text": "What is in"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ]},
        ]}))
        .unwrap();
        assert_eq!(chat.message, "What is in", "the text is the query routing reads");
        assert_eq!(chat.history.len(), 2);
        let last = &chat.history[1];
        assert_eq!(last.role(), router::ChatRole::User);
        assert_eq!(last.content, "");
        assert_eq!(last.parts.len(), 3);
        assert_eq!(last.parts[0].part, Some(content_part::Part::Text("What is in".into())));
        let Some(content_part::Part::Image(image)) = &last.parts[1].part else { panic!("an image") };
        assert_eq!((image.url.as_str(), image.detail.as_str()), ("https://example.com/cat.png", "low"));
        let Some(content_part::Part::Image(image)) = &last.parts[2].part else { panic!("an image") };
        assert!(image.url.starts_with("data:image/png") && image.detail.is_empty());
        assert_eq!(message_text(last), "What is in");
    }

    #[test]
    fn bad_requests_name_the_field() {
        let field = |body: Value| request(body).unwrap_err().field().map(str::to_owned).unwrap_or_default();
        let with = |extra: Value| {
            let mut body = json!({"model": "s", "messages": [user("x")]});
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            field(body)
        };
        assert_eq!(field(json!({"model": "s", "messages": []})), "messages");
        assert_eq!(field(json!({"model": "s", "messages": "hi"})), "messages");
        assert_eq!(field(json!({"messages": [user("x")]})), "model");
        assert_eq!(field(json!({"model": 4, "messages": [user("x")]})), "model");
        assert_eq!(
            field(json!({"model": "s", "messages": [{"role": "assistant", "content": "x"}]})),
            "messages[0].role"
        );
        assert_eq!(
            field(json!({"model": "s", "messages": [{"role": "robot", "content": "a"}, user("b")]})),
            "messages[0].role"
        );
        assert_eq!(field(json!({"model": "s", "messages": [{"content": "a"}]})), "messages[0].role");
        assert_eq!(field(json!({"model": "s", "messages": [{"role": "user", "content": 5}]})), "messages[0].content");
        assert_eq!(
            field(json!({"model": "s", "messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})),
            "messages[0].content[0].type"
        );
        assert_eq!(
            field(
                json!({"model": "s", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}]})
            ),
            "messages[0].content[0].image_url.url"
        );
        assert_eq!(
            field(
                json!({"model": "s", "messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x"}}]}, user("b")]})
            ),
            "messages[0].content[0].type"
        );
        assert_eq!(
            field(json!({"model": "s", "messages": [{"role": "tool", "content": "r"}]})),
            "messages[0].tool_call_id"
        );
        assert_eq!(
            field(
                json!({"model": "s", "messages": [user("a"), {"role": "assistant", "tool_calls": [{"type": "function"}]}, {"role": "tool", "tool_call_id": "c", "content": "r"}]})
            ),
            "messages[1].tool_calls[0].id"
        );
        assert_eq!(with(json!({"n": 2})), "n");
        assert_eq!(with(json!({"tools": {"a": 1}})), "tools");
        assert_eq!(with(json!({"tools": [{"type": "custom", "custom": {"name": "x"}}]})), "tools[0].type");
        assert_eq!(with(json!({"tools": [{"type": "function"}]})), "tools[0].function");
        assert_eq!(
            with(json!({"tools": [{"type": "function", "function": {"name": "a b"}}]})),
            "tools[0].function.name"
        );
        assert_eq!(
            with(
                json!({"tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]})
            ),
            "tools[1].function.name"
        );
        assert_eq!(
            with(json!({"tools": [{"type": "function", "function": {"name": "a", "parameters": "{}"}}]})),
            "tools[0].function.parameters"
        );
        assert_eq!(with(json!({"tool_choice": "sometimes"})), "tool_choice");
        assert_eq!(with(json!({"tool_choice": "required"})), "tool_choice");
        assert_eq!(
            with(
                json!({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": {"type": "function", "function": {"name": "b"}}})
            ),
            "tool_choice.function.name"
        );
        assert_eq!(with(json!({"parallel_tool_calls": "yes"})), "parallel_tool_calls");
        assert_eq!(with(json!({"stop": ["a", "b", "c", "d", "e"]})), "stop");
        assert_eq!(with(json!({"stop": [1]})), "stop[0]");
        assert_eq!(with(json!({"response_format": {"type": "yaml"}})), "response_format.type");
        assert_eq!(with(json!({"response_format": {"type": "json_schema"}})), "response_format.json_schema");
        assert_eq!(
            with(json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}})),
            "response_format.json_schema.name"
        );
        assert_eq!(with(json!({"functions": [{"name": "f"}]})), "functions");
        assert_eq!(with(json!({"function_call": "auto"})), "function_call");
        assert_eq!(with(json!({"max_tokens": -1})), "max_tokens");
        assert_eq!(with(json!({"temperature": "hot"})), "temperature");
        assert_eq!(with(json!({"stream": "yes"})), "stream");
        assert_eq!(with(json!({"stream_options": {"include_usage": 1}})), "stream_options.include_usage");
    }
}

/// Property-based fuzzing of the chat completions reader: bodies with every field hostile.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use switchyard_testkit::fuzz::{config, timed};

    use super::*;
    use crate::llm_api::fuzz::{body, check_refusal, parsed};

    proptest! {
        #![proptest_config(config(96))]

        #[test]
        fn any_body_is_a_turn_or_refused_by_field(body in body()) {
            let Some(body) = parsed(&body) else { return Ok(()) };
            match timed("reading a chat completions request", || to_completion(&body)) {
                Ok(completion) => prop_assert!(completion.chat.stop.len() <= MAX_STOP),
                Err(error) => check_refusal(&error)?,
            }
        }
    }
}
