//! A Messages request read and checked, then turned into the router's turn.

use serde_json::{Map, Value};
use switchyard_proto::router::v1::{self as router, content_part::Part};

use super::{
    content::{conversation_message, text_block},
    fields::{Fields, Origin},
};
use crate::{
    error::ApiError,
    llm_api::{
        content::message_text,
        conversation::Conversation,
        route_or_model,
        tools::{MESSAGES, client_tools, tool_choice},
    },
    turn::ChatTurn,
};

pub(super) type Object = Map<String, Value>;

/// A `/v1/messages` request, checked.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MessagesRequest {
    pub(super) model: String,
    pub(super) max_tokens: u32,
    pub(super) system: String,
    /// The whole conversation, in the router's terms, in order.
    pub(super) messages: Vec<router::ChatMessage>,
    /// Where each of `messages` came from.
    pub(super) origins: Vec<Origin>,
    pub(super) tools: Vec<router::ClientTool>,
    pub(super) tool_choice: Option<router::ToolChoice>,
    pub(super) parallel_tool_calls: Option<bool>,
    pub(super) temperature: Option<f64>,
    pub(super) stop: Vec<String>,
    pub(super) stream: bool,
    /// Switchyard's own: continue this session (`x-session-id` works too).
    pub(super) session_id: Option<String>,
}

