//! One turn: a request met with the stored conversation it continues, as the router's chat
//! request, and the answer to keep.

use serde_json::Value;
use switchyard_proto::router::v1 as router;

use super::{
    answer::Shell,
    request::{Echo, Origin, Parsed},
    store::StoredResponse,
};
use crate::{
    auth::Caller,
    error::ApiError,
    llm_api::{content::message_text, route_or_model},
    turn::ChatTurn,
};

/// One turn: the router's request, the conversation it continues (to be kept with the answer)
/// and how to answer.
pub(super) struct Turn {
    pub(super) chat: ChatTurn,
    pub(super) origins: Vec<Origin>,
    pub(super) conversation: Vec<router::ChatMessage>,
    pub(super) model_name: String,
    pub(super) stream: bool,
    pub(super) store: bool,
    pub(super) echo: Echo,
}

impl Turn {
    /// The stored conversation (when the request continues one) and the new items; the
    /// instructions first. A conversation that ends in function_call_output items continues the
    /// caller's tool loop (an empty query); one that ends in a user message asks it.
    pub(super) fn assemble(parsed: Parsed, previous: Option<StoredResponse>) -> Result<Self, ApiError> {
        let (session_id, mut conversation) = previous.map(|p| (p.session_id, p.conversation)).unwrap_or_default();
        let mut origins = vec![Origin::new("previous_response_id"); conversation.len()];
        conversation.extend(parsed.items);
        origins.extend(parsed.origins);
        let mut history = conversation.clone();
        if !parsed.instructions.is_empty() {
            history.insert(
                0,
                router::ChatMessage {
                    role: router::ChatRole::System as i32,
                    content: parsed.instructions.clone(),
                    ..Default::default()
                },
            );
            origins.insert(0, Origin::new("instructions"));
        }
        let last = history.len() - 1;
        let message = match history[last].role() {
            router::ChatRole::Tool => String::new(),
            router::ChatRole::User if history[last].parts.is_empty() => {
                origins.pop();
                history.pop().unwrap_or_default().content
            }
            router::ChatRole::User => message_text(&history[last]),
            _ => {
                let at = origins.get(last).map_or("input", |o| o.path.as_str());
                let at = if at.starts_with("input[") { format!("{at}.role") } else { "input".to_owned() };
                return Err(ApiError::bad_request(
                    at,
                    "the last input item must be a user message or a function_call_output",
                ));
            }
        };
        let (force_route, model) = route_or_model(&parsed.model_name);
        let chat = ChatTurn {
            message,
            session_id,
            model,
            force_route,
            max_tokens: parsed.max_output_tokens,
            temperature: parsed.temperature,
            history,
            tools: parsed.tools,
            tool_choice: parsed.tool_choice,
            parallel_tool_calls: parsed.parallel_tool_calls,
            response_format: parsed.response_format,
            ..Default::default()
        };
        Ok(Self {
            chat,
            origins,
            conversation,
            model_name: parsed.model_name,
            stream: parsed.stream,
            store: parsed.store,
            echo: parsed.echo,
        })
    }

    pub(super) fn shell(&self) -> Shell {
        Shell {
            id: format!("resp_{}", uuid::Uuid::new_v4().simple()),
            created_at: chrono::Utc::now().timestamp(),
            model: self.model_name.clone(),
            echo: self.echo.clone(),
        }
    }

