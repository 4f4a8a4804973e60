//! The transition context (docs/requirements.md#sessions-transition-context): text for the
//! model taking over, saying who handled the conversation before, why it changed hands, and
//! what was being discussed.

use crate::domain::{Message, Role, SwitchReason, excerpt};

/// Most recent messages quoted, and how much of each.
const QUOTED_MESSAGES: usize = 6;
const QUOTED_CHARS: usize = 280;

pub fn transition_context(
    previous: &Role,
    next: &Role,
    reason: SwitchReason,
    detail: &str,
    recent: &[Message],
    query: Option<&str>,
) -> String {
    let why = match reason {
        SwitchReason::Triggered => "the conversation moved into your area of expertise",
        SwitchReason::Forced => "the caller asked for your role explicitly",
        SwitchReason::Manual => "the user switched roles by hand",
        _ => "the conversation changed hands",
    };
    let mut text = format!(
        "You are taking over this conversation as {} ({}) from {} ({}), because {why}.",
        next.name, next.id, previous.name, previous.id
    );
    if !detail.is_empty() {
        text.push_str(&format!(" Reason: {detail}."));
    }
    let start = recent.len().saturating_sub(QUOTED_MESSAGES);
    let quoted = &recent[start..];
    if quoted.is_empty() {
        text.push_str(" There is no earlier conversation to carry over.");
    } else {
        text.push_str("\nWhat was being discussed so far (oldest first):");
        for message in quoted {
            let speaker = match message.role {
                crate::domain::MessageRole::Assistant if !message.role_id.is_empty() => {
                    format!("assistant ({})", message.role_id)
                }
                role => role.as_str().to_owned(),
            };
            text.push_str(&format!("\n- {speaker}: {}", excerpt(message.content.trim(), QUOTED_CHARS)));
        }
    }
    if let Some(query) = query {
        text.push_str(&format!("\nThe user now asks: {}", excerpt(query.trim(), QUOTED_CHARS)));
    }
    text.push_str("\nContinue the conversation seamlessly from here; do not repeat what was already answered.");
    text
}

/// The system prompt for a turn: the role's prompt, the transition context when the role
/// just changed, and the caller's extra instructions.
pub fn system_prompt(role: &Role, transition: &str, custom_instructions: Option<&str>) -> String {
    let mut prompt = role.system_prompt.clone();
    if !transition.is_empty() {
        prompt.push_str("\n\n");
        prompt.push_str(transition);
    }
    if let Some(extra) = custom_instructions.map(str::trim).filter(|s| !s.is_empty()) {
        prompt.push_str("\n\nAdditional instructions: ");
        prompt.push_str(extra);
    }
    prompt
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{defaults::default_roles, domain::MessageRole};

    #[test]
    fn names_both_roles_the_reason_and_what_was_discussed() {
        let roles = default_roles();
        let (tech, finance) = (&roles[1], &roles[0]);
        let recent = vec![
            Message {
                seq: 1,
                role: MessageRole::User,
                content: "How do I shard Postgres?".into(),
                role_id: "tech-expert".into(),
                created_at_ms: 0,
                append_id: String::new(),
            },
            Message {
                seq: 2,
                role: MessageRole::Assistant,
                content: "Use Citus or app-level sharding.".into(),
                role_id: "tech-expert".into(),
                created_at_ms: 0,
                append_id: String::new(),
            },
        ];
        let text = transition_context(
            tech,
            finance,
            SwitchReason::Triggered,
            "finance scored 12 against 3",
            &recent,
            Some("What will it cost us per month?"),
        );
        assert!(text.contains("Finance Expert (finance-expert) from Technology Expert (tech-expert)"), "{text}");
        assert!(text.contains("- user: How do I shard Postgres?"));
        assert!(text.contains("- assistant (tech-expert): Use Citus"));
        assert!(text.contains("The user now asks: What will it cost us per month?"));
        let prompt = system_prompt(finance, &text, Some("Answer in French."));
        assert!(prompt.starts_with(&finance.system_prompt));
        assert!(prompt.ends_with("Additional instructions: Answer in French."));
    }
}
