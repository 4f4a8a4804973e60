//! Domain types that validate on construction, so nothing invalid travels inward: role ids,
//! triggers (with their regexes compiled once to prove they are sound), queries, and limits.

use std::fmt;

use serde::{Deserialize, Serialize};
use switchyard_kit::text::reject_nul;

use crate::{error::TriggersError, regexes::validate_regex, text::normalize};

/// The source name of a role's own (non-domain) triggers.
pub const CUSTOM_SOURCE: &str = "custom";

/// Size limits that keep requests and the compiled matcher bounded.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Longest query accepted, in bytes.
    pub max_query_bytes: usize,
    /// Most custom triggers one role may register.
    pub max_custom_triggers: usize,
    /// Longest trigger pattern, in bytes.
    pub max_pattern_bytes: usize,
    /// Largest compiled form of one regex trigger, in bytes (rejects "catastrophic" regexes
    /// such as `\w{1000}{1000}` whose automaton would explode).
    pub max_regex_bytes: usize,
    /// Most distinct triggers across all roles (bounds the matcher's memory).
    pub max_registry_triggers: usize,
    /// Most example questions one role may register for the semantic signal (each is embedded
    /// once, about 10 ms of CPU).
    pub max_role_examples: usize,
    /// Longest role description or example question, in bytes.
    pub max_example_bytes: usize,
}

impl Default for Limits {
    /// The flags' defaults.
    fn default() -> Self {
        crate::TriggersConfig::defaults().limits()
    }
}

pub use switchyard_kit::RoleId;

/// How a trigger's pattern is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TriggerKind {
    Keyword,
    Phrase,
    Regex,
}

impl TriggerKind {
    pub const ALL: [TriggerKind; 3] = [TriggerKind::Keyword, TriggerKind::Phrase, TriggerKind::Regex];

    /// A bit per kind, for counting distinct kinds matched.
    pub fn bit(self) -> u8 {
        match self {
            Self::Keyword => 1,
            Self::Phrase => 2,
            Self::Regex => 4,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Keyword => "keyword",
            Self::Phrase => "phrase",
            Self::Regex => "regex",
        }
    }
}

impl fmt::Display for TriggerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

pub const MIN_PRIORITY: u32 = 1;
pub const MAX_PRIORITY: u32 = 100;

/// A validated trigger. Keywords and phrases are stored normalized (lowercase, single spaces);
/// regexes are stored as written, after proving they compile within the limits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Trigger {
    pub pattern: String,
    pub kind: TriggerKind,
    pub priority: u32,
}

impl Trigger {
    /// Validates a trigger; errors name `field` (e.g. `custom_triggers[3]`).
    pub fn new(
        pattern: &str,
        kind: TriggerKind,
        priority: u32,
        limits: &Limits,
        field: &str,
    ) -> Result<Self, TriggersError> {
        let invalid = |sub: &str, reason: String| TriggersError::invalid(format!("{field}.{sub}"), reason);
        reject_nul(&format!("{field}.pattern"), pattern)?;
        if !(MIN_PRIORITY..=MAX_PRIORITY).contains(&priority) {
            return Err(invalid(
                "priority",
                format!("must be between {MIN_PRIORITY} and {MAX_PRIORITY}, got {priority}"),
            ));
        }
        if pattern.len() > limits.max_pattern_bytes {
            return Err(invalid(
                "pattern",
                format!("is {} bytes, over the limit of {} bytes", pattern.len(), limits.max_pattern_bytes),
            ));
        }
        let pattern = match kind {
            TriggerKind::Keyword => {
                let normalized = normalize(pattern);
                if normalized.is_empty() {
                    return Err(invalid("pattern", "must not be empty".into()));
                }
                if normalized.contains(' ') {
                    return Err(invalid(
                        "pattern",
                        format!("keyword `{pattern}` has spaces; use kind PHRASE for several words"),
                    ));
                }
                if !normalized.chars().any(char::is_alphanumeric) {
                    return Err(invalid("pattern", format!("keyword `{pattern}` has no letter or digit")));
                }
                normalized
            }
            TriggerKind::Phrase => {
                let normalized = normalize(pattern);
                if normalized.split(' ').filter(|w| !w.is_empty()).count() < 2 {
                    return Err(invalid(
                        "pattern",
                        format!("phrase `{pattern}` needs at least two words; use kind KEYWORD for one"),
                    ));
                }
                normalized
            }
            TriggerKind::Regex => {
                validate_regex(pattern, limits.max_regex_bytes).map_err(|reason| invalid("pattern", reason))?;
                pattern.to_owned()
            }
        };
        Ok(Self { pattern, kind, priority })
    }
}

