//! What the property-based fuzz suites share: one case budget, one way to time a case, and
//! strategies for hostile text and JSON (valid skeletons with hostile leaves reach the code
//! behind a parser's first check, where random bytes never get). Each
//! suite runs 256 cases per property unless `PROPTEST_CASES` says otherwise (CI keeps the
//! default; `PROPTEST_CASES=20000` is the longer local mode).

use std::time::{Duration, Instant};

use proptest::{prelude::*, test_runner::Config};

/// The most one case may take: parsers of outside data answer in well under this, even in a
/// debug build on a busy machine.
pub const CASE_BUDGET: Duration = Duration::from_secs(1);

/// The runner's settings: `PROPTEST_CASES` when set, else `ci_cases`. Failures are not written
/// to `proptest-regressions/` files: a case worth keeping becomes a named regression test.
pub fn config(ci_cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|cases| cases.parse().ok()).unwrap_or(ci_cases);
    Config { cases, failure_persistence: None, ..Config::default() }
}

/// Runs one case and fails it when it takes longer than [`CASE_BUDGET`].
pub fn timed<T>(what: &str, case: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = case();
    let took = start.elapsed();
    assert!(took < CASE_BUDGET, "{what} took {took:?}, over the {CASE_BUDGET:?} budget of one case");
    out
}

/// Text an attacker or a broken peer might send: any Unicode, NUL and control characters,
/// lookalikes of syntax, and now and then a long run.
pub fn hostile_text() -> BoxedStrategy<String> {
    prop_oneof![
        4 => "\\PC{0,24}",
        2 => any::<String>(),
        1 => Just(String::new()),
        1 => Just("\0".to_owned()),
        1 => "[\\x00-\\x1f\\x7f\\u{202e}\\u{feff}\\u{fffd}]{1,8}",
        1 => "[{}\\[\\]\":,\\\\/.*+?()|^$ ]{1,16}",
        1 => "[a-zA-Z0-9_.:/-]{1,64}",
        1 => "[a-z]{1000,8000}",
    ]
    .boxed()
}

/// A JSON string literal holding [`hostile_text`].
pub fn json_string() -> BoxedStrategy<String> {
    hostile_text().prop_map(|text| serde_json::Value::String(text).to_string()).boxed()
}

/// A number as JSON text, including those no Rust integer or float holds.
pub fn json_number() -> BoxedStrategy<String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_filter("finite", |n| n.is_finite()).prop_map(|n| format!("{n:e}")),
        Just("-0".to_owned()),
        Just("1e999".to_owned()),
        Just("-1e999".to_owned()),
        Just("4294967296".to_owned()),
        Just("-1".to_owned()),
        Just("0.5".to_owned()),
        Just("340282366920938463463374607431768211456".to_owned()),
        "[1-9][0-9]{20,400}",
    ]
    .boxed()
}

/// JSON text nested `depth` deep: arrays, objects, or both in turn.
pub fn deep_json(depth: usize, kind: u8) -> String {
    let (mut open, mut close) = (String::new(), String::new());
    for level in 0..depth {
        if (kind == 0) || (kind == 2 && level % 2 == 0) {
            open.push('[');
            close.push(']');
        } else {
            open.push_str("{\"a\":");
            close.push('}');
        }
    }
    format!("{open}0{close}")
}

/// One JSON value as text, of any type: hostile strings and numbers, `null`, booleans, empty and
/// deeply nested containers. Where a parser expects a certain type, this is the wrong one most
/// of the time.
pub fn json_leaf() -> BoxedStrategy<String> {
    prop_oneof![
        3 => json_string(),
        2 => json_number(),
        1 => prop_oneof![Just("null"), Just("true"), Just("false"), Just("{}"), Just("[]")].prop_map(str::to_owned),
        1 => (1usize..400, 0u8..3).prop_map(|(depth, kind)| deep_json(depth, kind)),
    ]
    .boxed()
}

/// Any JSON value as text, a few levels of arrays and objects over [`json_leaf`].
pub fn json_value() -> BoxedStrategy<String> {
    json_leaf()
        .prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(|items| format!("[{}]", items.join(","))),
                proptest::collection::vec((json_string(), inner), 0..6).prop_map(|members| {
                    let members: Vec<String> =
                        members.into_iter().map(|(key, value)| format!("{key}:{value}")).collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        })
        .boxed()
}

/// One member of a JSON object, as `"name":value` text: absent, of the expected shape (`typed`),
/// or any JSON value in its place.
pub fn member(name: &'static str, typed: BoxedStrategy<String>) -> BoxedStrategy<Option<String>> {
    prop_oneof![
        1 => Just(None),
        4 => typed.prop_map(move |value| Some(format!("\"{name}\":{value}"))),
        1 => json_leaf().prop_map(move |value| Some(format!("\"{name}\":{value}"))),
    ]
    .boxed()
}

/// A JSON object from members (see [`member`]), now and then with an unknown member added.
pub fn object(members: Vec<BoxedStrategy<Option<String>>>) -> BoxedStrategy<String> {
    (members, proptest::option::weighted(0.1, (json_string(), json_leaf())))
        .prop_map(|(members, extra)| {
            let mut members: Vec<String> = members.into_iter().flatten().collect();
            if let Some((key, value)) = extra {
                members.push(format!("{key}:{value}"));
            }
            format!("{{{}}}", members.join(","))
        })
        .boxed()
}

/// A JSON array of `item`s.
pub fn array(item: BoxedStrategy<String>, most: usize) -> BoxedStrategy<String> {
    proptest::collection::vec(item, 0..most).prop_map(|items| format!("[{}]", items.join(","))).boxed()
}

/// A string literal from a few `choices` (the values a parser acts on) or a hostile one.
pub fn one_of(choices: &'static [&'static str]) -> BoxedStrategy<String> {
    prop_oneof![
        3 => proptest::sample::select(choices).prop_map(|choice| format!("\"{choice}\"")),
        1 => json_string(),
    ]
    .boxed()
}

/// A small unsigned integer as JSON text (an index, a count), now and then a hostile number.
pub fn small_index() -> BoxedStrategy<String> {
    prop_oneof![4 => (0u32..4).prop_map(|n| n.to_string()), 1 => json_number()].boxed()
}
