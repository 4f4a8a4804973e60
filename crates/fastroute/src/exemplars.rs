//! Labelled example messages, one JSON object a line: `{"message": "...", "route": "..."}`.
//! The default set is compiled in, so the router needs no path at run time.

use serde::Deserialize;

use crate::route::Route;

/// The crate's own exemplars (`data/exemplars.jsonl`; sources in `data/README.md`).
pub const BUILTIN: &str = include_str!("../data/exemplars.jsonl");

/// One labelled message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exemplar {
    pub message: String,
    pub route: Route,
}

/// A mistake in an exemplars file; `line` counts from 1, as editors do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExemplarError {
    #[error("line {line}: not a {{\"message\", \"route\"}} JSON object: {reason}")]
    Json { line: usize, reason: String },
    #[error("line {line}: {reason}")]
    Route { line: usize, reason: String },
    #[error("line {line}: the message is empty")]
    EmptyMessage { line: usize },
    #[error("no exemplars for route `{0}`: every route needs at least one")]
    MissingRoute(Route),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    message: String,
    route: String,
}

/// A validated set of exemplars covering every route.
#[derive(Debug, Clone)]
pub struct Exemplars {
    items: Vec<Exemplar>,
}

impl Exemplars {
    /// The compiled-in set.
    pub fn builtin() -> Result<Self, ExemplarError> {
        Self::parse(BUILTIN)
    }

    /// Parses JSON lines; blank lines are skipped (a trailing newline is not an error).
    pub fn parse(text: &str) -> Result<Self, ExemplarError> {
        let mut items = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            if raw.trim().is_empty() {
                continue;
            }
            let parsed: Line =
                serde_json::from_str(raw).map_err(|err| ExemplarError::Json { line, reason: err.to_string() })?;
            let route =
                parsed.route.parse::<Route>().map_err(|err| ExemplarError::Route { line, reason: err.to_string() })?;
            let message = parsed.message.trim();
            if message.is_empty() {
                return Err(ExemplarError::EmptyMessage { line });
            }
            items.push(Exemplar { message: message.to_owned(), route });
        }
        Self::from_items(items)
    }

    /// A set from exemplars already in memory; every route must be present, or the classifier
    /// could never choose it (and would not know it is missing).
    pub fn from_items(items: Vec<Exemplar>) -> Result<Self, ExemplarError> {
        for route in Route::ALL {
            if !items.iter().any(|item| item.route == route) {
                return Err(ExemplarError::MissingRoute(route));
            }
        }
        Ok(Self { items })
    }

    /// The same set without the exemplars `drop` selects (evaluation leaves out the cases it
    /// measures); fails if a route would be left empty.
    pub fn without(&self, drop: impl Fn(&Exemplar) -> bool) -> Result<Self, ExemplarError> {
        Self::from_items(self.items.iter().filter(|item| !drop(item)).cloned().collect())
    }

    /// The exemplars whose place in `keep` is true (missing places count as false), in order:
    /// lets a caller keep the matching rows of embeddings it computed once.
    pub fn select(&self, keep: &[bool]) -> Result<Self, ExemplarError> {
        let kept = self.items.iter().zip(keep).filter(|(_, keep)| **keep).map(|(item, _)| item.clone());
        Self::from_items(kept.collect())
    }

    pub fn items(&self) -> &[Exemplar] {
        &self.items
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// How many exemplars each route has, in [`Route::ALL`] order.
    pub fn counts(&self) -> [usize; 3] {
        let mut counts = [0; 3];
        for item in &self.items {
            counts[item.route.index()] += 1;
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_ROUTES: &str = r#"{"message": "hi", "route": "direct"}
{"message": "read the file", "route": "mcp_agent"}

{"message": "law and money", "route": "multiagent"}
"#;

    #[test]
    fn parses_and_skips_blank_lines() {
        let set = Exemplars::parse(ALL_ROUTES).unwrap();
        assert_eq!(set.len(), 3);
        assert_eq!(set.counts(), [1, 1, 1]);
        assert_eq!(set.items()[2].route, Route::Multiagent);
    }

    #[test]
    fn errors_name_the_line() {
        let bad_json = format!("{ALL_ROUTES}{{\"message\": \"x\"\n");
        assert!(matches!(Exemplars::parse(&bad_json), Err(ExemplarError::Json { line: 5, .. })));
        let bad_route = format!("{ALL_ROUTES}{{\"message\": \"x\", \"route\": \"tools\"}}\n");
        let err = Exemplars::parse(&bad_route).unwrap_err();
        assert!(matches!(err, ExemplarError::Route { line: 5, .. }));
        assert!(err.to_string().starts_with("line 5: unknown route `tools`"), "{err}");
        let empty = "{\"message\": \"  \", \"route\": \"direct\"}";
        assert_eq!(Exemplars::parse(empty).unwrap_err(), ExemplarError::EmptyMessage { line: 1 });
        let extra = "{\"message\": \"a\", \"route\": \"direct\", \"label\": 1}";
        assert!(matches!(Exemplars::parse(extra), Err(ExemplarError::Json { line: 1, .. })));
    }

    #[test]
    fn every_route_is_required() {
        let two = "{\"message\": \"hi\", \"route\": \"direct\"}\n{\"message\": \"ls\", \"route\": \"mcp_agent\"}";
        assert_eq!(Exemplars::parse(two).unwrap_err(), ExemplarError::MissingRoute(Route::Multiagent));
        let set = Exemplars::parse(ALL_ROUTES).unwrap();
        assert!(set.without(|item| item.route == Route::Direct).is_err());
    }
}
