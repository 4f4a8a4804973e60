//! Property-based fuzzing of what callers send the triggers service, in process: custom trigger
//! patterns (keywords, phrases and regexes, catastrophic ones included), role ids, descriptions,
//! example questions and queries; and matching hostile queries against what was accepted. No
//! panic; an accepted value or an error naming its field; each case within the budget.

use std::sync::LazyLock;

use chrono::Utc;
use proptest::prelude::*;
use switchyard_testkit::fuzz::{config, hostile_text, timed};
use switchyard_triggers::{
    domain::{Limits, Query, RoleId, RoleRegistration, Trigger, TriggerKind, example_questions, role_description},
    matcher::{Matcher, Scoring},
    packs::DomainPacks,
};

/// Regexes built from the constructs that blow up automata or backtrackers: nested and
/// counted repetition, alternation of overlapping branches, big Unicode classes, case folding,
/// unsupported look-arounds and back-references, deep groups, and plain text.
fn hostile_regex() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        "[a-z]{1,3}",
        Just(r"\w".to_owned()),
        Just(r"\d".to_owned()),
        Just(r"\p{L}".to_owned()),
        Just(r"[^\x00]".to_owned()),
        Just(".".to_owned()),
        Just(r"\b".to_owned()),
        Just("^".to_owned()),
        Just("$".to_owned()),
        Just(r"(?<=a)".to_owned()),
        Just(r"\1".to_owned()),
        Just("(?i)".to_owned()),
        Just("(".to_owned()),
        Just(")".to_owned()),
        Just("[".to_owned()),
        "\\PC{1,3}",
    ];
    let repeated = (
        atom,
        prop_oneof![
            Just(String::new()),
            Just("*".to_owned()),
            Just("+".to_owned()),
            Just("?".to_owned()),
            (0u32..2000).prop_map(|n| format!("{{{n}}}")),
            (0u32..100, 0u32..100).prop_map(|(a, b)| format!("{{{a},{b}}}")),
            Just("{1000}{1000}".to_owned()),
            Just("{99999999999}".to_owned()),
        ],
    )
        .prop_map(|(atom, repeat)| format!("{atom}{repeat}"));
    let sequence = proptest::collection::vec(repeated, 1..6).prop_map(|parts| parts.concat());
    let alternation = proptest::collection::vec(sequence, 1..6).prop_map(|branches| branches.join("|"));
    prop_oneof![
        4 => (alternation, 0usize..3, prop_oneof![Just(""), Just("*"), Just("{50}")])
            .prop_map(|(inner, groups, repeat)| format!("{}{inner}{}{repeat}", "(".repeat(groups), ")".repeat(groups))),
        1 => (1usize..200).prop_map(|depth| format!("{}a{}", "(".repeat(depth), ")+".repeat(depth))),
        1 => hostile_text(),
    ]
}

fn kind() -> impl Strategy<Value = TriggerKind> {
    prop_oneof![Just(TriggerKind::Keyword), Just(TriggerKind::Phrase), Just(TriggerKind::Regex)]
}

/// The built-in packs, parsed once (no fuzzed role takes a domain: only its own trigger is compiled).
static PACKS: LazyLock<DomainPacks> = LazyLock::new(|| DomainPacks::builtin().expect("built-in packs"));

fn role(triggers: Vec<Trigger>) -> RoleRegistration {
    RoleRegistration {
        role_id: RoleId::parse("fuzzed").expect("a valid id"),
        domains: Vec::new(),
        custom_triggers: triggers,
        description: String::new(),
        example_questions: Vec::new(),
        updated_at: Utc::now(),
    }
}

/// A query for the matcher: hostile text, or words a pattern might match, up to the limit.
fn query() -> impl Strategy<Value = String> {
    prop_oneof![hostile_text(), "([a-z0-9$ ]{1,12} ){0,200}", (1usize..16 * 1024).prop_map(|n| "a".repeat(n)),]
}

