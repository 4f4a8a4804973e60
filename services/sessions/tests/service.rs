//! The sessions service over real gRPC, with the real triggers service, Redis and Postgres.

mod common;

use std::time::Duration;

use common::Suite;
use switchyard_proto::{
    sessions::v1::{
        AppendMessagesRequest, CloseSessionRequest, ConversationMessage, CreateRoleRequest, CreateSessionRequest,
        DeleteRoleRequest, GetHistoryRequest, GetRoleRequest, GetSessionRequest, ListRolesRequest, MessageRole,
        ProcessQueryRequest, Role, SessionStatus, SwitchContextRequest, SwitchReason, UpdateRoleRequest,
        role_service_client::RoleServiceClient, session_service_client::SessionServiceClient,
    },
    triggers::v1::{DetectTriggersRequest, Trigger, TriggerKind, trigger_service_client::TriggerServiceClient},
};
use switchyard_testkit::{
    database_url, delete_redis_keys, eventually,
    postgres::{database_addr, database_url_via},
    proxy::TcpProxy,
};
use tonic::{Code, Request};

const SPEC_EXAMPLE: &str = "What are the best investment strategies for tech startups?";
const FINANCE_ONLY: &str = "Should I refinance my mortgage at a 6% interest rate?";

fn create(id: &str, role: &str) -> CreateSessionRequest {
    CreateSessionRequest { session_id: id.into(), initial_role_id: role.into(), ..Default::default() }
}

fn process(id: &str, query: &str) -> ProcessQueryRequest {
    ProcessQueryRequest { session_id: id.into(), query: query.into(), ..Default::default() }
}

fn as_tenant<T>(tenant: &str, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert("x-tenant-id", tenant.parse().expect("ascii"));
    request
}

#[tokio::test]
async fn spec_usage_example_switches_keeps_by_hysteresis_and_records_history() {
    let suite = Suite::start().await;
    let mut sessions = SessionServiceClient::new(suite.channel().await);

    let created = sessions.create_session(create("", "tech-expert")).await.expect("create").into_inner();
    let session = created.session.expect("session");
    assert!(!session.session_id.is_empty(), "an id is generated");
    assert_eq!((session.role_id.as_str(), session.status()), ("tech-expert", SessionStatus::Active));
    let id = session.session_id;

    // Both domains match; technology leads, so the tech expert stays.
    let first = sessions.process_query(process(&id, SPEC_EXAMPLE)).await.expect("process").into_inner();
    let scored: Vec<_> = first.scores.iter().map(|m| m.role_id.as_str()).collect();
    assert!(scored.contains(&"finance-expert") && scored.contains(&"tech-expert"), "{scored:?}");
    assert_eq!((first.role_id.as_str(), first.switched), ("tech-expert", false));
    assert_eq!(first.reason(), SwitchReason::CurrentIsBest);
    assert!(first.transition_context.is_empty());
    assert!(first.system_prompt.starts_with(&first.role.as_ref().expect("role").system_prompt));

    // A finance-only question switches to the finance expert, with a transition context.
    let second = sessions.process_query(process(&id, FINANCE_ONLY)).await.expect("process").into_inner();
    assert_eq!((second.role_id.as_str(), second.switched), ("finance-expert", true));
    assert_eq!((second.previous_role_id.as_str(), second.reason()), ("tech-expert", SwitchReason::Triggered));
    assert!(
        second.transition_context.contains("from Technology Expert (tech-expert)"),
        "{}",
        second.transition_context
    );
    assert!(second.system_prompt.contains(&second.transition_context));

    // A follow-up mixing both: technology scores higher, but finance is within 80 %: kept.
    let third = sessions.process_query(process(&id, SPEC_EXAMPLE)).await.expect("process").into_inner();
    assert_eq!((third.role_id.as_str(), third.switched), ("finance-expert", false));
    assert_eq!(third.reason(), SwitchReason::KeptByHysteresis, "{}", third.reason_detail);

    let history = sessions.get_history(GetHistoryRequest { session_id: id.clone(), ..Default::default() }).await;
    let events = history.expect("history").into_inner().events;
    assert_eq!(events.len(), 1);
    let event = &events[0];
    assert_eq!(
        (event.sequence, event.from_role_id.as_str(), event.to_role_id.as_str()),
        (1, "tech-expert", "finance-expert")
    );
    assert_eq!(event.reason(), SwitchReason::Triggered);
    assert!(event.to_score > event.from_score);
    assert_eq!(event.query_excerpt, FINANCE_ONLY);
    assert!(event.occurred_at.is_some());

    let got = sessions.get_session(GetSessionRequest { session_id: id.clone(), include_messages: false }).await;
    let got = got.expect("get").into_inner().session.expect("session");
    assert_eq!((got.turn_count, got.switch_count, got.role_id.as_str()), (3, 1, "finance-expert"));
    suite.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_queries_on_one_session_leave_consistent_state_and_history() {
    let suite = Suite::start().await;
    let channel = suite.channel().await;
    let mut sessions = SessionServiceClient::new(channel.clone());
    sessions.create_session(create("busy", "general-assistant")).await.expect("create");

    let queries = [FINANCE_ONLY, "How do I fix a segfault in my Rust program?", SPEC_EXAMPLE, "hello there"];
    let mut calls = Vec::new();
    for index in 0..50 {
        let mut client = SessionServiceClient::new(channel.clone());
        let query = queries[index % queries.len()];
        calls.push(tokio::spawn(
            async move { client.process_query(process("busy", query)).await.map(|r| r.into_inner()) },
        ));
    }
    let mut switched = 0;
    for call in calls {
        let response = call.await.expect("task").expect("every call succeeds");
        switched += usize::from(response.switched);
    }

    let session = sessions.get_session(GetSessionRequest { session_id: "busy".into(), include_messages: false }).await;
    let session = session.expect("get").into_inner().session.expect("session");
    assert_eq!(session.turn_count, 50, "every query counted once");
    assert_eq!(session.switch_count as usize, switched, "every reported switch counted once");

    let events = sessions
        .get_history(GetHistoryRequest { session_id: "busy".into(), page_size: 500, ..Default::default() })
        .await
        .expect("history")
        .into_inner()
        .events;
    assert_eq!(events.len(), switched, "every switch recorded once");
    let mut role = "general-assistant".to_owned();
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event.sequence as usize, index + 1, "sequences have no gaps");
        assert_eq!(event.from_role_id, role, "each switch starts where the previous ended");
        role = event.to_role_id.clone();
    }
    assert_eq!(session.role_id, role, "the live role is where the history ends");
    suite.stop().await;
}

