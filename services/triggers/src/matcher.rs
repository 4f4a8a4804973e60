//! One compiled matcher for every registered role.
//!
//! Each distinct pattern becomes one "slot" however many roles share it. Keywords and phrases
//! go into a single Aho-Corasick automaton, searched once over the normalized query (whole-word
//! checks happen only at the few places it reports). Regexes whose matches must begin with a
//! known literal (almost all, e.g. `\bmortgag(?:e|es|ing)\b` → `mortgag`) put that literal in
//! the same automaton and are only run, anchored at the reported position, when it occurs;
//! the rest run together as one multi-pattern regex set. So detection costs one pass over the
//! query plus work proportional to what matched — never a loop over the patterns.

use std::{collections::HashMap, sync::Arc};

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind as AcMatchKind};
use regex_automata::{Anchored, Input, MatchKind, PatternID, PatternSet, meta};

use crate::{
    domain::{CUSTOM_SOURCE, RoleId, RoleRegistration, TriggerKind},
    packs::DomainPacks,
    regexes::{RegexRoute, build_regex_set, route_regex},
    text::{is_word_char, normalize},
};

/// A trigger that matched a query (borrowed from the matcher: no copies on the hot path).
#[derive(Debug, Clone, PartialEq)]
pub struct MatchedTrigger<'m> {
    pub pattern: &'m str,
    pub kind: TriggerKind,
    pub priority: u32,
    /// The domain pack it came from, or `custom`.
    pub source: &'m str,
}

/// How one role scored against a query.
#[derive(Debug, Clone, PartialEq)]
pub struct RoleScore<'m> {
    pub role_id: &'m RoleId,
    /// `base_score + diversity_bonus`.
    pub score: u32,
    /// Sum of the priorities of the distinct triggers matched.
    pub base_score: u32,
    /// `diversity_bonus_per_kind × (distinct kinds matched − 1)`.
    pub diversity_bonus: u32,
    pub matched: Vec<MatchedTrigger<'m>>,
}

/// Scoring parameters.
#[derive(Debug, Clone, Copy)]
pub struct Scoring {
    /// Added once for each kind of trigger matched beyond the first: a role matched by a
    /// keyword, a phrase and a regex gets twice this on top of its priorities.
    pub diversity_bonus_per_kind: u32,
}

impl Default for Scoring {
    /// The flags' default (`--diversity-bonus`).
    fn default() -> Self {
        Self { diversity_bonus_per_kind: crate::TriggersConfig::defaults().diversity_bonus }
    }
}

struct Slot {
    pattern: Arc<str>,
    kind: TriggerKind,
    owners: Vec<Owner>,
}

struct Owner {
    role: u32,
    priority: u32,
    source: Arc<str>,
}

#[derive(Clone, Copy)]
enum Target {
    /// A keyword or phrase; the flags say whether its first/last character is a word
    /// character and so needs a non-word neighbour.
    Literal { slot: u32, bound_start: bool, bound_end: bool },
    /// A literal every match of anchored regex number `regex` starts with.
    RegexPrefix { regex: u32 },
}

/// The compiled form of a whole registry. Immutable; rebuilt and swapped on change.
pub struct Matcher {
    roles: Vec<RoleId>,
    slots: Vec<Slot>,
    literals: Option<AhoCorasick>,
    literal_targets: Vec<Vec<Target>>,
    anchored: Option<meta::Regex>,
    anchored_slots: Vec<u32>,
    /// For each byte value, the anchored regexes a match of which can start with it.
    first_byte_regexes: Vec<Vec<u32>>,
    has_first_byte_regexes: bool,
    scanned: Option<meta::Regex>,
    scanned_slots: Vec<u32>,
    scoring: Scoring,
}

/// Literal automata up to this many bytes of patterns use Aho-Corasick's DFA (fastest, but
/// its memory grows with patterns × alphabet); larger ones use the contiguous NFA.
const MAX_DFA_LITERAL_BYTES: usize = 64 * 1024;

