//! The LLM APIs the edge speaks, so vendors' SDKs and agent CLIs use Switchyard unchanged:
//! OpenAI's chat completions (`openai`, with `/v1/models`), OpenAI's Responses (`responses`,
//! with its store of answers) and Anthropic's Messages (`anthropic`). Each reads its wire into
//! the router's chat and writes the router's answer and events back in its own shapes and
//! errors; what they share is here: the route or model a model name picks, the conversation a
//! request belongs to (`conversation`), content parts (`content`), the caller's tools and `tool_choice` (`tools`) and
//! JSON fields (`json`).

pub mod anthropic;
pub(crate) mod content;
pub mod conversation;
#[cfg(test)]
pub(crate) mod fuzz;
pub(crate) mod json;
pub mod openai;
pub mod responses;
pub(crate) mod tools;

use switchyard_proto::router::v1::RouteType;

/// The model names that choose a route; `switchyard` lets the router decide.
pub(crate) const ROUTE_MODELS: &[(&str, RouteType)] = &[
    ("switchyard", RouteType::Unspecified),
    ("switchyard-direct", RouteType::Direct),
    ("switchyard-mcp-agent", RouteType::McpAgent),
    ("switchyard-multiagent", RouteType::Multiagent),
];

/// Providers whose `provider/model` names pass through to the router.
const PROVIDERS: &[&str] = &["openai", "anthropic", "local"];

/// What a client API's model name asks for: a route (the route models), a model the router
/// knows (`provider/model`), or neither (`gpt-4o`, `claude-sonnet-4-5` and the like: an SDK's
/// or agent's default), when the router decides and its own model answers.
pub(crate) fn route_or_model(name: &str) -> (RouteType, Option<String>) {
    match ROUTE_MODELS.iter().find(|(route_model, _)| *route_model == name) {
        Some((_, route)) => (*route, None),
        None if name.split_once('/').is_some_and(|(p, m)| PROVIDERS.contains(&p) && !m.is_empty()) => {
            (RouteType::Unspecified, Some(name.to_owned()))
        }
        None => (RouteType::Unspecified, None),
    }
}
