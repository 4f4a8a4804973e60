//! Per-tool policies: who may see and call which tool, decided before the ranking.
//!
//! Policies live in the servers file (`[[policies]]`), each naming whom it applies to (tenants,
//! roles, user groups, scopes: every selector given must match; none given, everyone) and what
//! it does: allow or deny servers and tools by name or glob (`*` any run of characters, `?` one
//! character), pin tools (always listed) or hide them (callable, never listed).
//!
//! For one caller, over the policies that apply to it: a tool is **callable** when some
//! applying policy allows it (its server or its name) — or, if no applying policy has an allow
//! list at all, always — and no applying policy denies it (deny wins). It is **listed** when it
//! is callable and not hidden; **pinned** when it is listed and some applying policy pins it.
//! A present but empty allow list (`allow_tools = []`) allows nothing: a policy with no
//! selectors and one makes the gateway deny by default.
//!
//! One file per job: `subject` (who is asking), `rules` (the policies as written and
//! validated), and here, what they decide for one caller and the cache of those decisions.

mod rules;
mod subject;

use std::{collections::HashMap, sync::Arc};

pub use rules::{Glob, Policy, PolicySpec, validate};
use subject::PolicyKey;
pub use subject::{GROUPS_HEADER, MAX_GROUPS, ROLE_HEADER, Subject};

/// What one caller may do with one tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ToolAccess {
    pub callable: bool,
    pub listed: bool,
    pub pinned: bool,
}

/// Why a call was refused, for the error and the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A policy that applies to the caller denies the tool or its server.
    Denied { policy: String },
    /// Policies with allow lists apply to the caller, and none of them allows the tool.
    NotAllowed,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Denied { policy } => write!(f, "denied by policy `{policy}`"),
            Self::NotAllowed => write!(f, "not allowed by any policy that applies to the caller"),
        }
    }
}

/// The configured policies, as loaded (and reloaded) from the servers file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policies {
    pub policies: Vec<Policy>,
}

impl Policies {
    pub fn new(policies: Vec<Policy>) -> Self {
        Self { policies }
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// Every scope some policy selects on, sorted, once (advertised as `scopes_supported`).
    pub fn scopes(&self) -> Vec<String> {
        let mut scopes: Vec<String> = self.policies.iter().flat_map(|p| p.scopes.iter().cloned()).collect();
        scopes.sort();
        scopes.dedup();
        scopes
    }

    /// The policies that apply to `subject`.
    pub fn applying<'a>(&'a self, subject: &Subject) -> Vec<&'a Policy> {
        self.policies.iter().filter(|p| p.applies_to(subject)).collect()
    }

    /// Whether `subject` may call `tool` of `server`, and if not, why.
    pub fn decide(applying: &[&Policy], server: &str, tool: &str) -> Result<(), Refusal> {
        if let Some(policy) = applying.iter().find(|p| p.denies(server, tool)) {
            return Err(Refusal::Denied { policy: policy.name.clone() });
        }
        let restricted = applying.iter().any(|p| p.has_allow());
        if restricted && !applying.iter().any(|p| p.allows(server, tool)) {
            return Err(Refusal::NotAllowed);
        }
        Ok(())
    }

    /// One tool's access for the policies that apply to a caller.
    pub fn access(applying: &[&Policy], server: &str, tool: &str) -> ToolAccess {
        let callable = Self::decide(applying, server, tool).is_ok();
        let listed = callable && !applying.iter().any(|p| p.hide.iter().any(|g| g.matches(tool)));
        let pinned = listed && applying.iter().any(|p| p.pin.iter().any(|g| g.matches(tool)));
        ToolAccess { callable, listed, pinned }
    }
}

/// A caller's access to every tool of one catalog (by catalog index), computed once per
/// (catalog, policies, subject) and shared.
#[derive(Debug, Clone)]
pub struct AccessMap {
    /// None: no policy applies to the caller, every tool is callable and listed.
    tools: Option<Vec<ToolAccess>>,
    pub pinned: Vec<usize>,
}

impl AccessMap {
    pub fn open() -> Self {
        Self { tools: None, pinned: Vec::new() }
    }