impl MessagesRequest {
    pub(super) fn parse(body: &Value) -> Result<Self, ApiError> {
        let body = object(body, "body")?;
        let model = required_str(body, "model", "model")?.to_owned();
        let max_tokens = match body.get("max_tokens") {
            None | Some(Value::Null) => return Err(ApiError::bad_request("max_tokens", "is required")),
            Some(value) => value
                .as_u64()
                .filter(|n| *n >= 1)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| ApiError::bad_request("max_tokens", "must be a whole number from 1"))?,
        };
        let system = match body.get("system") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(blocks)) => blocks
                .iter()
                .enumerate()
                .map(|(i, block)| text_block(block, &format!("system[{i}]")))
                .collect::<Result<Vec<_>, _>>()?
                .join("\n"),
            Some(_) => return Err(ApiError::bad_request("system", "must be a string or an array of text blocks")),
        };
        let raw_messages = match body.get("messages") {
            Some(Value::Array(messages)) if !messages.is_empty() => messages,
            Some(Value::Array(_)) => return Err(ApiError::bad_request("messages", "must not be empty")),
            None | Some(Value::Null) => return Err(ApiError::bad_request("messages", "is required")),
            Some(_) => return Err(ApiError::bad_request("messages", "must be an array")),
        };
        let mut messages = Vec::new();
        let mut origins = Vec::new();
        for (i, message) in raw_messages.iter().enumerate() {
            for (message, origin) in conversation_message(message, i)? {
                messages.push(message);
                origins.push(origin);
            }
        }
        // Anthropic's server tools (`web_search_…`, `bash_…`, `text_editor_…`) run at Anthropic;
        // here only the caller's own tools can be called.
        let tools = client_tools(body.get("tools"), &MESSAGES)?;
        let tool_choice = tool_choice(body.get("tool_choice"), &tools, &MESSAGES)?;
        let parallel_tool_calls = match body
            .get("tool_choice")
            .and_then(|choice| choice.get("disable_parallel_tool_use"))
        {
            None | Some(Value::Null) => None,
            Some(Value::Bool(disable)) => Some(!disable),
            Some(_) => {
                return Err(ApiError::bad_request("tool_choice.disable_parallel_tool_use", "must be true or false"));
            }
        };
        let temperature = match body.get("temperature") {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                value
                    .as_f64()
                    .filter(|t| (0.0..=1.0).contains(t))
                    .ok_or_else(|| ApiError::bad_request("temperature", "must be a number from 0 to 1"))?,
            ),
        };
        let stop = match body.get("stop_sequences") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    item.as_str().filter(|s| !s.is_empty()).map(str::to_owned).ok_or_else(|| {
                        ApiError::bad_request(format!("stop_sequences[{i}]"), "must be a non-empty string")
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(ApiError::bad_request("stop_sequences", "must be an array of strings")),
        };
        // `metadata.user_id` is Anthropic's opaque id for abuse detection; the credential says
        // who the caller is here, so it is checked for shape and not used.
        match body.get("metadata") {
            None | Some(Value::Null) => {}
            Some(Value::Object(metadata)) => {
                optional_str(metadata, "user_id", "metadata.user_id")?;
            }
            Some(_) => return Err(ApiError::bad_request("metadata", "must be an object")),
        }
        let stream = match body.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(stream)) => *stream,
            Some(_) => return Err(ApiError::bad_request("stream", "must be true or false")),
        };
        let session_id = optional_str(body, "session_id", "session_id")?.map(str::to_owned);
        Ok(Self {
            model,
            max_tokens,
            system,
            messages,
            origins,
            tools,
            tool_choice,
            parallel_tool_calls,
            temperature,
            stop,
            stream,
            session_id,
        })
    }

    /// The text of the conversation's first user message, which with the system prompt keys a
    /// stateless caller's conversation.
    pub(super) fn first_user_text(&self) -> String {
        self.messages.iter().find(|m| m.role() == router::ChatRole::User).map(message_text).unwrap_or_default()
    }

    /// The router's request, and how to name the fields it may refuse as this request did.
    pub(super) fn into_chat(self, conversation: Conversation) -> Result<(ChatTurn, Fields), ApiError> {
        let (force_route, model) = route_or_model(&self.model);
        let mut history = self.messages;
        let mut origins = self.origins;
        // System messages after the last user message or tool results: the router reads every
        // system message as instructions wherever it stands, so they move to the front and the
        // turn ends with what the user (or the tools) said.
        let mut trailing = 0;
        while history.len() > trailing + 1 && history[history.len() - 1 - trailing].role() == router::ChatRole::System {
            trailing += 1;
        }
        history.rotate_right(trailing);
        origins.rotate_right(trailing);
        let message_field = origins.last().map(|o| format!("{}.content", o.path)).unwrap_or_else(|| "messages".into());
        fold_text_after_results(&mut history, &mut origins);
        if !self.system.is_empty() {
            origins.insert(0, Origin::new("system".into()));
            history.insert(
                0,
                router::ChatMessage {
                    role: router::ChatRole::System as i32,
                    content: self.system,
                    ..Default::default()
                },
            );
        }
        let message = match history.last().map(router::ChatMessage::role) {
            // Tool results: the caller's tool loop goes on, with no new user message.
            Some(router::ChatRole::Tool) => String::new(),
            // Text alone is the query; a message with images stays in the history, whole, with
            // its text as the query (as on /v1/chat/completions).
            Some(router::ChatRole::User) if history.last().is_some_and(|m| m.parts.is_empty()) => {
                history.pop().unwrap_or_default().content
            }
            Some(router::ChatRole::User) => history.last().map(message_text).unwrap_or_default(),
            _ => {
                return Err(ApiError::bad_request(
                    "messages",
                    "the last message must come from the user (a user message or tool results); \
                     continuing a prefilled assistant message is not supported",
                ));
            }
        };
        let mut chat = ChatTurn {
            message,
            model,
            force_route,
            max_tokens: Some(self.max_tokens),
            temperature: self.temperature,
            history,
            tools: self.tools,
            tool_choice: self.tool_choice,
            parallel_tool_calls: self.parallel_tool_calls,
            stop: self.stop,
            ..Default::default()
        };
        chat.belongs_to(conversation);
        Ok((chat, Fields { history: origins, message: message_field }))
    }
}

