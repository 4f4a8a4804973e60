//! Spend budgets over real Postgres and Redis: two router replicas spend one tenant's daily
//! budget (each turn costs exactly $1 under the price table), the soft threshold warns in the
//! response metadata, the hard limit refuses the turn that would start past it with
//! RESOURCE_EXHAUSTED naming the budget, a loss of the Redis counters (their keys deleted, as
//! FLUSHDB would) loses no spend because the counter is rebuilt from the recorded costs, and
//! another tenant is unaffected. Bad budgets are refused naming the field; only the operator
//! sets them.

mod common;

use std::time::Duration;

use common::{Options, Suite, as_tenant, chat, stream_request};
use switchyard_proto::router::v1::{
    Budget, BudgetAction, BudgetPeriod, ChatStreamResponse, DeleteBudgetRequest, ListBudgetsRequest, RouteType,
    SetBudgetRequest, chat_stream_response::Event, router_service_client::RouterServiceClient,
};
use switchyard_router::RouterConfig;
use switchyard_testkit::{
    database_url, delete_redis_keys, eventually,
    llm::{Reply, ScriptedLlm},
};
use tonic::{Code, Request, transport::Channel};
use tonic_types::StatusExt;

/// $1000 per million tokens: a turn of 1000 prompt tokens costs $1.
const PRICES: &str = "[\"openai/gpt-4o-mini\"]\ninput_per_mtok = 1000\ncached_input_per_mtok = 1000\n\
                      output_per_mtok = 1000\n";

const WARNING: &str = "x-switchyard-budget-warning";

fn operator<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert("x-switchyard-admin", "true".parse().expect("ascii"));
    request
}

fn budget(tenant: &str, limit_usd: f64, soft_usd: f64, period: BudgetPeriod) -> SetBudgetRequest {
    SetBudgetRequest {
        budget: Some(Budget {
            tenant_id: tenant.to_owned(),
            limit_usd,
            soft_usd,
            period: period as i32,
            ..Budget::default()
        }),
    }
}