impl Matcher {
    /// Compiles `roles` (each with its domains expanded from `packs`). CPU-heavy for big
    /// registries: call it off the request path.
    pub fn build(roles: &[RoleRegistration], packs: &DomainPacks, scoring: Scoring) -> Result<Self, String> {
        let custom: Arc<str> = Arc::from(CUSTOM_SOURCE);
        let domain_sources: HashMap<&str, Arc<str>> = packs.names().map(|name| (name, Arc::from(name))).collect();

        let mut slots: Vec<Slot> = Vec::new();
        let mut slot_ids: HashMap<(TriggerKind, Arc<str>), u32> = HashMap::new();
        let mut role_ids = Vec::with_capacity(roles.len());

        for (role_index, role) in roles.iter().enumerate() {
            let role_index = u32::try_from(role_index).map_err(|_| "too many roles".to_owned())?;
            role_ids.push(role.role_id.clone());
            // A pattern listed twice for one role (say in a domain and as a custom trigger)
            // counts once, with its highest priority.
            let mut own: HashMap<u32, usize> = HashMap::new();
            let domain_triggers = role.domains.iter().filter_map(|domain| {
                let pack = packs.get(domain)?;
                let source = domain_sources.get(domain.as_str())?.clone();
                Some(pack.triggers.iter().map(move |t| (t, source.clone())))
            });
            let custom_triggers = role.custom_triggers.iter().map(|t| (t, custom.clone()));
            for (trigger, source) in domain_triggers.flatten().chain(custom_triggers) {
                let key = (trigger.kind, Arc::<str>::from(trigger.pattern.as_str()));
                let slot = *slot_ids.entry(key.clone()).or_insert_with(|| {
                    slots.push(Slot { pattern: key.1.clone(), kind: trigger.kind, owners: Vec::new() });
                    (slots.len() - 1) as u32
                });
                let owners = &mut slots[slot as usize].owners;
                match own.get(&slot) {
                    Some(&at) if owners[at].priority >= trigger.priority => {}
                    Some(&at) => {
                        owners[at].priority = trigger.priority;
                        owners[at].source = source;
                    }
                    None => {
                        own.insert(slot, owners.len());
                        owners.push(Owner { role: role_index, priority: trigger.priority, source });
                    }
                }
            }
        }

        let mut literal_texts: Vec<Arc<str>> = Vec::new();
        let mut literal_ids: HashMap<Arc<str>, usize> = HashMap::new();
        let mut literal_targets: Vec<Vec<Target>> = Vec::new();
        let mut add_literal = |text: Arc<str>, target: Target| {
            let id = *literal_ids.entry(text.clone()).or_insert_with(|| {
                literal_texts.push(text);
                literal_targets.push(Vec::new());
                literal_texts.len() - 1
            });
            literal_targets[id].push(target);
        };
        let (mut anchored_patterns, mut anchored_slots) = (Vec::new(), Vec::new());
        let (mut scanned_patterns, mut scanned_slots) = (Vec::new(), Vec::new());
        let mut first_byte_regexes: Vec<Vec<u32>> = vec![Vec::new(); 256];

        for (slot_index, slot) in slots.iter().enumerate() {
            let slot_index = slot_index as u32;
            match slot.kind {
                TriggerKind::Keyword | TriggerKind::Phrase => {
                    let bound_start = slot.pattern.chars().next().is_some_and(is_word_char);
                    let bound_end = slot.pattern.chars().next_back().is_some_and(is_word_char);
                    add_literal(slot.pattern.clone(), Target::Literal { slot: slot_index, bound_start, bound_end });
                }
                TriggerKind::Regex => match route_regex(&slot.pattern) {
                    RegexRoute::Literals(prefixes) => {
                        let regex = anchored_patterns.len() as u32;
                        anchored_patterns.push(slot.pattern.to_string());
                        anchored_slots.push(slot_index);
                        for prefix in prefixes {
                            add_literal(Arc::from(prefix), Target::RegexPrefix { regex });
                        }
                    }
                    RegexRoute::FirstBytes(bytes) => {
                        let regex = anchored_patterns.len() as u32;
                        anchored_patterns.push(slot.pattern.to_string());
                        anchored_slots.push(slot_index);
                        for byte in bytes {
                            first_byte_regexes[usize::from(byte)].push(regex);
                        }
                    }
                    RegexRoute::Scan => {
                        scanned_patterns.push(slot.pattern.to_string());
                        scanned_slots.push(slot_index);
                    }
                },
            }
        }

        let literals = if literal_texts.is_empty() {
            None
        } else {
            let literal_bytes: usize = literal_texts.iter().map(|t| t.len()).sum();
            let kind = (literal_bytes <= MAX_DFA_LITERAL_BYTES).then_some(AhoCorasickKind::DFA);
            let automaton = AhoCorasick::builder()
                .match_kind(AcMatchKind::Standard)
                // Queries are searched as typed when they need no normalizing (see
                // `prepare`); patterns are lowercase already.
                .ascii_case_insensitive(true)
                .kind(kind)
                // Patterns start with almost every letter, so a start-byte prefilter would fire
                // at nearly every position and only add overhead.
                .prefilter(false)
                .build(literal_texts.iter().map(|t| t.as_bytes()))
                .map_err(|err| format!("literal automaton: {err}"))?;
            Some(automaton)
        };
        let anchored = build_regex_set(&anchored_patterns, MatchKind::LeftmostFirst)?;
        let scanned = build_regex_set(&scanned_patterns, MatchKind::All)?;

        Ok(Self {
            roles: role_ids,
            slots,
            literals,
            literal_targets,
            anchored,
            anchored_slots,
            has_first_byte_regexes: first_byte_regexes.iter().any(|r| !r.is_empty()),
            first_byte_regexes,
            scanned,
            scanned_slots,
            scoring,
        })
    }

