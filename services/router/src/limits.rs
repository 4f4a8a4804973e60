//! The router's limits, named once.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_message_bytes: usize,
    pub max_history: usize,
    /// Recent turns quoted to the model (session messages and caller history together).
    pub context_turns: usize,
    /// Largest `max_tokens` sent to a model; a caller's larger one is lowered to it.
    pub max_tokens: u32,
    pub max_tool_steps: usize,
    pub agent_tools: u32,
    /// Tools shown to a local model: a small model chooses better among the gateway's best few.
    pub local_agent_tools: u32,
    pub tool_call_timeout: Duration,
    pub max_experts: usize,
    pub expert_concurrency: usize,
    pub expert_timeout: Duration,
}

impl Default for Limits {
    /// The flags' defaults.
    fn default() -> Self {
        crate::RouterConfig::defaults().limits()
    }
}

/// Longest role id or instruction text accepted alongside a message.
pub const MAX_ROLE_ID_BYTES: usize = 128;
pub const MAX_INSTRUCTIONS_BYTES: usize = 8 * 1024;
/// Highest sampling temperature the vendors accept.
pub const MAX_TEMPERATURE: f64 = 2.0;
/// The caller's own tools accepted on one request.
pub const MAX_CLIENT_TOOLS: usize = 128;
/// Longest tool name the vendors accept.
pub const MAX_TOOL_NAME_BYTES: usize = 64;
/// Longest tool description or JSON Schema accepted.
pub const MAX_TOOL_SCHEMA_BYTES: usize = 64 * 1024;
/// Stop sequences accepted, and the longest one.
pub const MAX_STOP_SEQUENCES: usize = 16;
pub const MAX_STOP_BYTES: usize = 256;
/// Longest conversation key accepted (a digest is 64).
pub const MAX_CONVERSATION_KEY_BYTES: usize = 256;
/// Longest `anthropic-version` (a date, `2023-06-01`) and `anthropic-beta` (a list of dated
/// names; Claude Code sends about 150 bytes) accepted from a caller.
pub const MAX_ANTHROPIC_VERSION_BYTES: usize = 64;
pub const MAX_ANTHROPIC_BETA_BYTES: usize = 1024;