async fn suite() -> Suite {
    let dir = std::env::temp_dir().join(format!("router-budget-prices-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let prices = dir.join("prices.toml");
    std::fs::write(&prices, PRICES).expect("price file");
    // Every call answers directly: one model call of 1000 prompt tokens per turn.
    let llm = ScriptedLlm::start(|_| Reply::text("Fine.").usage(1000, 0)).await;
    let configure = Box::new(move |config: &mut RouterConfig| config.model_prices = Some(prices));
    Suite::with(llm, Options { budgets: true, configure, ..Options::default() }).await
}

async fn spent(client: &mut RouterServiceClient<Channel>, tenant: &str) -> f64 {
    let listed = client
        .list_budgets(operator(ListBudgetsRequest { tenant_id: tenant.to_owned() }))
        .await
        .expect("list budgets")
        .into_inner();
    listed.budgets.iter().find(|b| b.tenant_id == tenant && b.key_id.is_empty()).expect("the budget").spent_usd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_spend_one_budget_and_a_lost_counter_is_rebuilt() {
    let suite = suite().await;
    let second = suite.second_replica().await;
    let mut first = suite.client().await;
    let mut other = RouterServiceClient::new(
        Channel::from_shared(second.url()).expect("url").connect().await.expect("second replica"),
    );

    let set = first
        .set_budget(operator(budget("acme", 3.0, 2.0, BudgetPeriod::Day)))
        .await
        .expect("set budget")
        .into_inner()
        .budget
        .expect("budget");
    assert_eq!((set.limit_usd, set.soft_usd, set.spent_usd), (3.0, 2.0, 0.0));
    assert_eq!(set.period, BudgetPeriod::Day as i32);
    first.set_budget(operator(budget("globex", 10.0, 0.0, BudgetPeriod::Month))).await.expect("set globex's");

    // $0 and $1 spent: under the soft threshold, on either replica.
    let one = first.chat(as_tenant("acme", chat("first"))).await.expect("turn 1");
    assert!(one.metadata().get(WARNING).is_none());
    let two = other.chat(as_tenant("acme", chat("second"))).await.expect("turn 2");
    assert!(two.metadata().get(WARNING).is_none());
    // $2 spent: at the soft threshold, the turn goes on with a warning.
    let three = first.chat(as_tenant("acme", chat("third"))).await.expect("turn 3");
    let warning = three.metadata().get(WARNING).expect("a warning").to_str().expect("ascii").to_owned();
    assert!(warning.contains("budget acme of $3.00 per day") && warning.contains("$2.00 spent"), "{warning}");
    assert_eq!(spent(&mut other, "acme").await, 3.0);

    // $3 spent: refused on the other replica, naming the budget.
    let refused = other.chat(as_tenant("acme", chat("fourth"))).await.expect_err("over the budget");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(refused.message(), "budget acme of $3.00 per day is spent ($3.00)");

    // Another tenant is unaffected and counted apart.
    other.chat(as_tenant("globex", chat("hello"))).await.expect("globex's turn");
    assert_eq!(spent(&mut first, "globex").await, 1.0);

    // The counters lost once the three turns are recorded: the next check rebuilds acme's
    // from Postgres and still refuses.
    let pool =
        switchyard_kit::postgres::connect_in_schema(&database_url(), suite.schema.name(), 1).await.expect("postgres");
    eventually(Duration::from_secs(10), "acme's three turns recorded", || {
        let pool = pool.clone();
        async move {
            let (turns, cost): (i64, i64) = sqlx::query_as(
                "SELECT count(*), coalesce(sum(cost_nanousd), 0)::bigint FROM routing_decisions WHERE tenant_id = 'acme'",
            )
            .fetch_one(&pool)
            .await
            .map_err(|err| err.to_string())?;
            if (turns, cost) == (3, 3_000_000_000) { Ok(()) } else { Err(format!("{turns} turns, {cost} nano-dollars")) }
        }
    })
    .await;
    let prefix = suite.budget_prefix.as_ref().expect("budget counters in redis");
    assert!(delete_redis_keys(prefix.as_str()).await >= 2, "acme's and globex's counters were in redis");
    let refused = first.chat(as_tenant("acme", chat("after the flush"))).await.expect_err("still over the budget");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(refused.message(), "budget acme of $3.00 per day is spent ($3.00)");
    assert_eq!(spent(&mut other, "acme").await, 3.0);
    assert_eq!(spent(&mut other, "globex").await, 1.0);

    // Raising the limit lets the tenant go on.
    first.set_budget(operator(budget("acme", 5.0, 0.0, BudgetPeriod::Day))).await.expect("raise acme's");
    first.chat(as_tenant("acme", chat("fifth"))).await.expect("under the raised limit");
    assert_eq!(spent(&mut other, "acme").await, 4.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_sync_interval_a_replica_checks_against_its_own_view_and_counts_in_the_background() {
    let dir = std::env::temp_dir().join(format!("router-budget-prices-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let prices = dir.join("prices.toml");
    std::fs::write(&prices, PRICES).expect("price file");
    let llm = ScriptedLlm::start(|_| Reply::text("Fine.").usage(1000, 0)).await;
    // An interval longer than the test: the replica never reads a counter it has seen again.
    let configure = Box::new(move |config: &mut RouterConfig| {
        config.model_prices = Some(prices);
        config.budget_sync_interval = Duration::from_secs(3600);
    });
    let suite = Suite::with(llm, Options { budgets: true, configure, ..Options::default() }).await;
    let mut first = suite.client().await;
    first.set_budget(operator(budget("acme", 3.0, 2.0, BudgetPeriod::Day))).await.expect("set budget");

    // The replica's own turns are in its view at once: the warning and the refusal come at the
    // same turns as when every check reads the shared counter.
    for turn in ["first", "second"] {
        let answered = first.chat(as_tenant("acme", chat(turn))).await.expect("under the soft threshold");
        assert!(answered.metadata().get(WARNING).is_none(), "{turn}");
    }
    let third = first.chat(as_tenant("acme", chat("third"))).await.expect("past the soft threshold");
    assert!(third.metadata().get(WARNING).is_some());
    let refused = first.chat(as_tenant("acme", chat("fourth"))).await.expect_err("over the budget");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(refused.message(), "budget acme of $3.00 per day is spent ($3.00)");

    // The spend reached the shared counter in the background.
    let mut reader = suite.client().await;
    eventually(Duration::from_secs(10), "acme's three turns counted in redis", || {
        let mut reader = reader.clone();
        async move {
            let spent = spent(&mut reader, "acme").await;
            if spent == 3.0 { Ok(()) } else { Err(format!("${spent}")) }
        }
    })
    .await;
    // A replica that has not seen the counter reads the shared total: it refuses too.
    let second = suite.second_replica().await;
    let mut other = RouterServiceClient::new(
        Channel::from_shared(second.url()).expect("url").connect().await.expect("second replica"),
    );
    let refused = other.chat(as_tenant("acme", chat("fifth"))).await.expect_err("over the budget there too");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(spent(&mut reader, "acme").await, 3.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_budgets_name_their_field_and_only_the_operator_sets_them() {
    let suite = suite().await;
    let mut client = suite.client().await;
    for (request, field) in [
        (budget("acme", -1.0, 0.0, BudgetPeriod::Day), "limit_usd"),
        (budget("acme", 0.0, 0.0, BudgetPeriod::Day), "limit_usd"),
        (budget("acme", 5.0, 6.0, BudgetPeriod::Day), "soft_usd"),
        (budget("acme", 5.0, -1.0, BudgetPeriod::Month), "soft_usd"),
        (budget("acme", 5.0, 1.0, BudgetPeriod::Unspecified), "period"),
        (budget("not a tenant", 5.0, 1.0, BudgetPeriod::Day), "tenant_id"),
        (SetBudgetRequest { budget: None }, "budget"),
    ] {
        let err = client.set_budget(operator(request)).await.expect_err("refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err:?}");
        assert!(err.message().starts_with(&format!("{field}:")), "{field}: {}", err.message());
    }
    let mut unknown_period = budget("acme", 5.0, 1.0, BudgetPeriod::Day);
    unknown_period.budget.as_mut().expect("budget").period = 7;
    let err = client.set_budget(operator(unknown_period)).await.expect_err("unknown period");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("period:"), "{}", err.message());

    // A tenant's administrator may read its own budgets, not set them or read another's.
    let mut acme_admin = as_tenant("acme", budget("acme", 5.0, 0.0, BudgetPeriod::Day));
    acme_admin.metadata_mut().insert("x-switchyard-admin", "true".parse().expect("ascii"));
    assert_eq!(client.set_budget(acme_admin).await.expect_err("not the operator").code(), Code::PermissionDenied);
    client.set_budget(operator(budget("acme", 5.0, 0.0, BudgetPeriod::Day))).await.expect("the operator sets it");
    let mut own = as_tenant("acme", ListBudgetsRequest::default());
    own.metadata_mut().insert("x-switchyard-admin", "true".parse().expect("ascii"));
    let listed = client.list_budgets(own).await.expect("its own budgets").into_inner().budgets;
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].tenant_id.as_str(), listed[0].limit_usd), ("acme", 5.0));
    let mut others = as_tenant("acme", ListBudgetsRequest { tenant_id: "globex".to_owned() });
    others.metadata_mut().insert("x-switchyard-admin", "true".parse().expect("ascii"));
    assert_eq!(client.list_budgets(others).await.expect_err("another tenant's").code(), Code::PermissionDenied);
    let user = as_tenant("acme", ListBudgetsRequest::default());
    assert_eq!(client.list_budgets(user).await.expect_err("not an administrator").code(), Code::PermissionDenied);
}

fn with_key<T>(tenant: &str, key: &str, message: T) -> Request<T> {
    let mut request = as_tenant(tenant, message);
    request.metadata_mut().insert("x-switchyard-key-id", key.parse().expect("ascii"));
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_keys_budget_holds_its_turns_only_and_is_rebuilt_from_its_recorded_turns() {
    let suite = suite().await;
    let mut client = suite.client().await;
    let mut request = budget("initech", 2.0, 0.0, BudgetPeriod::Day);
    request.budget.as_mut().expect("budget").key_id = "k1".to_owned();
    client.set_budget(operator(request)).await.expect("set k1's budget");

    client.chat(with_key("initech", "k1", chat("one"))).await.expect("k1's first turn");
    client.chat(with_key("initech", "k1", chat("two"))).await.expect("k1's second turn");
    let refused = client.chat(with_key("initech", "k1", chat("three"))).await.expect_err("k1 is spent");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(refused.message(), "budget initech/k1 of $2.00 per day is spent ($2.00)");
    // Another key and the tenant's turns without a key go on.
    client.chat(with_key("initech", "k2", chat("other key"))).await.expect("k2's turn");
    client.chat(as_tenant("initech", chat("no key"))).await.expect("a turn without a key");

    let pool =
        switchyard_kit::postgres::connect_in_schema(&database_url(), suite.schema.name(), 1).await.expect("postgres");
    eventually(Duration::from_secs(10), "k1's two turns recorded with their key", || {
        let pool = pool.clone();
        async move {
            let turns: i64 = sqlx::query_scalar("SELECT count(*) FROM routing_decisions WHERE key_id = 'k1'")
                .fetch_one(&pool)
                .await
                .map_err(|err| err.to_string())?;
            if turns == 2 { Ok(()) } else { Err(format!("{turns} turns")) }
        }
    })
    .await;
    let prefix = suite.budget_prefix.as_ref().expect("budget counters in redis");
    assert!(delete_redis_keys(prefix.as_str()).await >= 1, "k1's counter was in redis");
    let refused = client.chat(with_key("initech", "k1", chat("after the flush"))).await.expect_err("k1 still spent");
    assert_eq!(refused.message(), "budget initech/k1 of $2.00 per day is spent ($2.00)");
    client.chat(with_key("initech", "k2", chat("k2 again"))).await.expect("k2 unaffected");

    let bad = client.chat(with_key("initech", "not/a key", chat("bad"))).await.expect_err("a bad key id");
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().starts_with("x-switchyard-key-id:"), "{}", bad.message());
}

/// Reads a stream to its end; true when it ended with the turn completed.
async fn completes(mut stream: tonic::Streaming<ChatStreamResponse>) -> bool {
    let mut completed = false;
    while let Some(message) = stream.message().await.expect("a stream event") {
        completed = matches!(message.event, Some(Event::Completed(_)));
    }
    completed
}

/// Seconds from now to the next UTC midnight, when a daily budget starts again.
fn to_midnight() -> Duration {
    let now = chrono::Utc::now();
    let midnight = (now.date_naive() + chrono::Days::new(1)).and_hms_opt(0, 0, 0).expect("midnight").and_utc();
    (midnight - now).to_std().expect("midnight is ahead")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_turn_is_warned_in_its_initial_metadata_and_refused_before_it_starts() {
    let suite = suite().await;
    let mut client = suite.client().await;
    client.set_budget(operator(budget("umbrella", 2.0, 1.0, BudgetPeriod::Day))).await.expect("set the budget");

    let first = client.chat_stream(as_tenant("umbrella", stream_request("one"))).await.expect("stream 1");
    assert!(first.metadata().get(WARNING).is_none(), "nothing spent yet");
    assert!(completes(first.into_inner()).await, "the first turn completes");
    // $1 spent: the warning is in the initial metadata, there before any event is read.
    let second = client.chat_stream(as_tenant("umbrella", stream_request("two"))).await.expect("stream 2");
    let warning = second.metadata().get(WARNING).expect("a warning").to_str().expect("ascii").to_owned();
    assert!(warning.contains("budget umbrella of $2.00 per day") && warning.contains("$1.00 spent"), "{warning}");
    assert!(completes(second.into_inner()).await, "the warned turn goes on");

    // $2 spent: the call itself is refused, with the time to the period's end to retry after.
    let refused = client.chat_stream(as_tenant("umbrella", stream_request("three"))).await.expect_err("spent");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(refused.message(), "budget umbrella of $2.00 per day is spent ($2.00)");
    let retry = refused.get_details_retry_info().and_then(|info| info.retry_delay).expect("a retry delay");
    let ahead = to_midnight();
    assert!(retry >= ahead && retry <= ahead + Duration::from_secs(30), "retry in {retry:?}, midnight in {ahead:?}");
    let unary = client.chat(as_tenant("umbrella", chat("four"))).await.expect_err("spent");
    assert_eq!(unary.code(), Code::ResourceExhausted);
    assert!(unary.get_details_retry_info().and_then(|info| info.retry_delay).is_some(), "{unary:?}");
    assert_eq!(spent(&mut client, "umbrella").await, 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degrading_budget_answers_on_the_direct_route_with_its_cheaper_model_and_a_refusing_one_429s() {
    let suite = suite().await;
    let mut client = suite.client().await;
    let mut degrading = budget("hooli", 1.0, 0.0, BudgetPeriod::Day);
    let sent = degrading.budget.as_mut().expect("budget");
    sent.on_limit = BudgetAction::Degrade as i32;
    sent.degrade_model = "openai/gpt-4.1-nano".to_owned();
    let set = client.set_budget(operator(degrading)).await.expect("set hooli's").into_inner().budget.expect("budget");
    assert_eq!((set.on_limit, set.degrade_model.as_str()), (BudgetAction::Degrade as i32, "openai/gpt-4.1-nano"));
    client.set_budget(operator(budget("pied-piper", 1.0, 0.0, BudgetPeriod::Day))).await.expect("set pied-piper's");

    // $0 spent: the turn is routed (the routing call, with its tools) by the default model.
    let first = client.chat(as_tenant("hooli", chat("first"))).await.expect("turn 1").into_inner();
    assert_eq!(first.model, "openai/gpt-4o-mini");
    assert!(first.metadata.expect("metadata").degraded.is_empty());
    let routed = suite.llm.requests().last().expect("a model call").body.clone();
    assert!(routed["tools"].as_array().is_some_and(|tools| !tools.is_empty()), "the routing call: {routed}");

    // $1 spent: the turn goes on, on the direct route, answered by the cheaper model.
    let second = client.chat(as_tenant("hooli", chat("second"))).await.expect("a degraded turn");
    let warning = second.metadata().get(WARNING).expect("a warning").to_str().expect("ascii").to_owned();
    let second = second.into_inner();
    assert_eq!(second.model, "openai/gpt-4.1-nano");
    let metadata = second.metadata.expect("metadata");
    assert_eq!(metadata.route_type, RouteType::Direct as i32);
    let reason = "budget hooli of $1.00 per day is spent ($1.00): answered on the direct route by openai/gpt-4.1-nano";
    assert_eq!(metadata.degraded, [reason]);
    assert_eq!(warning, reason);
    let answered = suite.llm.requests().last().expect("a model call").body.clone();
    assert_eq!(answered["model"], "gpt-4.1-nano", "{answered}");
    assert!(answered.get("tools").is_none_or(|tools| tools.as_array().is_some_and(Vec::is_empty)), "{answered}");
    // A streamed turn degrades too.
    let stream = client.chat_stream(as_tenant("hooli", stream_request("third"))).await.expect("a degraded stream");
    assert!(stream.metadata().get(WARNING).is_some(), "the stream is warned");
    assert!(completes(stream.into_inner()).await);
    assert_eq!(suite.llm.requests().last().expect("a model call").body["model"], "gpt-4.1-nano");

    // A refusing budget still refuses.
    client.chat(as_tenant("pied-piper", chat("first"))).await.expect("pied-piper's turn 1");
    let refused = client.chat(as_tenant("pied-piper", chat("second"))).await.expect_err("pied-piper is spent");
    assert_eq!(refused.code(), Code::ResourceExhausted);

    // A degrade model must be `provider/model` of a configured provider, and only with degrade.
    for (on_limit, model, says) in [
        (BudgetAction::Degrade, "nosuch/model", "no provider `nosuch` is configured"),
        (BudgetAction::Degrade, "gpt-4.1-nano", "must be named with its provider"),
        (BudgetAction::Refuse, "openai/gpt-4.1-nano", "only used with on_limit BUDGET_ACTION_DEGRADE"),
    ] {
        let mut bad = budget("hooli", 1.0, 0.0, BudgetPeriod::Day);
        let sent = bad.budget.as_mut().expect("budget");
        sent.on_limit = on_limit as i32;
        sent.degrade_model = model.to_owned();
        let err = client.set_budget(operator(bad)).await.expect_err("a bad degrade model");
        assert_eq!(err.code(), Code::InvalidArgument, "{model}");
        assert!(err.message().starts_with("degrade_model:") && err.message().contains(says), "{}", err.message());
    }
    let mut unknown = budget("hooli", 1.0, 0.0, BudgetPeriod::Day);
    unknown.budget.as_mut().expect("budget").on_limit = 9;
    let err = client.set_budget(operator(unknown)).await.expect_err("an unknown action");
    assert!(err.message().starts_with("on_limit:"), "{}", err.message());
}

fn as_user<T>(tenant: &str, user: &str, message: T) -> Request<T> {
    let mut request = as_tenant(tenant, message);
    request.metadata_mut().insert("x-user-id", user.parse().expect("ascii"));
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_budget_holds_that_users_turns_only_and_is_rebuilt_from_them() {
    let suite = suite().await;
    let mut client = suite.client().await;
    let mut request = budget("initrode", 1.0, 0.0, BudgetPeriod::Day);
    request.budget.as_mut().expect("budget").user_id = "alice".to_owned();
    let set = client.set_budget(operator(request)).await.expect("set alice's budget").into_inner();
    assert_eq!(set.budget.expect("budget").user_id, "alice");
    let mut bad = budget("initrode", 1.0, 0.0, BudgetPeriod::Day);
    bad.budget.as_mut().expect("budget").user_id = "not a user".to_owned();
    let err = client.set_budget(operator(bad)).await.expect_err("a bad user id");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("user_id:"), "{}", err.message());

    client.chat(as_user("initrode", "alice", chat("one"))).await.expect("alice's first turn");
    let spent_message = "budget initrode/user:alice of $1.00 per day is spent ($1.00)";
    let refused = client.chat(as_user("initrode", "alice", chat("two"))).await.expect_err("alice is spent");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(refused.message(), spent_message);
    // Another user of the tenant, and turns without a user, go on.
    client.chat(as_user("initrode", "bob", chat("bob's first"))).await.expect("bob's turn");
    client.chat(as_user("initrode", "bob", chat("bob's second"))).await.expect("bob's second turn");
    client.chat(as_tenant("initrode", chat("no user"))).await.expect("a turn without a user");
    let listed = client
        .list_budgets(operator(ListBudgetsRequest { tenant_id: "initrode".to_owned() }))
        .await
        .expect("list")
        .into_inner()
        .budgets;
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].user_id.as_str(), listed[0].spent_usd), ("alice", 1.0));

    // Its counter lost, it is rebuilt from alice's recorded turns alone (four were recorded).
    let pool =
        switchyard_kit::postgres::connect_in_schema(&database_url(), suite.schema.name(), 1).await.expect("postgres");
    eventually(Duration::from_secs(10), "initrode's four turns recorded", || {
        let pool = pool.clone();
        async move {
            let turns: i64 = sqlx::query_scalar("SELECT count(*) FROM routing_decisions WHERE tenant_id = 'initrode'")
                .fetch_one(&pool)
                .await
                .map_err(|err| err.to_string())?;
            if turns == 4 { Ok(()) } else { Err(format!("{turns} turns")) }
        }
    })
    .await;
    let prefix = suite.budget_prefix.as_ref().expect("budget counters in redis");
    assert!(delete_redis_keys(prefix.as_str()).await >= 1, "alice's counter was in redis");
    let refused = client.chat(as_user("initrode", "alice", chat("after the flush"))).await.expect_err("still spent");
    assert_eq!(refused.message(), spent_message);
    client.chat(as_user("initrode", "bob", chat("bob again"))).await.expect("bob unaffected");

    let mut delete = DeleteBudgetRequest { tenant_id: "initrode".to_owned(), ..DeleteBudgetRequest::default() };
    assert!(!client.delete_budget(operator(delete.clone())).await.expect("delete").into_inner().deleted);
    delete.user_id = "alice".to_owned();
    assert!(client.delete_budget(operator(delete)).await.expect("delete alice's").into_inner().deleted);
    client.chat(as_user("initrode", "alice", chat("unbudgeted"))).await.expect("no budget left");
}
