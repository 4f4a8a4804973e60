//! The triggers service over real gRPC on loopback, against the real Postgres.

mod common;

use std::time::Duration;

use switchyard_proto::triggers::v1::{
    BestRoleReason, DetectTriggersRequest, GetBestRoleRequest, ListDomainsRequest, ListRoleTriggersRequest,
    RegisterRoleTriggersRequest, Trigger, TriggerKind, UnregisterRoleRequest,
};
use switchyard_testkit::{Schema, eventually};
use tonic::Code;

const SPEC_EXAMPLE: &str = "What are the best investment strategies for tech startups?";

fn register(role: &str, domains: &[&str], custom: Vec<Trigger>) -> RegisterRoleTriggersRequest {
    RegisterRoleTriggersRequest {
        role_id: role.into(),
        domains: domains.iter().map(|d| (*d).to_owned()).collect(),
        custom_triggers: custom,
        ..RegisterRoleTriggersRequest::default()
    }
}

fn custom(pattern: &str, kind: TriggerKind, priority: u32) -> Trigger {
    Trigger { pattern: pattern.into(), kind: kind.into(), priority }
}

#[tokio::test]
async fn spec_example_matches_finance_and_technology_and_hysteresis_decides() {
    let schema = Schema::new("t");
    let server = common::spawn(&common::postgres_config(&schema)).await;
    let mut client = common::client(&server).await;
    client.register_role_triggers(register("finance-expert", &["finance"], vec![])).await.expect("register");
    client.register_role_triggers(register("tech-expert", &["technology"], vec![])).await.expect("register");

    let detected = client
        .detect_triggers(DetectTriggersRequest { query: SPEC_EXAMPLE.into() })
        .await
        .expect("detect")
        .into_inner();
    let roles: Vec<_> = detected.matches.iter().map(|m| m.role_id.as_str()).collect();
    assert!(roles.contains(&"finance-expert") && roles.contains(&"tech-expert"), "{roles:?}");
    for m in &detected.matches {
        let sum: u32 = m.matched_triggers.iter().map(|t| t.priority).sum();
        assert_eq!(m.base_score, sum, "base score is the sum of matched priorities");
        assert_eq!(m.score, m.base_score + m.diversity_bonus);
        assert!(m.matched_triggers.iter().all(|t| !t.source.is_empty()));
    }
    let (top, second) = (&detected.matches[0], &detected.matches[1]);
    assert!(top.score >= second.score);

    // With the runner-up as current role: kept when within 80 %, else switched.
    let best = client
        .get_best_role(GetBestRoleRequest {
            query: SPEC_EXAMPLE.into(),
            current_role_id: second.role_id.clone(),
            hysteresis_ratio: None,
            ..Default::default()
        })
        .await
        .expect("best role")
        .into_inner();
    assert_eq!(best.hysteresis_ratio, 0.8);
    assert_eq!(best.top_score, top.score);
    assert_eq!(best.current_score, second.score);
    let within = f64::from(second.score) >= 0.8 * f64::from(top.score);
    assert_eq!(best.kept_current, within);
    assert_eq!(best.role_id, if within { second.role_id.clone() } else { top.role_id.clone() });
    assert!(!best.explanation.is_empty());

    // A per-request ratio of 1.0 always moves to a strictly better role.
    let strict = client
        .get_best_role(GetBestRoleRequest {
            query: SPEC_EXAMPLE.into(),
            current_role_id: second.role_id.clone(),
            hysteresis_ratio: Some(1.0),
            ..Default::default()
        })
        .await
        .expect("best role")
        .into_inner();
    if top.score > second.score {
        assert_eq!((strict.role_id.as_str(), strict.reason()), (top.role_id.as_str(), BestRoleReason::TopScore));
    }

    // A finance-only question goes to finance from tech.
    let finance = client
        .get_best_role(GetBestRoleRequest {
            query: "Should I refinance my mortgage at a 6% interest rate?".into(),
            current_role_id: "tech-expert".into(),
            hysteresis_ratio: None,
            ..Default::default()
        })
        .await
        .expect("best role")
        .into_inner();
    assert_eq!((finance.role_id.as_str(), finance.kept_current), ("finance-expert", false));

    // Limited to candidates (one tenant's roles), a role left out neither wins nor scores.
    let among = client
        .get_best_role(GetBestRoleRequest {
            query: "Should I refinance my mortgage at a 6% interest rate?".into(),
            current_role_id: "tech-expert".into(),
            candidate_role_ids: vec!["tech-expert".into(), "legal-expert".into(), "not-registered".into()],
            ..Default::default()
        })
        .await
        .expect("best role")
        .into_inner();
    assert_ne!(among.role_id, "finance-expert");
    assert!(among.matches.iter().all(|m| m.role_id != "finance-expert"), "{:?}", among.matches);
    let bad = client
        .get_best_role(GetBestRoleRequest {
            query: "q".into(),
            candidate_role_ids: vec!["tech-expert".into(), "Not A Role".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().starts_with("candidate_role_ids[1]:"), "{}", bad.message());
    server.stop().await;
}

#[tokio::test]
async fn registrations_survive_a_restart_and_can_be_listed_paged_and_removed() {
    let schema = Schema::new("t");
    let config = common::postgres_config(&schema);
    let server = common::spawn(&config).await;
    let mut client = common::client(&server).await;
    for role in ["a-role", "b-role", "c-role"] {
        client
            .register_role_triggers(register(role, &["legal"], vec![custom("widget", TriggerKind::Keyword, 7)]))
            .await
            .expect("register");
    }
    server.stop().await;

    let server = common::spawn(&config).await;
    let mut client = common::client(&server).await;
    let page = client
        .list_role_triggers(ListRoleTriggersRequest { page_size: 2, ..Default::default() })
        .await
        .expect("list")
        .into_inner();
    assert_eq!(page.roles.iter().map(|r| r.role_id.as_str()).collect::<Vec<_>>(), ["a-role", "b-role"]);
    assert!(page.roles[0].trigger_count > 50, "legal pack plus one custom trigger");
    assert_eq!(page.roles[0].custom_triggers[0].pattern, "widget");
    let rest = client
        .list_role_triggers(ListRoleTriggersRequest {
            page_size: 2,
            page_token: page.next_page_token,
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    assert_eq!(rest.roles.iter().map(|r| r.role_id.as_str()).collect::<Vec<_>>(), ["c-role"]);
    assert!(rest.next_page_token.is_empty());

    let hit = client.detect_triggers(DetectTriggersRequest { query: "a WIDGET!".into() }).await.expect("detect");
    assert_eq!(hit.into_inner().matches.len(), 3);

    client.unregister_role(UnregisterRoleRequest { role_id: "b-role".into() }).await.expect("unregister");
    let err = client.unregister_role(UnregisterRoleRequest { role_id: "b-role".into() }).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let after = client.detect_triggers(DetectTriggersRequest { query: "widget".into() }).await.expect("detect");
    assert_eq!(after.into_inner().matches.len(), 2);
    server.stop().await;
}

/// How long a change on one replica may take to show on another. Idle, a NOTIFY makes it
/// milliseconds (the 250 ms version poll is the backstop); the bound is for a loaded two-core
/// machine, where the matcher rebuild on a blocking thread can wait seconds for a core.
const CONVERGENCE: Duration = Duration::from_secs(10);

#[tokio::test]
async fn two_replicas_converge() {
    let schema = Schema::new("t");
    let config = common::postgres_config(&schema);
    let (a, b) = (common::spawn(&config).await, common::spawn(&config).await);
    let (mut client_a, mut client_b) = (common::client(&a).await, common::client(&b).await);

    for round in 0..3 {
        let keyword = format!("zebracorn{round}");
        client_a
            .register_role_triggers(register("replicated", &[], vec![custom(&keyword, TriggerKind::Keyword, 5)]))
            .await
            .expect("register on a");
        eventually(CONVERGENCE, &format!("replica b sees {keyword}"), || {
            let (mut client_b, keyword) = (client_b.clone(), keyword.clone());
            async move {
                let seen =
                    client_b.detect_triggers(DetectTriggersRequest { query: keyword }).await.expect("detect on b");
                seen.into_inner().matches.iter().any(|m| m.role_id == "replicated")
            }
        })
        .await;
    }
    // And back the other way, with a removal.
    client_b.unregister_role(UnregisterRoleRequest { role_id: "replicated".into() }).await.expect("unregister on b");
    eventually(CONVERGENCE, "replica a sees the removal", || {
        let mut client_a = client_a.clone();
        async move {
            let seen =
                client_a.detect_triggers(DetectTriggersRequest { query: "zebracorn2".into() }).await.expect("detect");
            seen.into_inner().matches.is_empty()
        }
    })
    .await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn bad_input_is_invalid_argument_naming_the_field_and_loses_nothing() {
    let schema = Schema::new("t");
    let mut config = common::postgres_config(&schema);
    config.max_custom_triggers = 3;
    let server = common::spawn(&config).await;
    let mut client = common::client(&server).await;
    client
        .register_role_triggers(register("kept", &[], vec![custom("keepme", TriggerKind::Keyword, 3)]))
        .await
        .expect("register");

    let invalid = |status: tonic::Status, field_prefix: &str| {
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().starts_with(field_prefix),
            "message `{}` should name `{field_prefix}`",
            status.message()
        );
    };

    let empty = client.detect_triggers(DetectTriggersRequest { query: "  ".into() }).await.unwrap_err();
    invalid(empty, "query:");
    let oversize =
        client.detect_triggers(DetectTriggersRequest { query: "x".repeat(16 * 1024 + 1) }).await.unwrap_err();
    invalid(oversize.clone(), "query:");
    assert!(oversize.message().contains("16384"), "names the limit: {}", oversize.message());

    let cases = [
        (register("Bad Id", &[], vec![]), "role_id:"),
        (register("r", &["astrology"], vec![]), "domains[0]:"),
        (register("r", &[], vec![custom("(unclosed", TriggerKind::Regex, 3)]), "custom_triggers[0].pattern:"),
        (
            register(
                "r",
                &[],
                vec![custom("ok", TriggerKind::Keyword, 1), custom(r"\w{1000}{1000}", TriggerKind::Regex, 3)],
            ),
            "custom_triggers[1].pattern:",
        ),
        (register("r", &[], vec![custom(".*", TriggerKind::Regex, 3)]), "custom_triggers[0].pattern:"),
        (register("r", &[], vec![custom("x", TriggerKind::Unspecified, 3)]), "custom_triggers[0].kind:"),
        (register("r", &[], vec![custom("x", TriggerKind::Keyword, 0)]), "custom_triggers[0].priority:"),
        (
            register("r", &[], (0..4).map(|i| custom(&format!("k{i}"), TriggerKind::Keyword, 1)).collect()),
            "custom_triggers:",
        ),
    ];
    for (request, field) in cases {
        let err = client.register_role_triggers(request).await.unwrap_err();
        invalid(err, field);
    }
    let too_many = client
        .register_role_triggers(register(
            "r",
            &[],
            (0..4).map(|i| custom(&format!("k{i}"), TriggerKind::Keyword, 1)).collect(),
        ))
        .await
        .unwrap_err();
    assert!(too_many.message().contains("limit of 3"), "{}", too_many.message());

    let ratio = client
        .get_best_role(GetBestRoleRequest {
            query: "q".into(),
            current_role_id: String::new(),
            hysteresis_ratio: Some(1.5),
            ..Default::default()
        })
        .await
        .unwrap_err();
    invalid(ratio, "hysteresis_ratio:");
    let unknown = client
        .get_best_role(GetBestRoleRequest {
            query: "q".into(),
            current_role_id: "ghost".into(),
            hysteresis_ratio: None,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    assert!(unknown.message().contains("ghost"));
    let missing = client
        .list_role_triggers(ListRoleTriggersRequest { role_id: "ghost".into(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let token = client
        .list_role_triggers(ListRoleTriggersRequest { page_token: "NOT A TOKEN".into(), ..Default::default() })
        .await
        .unwrap_err();
    invalid(token, "page_token:");

    // Nothing was lost: the earlier registration is intact and nothing half-written exists.
    let listed = client.list_role_triggers(ListRoleTriggersRequest::default()).await.expect("list").into_inner();
    assert_eq!(listed.roles.len(), 1);
    assert_eq!(listed.roles[0].role_id, "kept");
    server.stop().await;
}

#[tokio::test]
async fn domains_are_listed_with_their_triggers() {
    let server =
        common::spawn(&switchyard_triggers::TriggersConfig::in_memory("127.0.0.1:0".parse().expect("addr"))).await;
    let mut client = common::client(&server).await;
    let domains = client.list_domains(ListDomainsRequest { include_triggers: true }).await.expect("list").into_inner();
    let names: Vec<_> = domains.domains.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["creative", "education", "finance", "healthcare", "legal", "marketing", "technology"]);
    for domain in &domains.domains {
        assert_eq!(domain.trigger_count as usize, domain.triggers.len());
        assert!(domain.trigger_count >= 50);
    }
    server.stop().await;
}

#[tokio::test]
async fn a_nul_in_registered_text_is_refused_naming_the_field() {
    let schema = Schema::new("t");
    let server = common::spawn(&common::postgres_config(&schema)).await;
    let mut client = common::client(&server).await;
    let with = |change: fn(&mut RegisterRoleTriggersRequest)| {
        let mut request = register("mortgage-expert", &["finance"], vec![custom("mortgage", TriggerKind::Keyword, 5)]);
        change(&mut request);
        request
    };
    type Change = fn(&mut RegisterRoleTriggersRequest);
    let cases: [(Change, &str); 4] = [
        (|r| r.description = "home loans\0".into(), "description"),
        (|r| r.example_questions = vec!["ok?".into(), "refinance\0?".into()], "example_questions[1]"),
        (|r| r.custom_triggers[0] = custom("mort\0gage", TriggerKind::Regex, 5), "custom_triggers[0].pattern"),
        (|r| r.role_id = "mortgage\0expert".into(), "role_id"),
    ];
    for (change, field) in cases {
        let status = client.register_role_triggers(with(change)).await.expect_err("a NUL is refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        assert!(status.message().starts_with(field), "{field}: {}", status.message());
    }
    // The same role without the NUL registers; the query to match may hold one (it is only
    // matched, never stored).
    client.register_role_triggers(with(|_| {})).await.expect("register");
    let detected = client
        .detect_triggers(DetectTriggersRequest { query: "my mortgage \0 rate".into() })
        .await
        .expect("detect")
        .into_inner();
    assert!(detected.matches.iter().any(|m| m.role_id == "mortgage-expert"), "{detected:?}");
}
