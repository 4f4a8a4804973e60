//! The id of an expert role, shared by every service that names roles (triggers, sessions,
//! router): one definition, so the services can never disagree on what a valid id is.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A role id: a slug such as `finance-expert`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RoleId(String);

impl RoleId {
    pub const MAX_LEN: usize = 64;

    /// Lowercase letters, digits, `-`, `_`, `.`; starting with a letter or digit; at most 64.
    /// The error says what is wrong, without a field name (callers add theirs).
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("must not be empty".into());
        }
        if text.len() > Self::MAX_LEN {
            return Err(format!("must be at most {} characters, got {}", Self::MAX_LEN, text.len()));
        }
        let first_ok = text.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let rest_ok =
            text.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'));
        if !first_ok || !rest_ok {
            return Err(format!(
                "`{text}` is not a role id: use lowercase letters, digits, '-', '_' or '.', starting with a letter or digit"
            ));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RoleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for RoleId {
    type Error = String;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<RoleId> for String {
    fn from(value: RoleId) -> Self {
        value.0
    }
}

#[cfg(test)]
mod tests {
    use super::RoleId;

    #[test]
    fn role_ids_are_slugs() {
        assert!(RoleId::parse("finance-expert").is_ok());
        assert!(RoleId::parse("a.b_c-1").is_ok());
        assert_eq!(RoleId::parse("").unwrap_err(), "must not be empty");
        assert!(RoleId::parse("Finance").is_err());
        assert!(RoleId::parse("-x").is_err());
        assert!(RoleId::parse(&"x".repeat(65)).unwrap_err().contains("at most 64"));
    }
}
