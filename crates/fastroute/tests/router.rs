//! The fast router with the real all-MiniLM-L6-v2 (`scripts/fetch-models.sh`;
//! `SWITCHYARD_MODEL_DIR` overrides): a missing model fails these tests, never skips them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, OnceLock};

use switchyard_fastroute::{Exemplars, FastRouter, Route};
use switchyard_models::Embedder;

/// One router for the file: embedding the exemplars and training the head is the slow part.
fn router() -> &'static FastRouter {
    static ROUTER: OnceLock<FastRouter> = OnceLock::new();
    ROUTER.get_or_init(|| {
        let dir = switchyard_testkit::model_dir();
        let embedder =
            Embedder::load(&dir).unwrap_or_else(|err| panic!("{}: {err} (run scripts/fetch-models.sh)", dir.display()));
        FastRouter::new(Arc::new(embedder), Exemplars::builtin().expect("built-in exemplars")).expect("router")
    })
}

#[test]
fn builtin_exemplars_cover_every_route() {
    let counts = Exemplars::builtin().expect("built-in exemplars").counts();
    assert!(counts.iter().all(|&count| count >= 60), "{counts:?}");
}

#[test]
fn clear_cases_take_their_route() {
    let cases = [
        ("Hey, good morning!", Route::Direct),
        ("Thank you, that helps a lot.", Route::Direct),
        ("What is the capital of Canada?", Route::Direct),
        ("List the files in the project folder and show me the biggest one.", Route::McpAgent),
        ("Search the web for today's news about the stock market.", Route::McpAgent),
        ("Check the free disk space on the server.", Route::McpAgent),
        (
            "Analyze the technical architecture and business implications of migrating to microservices",
            Route::Multiagent,
        ),
        ("Evaluate the legal and financial consequences of a merger between two hospitals.", Route::Multiagent),
    ];
    for (message, expected) in cases {
        let decision = router().decide(message, None).expect("decision");
        assert_eq!(decision.route, expected, "{message}: {decision:?}");
        let total: f32 = decision.scores.iter().sum();
        assert!((total - 1.0).abs() < 1e-4, "{decision:?}");
        assert!((0.0..=1.0).contains(&decision.confidence));
        assert_eq!(decision.confidence, decision.score(decision.route));
        assert!(!decision.nearest.message.is_empty());
    }
}

#[test]
fn last_turn_is_used_only_for_an_unsure_short_follow_up() {
    let router = router();
    // A message that stands alone ignores the last turn.
    let greeting = router.decide("Thanks, bye!", Some("Search the web for flights to Rome")).expect("decision");
    assert_eq!(greeting.route, Route::Direct, "{greeting:?}");
    assert!(!greeting.from_last_turn);
    let alone = router.decide("and what about tomorrow?", None).expect("decision");
    let followed = router
        .decide("and what about tomorrow?", Some("What's the weather forecast for Paris today?"))
        .expect("decision");
    // Short and unsure alone, it takes the last turn's confident route (a tool request).
    assert!(!alone.from_last_turn && alone.confidence < 0.75, "{alone:?}");
    assert!(followed.from_last_turn, "{followed:?}");
    assert_eq!(followed.route, Route::McpAgent, "{followed:?}");
    assert!(followed.confidence > alone.confidence, "{followed:?} vs {alone:?}");
    // From an embedding the caller already has, the same decision.
    let vector = router.embedder().embed(&["and what about tomorrow?"]).expect("embed").remove(0);
    let embedded = router
        .decide_embedded("and what about tomorrow?", &vector, Some("What's the weather forecast for Paris today?"))
        .expect("decision");
    assert_eq!(embedded, followed);
}

#[test]
fn odd_input_is_decided_not_a_panic() {
    for message in ["", "   ", "🙂", &"word ".repeat(2000)] {
        router().decide(message, Some("")).expect("decision");
    }
}