    /// Number of distinct patterns compiled.
    pub fn trigger_count(&self) -> usize {
        self.slots.len()
    }

    /// Scores `query` against every role; roles with no match are left out. Best first: by
    /// score, then number of distinct triggers matched, then role id.
    pub fn detect(&self, query: &str) -> Vec<RoleScore<'_>> {
        let text = prepare(query);
        let text = text.as_ref();
        let mut hits: Vec<u32> = Vec::new();
        let mut candidates: Vec<(u32, usize)> = Vec::new();

        if let Some(automaton) = &self.literals {
            for found in automaton.find_overlapping_iter(text) {
                for target in &self.literal_targets[found.pattern().as_usize()] {
                    match *target {
                        Target::Literal { slot, bound_start, bound_end } => {
                            if (!bound_start || word_boundary_before(text, found.start()))
                                && (!bound_end || word_boundary_after(text, found.end()))
                            {
                                hits.push(slot);
                            }
                        }
                        Target::RegexPrefix { regex } => candidates.push((regex, found.start())),
                    }
                }
            }
        }

        if self.has_first_byte_regexes {
            for (at, byte) in text.bytes().enumerate() {
                for &regex in &self.first_byte_regexes[usize::from(byte)] {
                    candidates.push((regex, at));
                }
            }
        }

        if let (Some(anchored), false) = (&self.anchored, candidates.is_empty()) {
            candidates.sort_unstable();
            candidates.dedup();
            let mut matched_regex = None;
            for (regex, start) in candidates {
                if matched_regex == Some(regex) {
                    continue;
                }
                let input = Input::new(&text)
                    .range(start..)
                    .anchored(Anchored::Pattern(PatternID::new_unchecked(regex as usize)));
                if anchored.search_half(&input).is_some() {
                    matched_regex = Some(regex);
                    hits.push(self.anchored_slots[regex as usize]);
                }
            }
        }

        if let Some(scanned) = &self.scanned {
            let mut which = PatternSet::new(scanned.pattern_len());
            scanned.which_overlapping_matches(&Input::new(&text), &mut which);
            hits.extend(which.iter().map(|pattern| self.scanned_slots[pattern.as_usize()]));
        }

        self.score(hits)
    }

    fn score(&self, mut hits: Vec<u32>) -> Vec<RoleScore<'_>> {
        if hits.is_empty() {
            return Vec::new();
        }
        hits.sort_unstable();
        hits.dedup();
        let mut by_role: Vec<(u32, u32, usize)> = Vec::new();
        for &slot in &hits {
            for (owner_index, owner) in self.slots[slot as usize].owners.iter().enumerate() {
                by_role.push((owner.role, slot, owner_index));
            }
        }
        by_role.sort_unstable();

        let mut scores = Vec::new();
        for group in by_role.chunk_by(|a, b| a.0 == b.0) {
            let role = group[0].0;
            let mut base_score = 0u32;
            let mut kinds = 0u8;
            let mut matched = Vec::with_capacity(group.len());
            for &(_, slot, owner_index) in group {
                let slot = &self.slots[slot as usize];
                let owner = &slot.owners[owner_index];
                base_score = base_score.saturating_add(owner.priority);
                kinds |= slot.kind.bit();
                matched.push(MatchedTrigger {
                    pattern: &slot.pattern,
                    kind: slot.kind,
                    priority: owner.priority,
                    source: &owner.source,
                });
            }
            matched.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.pattern.cmp(b.pattern)));
            let diversity_bonus =
                self.scoring.diversity_bonus_per_kind.saturating_mul(kinds.count_ones().saturating_sub(1));
            scores.push(RoleScore {
                role_id: &self.roles[role as usize],
                score: base_score.saturating_add(diversity_bonus),
                base_score,
                diversity_bonus,
                matched,
            });
        }
        scores.sort_by(|a, b| {
            b.score
                .cmp(&a.score)
                .then_with(|| b.matched.len().cmp(&a.matched.len()))
                .then_with(|| a.role_id.cmp(b.role_id))
        });
        scores
    }
}

