//! The three routes and the routing call's parts, as docs/requirements.md#router-routing-tools
//! gives them: the two routing tools verbatim, the routing prompt, and reading the model's decision.

use std::fmt::Write as _;

use serde_json::json;
use switchyard_llm::{ToolCall, ToolSpec};
use switchyard_proto::router::v1 as pb;

/// How a message is answered: the fast router's enum, so a decision moves between the routing
/// call, the fast router and the cache without translation.
pub use switchyard_fastroute::Route;

/// The route's wire form.
pub fn route_to_proto(route: Route) -> pb::RouteType {
    match route {
        Route::Direct => pb::RouteType::Direct,
        Route::McpAgent => pb::RouteType::McpAgent,
        Route::Multiagent => pb::RouteType::Multiagent,
    }
}

/// The route a wire value names; `None` for "unspecified".
pub fn route_from_proto(route: pb::RouteType) -> Option<Route> {
    match route {
        pb::RouteType::Unspecified => None,
        pb::RouteType::Direct => Some(Route::Direct),
        pb::RouteType::McpAgent => Some(Route::McpAgent),
        pb::RouteType::Multiagent => Some(Route::Multiagent),
    }
}

pub const USE_MCP_AGENT: &str = "use_mcp_agent";
pub const USE_MULTIAGENT: &str = "use_multiagent_orchestration";

/// The spec's two routing tools, names, descriptions and parameters verbatim.
pub fn routing_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: USE_MCP_AGENT.to_owned(),
            description: "Use this when the user's request requires external tools such as: reading/writing files, web search, API calls, calculations, system operations, or any interaction beyond conversation".to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "reasoning": {
                        "type": "string",
                        "description": "Brief explanation of why MCP agent is needed"
                    }
                },
                "required": ["reasoning"]
            }),
        },
        ToolSpec {
            name: USE_MULTIAGENT.to_owned(),
            description: "Use this for complex requests that require multiple expert perspectives, cross-domain analysis, or coordinated reasoning across different specialties (technical, business, creative, etc.)".to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "domains": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "List of domains needed (e.g., ['technical', 'business', 'creative'])"
                    },
                    "reasoning": {
                        "type": "string",
                        "description": "Why multiple agents are needed"
                    }
                },
                "required": ["domains", "reasoning"]
            }),
        },
    ]
}

/// What the routing call decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub route: Route,
    pub reasoning: String,
    /// Requested domains (multi-agent only).
    pub domains: Vec<String>,
    /// Set when the model's tool-call arguments could not be read; the route stands (the
    /// model did call the tool), but reasoning and domains are missing.
    pub malformed_arguments: Option<String>,
}

impl Decision {
    pub fn direct() -> Self {
        Self { route: Route::Direct, reasoning: String::new(), domains: Vec::new(), malformed_arguments: None }
    }

    /// The route of the first routing tool the model called; `None` for any other tool name
    /// (which is treated as a direct answer by the caller).
    pub fn from_tool_call(call: &ToolCall) -> Option<Self> {
        let route = match call.name.as_str() {
            USE_MCP_AGENT => Route::McpAgent,
            USE_MULTIAGENT => Route::Multiagent,
            _ => return None,
        };
        let (arguments, malformed) = match call.parsed_arguments() {
            Ok(map) => (map, None),
            Err(err) => (serde_json::Map::new(), Some(err)),
        };
        let reasoning = arguments.get("reasoning").and_then(|r| r.as_str()).unwrap_or_default().trim().to_owned();
        let domains = match arguments.get("domains") {
            Some(serde_json::Value::Array(items)) => {
                items.iter().filter_map(|d| d.as_str()).map(|d| d.trim().to_owned()).filter(|d| !d.is_empty()).collect()
            }
            // Some models send one comma-separated string instead of an array.
            Some(serde_json::Value::String(list)) => {
                list.split(',').map(|d| d.trim().to_owned()).filter(|d| !d.is_empty()).collect()
            }
            _ => Vec::new(),
        };
        Some(Self { route, reasoning, domains, malformed_arguments: malformed })
    }
}

/// What the routing prompt is built from.
#[derive(Debug, Clone, Default)]
pub struct RoutingContext {
    pub user_id: String,
    pub conversation_id: String,
    pub message_count: u64,
    /// The session's expert role.
    pub role_id: String,
    /// What the sessions service says about a role switch on this turn.
    pub transition_context: String,
}