/// A last message that answers tool calls and then says more (agents such as Claude Code add
/// text blocks after the `tool_result` blocks) still continues the tool loop, as Anthropic
/// reads it: its text and images join the last tool result, so the model sees them right after
/// the results, rather than becoming a new user message that would route the turn anew.
pub(super) fn fold_text_after_results(history: &mut Vec<router::ChatMessage>, origins: &mut Vec<Origin>) {
    let n = history.len();
    if n < 2 || history[n - 1].role() != router::ChatRole::User || history[n - 2].role() != router::ChatRole::Tool {
        return;
    }
    let same_message = origins[n - 2].path.starts_with(&format!("{}.content[", origins[n - 1].path));
    if !same_message {
        return;
    }
    let (Some(user), Some(user_origin)) = (history.pop(), origins.pop()) else { return };
    let result = &mut history[n - 2];
    let result_origin = &mut origins[n - 2];
    if result.parts.is_empty() {
        // Its text blocks were joined into one text: one part, named after the first block.
        if result.content.is_empty() {
            result_origin.parts.clear();
        } else {
            result.parts.push(text_part(std::mem::take(&mut result.content)));
            result_origin.parts.truncate(1);
        }
    }
    if user.parts.is_empty() {
        result.parts.push(text_part(user.content));
        result_origin.parts.push(user_origin.parts.first().cloned().unwrap_or(user_origin.path));
    } else {
        result.parts.extend(user.parts);
        result_origin.parts.extend(user_origin.parts);
    }
}

pub(super) fn text_part(text: String) -> router::ContentPart {
    router::ContentPart { part: Some(Part::Text(text)) }
}

pub(super) fn object<'a>(value: &'a Value, field: &str) -> Result<&'a Object, ApiError> {
    value.as_object().ok_or_else(|| ApiError::bad_request(field, "must be an object"))
}

pub(super) fn optional_str<'a>(object: &'a Object, key: &str, field: &str) -> Result<Option<&'a str>, ApiError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(ApiError::bad_request(field, "must be a string")),
    }
}