proptest! {
    #![proptest_config(config(256))]

    /// A pattern of any kind is accepted or refused with its field named; an accepted regex
    /// compiles into the matcher, which then answers any query within the budget.
    #[test]
    fn any_pattern_is_accepted_or_refused_by_name(
        pattern in prop_oneof![hostile_regex(), hostile_text()],
        kind in kind(),
        priority in prop_oneof![1u32..=100, any::<u32>()],
        query in query(),
    ) {
        let limits = Limits::default();
        let trigger = timed("checking a pattern", || {
            Trigger::new(&pattern, kind, priority, &limits, "custom_triggers[0]")
        });
        match trigger {
            Err(error) => {
                let message = error.to_string();
                prop_assert!(message.starts_with("custom_triggers[0]."), "{}", message);
            }
            Ok(trigger) => {
                // Normalizing (lowercase) may lengthen a keyword, never past 3 bytes for 1.
                prop_assert!(trigger.pattern.len() <= limits.max_pattern_bytes * 3);
                let matcher = timed("compiling the matcher", || Matcher::build(&[role(vec![trigger])], &PACKS, Scoring::default()));
                let matcher = matcher.map_err(|err| TestCaseError::fail(format!("an accepted trigger failed to compile: {err}")))?;
                if let Ok(query) = Query::new(&query, &limits) {
                    let scores = timed("matching a query", || matcher.detect(query.as_str()));
                    prop_assert!(scores.len() <= 1);
                }
            }
        }
    }

    /// Role ids, descriptions, example questions and queries: accepted or refused by name.
    #[test]
    fn role_fields_and_queries_are_accepted_or_refused_by_name(
        id in hostile_text(),
        description in hostile_text(),
        questions in proptest::collection::vec(hostile_text(), 0..60),
        query in hostile_text(),
    ) {
        let limits = Limits::default();
        timed("checking a role", || -> Result<(), TestCaseError> {
            if let Ok(role) = RoleId::parse(&id) {
                prop_assert!(role.as_str().len() <= RoleId::MAX_LEN);
            }
            match role_description(&description, &limits) {
                Ok(kept) => prop_assert!(kept.len() <= limits.max_example_bytes),
                Err(error) => prop_assert!(error.to_string().starts_with("description:"), "{}", error),
            }
            match example_questions(&questions, &limits, "example_questions") {
                Ok(kept) => prop_assert!(kept.len() <= limits.max_role_examples),
                Err(error) => prop_assert!(error.to_string().starts_with("example_questions"), "{}", error),
            }
            if let Err(error) = Query::new(&query, &limits) {
                prop_assert!(error.to_string().starts_with("query:"), "{}", error);
            }
            Ok(())
        })?;
    }
}

/// Regexes whose automata explode are refused by the size limit, quickly, whatever their shape.
#[test]
fn catastrophic_regexes_are_refused_quickly() {
    let limits = Limits::default();
    for pattern in [r"\w{1000}{1000}", r"(\p{L}{100}){100}", r"[\p{L}\p{N}]{255}{255}"] {
        let refused = timed(pattern, || Trigger::new(pattern, TriggerKind::Regex, 5, &limits, "custom_triggers[0]"));
        let message = refused.expect_err(pattern).to_string();
        assert!(message.starts_with("custom_triggers[0].pattern:"), "{pattern}: {message}");
    }
}

/// Regexes that make a backtracking engine take exponential time are fine here: the matcher's
/// automata answer the longest query in linear time.
#[test]
fn backtracking_bombs_match_in_linear_time() {
    let limits = Limits::default();
    let query = format!("{}!", "a".repeat(limits.max_query_bytes - 1));
    for pattern in [r"((a|aa)+)+{200}b", r"(a*)*b", r"(a|a?)+b", r"(\w+\s?)+$x"] {
        let trigger = Trigger::new(pattern, TriggerKind::Regex, 5, &limits, "custom_triggers[0]").expect(pattern);
        let matcher = Matcher::build(&[role(vec![trigger])], &PACKS, Scoring::default()).expect(pattern);
        let scores = timed(pattern, || matcher.detect(&query));
        assert!(scores.is_empty(), "{pattern} matched {} bytes of `a`", query.len());
    }
}