    /// The answer to keep, with the conversation up to it, when the request asked to store it.
    pub(super) fn to_keep(
        &self,
        caller: &Caller,
        session_id: &str,
        answer: router::ChatMessage,
        response: &Value,
    ) -> Option<(String, StoredResponse)> {
        if !self.store {
            return None;
        }
        let mut conversation = self.conversation.clone();
        conversation.push(router::ChatMessage { role: router::ChatRole::Assistant as i32, ..answer });
        let id = response["id"].as_str().unwrap_or_default().to_owned();
        let stored = StoredResponse {
            tenant: caller.tenant.as_str().to_owned(),
            user: caller.user.as_ref().map(|u| u.as_str().to_owned()),
            session_id: session_id.to_owned(),
            conversation,
            response: response.clone(),
        };
        Some((id, stored))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use switchyard_proto::router::v1::{response_format, tool_choice};

    use super::*;
    use crate::llm_api::responses::{error::caller_field, request::parse};

    fn turn(body: Value) -> Result<Turn, ApiError> {
        Turn::assemble(parse(&body)?, None)
    }

    fn field(body: Value) -> String {
        match turn(body) {
            Ok(_) => String::new(),
            Err(error) => error.field().unwrap_or_default().to_owned(),
        }
    }

    #[test]
    fn a_string_input_is_the_query_and_instructions_the_system_prompt() {
        let turn = turn(json!({"model": "switchyard", "input": "Hi", "instructions": "Be brief."})).unwrap();
        assert_eq!(turn.chat.message, "Hi");
        assert_eq!(turn.chat.history.len(), 1);
        assert_eq!(turn.chat.history[0].role(), router::ChatRole::System);
        assert_eq!(turn.chat.history[0].content, "Be brief.");
        assert_eq!(turn.conversation.len(), 1, "the instructions are not part of the kept conversation");
        assert_eq!(caller_field("history[0].content", &turn.origins), "instructions");
    }

    #[test]
    fn items_become_history_and_a_function_call_output_continues_the_loop() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
        let turn = turn(json!({
            "model": "switchyard-direct",
            "input": [
                {"role": "developer", "content": "Use tools."},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
                {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
            ],
            "tools": [{"type": "function", "name": "get_weather", "parameters": schema, "strict": true},
                      {"type": "function", "name": "get_time"}],
            "tool_choice": {"type": "function", "name": "get_time"},
            "parallel_tool_calls": false,
            "max_output_tokens": 50,
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
            "reasoning": {"effort": "low"}, "include": [], "store": false,
        }))
        .unwrap();
        assert_eq!(turn.chat.message, "");
        assert!(!turn.store);
        let history = &turn.chat.history;
        assert_eq!(history.len(), 5);
        assert_eq!(history[0].role(), router::ChatRole::System);
        assert_eq!(history[1].content, "Weather?");
        assert_eq!(history[2].role(), router::ChatRole::Assistant);
        assert_eq!(history[2].tool_calls.len(), 2);
        assert_eq!(history[2].tool_calls[0].id, "call_1");
        assert_eq!(history[3].role(), router::ChatRole::Tool);
        assert_eq!((history[4].tool_call_id.as_str(), history[4].content.as_str()), ("call_2", "noon"));
        assert_eq!(turn.chat.tools.len(), 2);
        assert_eq!(serde_json::from_str::<Value>(&turn.chat.tools[0].parameters_json).unwrap(), schema);
        assert_eq!(
            turn.chat.tool_choice.clone().unwrap().choice,
            Some(tool_choice::Choice::Function("get_time".into()))
        );
        assert_eq!(turn.chat.parallel_tool_calls, Some(false));
        assert_eq!(turn.chat.max_tokens, Some(50));
        assert_eq!(turn.chat.force_route, router::RouteType::Direct);
        assert!(matches!(
            turn.chat.response_format.and_then(|f| f.format),
            Some(response_format::Format::JsonSchema(router::JsonSchemaFormat { ref name, .. })) if name == "w"
        ));
        // A router field is named as the caller sent it.
        assert_eq!(caller_field("history[2].tool_calls[1].name", &turn.origins), "input[4].name");
        assert_eq!(caller_field("history[2].tool_calls[0].arguments_json", &turn.origins), "input[3].arguments");
        assert_eq!(caller_field("history[4].tool_call_id", &turn.origins), "input[6].call_id");
        assert_eq!(caller_field("history[0].content", &turn.origins), "input[0].content");
        assert_eq!(caller_field("tools[1].parameters_json", &turn.origins), "tools[1].parameters");
        assert_eq!(caller_field("response_format.json_schema.schema_json", &turn.origins), "text.format.schema");
        assert_eq!(caller_field("message", &turn.origins), "input");
    }

    #[test]
    fn a_previous_response_continues_its_conversation_and_session() {
        let first = turn(json!({"model": "s", "input": "Weather?"})).unwrap();
        let mut conversation = first.conversation.clone();
        conversation.push(router::ChatMessage {
            role: router::ChatRole::Assistant as i32,
            tool_calls: vec![router::ToolCall {
                id: "c1".into(),
                name: "get_weather".into(),
                arguments_json: "{}".into(),
            }],
            ..Default::default()
        });
        let previous = StoredResponse {
            tenant: "acme".into(),
            user: None,
            session_id: "s-9".into(),
            conversation,
            response: json!({}),
        };
        let body = json!({"model": "s", "previous_response_id": "resp_1",
            "input": [{"type": "function_call_output", "call_id": "c1", "output": "18C"}]});
        let next = Turn::assemble(parse(&body).unwrap(), Some(previous)).unwrap();
        assert_eq!(next.chat.session_id, "s-9");
        assert_eq!(next.chat.message, "");
        assert_eq!(next.chat.history.len(), 3);
        assert_eq!(next.chat.history[1].tool_calls[0].id, "c1");
        assert_eq!(caller_field("history[1].tool_calls[0].id", &next.origins), "previous_response_id");
        assert_eq!(caller_field("history[2].tool_call_id", &next.origins), "input[0].call_id");
    }

    #[test]
    fn images_travel_with_the_last_user_message() {
        let turn = turn(json!({"model": "s", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "low"},
        ]}]}))
        .unwrap();
        assert_eq!(turn.chat.message, "What is this?");
        assert_eq!(turn.chat.history.len(), 1);
        assert_eq!(turn.chat.history[0].parts.len(), 2);
        assert_eq!(caller_field("history[0].parts[1].image", &turn.origins), "input[0].content[1].image_url");
        assert_eq!(caller_field("history[0].parts[1].image.url", &turn.origins), "input[0].content[1].image_url");
    }

    #[test]
    fn bad_requests_name_the_field() {
        let with = |extra: Value| {
            let mut body = json!({"model": "s", "input": "x"});
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            field(body)
        };
        assert_eq!(field(json!({"input": "x"})), "model");
        assert_eq!(field(json!({"model": "s"})), "input");
        assert_eq!(field(json!({"model": "s", "input": []})), "input");
        assert_eq!(field(json!({"model": "s", "input": 5})), "input");
        assert_eq!(field(json!({"model": "s", "input": [7]})), "input[0]");
        assert_eq!(field(json!({"model": "s", "input": [{"type": "item_reference", "id": "x"}]})), "input[0].type");
        assert_eq!(field(json!({"model": "s", "input": [{"role": "robot", "content": "x"}]})), "input[0].role");
        assert_eq!(field(json!({"model": "s", "input": [{"role": "user"}]})), "input[0].content");
        assert_eq!(
            field(json!({"model": "s", "input": [{"role": "user", "content": [{"type": "input_file"}]}]})),
            "input[0].content[0].type"
        );
        assert_eq!(
            field(
                json!({"model": "s", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]})
            ),
            "input[0].content[0].file_id"
        );
        assert_eq!(
            field(
                json!({"model": "s", "input": [{"role": "user", "content": "a"}, {"type": "function_call", "name": "f"}]})
            ),
            "input[1].call_id"
        );
        assert_eq!(
            field(json!({"model": "s", "input": [{"type": "function_call_output", "call_id": "c", "output": 3}]})),
            "input[0].output"
        );
        assert_eq!(field(json!({"model": "s", "input": [{"role": "assistant", "content": "a"}]})), "input[0].role");
        assert_eq!(with(json!({"instructions": 3})), "instructions");
        assert_eq!(with(json!({"tools": [{"type": "web_search"}]})), "tools[0].type");
        assert_eq!(with(json!({"tools": [{"type": "function", "name": "a b"}]})), "tools[0].name");
        assert_eq!(
            with(json!({"tools": [{"type": "function", "name": "a"}, {"type": "function", "name": "a"}]})),
            "tools[1].name"
        );
        assert_eq!(
            with(json!({"tools": [{"type": "function", "name": "a", "parameters": []}]})),
            "tools[0].parameters"
        );
        assert_eq!(with(json!({"tool_choice": "required"})), "tool_choice");
        assert_eq!(with(json!({"tool_choice": {"type": "function", "name": "b"}})), "tool_choice.name");
        assert_eq!(with(json!({"tool_choice": {"type": "allowed_tools"}})), "tool_choice.type");
        assert_eq!(with(json!({"text": {"format": {"type": "yaml"}}})), "text.format.type");
        assert_eq!(with(json!({"text": {"format": {"type": "json_schema", "schema": {}}}})), "text.format.name");
        assert_eq!(with(json!({"max_output_tokens": -1})), "max_output_tokens");
        assert_eq!(with(json!({"metadata": {"a": 1}})), "metadata.a");
        assert_eq!(with(json!({"stream": "yes"})), "stream");
        assert_eq!(with(json!({"store": 1})), "store");
        assert_eq!(with(json!({"previous_response_id": 4})), "previous_response_id");
    }
}
