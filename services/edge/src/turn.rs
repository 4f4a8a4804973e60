//! One chat turn as the edge hands it to the router, whichever API it came in on. OpenAI's chat
//! completions, Anthropic's Messages, OpenAI's Responses and the REST streamed processing each
//! read their request into a [`ChatTurn`] once; the router's `ChatRequest` or
//! `ChatStreamRequest` (the same fields under the same numbers) is made from it in one place,
//! at the call, and so is the call itself.

use switchyard_proto::router::v1::{self as router, RouteType};
use tonic::{Status, Streaming};

use crate::{Edge, auth::Caller, clients, llm_api::conversation::Conversation};

/// What the router gets for one turn; `router.proto`'s ChatRequest says what each field means.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatTurn {
    /// The user's message (its text, which routing reads); empty when the history ends in tool
    /// results, which continues the caller's tool loop.
    pub message: String,
    pub history: Vec<router::ChatMessage>,
    pub session_id: String,
    pub conversation_key: String,
    pub model: Option<String>,
    pub force_route: RouteType,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub force_role_id: Option<String>,
    pub custom_instructions: Option<String>,
    pub tools: Vec<router::ClientTool>,
    pub tool_choice: Option<router::ToolChoice>,
    pub parallel_tool_calls: Option<bool>,
    pub response_format: Option<router::ResponseFormat>,
    pub stop: Vec<String>,
    pub anthropic_version: Option<String>,
    pub anthropic_beta: Option<String>,
}

impl ChatTurn {
    /// The conversation the turn continues: a named session, or a stateless caller's key.
    pub fn belongs_to(&mut self, conversation: Conversation) {
        self.session_id = conversation.session_id;
        self.conversation_key = conversation.conversation_key;
    }
}

/// ChatRequest and ChatStreamRequest carry the same fields under the same names; every field is
/// named here (no `..Default::default()`), so a field added to the protos cannot be left behind.
macro_rules! router_request_from_turn {
    ($($request:ty),+) => {$(
        impl From<ChatTurn> for $request {
            fn from(turn: ChatTurn) -> Self {
                Self {
                    message: turn.message,
                    session_id: turn.session_id,
                    model: turn.model,
                    force_route: turn.force_route as i32,
                    max_tokens: turn.max_tokens,
                    temperature: turn.temperature,
                    history: turn.history,
                    force_role_id: turn.force_role_id,
                    custom_instructions: turn.custom_instructions,
                    tools: turn.tools,
                    tool_choice: turn.tool_choice,
                    parallel_tool_calls: turn.parallel_tool_calls,
                    response_format: turn.response_format,
                    stop: turn.stop,
                    conversation_key: turn.conversation_key,
                    anthropic_version: turn.anthropic_version,
                    anthropic_beta: turn.anthropic_beta,
                }
            }
        }
    )+};
}

router_request_from_turn!(router::ChatRequest, router::ChatStreamRequest);

/// The router's whole answer to a turn, within the edge's request timeout.
pub async fn answer(edge: &Edge, caller: &Caller, turn: ChatTurn) -> Result<router::ChatResponse, Status> {
    Ok(answer_warned(edge, caller, turn).await?.0)
}

/// The header (and router metadata) that says a turn went on past a budget's soft threshold.
pub const BUDGET_WARNING_HEADER: &str = "x-switchyard-budget-warning";

/// The router's whole answer to a turn with its budget warning, when it has one.
pub async fn answer_warned(
    edge: &Edge,
    caller: &Caller,
    turn: ChatTurn,
) -> Result<(router::ChatResponse, Option<http::HeaderValue>), Status> {
    let request = clients::request(router::ChatRequest::from(turn), caller, Some(edge.request_timeout));
    let response = edge.upstreams.router().chat(request).await?;
    let warning = budget_warning(response.metadata());
    Ok((response.into_inner(), warning))
}

/// The budget warning a router response's metadata carries (a stream's, in its initial
/// metadata), as an HTTP header value.
pub fn budget_warning(metadata: &tonic::metadata::MetadataMap) -> Option<http::HeaderValue> {
    metadata.get(BUDGET_WARNING_HEADER).and_then(|value| http::HeaderValue::from_bytes(value.as_bytes()).ok())
}