#[tokio::test]
async fn a_session_redis_lost_is_rebuilt_from_postgres() {
    let suite = Suite::start().await;
    let mut sessions = SessionServiceClient::new(suite.channel().await);
    sessions.create_session(create("lost", "tech-expert")).await.expect("create");
    sessions.process_query(process("lost", FINANCE_ONLY)).await.expect("process");
    let messages = vec![
        ConversationMessage { role: MessageRole::User.into(), content: FINANCE_ONLY.into(), ..Default::default() },
        ConversationMessage {
            role: MessageRole::Assistant.into(),
            content: "Compare the rates first.".into(),
            ..Default::default()
        },
    ];
    let appended = sessions
        .append_messages(AppendMessagesRequest { session_id: "lost".into(), messages, ..Default::default() })
        .await
        .expect("append")
        .into_inner();
    assert_eq!(appended.message_count, 2);
    let before = sessions.get_session(GetSessionRequest { session_id: "lost".into(), include_messages: true }).await;
    let before = before.expect("get").into_inner();

    assert!(delete_redis_keys(&suite.prefix).await >= 1, "the live session was in Redis");

    let after = sessions.get_session(GetSessionRequest { session_id: "lost".into(), include_messages: true }).await;
    let after = after.expect("rebuilt").into_inner();
    let (b, a) = (before.session.expect("session"), after.session.clone().expect("session"));
    assert_eq!((a.role_id.as_str(), a.switch_count, a.turn_count), ("finance-expert", 1, 1));
    assert_eq!((a.role_id, a.switch_count, a.created_at), (b.role_id, b.switch_count, b.created_at));
    let contents = |r: &[ConversationMessage]| {
        r.iter().map(|m| (m.role, m.content.clone(), m.role_id.clone())).collect::<Vec<_>>()
    };
    assert_eq!(contents(&after.recent_messages), contents(&before.recent_messages));
    assert_eq!(after.recent_messages[1].role_id, "finance-expert");

    // And it carries on: the next message continues the numbering.
    let more =
        vec![ConversationMessage { role: MessageRole::User.into(), content: "And fees?".into(), ..Default::default() }];
    let appended = sessions
        .append_messages(AppendMessagesRequest { session_id: "lost".into(), messages: more, ..Default::default() })
        .await;
    assert_eq!(appended.expect("append").into_inner().message_count, 3);
    let history = sessions.get_history(GetHistoryRequest { session_id: "lost".into(), ..Default::default() }).await;
    assert_eq!(history.expect("history").into_inner().events.len(), 1);
    suite.stop().await;
}

