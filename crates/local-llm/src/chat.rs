//! Renders a conversation in SmolLM2's ChatML template, as token ids.
//!
//! `<|im_start|>role\ncontent<|im_end|>\n` per turn, then `<|im_start|>assistant\n` for the
//! answer. The markers are inserted as their ids and the contents encoded as plain text, so
//! a message that contains `<|im_end|>` cannot end its turn early.

use switchyard_llm::{ChatRequest, Message, ToolSpec};

use crate::tokenizer::{ChatTokenizer, IM_END, IM_START};

/// The system prompt of SmolLM2's own template, used when the request has none.
pub const DEFAULT_SYSTEM: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

/// Builds prompts turn by turn.
pub struct Prompt<'t> {
    tokenizer: &'t ChatTokenizer,
    pub ids: Vec<u32>,
}

impl<'t> Prompt<'t> {
    pub fn new(tokenizer: &'t ChatTokenizer) -> Self {
        Self { tokenizer, ids: Vec::new() }
    }

    pub fn turn(&mut self, role: &str, content: &str) -> Result<(), String> {
        self.open(role)?;
        self.text(content)?;
        self.ids.push(IM_END);
        self.text("\n")
    }

    /// `<|im_start|>role\n`, leaving the turn open.
    pub fn open(&mut self, role: &str) -> Result<(), String> {
        self.ids.push(IM_START);
        self.text(&format!("{role}\n"))
    }

    pub fn text(&mut self, text: &str) -> Result<(), String> {
        self.ids.extend(self.tokenizer.encode(text)?);
        Ok(())
    }
}

/// How an assistant's tool call is written in the transcript (and how the model is asked to
/// write one): one JSON object per call.
pub fn tool_call_json(name: &str, arguments: &str) -> String {
    let arguments = if arguments.trim().is_empty() { "{}" } else { arguments };
    format!("{{\"name\": {}, \"arguments\": {arguments}}}", serde_json::Value::from(name))
}

/// The system prompt listing the tools, when the model is to call one.
pub fn tools_system(system: Option<&str>, tools: &[ToolSpec]) -> String {
    let mut text = String::from(system.unwrap_or(DEFAULT_SYSTEM));
    text.push_str("\n\nYou can call these tools:\n");
    for tool in tools {
        text.push_str(&format!("- {}: {} Parameters: {}\n", tool.name, tool.description.trim(), tool.parameters));
    }
    text.push_str("To call a tool, answer with {\"name\": <tool name>, \"arguments\": <JSON object>}.");
    text
}

/// The whole conversation, ending with an open assistant turn. `system` replaces the
/// request's system prompt when given (the tool-calling prompt).
pub fn render(tokenizer: &ChatTokenizer, request: &ChatRequest, system: Option<&str>) -> Result<Vec<u32>, String> {
    let mut prompt = Prompt::new(tokenizer);
    let system = system.or(request.system.as_deref()).unwrap_or(DEFAULT_SYSTEM);
    prompt.turn("system", system)?;
    for message in &request.messages {
        match message {
            Message::User { .. } => prompt.turn("user", &message.text())?,
            Message::Assistant { content, tool_calls } => {
                let mut text = content.clone();
                for call in tool_calls {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&tool_call_json(&call.name, &call.arguments));
                }
                prompt.turn("assistant", &text)?;
            }
            Message::Tool { is_error, .. } => {
                let content = message.text();
                let content = if *is_error { format!("Error: {content}") } else { content.into_owned() };
                prompt.turn("tool", &content)?;
            }
        }
    }
    prompt.open("assistant")?;
    Ok(prompt.ids)
}

/// A tool result follows the last user message: the model should now answer in text.
pub fn has_tool_result_for_last_user(messages: &[Message]) -> bool {
    let last_user = messages.iter().rposition(|m| matches!(m, Message::User { .. }));
    let after = last_user.map_or(0, |i| i + 1);
    messages[after..].iter().any(|m| matches!(m, Message::Tool { .. }))
}