/// `response` with the budget warning header, when there is one.
pub fn warned(mut response: axum::response::Response, warning: Option<http::HeaderValue>) -> axum::response::Response {
    if let Some(warning) = warning {
        response.headers_mut().insert(BUDGET_WARNING_HEADER, warning);
    }
    response
}

/// The router's answer to a turn as it streams, with its budget warning when it has one (the
/// router checks budgets before the stream starts); no timeout, as a stream lasts as long as the
/// answer does.
pub async fn stream(
    edge: &Edge,
    caller: &Caller,
    turn: ChatTurn,
) -> Result<(Streaming<router::ChatStreamResponse>, Option<http::HeaderValue>), Status> {
    let request = clients::request(router::ChatStreamRequest::from(turn), caller, None);
    let response = edge.upstreams.router().chat_stream(request).await?;
    let warning = budget_warning(response.metadata());
    Ok((response.into_inner(), warning))
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use switchyard_proto::router::v1::{response_format, tool_choice};

    use super::*;

    /// A turn with every field set to something other than its default.
    fn full_turn() -> ChatTurn {
        ChatTurn {
            message: "What is Rust?".into(),
            history: vec![router::ChatMessage {
                role: router::ChatRole::System as i32,
                content: "Be brief.".into(),
                ..Default::default()
            }],
            session_id: "s-1".into(),
            conversation_key: "conv-1".into(),
            model: Some("openai/gpt-4o-mini".into()),
            force_route: RouteType::Direct,
            max_tokens: Some(64),
            temperature: Some(0.5),
            force_role_id: Some("tech-expert".into()),
            custom_instructions: Some("Cite sources.".into()),
            tools: vec![router::ClientTool { name: "get_weather".into(), ..Default::default() }],
            tool_choice: Some(router::ToolChoice { choice: Some(tool_choice::Choice::Function("get_weather".into())) }),
            parallel_tool_calls: Some(false),
            response_format: Some(router::ResponseFormat { format: Some(response_format::Format::JsonObject(true)) }),
            stop: vec!["END".into()],
            anthropic_version: Some("2023-06-01".into()),
            anthropic_beta: Some("tools-2024-04-04".into()),
        }
    }

    #[test]
    fn both_router_requests_carry_every_field_of_the_turn() {
        let turn = full_turn();
        let whole = router::ChatRequest::from(turn.clone());
        let streamed = router::ChatStreamRequest::from(turn);
        // Every field reached the wire: no field of the request is left at its default.
        let empty = router::ChatRequest::default();
        assert_ne!(whole.message, empty.message);
        assert_ne!(whole.history, empty.history);
        assert_ne!(whole.session_id, empty.session_id);
        assert_ne!(whole.conversation_key, empty.conversation_key);
        assert_ne!(whole.model, empty.model);
        assert_eq!(whole.force_route(), RouteType::Direct);
        assert_ne!(whole.max_tokens, empty.max_tokens);
        assert_ne!(whole.temperature, empty.temperature);
        assert_ne!(whole.force_role_id, empty.force_role_id);
        assert_ne!(whole.custom_instructions, empty.custom_instructions);
        assert_ne!(whole.tools, empty.tools);
        assert_ne!(whole.tool_choice, empty.tool_choice);
        assert_ne!(whole.parallel_tool_calls, empty.parallel_tool_calls);
        assert_ne!(whole.response_format, empty.response_format);
        assert_ne!(whole.stop, empty.stop);
        assert_ne!(whole.anthropic_version, empty.anthropic_version);
        assert_ne!(whole.anthropic_beta, empty.anthropic_beta);
        // And the two requests say the same thing on the wire.
        assert_eq!(whole.encode_to_vec(), streamed.encode_to_vec());
    }

    #[test]
    fn a_conversation_names_the_session_or_the_key() {
        let mut turn = ChatTurn::default();
        turn.belongs_to(Conversation { session_id: "s-2".into(), conversation_key: String::new() });
        assert_eq!((turn.session_id.as_str(), turn.conversation_key.as_str()), ("s-2", ""));
        turn.belongs_to(Conversation { session_id: String::new(), conversation_key: "conv-9".into() });
        assert_eq!((turn.session_id.as_str(), turn.conversation_key.as_str()), ("", "conv-9"));
    }
}
