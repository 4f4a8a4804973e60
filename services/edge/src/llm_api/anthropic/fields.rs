//! Where each message of the router's request came from, so that a field the router refuses
//! is named as the caller's request has it.

use crate::error::ApiError;

/// Where a message of the router's history came from in the caller's request.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Origin {
    /// `messages[i]`; `messages[i].content[b]` for a tool result; `system`.
    pub(super) path: String,
    /// The block each of the router message's parts came from.
    pub(super) parts: Vec<String>,
    /// The `tool_use` block each of its tool calls came from.
    pub(super) tool_calls: Vec<String>,
}

impl Origin {
    pub(super) fn new(path: String) -> Self {
        Self { path, ..Self::default() }
    }
}

/// Names a field of the router's request as the caller's request has it: the router checks
/// tools, tool calls and results, and images, and names what it refuses in its own terms
/// (`history[3].tool_call_id`, `tools[0].parameters_json`).
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Fields {
    pub(super) history: Vec<Origin>,
    /// The field the router's `message` came from.
    pub(super) message: String,
}

impl Fields {
    pub(super) fn rename(&self, error: ApiError) -> ApiError {
        match error.field().and_then(|field| self.caller_field(field)) {
            Some(field) => error.with_field(field),
            None => error,
        }
    }

    pub(super) fn caller_field(&self, field: &str) -> Option<String> {
        let renamed = match field {
            "message" => self.message.clone(),
            "history" => "messages".to_owned(),
            "parallel_tool_calls" => "tool_choice.disable_parallel_tool_use".to_owned(),
            "tool_choice.function" => "tool_choice.name".to_owned(),
            "tool_choice.mode" => "tool_choice.type".to_owned(),
            "anthropic_version" => "anthropic-version".to_owned(),
            "anthropic_beta" => "anthropic-beta".to_owned(),
            _ if field.starts_with("tools[") => field.replace(".parameters_json", ".input_schema"),
            _ if field.starts_with("stop[") => format!("stop_sequences{}", &field[4..]),
            _ => {
                let rest = field.strip_prefix("history[")?;
                let (index, rest) = rest.split_once(']')?;
                let origin = self.history.get(index.parse::<usize>().ok()?)?;
                return Some(origin_field(origin, rest));
            }
        };
        Some(renamed)
    }
}

/// `rest` of a router history field (`.tool_calls[0].arguments_json`) under its origin.
pub(super) fn origin_field(origin: &Origin, rest: &str) -> String {
    let indexed = |rest: &str, name: &str, paths: &[String]| -> Option<(String, String)> {
        let rest = rest.strip_prefix(name)?.strip_prefix('[')?;
        let (index, tail) = rest.split_once(']')?;
        let path = paths.get(index.parse::<usize>().ok()?)?;
        Some((path.clone(), tail.to_owned()))
    };
    if let Some((path, tail)) = indexed(rest, ".tool_calls", &origin.tool_calls) {
        let tail = tail.replace(".arguments_json", ".input");
        return format!("{path}{tail}");
    }
    if let Some((path, tail)) = indexed(rest, ".parts", &origin.parts) {
        // An image part's URL is the image block's source.
        let tail = if tail.starts_with(".image") { ".source".to_owned() } else { tail };
        return format!("{path}{tail}");
    }
    match rest {
        ".tool_call_id" => format!("{}.tool_use_id", origin.path),
        ".tool_calls" | ".parts" => format!("{}.content", origin.path),
        _ => format!("{}{rest}", origin.path),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::llm_api::{anthropic::request::MessagesRequest, conversation::Conversation};

    #[test]
    fn fields_the_router_refuses_are_named_as_the_caller_sent_them() {
        let image = json!({"type": "image", "source": {"type": "url", "url": "http://example.com/a.png"}});
        let (_, fields) =
            MessagesRequest::parse(&json!({"model": "m", "max_tokens": 9, "system": "Be brief.", "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "text", "text": "x"},
                    {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
                {"role": "user", "content": [{"type": "text", "text": "see"},
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "r"}, image]},
                    image]},
                {"role": "user", "content": "next"},
            ]}))
            .unwrap()
            .into_chat(Conversation::default())
            .unwrap();
        let named = |field: &str| fields.caller_field(field).unwrap_or_default();
        assert_eq!(named("history[0].content"), "system.content");
        assert_eq!(named("history[2].tool_calls[0].arguments_json"), "messages[1].content[1].input");
        assert_eq!(named("history[3].tool_call_id"), "messages[2].content[1].tool_use_id");
        assert_eq!(named("history[3].parts[1].image.url"), "messages[2].content[1].content[1].source");
        assert_eq!(named("history[4].parts[1].image.url"), "messages[2].content[2].source");
        assert_eq!(named("message"), "messages[3].content");
        assert_eq!(named("tools[0].parameters_json"), "tools[0].input_schema");
        assert_eq!(named("stop[1]"), "stop_sequences[1]");
        let error = fields.rename(ApiError::bad_request("history[3].tool_call_id", "answers no call"));
        assert_eq!(error.field(), Some("messages[2].content[1].tool_use_id"));
        assert_eq!(error.message(), "messages[2].content[1].tool_use_id: answers no call");
    }
}
