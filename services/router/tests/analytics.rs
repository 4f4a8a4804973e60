//! Routing analytics in Postgres: every turn's decision recorded off the request path,
//! GetRoutingStats over a window, SubmitFeedback feeding satisfaction and the false routing
//! rate, cost per API key, one tenant's figures invisible to another.

mod common;

use std::time::Duration;

use common::{RecordedExt, Suite, as_tenant, chat};
use switchyard_proto::router::v1::{GetRoutingStatsRequest, RouteType, SubmitFeedbackRequest};
use switchyard_testkit::{
    eventually,
    llm::{Recorded, Reply, ScriptedLlm},
};
use tonic::Code;

fn script(request: &Recorded) -> Reply {
    let routing = request.tool_names().iter().any(|t| t == "use_mcp_agent");
    let message = request.user_text();
    if routing && message.contains("experts") {
        Reply::tool_call("use_multiagent_orchestration", r#"{"domains": ["finance"], "reasoning": "r"}"#)
    } else {
        Reply::text("an answer").usage(10, 5)
    }
}

#[tokio::test]
async fn stats_and_feedback_reflect_the_turns_of_each_tenant() {
    let llm = ScriptedLlm::start(script).await;
    let suite = Suite::start(llm).await;
    let mut client = suite.client().await;

    let mut ids = Vec::new();
    let mut costs = Vec::new();
    // The first turn comes without an API key, the others with one each (as the edge names it).
    for (message, key) in
        [("hello", None), ("what is a bond?", Some("k1")), ("ask the experts about budgets", Some("k2"))]
    {
        let mut request = as_tenant("acme", chat(message));
        if let Some(key) = key {
            request.metadata_mut().insert("x-switchyard-key-id", key.parse().expect("ascii"));
        }
        let response = client.chat(request).await.expect("chat").into_inner();
        let meta = response.metadata.expect("metadata");
        costs.push((key.unwrap_or_default(), meta.cost_usd, meta.cost_parts.len() as u64));
        ids.push((response.id, meta.route_type()));
    }
    assert_eq!(
        ids.iter().map(|(_, r)| *r).collect::<Vec<_>>(),
        [RouteType::Direct, RouteType::Direct, RouteType::Multiagent]
    );
    client.chat(as_tenant("globex", chat("hello"))).await.expect("another tenant's turn");

    // Feedback right after the answer: the decision may still be buffered; it is found.
    client
        .submit_feedback(as_tenant(
            "acme",
            SubmitFeedbackRequest { response_id: ids[0].0.clone(), helpful: true, ..Default::default() },
        ))
        .await
        .expect("feedback on a direct answer");
    client
        .submit_feedback(as_tenant(
            "acme",
            SubmitFeedbackRequest {
                response_id: ids[1].0.clone(),
                helpful: false,
                expected_route: RouteType::McpAgent as i32,
                comment: "should have looked it up".into(),
            },
        ))
        .await
        .expect("a correction");

    let stats = eventually(Duration::from_secs(10), "acme's three turns recorded", || {
        let mut client = client.clone();
        async move {
            let stats = client
                .get_routing_stats(as_tenant("acme", GetRoutingStatsRequest::default()))
                .await
                .map_err(|s| s.to_string())?
                .into_inner();
            if stats.total == 3 { Ok(stats) } else { Err(format!("{stats:?}")) }
        }
    })
    .await;
    let direct = stats.routes.iter().find(|r| r.route_type() == RouteType::Direct).expect("direct figures");
    let multi = stats.routes.iter().find(|r| r.route_type() == RouteType::Multiagent).expect("multiagent figures");
    assert_eq!((direct.count, multi.count), (2, 1));
    assert!((direct.share - 2.0 / 3.0).abs() < 1e-9, "{}", direct.share);
    assert_eq!(direct.feedback_count, 2);
    assert!((direct.satisfaction - 0.5).abs() < 1e-9);
    assert!((direct.false_routing_rate - 0.5).abs() < 1e-9);
    assert_eq!(stats.feedback_count, 2);
    assert!((stats.false_routing_rate - 0.5).abs() < 1e-9);
    assert_eq!((stats.cache_hit_rate, stats.fallback_rate), (0.0, 0.0));
    assert!(stats.routing_latency_p99_ms >= stats.routing_latency_p50_ms);
    assert!(stats.execution_time_p50_ms > 0.0 || stats.execution_time_p95_ms >= 0.0);
    assert!(stats.since.is_some() && stats.until.is_some());
    // Per API key: one turn each, with the cost and calls the turn returned; costliest first.
    assert_eq!(stats.api_keys.len(), 3, "{:?}", stats.api_keys);
    for (key, cost_usd, calls) in &costs {
        let figures = stats.api_keys.iter().find(|k| k.key_id == *key).expect("the key's figures");
        assert_eq!((figures.turns, figures.calls), (1, *calls), "{figures:?}");
        assert!((figures.cost_usd - cost_usd).abs() < 1e-12 && *cost_usd > 0.0, "{figures:?} vs {cost_usd}");
    }
    assert_eq!(stats.api_keys[0].key_id, "k2", "the multi-agent turn cost most: {:?}", stats.api_keys);
    let keys_cost: f64 = stats.api_keys.iter().map(|k| k.cost_usd).sum();
    assert!((keys_cost - stats.cost_usd).abs() < 1e-12, "{keys_cost} vs {}", stats.cost_usd);

    // The other tenant sees only its own turn, and cannot judge acme's answers.
    // (Its decision may be in a later batch than acme's.)
    let other = eventually(Duration::from_secs(10), "globex's turn recorded", || {
        let mut client = client.clone();
        async move {
            let stats = client
                .get_routing_stats(as_tenant("globex", GetRoutingStatsRequest::default()))
                .await
                .map_err(|s| s.to_string())?
                .into_inner();
            if stats.total >= 1 { Ok(stats) } else { Err(format!("{stats:?}")) }
        }
    })
    .await;
    assert_eq!(other.total, 1);
    let other_keys: Vec<(&str, u64)> = other.api_keys.iter().map(|k| (k.key_id.as_str(), k.turns)).collect();
    assert_eq!(other_keys, [("", 1)], "globex's own keyless turn only");
    let status = client
        .submit_feedback(as_tenant(
            "globex",
            SubmitFeedbackRequest { response_id: ids[2].0.clone(), helpful: true, ..Default::default() },
        ))
        .await
        .expect_err("another tenant's answer");
    assert_eq!(status.code(), Code::NotFound);

    // A window before the turns holds nothing.
    let before = prost_types::Timestamp { seconds: 1_000_000_000, nanos: 0 };
    let empty = client
        .get_routing_stats(as_tenant(
            "acme",
            GetRoutingStatsRequest {
                since: Some(before),
                until: Some(prost_types::Timestamp { seconds: 1_000_003_600, nanos: 0 }),
            },
        ))
        .await
        .expect("stats")
        .into_inner();
    assert_eq!((empty.total, empty.routes.len()), (0, 0));
}

#[tokio::test]
async fn feedback_and_stats_refuse_bad_input() {
    let llm = ScriptedLlm::start(script).await;
    let suite = Suite::start(llm).await;
    let mut client = suite.client().await;
    let status = client.submit_feedback(SubmitFeedbackRequest::default()).await.expect_err("no id");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("response_id"), "{}", status.message());
    let status = client
        .submit_feedback(SubmitFeedbackRequest { response_id: "chat-unknown".into(), ..Default::default() })
        .await
        .expect_err("unknown");
    assert_eq!(status.code(), Code::NotFound);
    let status = client
        .submit_feedback(SubmitFeedbackRequest {
            response_id: "chat-x".into(),
            expected_route: 9,
            ..Default::default()
        })
        .await
        .expect_err("bad route");
    assert_eq!((status.code(), status.message().starts_with("expected_route")), (Code::InvalidArgument, true));
    let now = prost_types::Timestamp { seconds: 2_000_000_000, nanos: 0 };
    let status = client
        .get_routing_stats(GetRoutingStatsRequest { since: Some(now), until: Some(now) })
        .await
        .expect_err("empty window");
    assert_eq!((status.code(), status.message().starts_with("since")), (Code::InvalidArgument, true));
}
