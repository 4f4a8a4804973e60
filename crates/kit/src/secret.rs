//! Secrets from flags and the environment (`DATABASE_URL`, `REDIS_URL`, API keys): a type whose
//! `Debug` and `Display` never show the value, so a config struct can be logged or printed whole
//! without leaking credentials. The value is read only where it is used, through [`Secret::expose`].

use std::{fmt, str::FromStr};

/// A secret string. Compare, clone and parse it freely; print it and you get `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself, for the one place that hands it to a client library.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// For a URL secret: scheme, host, port and path without the user and password, for logs
    /// and error messages (`postgres://127.0.0.1:5432/test`). Anything not URL-shaped gives
    /// `[redacted]`.
    pub fn url_without_credentials(&self) -> String {
        let Some((scheme, rest)) = self.0.split_once("://") else { return REDACTED.to_owned() };
        // A "scheme" holding anything but a scheme's characters (RFC 3986: letters, digits, `+`,
        // `-`, `.`) is not one: `a:pass@b://c` would otherwise show its password.
        if scheme.is_empty() || !scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) {
            return REDACTED.to_owned();
        }
        let after_userinfo = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
        // Query strings may carry passwords too (`?password=`): drop them.
        let without_query = after_userinfo.split(['?', '#']).next().unwrap_or_default();
        format!("{scheme}://{without_query}")
    }
}

const REDACTED: &str = "[redacted]";

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Ok(Self(value.to_owned()))
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_its_value() {
        let secret = Secret::new("postgres://app:hunter2@db:5432/app?sslpassword=x");
        assert_eq!(format!("{secret:?}"), "[redacted]");
        assert_eq!(format!("{secret}"), "[redacted]");
        assert_eq!(format!("{:?}", Some(secret.clone())), "Some([redacted])");
        assert_eq!(secret.url_without_credentials(), "postgres://db:5432/app");
        assert_eq!(secret.expose(), "postgres://app:hunter2@db:5432/app?sslpassword=x");
    }

    #[test]
    fn non_urls_are_fully_redacted() {
        assert_eq!(Secret::new("sk-live-abc").url_without_credentials(), "[redacted]");
        assert_eq!(Secret::new("redis://127.0.0.1:6379").url_without_credentials(), "redis://127.0.0.1:6379");
        assert_eq!(
            Secret::new("redis+cluster://a:7001,b:7002").url_without_credentials(),
            "redis+cluster://a:7001,b:7002"
        );
        // Userinfo before the first `://`: not a scheme, so nothing of it is shown.
        assert_eq!(Secret::new("a:hunter2@b://c").url_without_credentials(), "[redacted]");
    }
}
