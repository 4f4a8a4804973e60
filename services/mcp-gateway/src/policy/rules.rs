//! The `[[policies]]` of the servers file: the entries as written, their validation (errors name
//! the entry and the field), and the globs their rules match names with.

use std::collections::HashMap;

use serde::Deserialize;
use switchyard_kit::{RoleId, TenantId};

use super::{Subject, subject::check_group};

/// One `[[policies]]` entry as written in the servers file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    pub name: Option<String>,
    #[serde(default)]
    pub tenants: Vec<String>,
    #[serde(default)]
    pub roles: Vec<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    pub allow_servers: Option<Vec<String>>,
    #[serde(default)]
    pub deny_servers: Vec<String>,
    pub allow_tools: Option<Vec<String>>,
    #[serde(default)]
    pub deny_tools: Vec<String>,
    #[serde(default)]
    pub pin: Vec<String>,
    #[serde(default)]
    pub hide: Vec<String>,
}

/// A glob over names: `*` any run of characters, `?` one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob(String);

impl Glob {
    pub(super) fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("is empty".into());
        }
        if text.len() > 128
            || !text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-' | '*' | '?' | ':'))
        {
            return Err(format!(
                "`{text}` must be at most 128 characters of [A-Za-z0-9_./:-] and the wildcards * and ?"
            ));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn matches(&self, name: &str) -> bool {
        glob_match(self.0.as_bytes(), name.as_bytes())
    }
}

/// Iterative wildcard matching with one backtrack point: linear for the patterns policies use.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// One validated policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub name: String,
    pub tenants: Vec<String>,
    pub roles: Vec<String>,
    pub groups: Vec<String>,
    pub scopes: Vec<String>,
    pub allow_servers: Option<Vec<Glob>>,
    pub deny_servers: Vec<Glob>,
    pub allow_tools: Option<Vec<Glob>>,
    pub deny_tools: Vec<Glob>,
    pub pin: Vec<Glob>,
    pub hide: Vec<Glob>,
}

impl Policy {
    /// Every selector given matches (a list matches when the caller has one of its values).
    pub fn applies_to(&self, subject: &Subject) -> bool {
        fn any<'a>(wanted: &[String], mut have: impl Iterator<Item = &'a str>) -> bool {
            wanted.is_empty() || have.any(|h| wanted.iter().any(|w| w == h))
        }
        any(&self.tenants, std::iter::once(subject.tenant.as_str()))
            && any(&self.roles, subject.role.iter().map(RoleId::as_str))
            && any(&self.groups, subject.groups.iter().map(String::as_str))
            && any(&self.scopes, subject.scopes.iter().map(String::as_str))
    }

    pub(super) fn has_allow(&self) -> bool {
        self.allow_servers.is_some() || self.allow_tools.is_some()
    }

    pub(super) fn allows(&self, server: &str, tool: &str) -> bool {
        self.allow_servers.iter().flatten().any(|g| g.matches(server))
            || self.allow_tools.iter().flatten().any(|g| g.matches(tool))
    }

    pub(super) fn denies(&self, server: &str, tool: &str) -> bool {
        self.deny_servers.iter().any(|g| g.matches(server)) || self.deny_tools.iter().any(|g| g.matches(tool))
    }
}

/// Validates the file's `[[policies]]`; errors name the entry (`policies[1] (contractors)`)
/// and the field.
pub fn validate(specs: Vec<PolicySpec>) -> Result<Vec<Policy>, String> {
    let mut names: HashMap<String, usize> = HashMap::new();
    specs
        .into_iter()
        .enumerate()
        .map(|(index, spec)| {
            let name = spec.name.clone().unwrap_or_else(|| format!("policies[{index}]"));
            let at = match &spec.name {
                Some(name) => format!("policies[{index}] ({name})"),
                None => format!("policies[{index}]"),
            };
            let fail = |field: &str, why: String| format!("{at}: {field}: {why}");
            if spec.name.as_deref().is_some_and(|n| n.trim().is_empty() || n.len() > 128) {
                return Err(fail("name", "must be 1 to 128 characters".into()));
            }
            if let Some(earlier) = names.insert(name.clone(), index) {
                return Err(fail("name", format!("`{name}` is also the name of policies[{earlier}]")));
            }
            for (i, tenant) in spec.tenants.iter().enumerate() {
                TenantId::parse(tenant).map_err(|err| fail(&format!("tenants[{i}]"), err.reason))?;
            }
            for (i, role) in spec.roles.iter().enumerate() {
                RoleId::parse(role).map_err(|why| fail(&format!("roles[{i}]"), why))?;
            }
            for (i, group) in spec.groups.iter().enumerate() {
                if group.is_empty() {
                    return Err(fail(&format!("groups[{i}]"), "is empty".into()));
                }
                check_group(group).map_err(|why| fail(&format!("groups[{i}]"), why))?;
            }
            for (i, scope) in spec.scopes.iter().enumerate() {
                if scope.is_empty()
                    || scope.len() > 256
                    || !scope.chars().all(|c| c.is_ascii_graphic() && c != '"' && c != '\\')
                {
                    return Err(fail(&format!("scopes[{i}]"), format!("`{scope}` is not an OAuth scope token")));
                }
            }
            let globs = |field: &str, list: &[String]| -> Result<Vec<Glob>, String> {
                list.iter()
                    .enumerate()
                    .map(|(i, p)| Glob::parse(p).map_err(|why| fail(&format!("{field}[{i}]"), why)))
                    .collect()
            };
            let policy = Policy {
                allow_servers: spec.allow_servers.as_deref().map(|l| globs("allow_servers", l)).transpose()?,
                deny_servers: globs("deny_servers", &spec.deny_servers)?,
                allow_tools: spec.allow_tools.as_deref().map(|l| globs("allow_tools", l)).transpose()?,
                deny_tools: globs("deny_tools", &spec.deny_tools)?,
                pin: globs("pin", &spec.pin)?,
                hide: globs("hide", &spec.hide)?,
                name,
                tenants: spec.tenants,
                roles: spec.roles,
                groups: spec.groups,
                scopes: spec.scopes,
            };
            if !policy.has_allow()
                && policy.deny_servers.is_empty()
                && policy.deny_tools.is_empty()
                && policy.pin.is_empty()
                && policy.hide.is_empty()
            {
                return Err(format!(
                    "{at}: has no rule: set allow_servers, allow_tools, deny_servers, deny_tools, pin or hide"
                ));
            }
            Ok(policy)
        })
        .collect()
}