pub(super) fn required_str<'a>(object: &'a Object, key: &str, field: &str) -> Result<&'a str, ApiError> {
    optional_str(object, key, field)?.ok_or_else(|| ApiError::bad_request(field, "is required"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use switchyard_proto::router::v1::{RouteType, tool_choice::Choice};

    use super::*;

    fn parse(body: Value) -> Result<MessagesRequest, ApiError> {
        MessagesRequest::parse(&body)
    }

    fn chat(body: Value) -> Result<ChatTurn, ApiError> {
        Ok(parse(body)?.into_chat(Conversation::default())?.0)
    }

    fn model_chat(model: &str) -> ChatTurn {
        chat(json!({"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})).unwrap()
    }

    fn field(result: Result<impl std::fmt::Debug, ApiError>) -> String {
        result.unwrap_err().field().unwrap_or_default().to_owned()
    }

    #[test]
    fn a_plain_message_is_the_query_with_the_system_prompt_in_history() {
        let chat = chat(json!({
            "model": "claude-sonnet-4-5", "max_tokens": 100, "temperature": 0.5, "stop_sequences": ["END"],
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]},
                {"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "Rust?"}]},
            ],
            "metadata": {"user_id": "u-1"},
            "unknown_field": 1,
        }))
        .unwrap();
        assert_eq!(chat.message, "What is\nRust?");
        assert_eq!(chat.history.len(), 3);
        assert_eq!(chat.history[0].role(), router::ChatRole::System);
        assert_eq!(chat.history[0].content, "Be brief.");
        assert_eq!(chat.history[2].content, "Hello!");
        assert_eq!(chat.max_tokens, Some(100));
        assert_eq!(chat.stop, vec!["END".to_owned()]);
        // An Anthropic model name the router does not know: the router's own model answers.
        assert_eq!((chat.model.as_deref(), chat.force_route), (None, RouteType::Unspecified));
        assert_eq!(model_chat("switchyard-direct").force_route, RouteType::Direct);
        assert_eq!(model_chat("anthropic/claude-haiku-4-5").model.as_deref(), Some("anthropic/claude-haiku-4-5"));
    }

    #[test]
    fn tools_tool_use_and_tool_results_map_onto_the_router() {
        let chat = chat(json!({
            "model": "claude", "max_tokens": 100,
            "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object",
                "properties": {"city": {"type": "string"}}}, "cache_control": {"type": "ephemeral"}}],
            "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "s"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}]},
                ]},
            ],
        }))
        .unwrap();
        assert_eq!(chat.message, "", "tool results continue the loop");
        assert_eq!(chat.tools.len(), 1);
        assert_eq!(chat.tools[0].name, "get_weather");
        let schema: Value = serde_json::from_str(&chat.tools[0].parameters_json).unwrap();
        assert_eq!(schema["properties"]["city"]["type"], "string");
        assert_eq!(chat.tool_choice.unwrap().choice, Some(Choice::Function("get_weather".into())));
        assert_eq!(chat.parallel_tool_calls, Some(false));
        let assistant = &chat.history[1];
        assert_eq!((assistant.role(), assistant.content.as_str()), (router::ChatRole::Assistant, "Checking."));
        assert_eq!(assistant.tool_calls[0].id, "toolu_1");
        assert_eq!(serde_json::from_str::<Value>(&assistant.tool_calls[0].arguments_json).unwrap()["city"], "Paris");
        let result = &chat.history[2];
        assert_eq!((result.role(), result.tool_call_id.as_str()), (router::ChatRole::Tool, "toolu_1"));
        assert_eq!((result.content.as_str(), result.is_error), ("18C", false));
    }

    #[test]
    fn tool_results_come_before_the_text_of_their_message_and_images_become_parts() {
        let answer = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "is_error": true, "content": "denied"},
            {"type": "text", "text": "Look at this"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
        ]});
        let call =
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]});
        let image = router::ImagePart { url: "data:image/png;base64,iVBO".into(), detail: String::new() };
        let text = |t: &str| router::ContentPart { part: Some(Part::Text(t.into())) };
        let picture = router::ContentPart { part: Some(Part::Image(image)) };
        // Earlier in the conversation: a tool message, then a user message with the rest.
        let earlier = chat(json!({"model": "m", "max_tokens": 9, "messages": [
            call, answer, {"role": "assistant", "content": "Seen."}, {"role": "user", "content": "Next?"},
        ]}))
        .unwrap();
        assert_eq!(earlier.message, "Next?");
        let roles: Vec<_> = earlier.history.iter().map(router::ChatMessage::role).collect();
        use router::ChatRole::{Assistant, Tool, User};
        assert_eq!(roles, [Assistant, Tool, User, Assistant]);
        assert!(earlier.history[1].is_error);
        assert_eq!(earlier.history[2].parts, vec![text("Look at this"), picture.clone()]);
        // As the last message: the loop goes on, the text and image joining the tool result.
        let last = chat(json!({"model": "m", "max_tokens": 9, "messages": [call, answer]})).unwrap();
        assert_eq!(last.message, "", "a continuation");
        let roles: Vec<_> = last.history.iter().map(router::ChatMessage::role).collect();
        assert_eq!(roles, [Assistant, Tool]);
        assert_eq!(last.history[1].parts, vec![text("denied"), text("Look at this"), picture]);
        assert!(last.history[1].content.is_empty());
    }

    #[test]
    fn system_messages_in_the_conversation_are_instructions_and_never_end_it() {
        // As Claude Code sends it: the user's message, then a system message after it.
        let chat = chat(json!({"model": "m", "max_tokens": 9, "system": "Top.", "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "system", "content": [{"type": "text", "text": "Agent types: a, b."}]},
        ]}))
        .unwrap();
        assert_eq!(chat.message, "Hi");
        let history: Vec<_> = chat.history.iter().map(|m| (m.role(), m.content.as_str())).collect();
        assert_eq!(history, [(router::ChatRole::System, "Top."), (router::ChatRole::System, "Agent types: a, b.")]);
    }

    #[test]
    fn tool_choice_modes() {
        let tools = [router::ClientTool { name: "t".into(), ..Default::default() }];
        let choice = |value: Value| tool_choice(Some(&value), &tools, &MESSAGES).unwrap().unwrap().choice.unwrap();
        assert_eq!(choice(json!({"type": "any"})), Choice::Mode(router::ToolChoiceMode::Required as i32));
        assert_eq!(choice(json!({"type": "auto"})), Choice::Mode(router::ToolChoiceMode::Auto as i32));
        assert_eq!(choice(json!({"type": "none"})), Choice::Mode(router::ToolChoiceMode::None as i32));
    }

    #[test]
    fn bad_requests_name_the_field() {
        let user = json!([{"role": "user", "content": "x"}]);
        assert_eq!(field(parse(json!({"model": "m", "messages": user}))), "max_tokens");
        assert_eq!(field(parse(json!({"model": "m", "max_tokens": "9", "messages": user}))), "max_tokens");
        assert_eq!(field(parse(json!({"model": "m", "max_tokens": 0, "messages": user}))), "max_tokens");
        assert_eq!(field(parse(json!({"max_tokens": 9, "messages": user}))), "model");
        assert_eq!(field(parse(json!({"model": "m", "max_tokens": 9, "messages": []}))), "messages");
        assert_eq!(field(parse(json!([1]))), "body");
        let one = |message: Value| field(parse(json!({"model": "m", "max_tokens": 9, "messages": [message]})));
        assert_eq!(one(json!({"role": "robot", "content": "x"})), "messages[0].role");
        assert_eq!(one(json!({"role": "system", "content": [{"type": "image"}]})), "messages[0].content[0].type");
        assert_eq!(one(json!({"role": "user", "content": 5})), "messages[0].content");
        assert_eq!(one(json!({"role": "user", "content": [{"type": "document"}]})), "messages[0].content[0].type");
        assert_eq!(
            one(
                json!({"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png"}}]})
            ),
            "messages[0].content[0].source.data"
        );
        assert_eq!(
            one(json!({"role": "user", "content": [{"type": "tool_result", "content": "x"}]})),
            "messages[0].content[0].tool_use_id"
        );
        assert_eq!(
            one(json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": [1]}]})),
            "messages[0].content[0].input"
        );
        let with = |key: &str, value: Value| {
            let mut body = json!({"model": "m", "max_tokens": 9, "messages": user});
            body[key] = value;
            field(parse(body))
        };
        assert_eq!(with("tools", json!([{"name": "t"}])), "tools[0].input_schema");
        assert_eq!(with("tools", json!([{"type": "web_search_20250305", "name": "web_search"}])), "tools[0].type");
        assert_eq!(with("tool_choice", json!({"type": "tool"})), "tool_choice.name");
        assert_eq!(with("tool_choice", json!({"type": "sometimes"})), "tool_choice.type");
        assert_eq!(with("temperature", json!(3)), "temperature");
        assert_eq!(with("stop_sequences", json!("END")), "stop_sequences");
        assert_eq!(with("stream", json!("yes")), "stream");
        assert_eq!(with("metadata", json!({"user_id": 7})), "metadata.user_id");
        assert_eq!(with("system", json!([{"type": "image"}])), "system[0].type");
        let last_assistant = chat(json!({"model": "m", "max_tokens": 9, "messages": [
            {"role": "user", "content": "x"}, {"role": "assistant", "content": "The answer is"}]}));
        assert_eq!(field(last_assistant), "messages");
        let only_system =
            chat(json!({"model": "m", "max_tokens": 9, "messages": [{"role": "system", "content": "x"}]}));
        assert_eq!(field(only_system), "messages");
    }
}

/// Property-based fuzzing of the Messages reader: bodies with every field hostile, read and
/// then turned into the router's turn.
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
            let read = timed("reading a Messages request", || {
                MessagesRequest::parse(&body).and_then(|request| request.into_chat(Conversation::default()))
            });
            if let Err(error) = read {
                check_refusal(&error)?;
            }
        }
    }
}
