//! One behavioural suite for every `TriggerStore`: the in-memory store and Postgres.

mod common;

use std::{sync::Arc, time::Duration};

use switchyard_testkit::{Schema, database_url};
use switchyard_triggers::{
    domain::{Limits, RoleId, RoleRegistration, Trigger, TriggerKind},
    store::{MemoryStore, PostgresStore, TriggerStore},
};

fn registration(id: &str, domains: &[&str], custom: &[(&str, TriggerKind, u32)]) -> RoleRegistration {
    RoleRegistration {
        role_id: RoleId::parse(id).expect("valid id"),
        domains: domains.iter().map(|d| (*d).to_owned()).collect(),
        custom_triggers: custom
            .iter()
            .map(|(p, k, prio)| Trigger::new(p, *k, *prio, &Limits::default(), "t").expect("valid"))
            .collect(),
        description: format!("{id}, for the semantic signal"),
        example_questions: vec![format!("what does {id} do?"), "and why?".to_owned()],
        // Postgres keeps microseconds; keep the comparison exact.
        updated_at: chrono::DateTime::from_timestamp_micros(chrono::Utc::now().timestamp_micros()).expect("time"),
    }
}

async fn behaves_like_a_trigger_store(store: Arc<dyn TriggerStore>) {
    let empty = store.load().await.expect("load");
    assert!(empty.roles.is_empty());
    let start = empty.version;
    let mut versions = store.versions();
    assert_eq!(*versions.borrow_and_update(), start);

    let finance = registration("finance-expert", &["finance"], &[("runway", TriggerKind::Keyword, 4)]);
    let v1 = store.upsert(&finance).await.expect("upsert");
    assert!(v1 > start);
    let tech = registration("tech-expert", &["technology"], &[(r"\brust(?:acean)?s?\b", TriggerKind::Regex, 6)]);
    let v2 = store.upsert(&tech).await.expect("upsert");
    assert!(v2 > v1);

    let loaded = store.load().await.expect("load");
    assert_eq!(loaded.version, v2);
    assert_eq!(loaded.roles, vec![finance.clone(), tech.clone()], "ordered by role id, round-tripped exactly");

    // The version channel reports the change (Postgres: within its poll/notify latency).
    tokio::time::timeout(Duration::from_secs(2), async {
        while *versions.borrow_and_update() != v2 {
            versions.changed().await.expect("store alive");
        }
    })
    .await
    .expect("version channel reached the new version");

    // Replacing keeps one row.
    let finance2 = registration("finance-expert", &["finance", "legal"], &[]);
    let v3 = store.upsert(&finance2).await.expect("replace");
    let loaded = store.load().await.expect("load");
    assert_eq!(loaded.version, v3);
    assert_eq!(loaded.roles.len(), 2);
    assert_eq!(loaded.roles[0], finance2);

    assert_eq!(store.remove(&RoleId::parse("nobody").expect("id")).await.expect("remove"), None);
    let v4 = store.remove(&RoleId::parse("tech-expert").expect("id")).await.expect("remove").expect("was there");
    assert!(v4 > v3);
    let loaded = store.load().await.expect("load");
    assert_eq!((loaded.version, loaded.roles.len()), (v4, 1));
    store.ping().await.expect("ping");
}

#[tokio::test]
async fn memory_store_behaves() {
    behaves_like_a_trigger_store(Arc::new(MemoryStore::default())).await;
}

#[tokio::test]
async fn postgres_store_behaves() {
    let schema = Schema::new("t");
    let store = PostgresStore::connect(&database_url(), &schema, Duration::from_millis(200))
        .await
        .expect("postgres reachable at DATABASE_URL");
    behaves_like_a_trigger_store(Arc::new(store)).await;
}

#[tokio::test]
async fn two_services_migrate_one_database_in_their_own_schemas() {
    let (a, b) = (Schema::new("t"), Schema::new("t"));
    let url = database_url();
    let (first, second) = tokio::join!(
        PostgresStore::connect(&url, &a, Duration::from_secs(1)),
        PostgresStore::connect(&url, &b, Duration::from_secs(1)),
    );
    let (first, second) = (first.expect("first"), second.expect("second"));
    first.upsert(&registration("only-in-a", &[], &[])).await.expect("upsert");
    assert_eq!(first.load().await.expect("load").roles.len(), 1);
    assert!(second.load().await.expect("load").roles.is_empty(), "schemas are separate");
    // Migrating an existing schema again is a no-op.
    PostgresStore::connect(&url, &a, Duration::from_secs(1)).await.expect("reopen");
}

#[tokio::test]
async fn bad_schema_names_are_refused() {
    let err =
        PostgresStore::connect(&database_url(), "Robert'); DROP", Duration::from_secs(1)).await.err().expect("refused");
    assert!(err.to_string().contains("schema"), "{err}");
}
