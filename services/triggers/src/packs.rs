//! The built-in domain trigger packs (finance, technology, healthcare, marketing, legal,
//! education, creative), kept as data files under `packs/` and compiled into the binary.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::domain::{Limits, Trigger, TriggerKind};

const BUILTIN: [(&str, &str); 7] = [
    ("finance", include_str!("../packs/finance.toml")),
    ("technology", include_str!("../packs/technology.toml")),
    ("healthcare", include_str!("../packs/healthcare.toml")),
    ("marketing", include_str!("../packs/marketing.toml")),
    ("legal", include_str!("../packs/legal.toml")),
    ("education", include_str!("../packs/education.toml")),
    ("creative", include_str!("../packs/creative.toml")),
];

/// One domain's triggers.
#[derive(Debug, Clone)]
pub struct DomainPack {
    pub name: String,
    pub description: String,
    pub triggers: Vec<Trigger>,
}

/// Every built-in pack, by name.
#[derive(Debug, Clone, Default)]
pub struct DomainPacks {
    packs: BTreeMap<String, DomainPack>,
}

#[derive(Debug, thiserror::Error)]
#[error("domain pack `{pack}`: {reason}")]
pub struct PackError {
    pack: String,
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PackFile {
    name: String,
    description: String,
    #[serde(default)]
    keywords: Vec<PatternGroup>,
    #[serde(default)]
    phrases: Vec<PatternGroup>,
    #[serde(default)]
    regexes: Vec<PatternGroup>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatternGroup {
    priority: u32,
    patterns: Vec<String>,
}

impl DomainPacks {
    /// Parses and validates the packs compiled into the binary.
    pub fn builtin() -> Result<Self, PackError> {
        let limits = Limits::default();
        let mut packs = BTreeMap::new();
        for (name, text) in BUILTIN {
            let pack = parse_pack(name, text, &limits)?;
            packs.insert(pack.name.clone(), pack);
        }
        Ok(Self { packs })
    }

    pub fn get(&self, name: &str) -> Option<&DomainPack> {
        self.packs.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &DomainPack> {
        self.packs.values()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.packs.keys().map(String::as_str)
    }
}

fn parse_pack(expected_name: &str, text: &str, limits: &Limits) -> Result<DomainPack, PackError> {
    let error = |reason: String| PackError { pack: expected_name.to_owned(), reason };
    let file: PackFile = toml::from_str(text).map_err(|err| error(err.to_string()))?;
    if file.name != expected_name {
        return Err(error(format!("declares name `{}`", file.name)));
    }
    let mut triggers = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let groups = [
        (TriggerKind::Keyword, &file.keywords),
        (TriggerKind::Phrase, &file.phrases),
        (TriggerKind::Regex, &file.regexes),
    ];
    for (kind, groups) in groups {
        for group in groups {
            for pattern in &group.patterns {
                let trigger = Trigger::new(pattern, kind, group.priority, limits, kind.as_str())
                    .map_err(|err| error(format!("`{pattern}`: {err}")))?;
                if !seen.insert((trigger.kind, trigger.pattern.clone())) {
                    return Err(error(format!("{kind} `{pattern}` is listed twice")));
                }
                triggers.push(trigger);
            }
        }
    }
    Ok(DomainPack { name: file.name, description: file.description, triggers })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_packs_parse_and_are_rich() {
        let packs = DomainPacks::builtin().expect("built-in packs are valid");
        let names: Vec<_> = packs.names().collect();
        assert_eq!(names, ["creative", "education", "finance", "healthcare", "legal", "marketing", "technology"]);
        for pack in packs.iter() {
            assert!(pack.triggers.len() >= 50, "{} has only {} triggers", pack.name, pack.triggers.len());
            for kind in TriggerKind::ALL {
                assert!(pack.triggers.iter().any(|t| t.kind == kind), "{} has no {kind} trigger", pack.name);
            }
        }
    }

    #[test]
    fn pack_errors_name_the_pack_and_pattern() {
        let text = "name = \"x\"\ndescription = \"d\"\n[[keywords]]\npriority = 2\npatterns = [\"two words\"]\n";
        let err = parse_pack("x", text, &Limits::default()).unwrap_err();
        assert!(err.to_string().contains("domain pack `x`: `two words`"), "{err}");
        let unknown = "name = \"x\"\ndescription = \"d\"\nextra = 1\n";
        assert!(parse_pack("x", unknown, &Limits::default()).is_err());
    }
}