/// A caller that lost an append's reply retries it under the same `append_id`: the turn is
/// recorded once, whether the live copy still holds it or was rebuilt from Postgres meanwhile.
#[tokio::test]
async fn a_retried_append_is_recorded_once_also_after_a_rebuild() {
    let suite = Suite::start().await;
    let mut sessions = SessionServiceClient::new(suite.channel().await);
    sessions.create_session(create("retried", "tech-expert")).await.expect("create");
    let turn = |append_id: &str| AppendMessagesRequest {
        session_id: "retried".into(),
        messages: vec![
            ConversationMessage { role: MessageRole::User.into(), content: "Rates?".into(), ..Default::default() },
            ConversationMessage { role: MessageRole::Assistant.into(), content: "Lower.".into(), ..Default::default() },
        ],
        append_id: append_id.into(),
    };
    let mut append = async |request: AppendMessagesRequest| {
        sessions.append_messages(request).await.map(|r| r.into_inner().message_count)
    };
    assert_eq!(append(turn("chat-1")).await.expect("append"), 2);
    assert_eq!(append(turn("chat-1")).await.expect("retry"), 2, "the retry appends nothing");
    assert!(delete_redis_keys(&suite.prefix).await >= 1, "the live session was in Redis");
    assert_eq!(append(turn("chat-1")).await.expect("retry after the rebuild"), 2);
    assert_eq!(append(turn("chat-2")).await.expect("the next turn"), 4);
    let err = append(turn("chat 3\"")).await.expect_err("an id that needs escaping");
    assert_eq!((err.code(), err.message().split(':').next()), (Code::InvalidArgument, Some("append_id")));

    let got = sessions.get_session(GetSessionRequest { session_id: "retried".into(), include_messages: true }).await;
    let got = got.expect("get").into_inner();
    let contents = got.recent_messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>();
    assert_eq!(contents, ["Rates?", "Lower.", "Rates?", "Lower."], "each turn once");
    suite.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgres_cut_queries_keep_serving_and_records_arrive_after() {
    let proxy = TcpProxy::start(database_addr()).await;
    let triggers = common::start_triggers().await;
    let (mut config, _schema, _prefix) = common::sessions_config(&triggers.url(), &database_url_via(proxy.addr()));
    config.record_write_timeout = Duration::from_millis(300);
    config.record_buffer = 3;
    let (server, switcher) = common::start_sessions(&config).await;
    let channel = tonic::transport::Endpoint::from_shared(server.url()).expect("url").connect().await.expect("connect");
    let mut sessions = SessionServiceClient::new(channel);
    sessions.create_session(create("outage", "tech-expert")).await.expect("create");

    proxy.cut();
    let switched =
        sessions.process_query(process("outage", FINANCE_ONLY)).await.expect("serves from Redis").into_inner();
    assert!(switched.switched, "switching works with Postgres down");
    let back = sessions.process_query(process("outage", "How do I fix a segfault in my Rust program?")).await;
    assert!(back.expect("serves").into_inner().switched);
    assert!(switcher.recorder().backlog() >= 2, "the switches wait in the buffer");
    // Over the bound: further records are dropped, counted.
    for query in [FINANCE_ONLY, "How do I fix a segfault in my Rust program?", FINANCE_ONLY] {
        sessions.process_query(process("outage", query)).await.expect("still serving");
    }
    assert!(switcher.recorder().dropped() >= 1, "records past the bound are counted as dropped");
    let history = sessions.get_history(GetHistoryRequest { session_id: "outage".into(), ..Default::default() }).await;
    assert_eq!(history.unwrap_err().code(), Code::Unavailable, "history needs Postgres");

    proxy.restore();
    eventually(Duration::from_secs(15), "buffer drained after Postgres returned", || async {
        switcher.recorder().backlog() == 0
    })
    .await;
    let events = sessions
        .get_history(GetHistoryRequest { session_id: "outage".into(), ..Default::default() })
        .await
        .expect("history")
        .into_inner()
        .events;
    assert!(events.len() >= 2, "the buffered switches were written: {events:?}");
    assert_eq!((events[0].from_role_id.as_str(), events[0].to_role_id.as_str()), ("tech-expert", "finance-expert"));
    server.stop().await;
    triggers.stop().await;
}

#[tokio::test]
async fn bad_input_and_missing_things_get_clear_errors_and_tenants_are_isolated() {
    let suite = Suite::start().await;
    let mut sessions = SessionServiceClient::new(suite.channel().await);
    sessions.create_session(create("mine", "tech-expert")).await.expect("create");

    let err = sessions.create_session(create("mine", "tech-expert")).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    let err = sessions.create_session(create("x", "no-such-role")).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = sessions.create_session(create("bad id!", "tech-expert")).await.unwrap_err();
    assert_eq!((err.code(), err.message().starts_with("session_id:")), (Code::InvalidArgument, true));

    for (query, field) in [("   ", "query:"), (&*"q".repeat(16 * 1024 + 1), "query:")] {
        let err = sessions.process_query(process("mine", query)).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().starts_with(field), "{}", err.message());
    }
    let err = sessions.process_query(process("nobody", "hello")).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let forced = ProcessQueryRequest { force_role_id: Some("ghost".into()), ..process("mine", "hello") };
    assert_eq!(sessions.process_query(forced).await.unwrap_err().code(), Code::NotFound);
    let switch = SwitchContextRequest { session_id: "mine".into(), new_role_id: "ghost".into(), reason: String::new() };
    assert_eq!(sessions.switch_context(switch).await.unwrap_err().code(), Code::NotFound);
    let empty = AppendMessagesRequest { session_id: "mine".into(), ..Default::default() };
    assert_eq!(sessions.append_messages(empty).await.unwrap_err().code(), Code::InvalidArgument);
    let unspecified = AppendMessagesRequest {
        session_id: "mine".into(),
        messages: vec![ConversationMessage { content: "x".into(), ..Default::default() }],
        ..Default::default()
    };
    let err = sessions.append_messages(unspecified).await.unwrap_err();
    assert!(err.message().starts_with("messages[0].role:"), "{}", err.message());

    // Another tenant sees nothing; a malformed tenant is refused.
    let err = sessions
        .get_session(as_tenant("acme", GetSessionRequest { session_id: "mine".into(), include_messages: false }))
        .await;
    assert_eq!(err.unwrap_err().code(), Code::NotFound);
    let err = sessions.process_query(as_tenant("acme", process("mine", "hello"))).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    sessions.create_session(as_tenant("acme", create("mine", "legal-expert"))).await.expect("same id, other tenant");
    let theirs = sessions
        .get_session(as_tenant("acme", GetSessionRequest { session_id: "mine".into(), include_messages: false }))
        .await;
    assert_eq!(theirs.expect("get").into_inner().session.expect("s").role_id, "legal-expert");
    let err = sessions
        .get_session(as_tenant("bad tenant!", GetSessionRequest { session_id: "mine".into(), include_messages: false }))
        .await;
    assert_eq!(err.unwrap_err().code(), Code::InvalidArgument);

    // Manual switch, forced role, then closing.
    let manual =
        SwitchContextRequest { session_id: "mine".into(), new_role_id: "legal-expert".into(), reason: String::new() };
    let manual = sessions.switch_context(manual).await.expect("switch").into_inner();
    assert!(manual.switched && manual.transition_context.contains("Legal Expert"));
    assert!(!manual.transition_context.contains("The user now asks"), "a manual switch quotes no query");
    let forced = ProcessQueryRequest { force_role_id: Some("creative-expert".into()), ..process("mine", "hello") };
    let forced = sessions.process_query(forced).await.expect("forced").into_inner();
    assert_eq!((forced.role_id.as_str(), forced.reason()), ("creative-expert", SwitchReason::Forced));
    let events =
        sessions.get_history(GetHistoryRequest { session_id: "mine".into(), page_size: 1, ..Default::default() }).await;
    let page = events.expect("history").into_inner();
    assert_eq!((page.events.len(), page.events[0].reason()), (1, SwitchReason::Manual));
    assert_eq!(page.events[0].reason_detail, "Manual switch by user");
    let rest = sessions
        .get_history(GetHistoryRequest { session_id: "mine".into(), page_size: 1, page_token: page.next_page_token })
        .await
        .expect("page 2")
        .into_inner();
    assert_eq!(rest.events[0].reason(), SwitchReason::Forced);

    sessions.close_session(CloseSessionRequest { session_id: "mine".into() }).await.expect("close");
    let err = sessions.process_query(process("mine", "hello")).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let err = sessions
        .append_messages(AppendMessagesRequest {
            session_id: "mine".into(),
            messages: vec![ConversationMessage {
                role: MessageRole::User.into(),
                content: "x".into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    suite.stop().await;
}

fn role(id: &str, keyword: &str) -> Role {
    Role {
        id: id.into(),
        name: "Space Expert".into(),
        description: "Rockets".into(),
        domains: vec![],
        system_prompt: "You are a rocket scientist.".into(),
        custom_triggers: vec![Trigger { pattern: keyword.into(), kind: TriggerKind::Keyword.into(), priority: 9 }],
        ..Default::default()
    }
}

#[tokio::test]
async fn roles_are_seeded_managed_and_always_registered_with_triggers() {
    let suite = Suite::start().await;
    let channel = suite.channel().await;
    let mut roles = RoleServiceClient::new(channel.clone());
    let mut sessions = SessionServiceClient::new(channel);
    let mut triggers = TriggerServiceClient::new(
        tonic::transport::Endpoint::from_shared(suite.triggers.url()).expect("url").connect().await.expect("connect"),
    );

    let listed = roles.list_roles(ListRolesRequest::default()).await.expect("list").into_inner().roles;
    let ids: Vec<_> = listed.iter().map(|r| r.id.as_str()).collect();
    for expected in [
        "creative-expert",
        "education-expert",
        "finance-expert",
        "general-assistant",
        "healthcare-expert",
        "legal-expert",
        "marketing-expert",
        "tech-expert",
    ] {
        assert!(ids.contains(&expected), "{expected} seeded: {ids:?}");
    }
    let finance = roles.list_roles(ListRolesRequest { domain: "finance".into(), ..Default::default() }).await;
    assert_eq!(
        finance.expect("list").into_inner().roles.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["finance-expert"]
    );

    let created =
        roles.create_role(CreateRoleRequest { role: Some(role("space-expert", "rocketry")) }).await.expect("create");
    assert_eq!(created.into_inner().role.expect("role").custom_triggers.len(), 1);
    let detected =
        triggers.detect_triggers(DetectTriggersRequest { query: "a rocketry question".into() }).await.expect("detect");
    // A tenant's role is registered under its registry id (its id and a digest of its tenant).
    let registered = detected.into_inner().matches[0].role_id.clone();
    assert!(registered.starts_with("space-expert.t"), "registered with the triggers service: {registered}");
    assert_eq!(
        roles.create_role(CreateRoleRequest { role: Some(role("space-expert", "x")) }).await.unwrap_err().code(),
        Code::AlreadyExists
    );

    // A pattern the triggers service rejects fails the write and names the field.
    let mut bad = role("bad-regex", "x");
    bad.custom_triggers[0] = Trigger { pattern: "(".into(), kind: TriggerKind::Regex.into(), priority: 3 };
    let err = roles.create_role(CreateRoleRequest { role: Some(bad) }).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("role.custom_triggers[0].pattern:"), "{}", err.message());
    assert_eq!(
        roles.get_role(GetRoleRequest { role_id: "bad-regex".into() }).await.unwrap_err().code(),
        Code::NotFound
    );

    // Update only the prompt; the triggers stay.
    let mut changed = role("space-expert", "ignored");
    changed.system_prompt = "You are a rocket engineer.".into();
    let mask = prost_types::FieldMask { paths: vec!["system_prompt".into()] };
    let updated =
        roles.update_role(UpdateRoleRequest { role: Some(changed), update_mask: Some(mask) }).await.expect("update");
    let updated = updated.into_inner().role.expect("role");
    assert_eq!(
        (updated.system_prompt.as_str(), updated.custom_triggers[0].pattern.as_str()),
        ("You are a rocket engineer.", "rocketry")
    );
    let bad_mask = prost_types::FieldMask { paths: vec!["id".into()] };
    let err = roles
        .update_role(UpdateRoleRequest { role: Some(role("space-expert", "x")), update_mask: Some(bad_mask) })
        .await;
    assert!(err.unwrap_err().message().starts_with("update_mask.paths[0]:"));

    // A query with the custom trigger switches a session to the new role.
    sessions.create_session(create("space", "general-assistant")).await.expect("create");
    let turn = sessions.process_query(process("space", "Tell me about rocketry")).await.expect("process").into_inner();
    assert_eq!((turn.role_id.as_str(), turn.switched), ("space-expert", true));

    roles.delete_role(DeleteRoleRequest { role_id: "space-expert".into() }).await.expect("delete");
    assert_eq!(
        roles.delete_role(DeleteRoleRequest { role_id: "space-expert".into() }).await.unwrap_err().code(),
        Code::NotFound
    );
    let detected = triggers.detect_triggers(DetectTriggersRequest { query: "rocketry".into() }).await.expect("detect");
    assert!(detected.into_inner().matches.is_empty(), "unregistered with the role");
    // The session on the deleted role can still move on.
    let moved = sessions.process_query(process("space", FINANCE_ONLY)).await.expect("process").into_inner();
    assert_eq!(moved.role_id, "finance-expert");
    suite.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_writes_fail_while_triggers_is_down_and_forgotten_roles_are_registered_again() {
    let triggers = common::start_triggers().await;
    let triggers_addr = triggers.addr;
    let (config, _schema, _prefix) = common::sessions_config(&triggers.url(), &database_url());
    let (server, _switcher) = common::start_sessions(&config).await;
    let channel = tonic::transport::Endpoint::from_shared(server.url()).expect("url").connect().await.expect("connect");
    let mut roles = RoleServiceClient::new(channel.clone());
    let mut sessions = SessionServiceClient::new(channel);
    sessions.create_session(create("s1", "tech-expert")).await.expect("create");

    triggers.stop().await;
    let err = roles.create_role(CreateRoleRequest { role: Some(role("orphan", "orphanage")) }).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "the write fails when triggers cannot be registered");
    assert_eq!(roles.get_role(GetRoleRequest { role_id: "orphan".into() }).await.unwrap_err().code(), Code::NotFound);
    // Queries keep working, keeping the role, and say why.
    let kept = sessions.process_query(process("s1", FINANCE_ONLY)).await.expect("degraded").into_inner();
    assert_eq!((kept.role_id.as_str(), kept.reason()), ("tech-expert", SwitchReason::DetectionUnavailable));

    // Triggers comes back empty (in memory): the current role is registered again on demand.
    let triggers = common::start_triggers_on(triggers_addr).await;
    let turn = sessions.process_query(process("s1", FINANCE_ONLY)).await.expect("process").into_inner();
    assert_eq!(turn.reason(), SwitchReason::Triggered, "{}", turn.reason_detail);
    server.stop().await;
    triggers.stop().await;
}

#[tokio::test]
async fn process_query_returns_the_recent_messages_when_asked() {
    let suite = Suite::start().await;
    let mut sessions = SessionServiceClient::new(suite.channel().await);
    sessions.create_session(create("chatty", "tech-expert")).await.expect("create");
    let messages = vec![
        ConversationMessage { role: MessageRole::User.into(), content: "Is Rust fast?".into(), ..Default::default() },
        ConversationMessage { role: MessageRole::Assistant.into(), content: "Yes.".into(), ..Default::default() },
    ];
    sessions
        .append_messages(AppendMessagesRequest { session_id: "chatty".into(), messages, ..Default::default() })
        .await
        .expect("append");

    // Twice each way: the second call of a session that keeps its role takes the fast path
    // that skips reading the session, unless the messages are asked for.
    for _ in 0..2 {
        let with =
            ProcessQueryRequest { include_messages: true, ..process("chatty", "How do I profile a Rust binary?") };
        let with = sessions.process_query(with).await.expect("process").into_inner();
        let texts: Vec<&str> = with.recent_messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(texts, ["Is Rust fast?", "Yes."]);
        assert_eq!(with.recent_messages[0].role(), MessageRole::User);
        let without = sessions.process_query(process("chatty", "And a Rust benchmark?")).await.expect("process");
        assert!(without.into_inner().recent_messages.is_empty());
    }
    suite.stop().await;
}

/// A request as the edge sends it for an authenticated caller (or, without a user, as an
/// internal caller sends it).
fn as_caller<T>(tenant: &str, user: Option<&str>, admin: bool, message: T) -> Request<T> {
    let mut request = as_tenant(tenant, message);
    if let Some(user) = user {
        request.metadata_mut().insert("x-user-id", user.parse().expect("ascii"));
    }
    if admin {
        request.metadata_mut().insert("x-switchyard-admin", "true".parse().expect("ascii"));
    }
    request
}

#[tokio::test]
async fn a_session_is_its_users_even_rebuilt_from_postgres_and_internal_callers_see_the_tenants() {
    let suite = Suite::start().await;
    let mut sessions = SessionServiceClient::new(suite.channel().await);
    fn ann<T>(message: T) -> Request<T> {
        as_caller("acme", Some("ann"), false, message)
    }
    fn bob<T>(message: T) -> Request<T> {
        as_caller("acme", Some("bob"), false, message)
    }
    fn admin<T>(message: T) -> Request<T> {
        as_caller("acme", Some("root"), true, message)
    }
    fn internal<T>(message: T) -> Request<T> {
        as_caller("acme", None, false, message)
    }
    let get = || GetSessionRequest { session_id: "owned".into(), include_messages: false };

    let created = sessions.create_session(ann(create("owned", "tech-expert"))).await.expect("create").into_inner();
    assert_eq!(created.session.expect("session").user_id, "ann");
    // Ann's turns leave this replica a hint for the fast path; it must not let bob in.
    for _ in 0..2 {
        sessions.process_query(ann(process("owned", "How do I profile a Rust binary?"))).await.expect("ann's turn");
    }
    for _ in 0..2 {
        let err = sessions.process_query(bob(process("owned", "How do I profile a Rust binary?"))).await.unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{err:?}");
    }
    assert_eq!(sessions.get_session(bob(get())).await.unwrap_err().code(), Code::NotFound);
    let history = || GetHistoryRequest { session_id: "owned".into(), ..Default::default() };
    assert_eq!(sessions.get_history(bob(history())).await.unwrap_err().code(), Code::NotFound);
    let switch = || SwitchContextRequest {
        session_id: "owned".into(),
        new_role_id: "finance-expert".into(),
        ..Default::default()
    };
    assert_eq!(sessions.switch_context(bob(switch())).await.unwrap_err().code(), Code::NotFound);
    let close = || CloseSessionRequest { session_id: "owned".into() };
    assert_eq!(sessions.close_session(bob(close())).await.unwrap_err().code(), Code::NotFound);
    let append = || AppendMessagesRequest {
        session_id: "owned".into(),
        messages: vec![ConversationMessage {
            role: MessageRole::User.into(),
            content: "hi".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    assert_eq!(sessions.append_messages(bob(append())).await.unwrap_err().code(), Code::NotFound);

    // The tenant's administrator reads it, but does not use it as ann.
    let read = sessions.get_session(admin(get())).await.expect("an administrator reads it").into_inner();
    assert_eq!(read.session.expect("session").turn_count, 2);
    sessions.get_history(admin(history())).await.expect("and its history");
    assert_eq!(sessions.switch_context(admin(switch())).await.unwrap_err().code(), Code::NotFound);
    // Another tenant's administrator finds nothing.
    let other_admin = as_caller("globex", Some("root"), true, get());
    assert_eq!(sessions.get_session(other_admin).await.unwrap_err().code(), Code::NotFound);

    // Rebuilt from Postgres after Redis lost it, the session is still ann's.
    assert!(delete_redis_keys(&suite.prefix).await >= 1, "the live session was in Redis");
    assert_eq!(sessions.get_session(bob(get())).await.unwrap_err().code(), Code::NotFound);
    let rebuilt = sessions.get_session(ann(get())).await.expect("ann's after the rebuild").into_inner();
    assert_eq!(rebuilt.session.expect("session").user_id, "ann");

    // An internal caller without a user keeps the tenant-wide view, and its own sessions are
    // the whole tenant's.
    sessions.get_session(internal(get())).await.expect("tenant-wide read");
    sessions.append_messages(internal(append())).await.expect("tenant-wide write");
    sessions.create_session(internal(create("shared", "tech-expert"))).await.expect("create");
    let shared = GetSessionRequest { session_id: "shared".into(), include_messages: false };
    let read = sessions.get_session(bob(shared)).await.expect("any user of the tenant").into_inner();
    assert_eq!(read.session.expect("session").user_id, "");
    suite.stop().await;
}

#[tokio::test]
async fn a_tenants_role_is_invisible_to_other_tenants_and_never_chosen_for_their_sessions() {
    let suite = Suite::start().await;
    let channel = suite.channel().await;
    let mut roles = RoleServiceClient::new(channel.clone());
    let mut sessions = SessionServiceClient::new(channel);
    let mut space = role("space-expert", "rocketry");
    space.system_prompt = "ACME-SECRET launch schedule.".into();
    roles.create_role(as_tenant("acme", CreateRoleRequest { role: Some(space) })).await.expect("acme creates");

    let get = || GetRoleRequest { role_id: "space-expert".into() };
    let own = roles.get_role(as_tenant("acme", get())).await.expect("acme reads its role").into_inner();
    assert!(!own.role.expect("role").built_in);
    let err = roles.get_role(as_tenant("globex", get())).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(!err.message().contains("ACME-SECRET"));
    let listed = roles.list_roles(as_tenant("globex", ListRolesRequest::default())).await.expect("list").into_inner();
    assert!(listed.roles.iter().all(|r| r.id != "space-expert" && r.built_in), "globex sees the built-ins alone");
    // Globex may make a role of the same id: its own, apart from acme's.
    let mut globex_space = role("space-expert", "telescope");
    globex_space.system_prompt = "Globex stargazing.".into();
    roles.create_role(as_tenant("globex", CreateRoleRequest { role: Some(globex_space) })).await.expect("globex");

    for (tenant, keyword, switched_to) in
        [("acme", "rocketry", "space-expert"), ("globex", "rocketry", "general-assistant")]
    {
        let id = format!("{tenant}-space");
        sessions.create_session(as_tenant(tenant, create(&id, "general-assistant"))).await.expect("create");
        let turn = sessions
            .process_query(as_tenant(tenant, process(&id, &format!("Tell me about {keyword}"))))
            .await
            .expect("process")
            .into_inner();
        assert_eq!(turn.role_id, switched_to, "{tenant}: {}", turn.reason_detail);
        if tenant == "globex" {
            assert!(turn.scores.iter().all(|m| m.role_id != "space-expert"), "{:?}", turn.scores);
            assert!(!turn.system_prompt.contains("ACME-SECRET"));
        } else {
            assert!(turn.system_prompt.contains("ACME-SECRET"));
        }
    }
    // Globex's own role of that id answers to its own trigger, with its own prompt.
    let turn = sessions
        .process_query(as_tenant("globex", process("globex-space", "Which telescope should I buy?")))
        .await
        .expect("process")
        .into_inner();
    assert_eq!(turn.role_id, "space-expert");
    assert!(turn.system_prompt.contains("Globex stargazing.") && !turn.system_prompt.contains("ACME-SECRET"));
    suite.stop().await;
}

#[tokio::test]
async fn a_nul_is_refused_in_catalog_text_and_ids_and_recorded_safely_in_queries() {
    let suite = Suite::start().await;
    let channel = suite.channel().await;
    let mut roles = RoleServiceClient::new(channel.clone());
    let mut sessions = SessionServiceClient::new(channel);

    let mut named = role("space-expert", "rocketry");
    named.name = "Space\0 Expert".into();
    let err = roles.create_role(CreateRoleRequest { role: Some(named) }).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().starts_with("role.name:"), "{}", err.message());
    let err = sessions.create_session(create("a\0b", "general-assistant")).await.unwrap_err();
    assert!(err.code() == Code::InvalidArgument && err.message().starts_with("session_id"), "{err:?}");
    let mut tagged = create("tagged", "general-assistant");
    tagged.metadata.insert("channel".into(), "web\0".into());
    let err = sessions.create_session(tagged).await.unwrap_err();
    assert!(err.code() == Code::InvalidArgument && err.message().starts_with("metadata[channel]"), "{err:?}");

    // A query is conversation content: matched and switched on as sent, recorded with U+FFFD.
    sessions.create_session(create("nul", "general-assistant")).await.expect("create");
    let query = format!("{FINANCE_ONLY} \0");
    let switched = sessions.process_query(process("nul", &query)).await.expect("process").into_inner();
    assert_eq!((switched.role_id.as_str(), switched.switched), ("finance-expert", true));
    sessions.create_session(create("after", "general-assistant")).await.expect("create");
    sessions.process_query(process("after", FINANCE_ONLY)).await.expect("process");
    for (id, excerpt) in [("nul", format!("{FINANCE_ONLY} \u{FFFD}")), ("after", FINANCE_ONLY.to_owned())] {
        let history = sessions.get_history(GetHistoryRequest { session_id: id.into(), ..Default::default() }).await;
        let events = history.expect("history").into_inner().events;
        assert_eq!(events.iter().map(|e| e.query_excerpt.as_str()).collect::<Vec<_>>(), [excerpt.as_str()], "{id}");
    }
    suite.stop().await;
}