    /// `tools` are (server, gateway name) in catalog order.
    pub fn build<'a>(policies: &Policies, subject: &Subject, tools: impl Iterator<Item = (&'a str, &'a str)>) -> Self {
        let applying = policies.applying(subject);
        if applying.is_empty() {
            return Self::open();
        }
        let access: Vec<ToolAccess> = tools.map(|(server, tool)| Policies::access(&applying, server, tool)).collect();
        let pinned = access.iter().enumerate().filter(|(_, a)| a.pinned).map(|(i, _)| i).collect();
        Self { tools: Some(access), pinned }
    }

    pub fn is_open(&self) -> bool {
        self.tools.is_none()
    }

    pub fn get(&self, index: usize) -> ToolAccess {
        match &self.tools {
            None => ToolAccess { callable: true, listed: true, pinned: false },
            Some(tools) => tools.get(index).copied().unwrap_or_default(),
        }
    }

    /// Which tools the ranking may pick for a filtered list: listed and not pinned (pinned
    /// ones are shown anyway). None: all.
    pub fn rankable(&self) -> Option<Vec<bool>> {
        self.tools.as_ref().map(|tools| tools.iter().map(|a| a.listed && !a.pinned).collect())
    }

    /// How many tools the caller may see listed (out of `total`).
    pub fn listed_count(&self, total: usize) -> usize {
        self.tools.as_ref().map_or(total, |tools| tools.iter().filter(|a| a.listed).count())
    }
}

/// Access maps by subject, for one catalog and one set of policies; emptied when either
/// changes.
#[derive(Default)]
pub struct AccessCache {
    inner: std::sync::Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    /// The catalog and policies the maps were computed for (pointer identity).
    catalog: usize,
    policies: usize,
    maps: HashMap<PolicyKey, Arc<AccessMap>>,
}

/// Subjects kept before the cache starts over (each map is a few bytes per tool).
const MAX_CACHED_SUBJECTS: usize = 4096;