/// The spec's routing prompt, word for word, then the session's context: the expert role whose
/// persona (`persona`, the role's system prompt) a direct answer speaks in, and the role
/// transition. The recent turns travel as the call's messages, so the route is chosen on the
/// conversation and not only on its last message.
pub fn routing_prompt(ctx: &RoutingContext, persona: &str) -> String {
    let mut prompt = format!(
        "You are an intelligent assistant that can either respond directly or use specialized tools when needed.

Current context:
- User: {}
- Conversation: {}
- Message count: {}

Respond directly for:
- Greetings, casual conversation
- Simple questions with straightforward answers
- Clarifications or follow-ups to previous messages
- General knowledge queries

Use tools only when the request explicitly requires:
- File operations or code analysis (use_mcp_agent)
- Web searches or API calls (use_mcp_agent)
- Complex multi-domain analysis (use_multiagent_orchestration)
- Coordinated expert reasoning (use_multiagent_orchestration)

When in doubt, prefer direct responses. Tools add latency and should only be used when truly beneficial.",
        ctx.user_id, ctx.conversation_id, ctx.message_count
    );
    // The sessions service puts the transition into the role's prompt already; quote it only
    // when a caller's persona does not carry it.
    if !ctx.transition_context.is_empty() && !persona.contains(&ctx.transition_context) {
        let _ = write!(prompt, "\n\nRole transition on this message: {}", ctx.transition_context);
    }
    if !persona.is_empty() {
        let _ = write!(
            prompt,
            "\n\nWhen you respond directly, you answer as the session's expert role ({}), in its voice:\n\n{}",
            ctx.role_id, persona
        );
    }
    prompt
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall { id: "call_1".into(), name: name.into(), arguments: arguments.into() }
    }

    #[test]
    fn the_routing_tools_are_the_specs() {
        let tools = routing_tools();
        assert_eq!(tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), [USE_MCP_AGENT, USE_MULTIAGENT]);
        assert_eq!(tools[1].parameters["required"], json!(["domains", "reasoning"]));
    }

    #[test]
    fn decisions_are_read_from_tool_calls() {
        let d = Decision::from_tool_call(&call(
            USE_MULTIAGENT,
            r#"{"domains":["technical"," business "],"reasoning":"two views"}"#,
        ))
        .expect("a routing tool");
        assert_eq!(
            (d.route, d.domains.as_slice(), d.reasoning.as_str()),
            (Route::Multiagent, &["technical".to_owned(), "business".to_owned()][..], "two views")
        );
        let d = Decision::from_tool_call(&call(USE_MULTIAGENT, r#"{"domains":"legal, finance","reasoning":"x"}"#))
            .expect("routing");
        assert_eq!(d.domains, ["legal", "finance"]);
        assert!(Decision::from_tool_call(&call("other_tool", "{}")).is_none());
    }

    #[test]
    fn malformed_arguments_keep_the_route_and_say_so() {
        let d = Decision::from_tool_call(&call(USE_MCP_AGENT, r#"{"reasoning": "needs a fi"#)).expect("routing");
        assert_eq!(d.route, Route::McpAgent);
        assert!(d.reasoning.is_empty());
        assert!(d.malformed_arguments.expect("noted").contains("not valid JSON"));
    }

    #[test]
    fn the_prompt_is_the_specs_with_the_sessions_context() {
        let ctx = RoutingContext {
            user_id: "u1".into(),
            conversation_id: "s1".into(),
            message_count: 4,
            role_id: "finance-expert".into(),
            transition_context: "Switched from tech-expert".into(),
        };
        let prompt = routing_prompt(&ctx, "You are a finance expert.");
        assert!(prompt.starts_with("You are an intelligent assistant that can either respond directly"));
        assert!(prompt.contains("- User: u1\n- Conversation: s1\n- Message count: 4"));
        assert!(prompt.contains("When in doubt, prefer direct responses."));
        assert!(prompt.contains("Role transition on this message: Switched from tech-expert"));
        assert!(prompt.ends_with("(finance-expert), in its voice:\n\nYou are a finance expert."));
    }
}
