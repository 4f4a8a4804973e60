//! The built-in domain trigger packs (finance, technology, healthcare, marketing, legal,
//! education, creative), kept as data files under `packs/` and compiled into the binary, each
//! with its exemplar questions for the semantic signal (`exemplars/`, one file per domain).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::domain::{Limits, Trigger, TriggerKind};

/// Name, trigger pack, exemplar questions.
const BUILTIN: [(&str, &str, &str); 7] = [
    ("finance", include_str!("../packs/finance.toml"), include_str!("../exemplars/finance.toml")),
    ("technology", include_str!("../packs/technology.toml"), include_str!("../exemplars/technology.toml")),
    ("healthcare", include_str!("../packs/healthcare.toml"), include_str!("../exemplars/healthcare.toml")),
    ("marketing", include_str!("../packs/marketing.toml"), include_str!("../exemplars/marketing.toml")),
    ("legal", include_str!("../packs/legal.toml"), include_str!("../exemplars/legal.toml")),
    ("education", include_str!("../packs/education.toml"), include_str!("../exemplars/education.toml")),
    ("creative", include_str!("../packs/creative.toml"), include_str!("../exemplars/creative.toml")),
];

/// Everyday questions of no domain: the semantic signal's competing class (see
/// `crate::semantic`).
const GENERAL: &str = include_str!("../exemplars/general.toml");

/// Most questions an exemplar file may hold (a registering role may give far fewer: see
/// `Limits::max_role_examples`); each question is held to the same byte limit.
const MAX_FILE_EXEMPLARS: usize = 500;

/// One domain's triggers.
#[derive(Debug, Clone)]
pub struct DomainPack {
    pub name: String,
    pub description: String,
    pub triggers: Vec<Trigger>,
    /// Questions of the domain in users' own words, for the semantic signal.
    pub exemplar_questions: Vec<String>,
}

/// Every built-in pack, by name, and the everyday questions that belong to none.
#[derive(Debug, Clone, Default)]
pub struct DomainPacks {
    packs: BTreeMap<String, DomainPack>,
    general_questions: Vec<String>,
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
struct ExemplarFile {
    name: String,
    questions: Vec<String>,
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
        for (name, pack_text, exemplars_text) in BUILTIN {
            let mut pack = parse_pack(name, pack_text, &limits)?;
            pack.exemplar_questions = parse_exemplars(name, exemplars_text, &limits)?;
            packs.insert(pack.name.clone(), pack);
        }
        let general_questions = parse_exemplars("general", GENERAL, &limits)?;
        Ok(Self { packs, general_questions })
    }

    /// Everyday questions of no domain (small talk, trivia, chores…): a query closer to these
    /// than to a role's exemplars gets no semantic points for that role.
    pub fn general_questions(&self) -> &[String] {
        &self.general_questions
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
    Ok(DomainPack { name: file.name, description: file.description, triggers, exemplar_questions: Vec::new() })
}

/// A domain's exemplar questions, each held to the byte limit a role's own example questions
/// get (a file may hold more of them than a role may register).
fn parse_exemplars(expected_name: &str, text: &str, limits: &Limits) -> Result<Vec<String>, PackError> {
    let error = |reason: String| PackError { pack: expected_name.to_owned(), reason };
    let limits = &Limits { max_role_examples: MAX_FILE_EXEMPLARS, ..limits.clone() };
    let file: ExemplarFile = toml::from_str(text).map_err(|err| error(format!("exemplars: {err}")))?;
    if file.name != expected_name {
        return Err(error(format!("exemplars declare name `{}`", file.name)));
    }
    crate::domain::example_questions(&file.questions, limits, "questions").map_err(|err| error(err.to_string()))
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
    fn every_pack_has_its_own_exemplar_questions() {
        let packs = DomainPacks::builtin().expect("built-in packs are valid");
        let mut seen = std::collections::HashSet::new();
        for pack in packs.iter() {
            assert!(
                pack.exemplar_questions.len() >= 20,
                "{} has {} exemplars",
                pack.name,
                pack.exemplar_questions.len()
            );
            for question in &pack.exemplar_questions {
                assert!(seen.insert(question.to_lowercase()), "`{question}` is an exemplar of two domains");
            }
        }
        assert!(packs.general_questions().len() >= 100, "{} general questions", packs.general_questions().len());
        for question in packs.general_questions() {
            assert!(seen.insert(question.to_lowercase()), "`{question}` is both general and a domain's");
        }
        let wrong = "name = \"finance\"\nquestions = [\"a\"]\n";
        let err = parse_exemplars("legal", wrong, &Limits::default()).unwrap_err();
        assert!(err.to_string().contains("exemplars declare name `finance`"), "{err}");
        let empty = "name = \"legal\"\nquestions = [\" \"]\n";
        let err = parse_exemplars("legal", empty, &Limits::default()).unwrap_err();
        assert!(err.to_string().contains("questions[0]: must not be empty"), "{err}");
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