impl AccessCache {
    pub fn get_or_build(
        &self,
        catalog: usize,
        policies: usize,
        subject: &Subject,
        build: impl FnOnce() -> AccessMap,
    ) -> Arc<AccessMap> {
        let key = subject.policy_key();
        {
            let state = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if state.catalog == catalog
                && state.policies == policies
                && let Some(map) = state.maps.get(&key)
            {
                return map.clone();
            }
        }
        let map = Arc::new(build());
        let mut state = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.catalog != catalog || state.policies != policies || state.maps.len() >= MAX_CACHED_SUBJECTS {
            state.maps.clear();
            state.catalog = catalog;
            state.policies = policies;
        }
        state.maps.insert(key, map.clone());
        map
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use switchyard_kit::{Identity, RoleId, TenantId};

    use super::*;

    fn spec(toml_text: &str) -> Vec<PolicySpec> {
        #[derive(Deserialize)]
        struct File {
            policies: Vec<PolicySpec>,
        }
        toml::from_str::<File>(toml_text).unwrap().policies
    }

    fn subject(tenant: &str, role: Option<&str>, groups: &[&str]) -> Subject {
        Subject {
            tenant: TenantId::parse(tenant).unwrap(),
            user: None,
            role: role.map(|r| RoleId::parse(r).unwrap()),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            scopes: Vec::new(),
        }
    }

    #[test]
    fn globs() {
        let g = |p: &str, n: &str| Glob::parse(p).unwrap().matches(n);
        assert!(g("files__*", "files__read_file"));
        assert!(!g("files__*", "search__files__x"));
        assert!(g("*write*", "files__write_file"));
        assert!(g("a?c", "abc") && !g("a?c", "abbc"));
        assert!(g("*", "") && g("x*y*z", "xaaybbz") && !g("x*y*z", "xaayb"));
        assert!(Glob::parse("").is_err() && Glob::parse("has space").is_err());
    }

    #[test]
    fn deny_wins_allow_lists_restrict_and_hide_pin() {
        let policies = Policies::new(
            validate(spec(
                r#"
                [[policies]]
                name = "everyone"
                allow_servers = ["files", "search"]
                hide = ["files__debug_*"]
                [[policies]]
                name = "contractors"
                groups = ["contractors"]
                deny_tools = ["files__write_*"]
                [[policies]]
                name = "finance"
                roles = ["finance-expert"]
                allow_servers = ["ledger"]
                pin = ["ledger__balance"]
                "#,
            ))
            .unwrap(),
        );
        let access = |s: &Subject, server: &str, tool: &str| Policies::access(&policies.applying(s), server, tool);
        let plain = subject("acme", None, &[]);
        assert!(access(&plain, "files", "files__write_file").callable);
        assert!(!access(&plain, "ledger", "ledger__balance").callable, "no allow list names ledger");
        let debug = access(&plain, "files", "files__debug_dump");
        assert!(debug.callable && !debug.listed, "hidden: callable, not listed");
        let contractor = subject("acme", None, &["contractors", "staff"]);
        assert_eq!(
            Policies::decide(&policies.applying(&contractor), "files", "files__write_file"),
            Err(Refusal::Denied { policy: "contractors".into() })
        );
        let finance = subject("acme", Some("finance-expert"), &[]);
        let balance = access(&finance, "ledger", "ledger__balance");
        assert!(balance.callable && balance.listed && balance.pinned, "allow lists add up; pinned");
        assert!(access(&finance, "files", "files__read").callable);
    }

    #[test]
    fn an_empty_allow_list_denies_by_default() {
        let policies = Policies::new(
            validate(spec(
                "[[policies]]\nname='base'\nallow_tools=[]\n[[policies]]\ngroups=['eng']\nallow_servers=['*']\n",
            ))
            .unwrap(),
        );
        let decide = |s: &Subject| Policies::decide(&policies.applying(s), "files", "files__read");
        assert_eq!(decide(&subject("acme", None, &[])), Err(Refusal::NotAllowed));
        assert_eq!(decide(&subject("acme", None, &["eng"])), Ok(()));
    }

    #[test]
    fn selectors_all_match_and_scopes_are_carried() {
        let policies = Policies::new(
            validate(spec("[[policies]]\ntenants=['acme']\nscopes=['tools:admin']\ndeny_tools=['*']\n")).unwrap(),
        );
        let mut s = subject("acme", None, &[]);
        assert!(policies.applying(&s).is_empty(), "no scope, not applying");
        s.scopes = vec!["tools:admin".into()];
        assert_eq!(policies.applying(&s).len(), 1);
        s.tenant = TenantId::parse("other").unwrap();
        assert!(policies.applying(&s).is_empty());
    }

    #[test]
    fn mistakes_name_the_entry_and_field() {
        let cases = [
            ("[[policies]]\nname='p'\ngroups=['eng']\n", "policies[0] (p): has no rule"),
            ("[[policies]]\ndeny_tools=['ok', '']\n", "policies[0]: deny_tools[1]: is empty"),
            ("[[policies]]\nname='p'\nroles=['Bad Role']\ndeny_tools=['x']\n", "policies[0] (p): roles[0]"),
            ("[[policies]]\ntenants=['a:b']\ndeny_tools=['x']\n", "policies[0]: tenants[0]"),
            ("[[policies]]\nname='a'\npin=['x']\n[[policies]]\nname='a'\npin=['y']\n", "policies[1] (a): name"),
            ("[[policies]]\nallow_tools=['sp ace']\n", "policies[0]: allow_tools[0]"),
        ];
        for (text, expected) in cases {
            let err = validate(spec(text)).unwrap_err();
            assert!(err.contains(expected), "{text:?} gave {err:?}, expected {expected:?}");
        }
    }

    #[test]
    fn headers_give_role_and_groups() {
        let identity = Identity::default();
        let mut headers = http::HeaderMap::new();
        headers.insert(GROUPS_HEADER, "eng, contractors,eng".parse().unwrap());
        headers.insert(ROLE_HEADER, "finance-expert".parse().unwrap());
        let s = Subject::from_headers(&identity, &headers).unwrap();
        assert_eq!(s.groups, ["contractors", "eng"]);
        assert_eq!(s.role.unwrap().as_str(), "finance-expert");
        headers.insert(GROUPS_HEADER, "a b".parse().unwrap());
        assert_eq!(Subject::from_headers(&identity, &headers).unwrap_err().field, GROUPS_HEADER);
        headers.remove(GROUPS_HEADER);
        headers.insert(ROLE_HEADER, "Not A Role".parse().unwrap());
        assert_eq!(Subject::from_headers(&identity, &headers).unwrap_err().field, ROLE_HEADER);
    }
}

#[cfg(test)]
mod manual_example {
    /// The manual's policies example is a servers file the gateway loads.
    #[test]
    fn the_manuals_example_loads() {
        let manual = include_str!("../../README.md");
        let block = manual
            .split("```toml\n")
            .skip(1)
            .filter_map(|rest| rest.split("```").next())
            .find(|block| block.contains("[[policies]]"))
            .expect("a policies example in the manual");
        let contents = crate::upstream::config::parse_contents("README.md", block, false, &|_| None).unwrap();
        assert_eq!(contents.servers.len(), 1);
        let names: Vec<&str> = contents.policies.policies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["everyone", "contractors", "finance"]);
    }
}