/// What a role registers: the domain packs it draws from, its own triggers, and what the
/// semantic signal knows it by beyond its domains' exemplars (both may be empty).
#[derive(Debug, Clone, PartialEq)]
pub struct RoleRegistration {
    pub role_id: RoleId,
    pub domains: Vec<String>,
    pub custom_triggers: Vec<Trigger>,
    pub description: String,
    pub example_questions: Vec<String>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

/// A role description: trimmed, at most `max_example_bytes` (empty is allowed: no description).
pub fn role_description(text: &str, limits: &Limits) -> Result<String, TriggersError> {
    let text = text.trim();
    reject_nul("description", text)?;
    if text.len() > limits.max_example_bytes {
        return Err(TriggersError::invalid(
            "description",
            format!("is {} bytes, over the limit of {} bytes", text.len(), limits.max_example_bytes),
        ));
    }
    Ok(text.to_owned())
}

/// Example questions: each trimmed, non-empty and bounded; at most `max_role_examples`;
/// duplicates dropped. Errors name `field[index]`.
pub fn example_questions(questions: &[String], limits: &Limits, field: &str) -> Result<Vec<String>, TriggersError> {
    if questions.len() > limits.max_role_examples {
        return Err(TriggersError::invalid(
            field,
            format!("{} questions given, over the limit of {} per role", questions.len(), limits.max_role_examples),
        ));
    }
    let mut kept: Vec<String> = Vec::with_capacity(questions.len());
    for (index, question) in questions.iter().enumerate() {
        let question = question.trim();
        if question.is_empty() {
            return Err(TriggersError::invalid(format!("{field}[{index}]"), "must not be empty".into()));
        }
        reject_nul(&format!("{field}[{index}]"), question)?;
        if question.len() > limits.max_example_bytes {
            return Err(TriggersError::invalid(
                format!("{field}[{index}]"),
                format!("is {} bytes, over the limit of {} bytes", question.len(), limits.max_example_bytes),
            ));
        }
        if !kept.iter().any(|k| k == question) {
            kept.push(question.to_owned());
        }
    }
    Ok(kept)
}

/// A user query, checked for emptiness and size.
#[derive(Debug, Clone, Copy)]
pub struct Query<'a>(&'a str);

impl<'a> Query<'a> {
    pub fn new(text: &'a str, limits: &Limits) -> Result<Self, TriggersError> {
        if text.trim().is_empty() {
            return Err(TriggersError::invalid("query", "must not be empty".into()));
        }
        if text.len() > limits.max_query_bytes {
            return Err(TriggersError::invalid(
                "query",
                format!("is {} bytes, over the limit of {} bytes", text.len(), limits.max_query_bytes),
            ));
        }
        Ok(Self(text))
    }

    pub fn as_str(&self) -> &'a str {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_validate_kind_and_priority() {
        let limits = Limits::default();
        let keyword = Trigger::new("  Budget ", TriggerKind::Keyword, 3, &limits, "t").expect("valid");
        assert_eq!(keyword.pattern, "budget");
        let err = Trigger::new("two words", TriggerKind::Keyword, 3, &limits, "custom_triggers[0]").unwrap_err();
        assert!(err.to_string().starts_with("custom_triggers[0].pattern:"), "{err}");
        assert!(Trigger::new("one", TriggerKind::Phrase, 3, &limits, "t").is_err());
        assert!(Trigger::new("x", TriggerKind::Keyword, 0, &limits, "t").is_err());
        assert!(Trigger::new("x", TriggerKind::Keyword, 101, &limits, "t").is_err());
        assert!(Trigger::new("!!", TriggerKind::Keyword, 1, &limits, "t").is_err());
        let long = "a".repeat(limits.max_pattern_bytes + 1);
        let err = Trigger::new(&long, TriggerKind::Keyword, 1, &limits, "t").unwrap_err();
        assert!(err.to_string().contains("over the limit of 512 bytes"), "{err}");
    }

    #[test]
    fn descriptions_and_example_questions_are_trimmed_bounded_and_named() {
        let limits = Limits { max_role_examples: 2, max_example_bytes: 12, ..Limits::default() };
        assert_eq!(role_description("  rockets  ", &limits).expect("valid"), "rockets");
        let err = role_description("far too long a text", &limits).unwrap_err();
        assert_eq!(err.to_string(), "description: is 19 bytes, over the limit of 12 bytes");
        let kept = example_questions(&[" why? ".into(), "why?".into()], &limits, "example_questions");
        assert_eq!(kept.expect("valid"), ["why?"]);
        let err = example_questions(&["ok".into(), " ".into()], &limits, "example_questions").unwrap_err();
        assert_eq!(err.to_string(), "example_questions[1]: must not be empty");
        let three: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let err = example_questions(&three, &limits, "example_questions").unwrap_err();
        assert!(err.to_string().starts_with("example_questions: 3 questions given"), "{err}");
    }

    #[test]
    fn queries_must_be_non_empty_and_bounded() {
        let limits = Limits { max_query_bytes: 10, ..Limits::default() };
        assert!(Query::new("hello", &limits).is_ok());
        assert!(Query::new("   ", &limits).unwrap_err().to_string().starts_with("query: must not be empty"));
        let err = Query::new("hello world!", &limits).unwrap_err();
        assert_eq!(err.to_string(), "query: is 12 bytes, over the limit of 10 bytes");
    }
}