/// The text to search. Most queries are ASCII with single spaces: they are searched as they
/// are (the automaton ignores ASCII case, regexes are case-insensitive). Others are
/// normalized first, which costs a copy.
fn prepare(query: &str) -> std::borrow::Cow<'_, str> {
    let irregular_space = query.bytes().any(|b| matches!(b, b'\t'..=b'\r')) || query.contains("  ");
    if query.is_ascii() && !irregular_space {
        std::borrow::Cow::Borrowed(query)
    } else {
        std::borrow::Cow::Owned(normalize(query))
    }
}

fn word_boundary_before(text: &str, at: usize) -> bool {
    text[..at].chars().next_back().is_none_or(|c| !is_word_char(c))
}

fn word_boundary_after(text: &str, at: usize) -> bool {
    text[at..].chars().next().is_none_or(|c| !is_word_char(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Limits, Trigger};

    fn trigger(pattern: &str, kind: TriggerKind, priority: u32) -> Trigger {
        Trigger::new(pattern, kind, priority, &Limits::default(), "t").expect("valid trigger")
    }

    fn role(id: &str, domains: &[&str], custom: Vec<Trigger>) -> RoleRegistration {
        RoleRegistration {
            role_id: RoleId::parse(id).expect("valid id"),
            domains: domains.iter().map(|d| (*d).to_owned()).collect(),
            custom_triggers: custom,
            description: String::new(),
            example_questions: Vec::new(),
            updated_at: chrono::Utc::now(),
        }
    }

    fn matcher(roles: &[RoleRegistration]) -> Matcher {
        Matcher::build(roles, &DomainPacks::default(), Scoring::default()).expect("builds")
    }

    #[test]
    fn keywords_match_whole_words_only_case_insensitively() {
        let m = matcher(&[role("r", &[], vec![trigger("loan", TriggerKind::Keyword, 3)])]);
        assert_eq!(m.detect("Can I get a LOAN?")[0].score, 3);
        assert!(m.detect("my loans").is_empty());
        assert!(m.detect("a balloon").is_empty());
        assert!(m.detect("loan_officer").is_empty(), "underscore is a word character");
    }

    #[test]
    fn symbols_at_pattern_edges_do_not_need_word_boundaries() {
        let m = matcher(&[role(
            "r",
            &[],
            vec![trigger("c++", TriggerKind::Keyword, 4), trigger(".net", TriggerKind::Keyword, 4)],
        )]);
        let found = &m.detect("I write C++ and ASP.NET code")[0];
        assert_eq!(found.base_score, 8);
        assert!(m.detect("abc++").is_empty(), "the word-character start still needs a boundary");
    }

    #[test]
    fn matching_is_unicode_aware() {
        let m = matcher(&[role(
            "r",
            &[],
            vec![trigger("école", TriggerKind::Keyword, 2), trigger("straße", TriggerKind::Keyword, 3)],
        )]);
        assert_eq!(m.detect("Une ÉCOLE à la STRAßE")[0].base_score, 5);
        assert!(m.detect("écoles").is_empty(), "é-words still need whole-word boundaries");
    }

    #[test]
    fn phrases_match_across_any_spacing() {
        let m = matcher(&[role("r", &[], vec![trigger("interest rate", TriggerKind::Phrase, 5)])]);
        assert_eq!(m.detect("what INTEREST \n\t RATE applies")[0].score, 5);
        assert!(m.detect("interest rates").is_empty());
    }

    #[test]
    fn regexes_with_and_without_literal_prefixes_match() {
        let m = matcher(&[role(
            "r",
            &[],
            vec![
                trigger(r"\bmortgag(?:e|es|ing)\b", TriggerKind::Regex, 4),
                trigger(r"\$\s?\d+", TriggerKind::Regex, 2),
                trigger(r"\d+ ?mg\b", TriggerKind::Regex, 3),
                trigger(r"[^\s]+ing\b", TriggerKind::Regex, 1),
            ],
        )]);
        assert_eq!(m.detect("Mortgaging a house for $ 500")[0].base_score, 7, "4 + 2 + 1 (…ing)");
        assert_eq!(m.detect("mortgages")[0].base_score, 4);
        assert_eq!(m.detect("take 250mg twice")[0].base_score, 3);
        assert_eq!(m.detect("take ٢٥٠ mg twice")[0].base_score, 3, "Arabic-Indic digits are digits");
        assert!(m.detect("mortgagee").is_empty());
    }

    #[test]
    fn scores_sum_distinct_triggers_plus_a_diversity_bonus() {
        let m = matcher(&[role(
            "r",
            &[],
            vec![
                trigger("budget", TriggerKind::Keyword, 3),
                trigger("cash flow", TriggerKind::Phrase, 5),
                trigger(r"\binvest(?:ing|ment)\b", TriggerKind::Regex, 4),
            ],
        )]);
        // A trigger matched twice counts once.
        let one_kind = &m.detect("budget, budget, budget")[0];
        assert_eq!((one_kind.base_score, one_kind.diversity_bonus, one_kind.score), (3, 0, 3));
        // Two kinds: one bonus.
        let two_kinds = &m.detect("budget and cash flow")[0];
        assert_eq!((two_kinds.base_score, two_kinds.diversity_bonus, two_kinds.score), (8, 2, 10));
        // Three kinds: two bonuses.
        let three = &m.detect("budget, cash flow and investing")[0];
        assert_eq!((three.base_score, three.diversity_bonus, three.score), (12, 4, 16));
        assert_eq!(three.matched.len(), 3);
    }

    #[test]
    fn a_shared_pattern_scores_for_every_role_with_its_own_priority() {
        let m = matcher(&[
            role("a", &[], vec![trigger("api", TriggerKind::Keyword, 5)]),
            role("b", &[], vec![trigger("api", TriggerKind::Keyword, 2)]),
        ]);
        assert_eq!(m.trigger_count(), 1);
        let scores = m.detect("an API question");
        assert_eq!(scores.iter().map(|s| (s.role_id.as_str(), s.score)).collect::<Vec<_>>(), [("a", 5), ("b", 2)]);
    }

    #[test]
    fn a_pattern_listed_twice_for_a_role_counts_once_with_its_highest_priority() {
        let packs = DomainPacks::builtin().expect("packs");
        let m = Matcher::build(
            &[role("r", &["finance"], vec![trigger("investment", TriggerKind::Keyword, 9)])],
            &packs,
            Scoring::default(),
        )
        .expect("builds");
        let score = &m.detect("investment")[0];
        let investment: Vec<_> = score.matched.iter().filter(|t| t.pattern == "investment").collect();
        assert_eq!(investment.len(), 1);
        assert_eq!((investment[0].priority, investment[0].source), (9, "custom"));
    }

    #[test]
    fn ties_break_by_trigger_count_then_role_id() {
        let m = matcher(&[
            role("b", &[], vec![trigger("alpha", TriggerKind::Keyword, 2)]),
            role("a", &[], vec![trigger("alpha", TriggerKind::Keyword, 2)]),
            role("c", &[], vec![trigger("alpha", TriggerKind::Keyword, 1), trigger("beta", TriggerKind::Keyword, 1)]),
        ]);
        let order: Vec<_> = m.detect("alpha beta").into_iter().map(|s| s.role_id.to_string()).collect();
        assert_eq!(order, ["c", "a", "b"]);
    }

    #[test]
    fn spec_example_matches_both_finance_and_technology() {
        let packs = DomainPacks::builtin().expect("packs");
        let roles = [role("finance-expert", &["finance"], vec![]), role("tech-expert", &["technology"], vec![])];
        let m = Matcher::build(&roles, &packs, Scoring::default()).expect("builds");
        let scores = m.detect("What are the best investment strategies for tech startups?");
        let ids: Vec<_> = scores.iter().map(|s| s.role_id.as_str()).collect();
        assert!(ids.contains(&"finance-expert") && ids.contains(&"tech-expert"), "{ids:?}");
        for score in &scores {
            assert_eq!(score.base_score, score.matched.iter().map(|t| t.priority).sum::<u32>());
            let kinds = score.matched.iter().map(|t| t.kind.bit()).fold(0u8, |a, b| a | b).count_ones();
            assert_eq!(score.diversity_bonus, 2 * (kinds - 1));
        }
    }
}
