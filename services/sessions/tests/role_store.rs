//! One behavioural suite for every `RoleStore` (memory and Postgres).
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use switchyard_sessions::{
    domain::{CustomTrigger, Role, RoleId, TenantId, TriggerKind},
    store::{RoleStore, memory::MemoryRoleStore, postgres::PostgresStore},
};
use switchyard_testkit::{Schema, database_url};

/// A time Postgres stores exactly (microsecond precision), `secs` after a fixed instant.
fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap() + TimeDelta::seconds(secs)
}

fn role_id(id: &str) -> RoleId {
    RoleId::parse(id).unwrap()
}

fn role(id: &str) -> Role {
    Role {
        tenant: None,
        id: role_id(id),
        name: format!("{id} expert"),
        description: format!("answers {id} questions"),
        domains: vec!["finance".to_owned(), "accounting".to_owned()],
        system_prompt: "You are a careful expert.".to_owned(),
        custom_triggers: vec![
            CustomTrigger { pattern: "balance sheet".to_owned(), kind: TriggerKind::Phrase, priority: 7 },
            CustomTrigger { pattern: r"\bIFRS\s*\d+\b".to_owned(), kind: TriggerKind::Regex, priority: 3 },
        ],
        preferred_model: Some("gpt-4o".to_owned()),
        created_at: at(0),
        updated_at: at(0),
    }
}

async fn role_store_behaves(store: Arc<dyn RoleStore>) {
    store.ping().await.unwrap();
    assert!(store.list().await.unwrap().is_empty());

    let finance = role("finance");
    assert!(store.insert(&finance).await.unwrap());
    let duplicate = Role { name: "someone else".to_owned(), ..role("finance") };
    assert!(!store.insert(&duplicate).await.unwrap(), "a second insert of an id is refused");
    let analyst = Role {
        domains: Vec::new(),
        custom_triggers: Vec::new(),
        preferred_model: None,
        created_at: at(5),
        updated_at: at(6),
        ..role("analyst")
    };
    assert!(store.insert(&analyst).await.unwrap());
    assert!(store.insert(&role("zoning")).await.unwrap());
    assert_eq!(
        store.list().await.unwrap(),
        vec![analyst.clone(), finance.clone(), role("zoning")],
        "ordered by id, every field as inserted"
    );

    let changed = Role {
        name: "Finance".to_owned(),
        description: "money".to_owned(),
        domains: vec!["tax".to_owned()],
        system_prompt: "Be brief.".to_owned(),
        custom_triggers: vec![CustomTrigger { pattern: "audit".to_owned(), kind: TriggerKind::Keyword, priority: 1 }],
        preferred_model: None,
        created_at: at(500),
        updated_at: at(60),
        ..role("finance")
    };
    assert!(store.update(&changed).await.unwrap());
    let stored = store.list().await.unwrap().into_iter().find(|role| role.id == finance.id).unwrap();
    assert_eq!(stored, Role { created_at: finance.created_at, ..changed }, "update keeps created_at");
    assert!(!store.update(&role("missing")).await.unwrap());
    assert_eq!(store.list().await.unwrap().len(), 3, "updating a missing role creates nothing");

    assert!(store.delete(None, &finance.id).await.unwrap());
    assert!(!store.delete(None, &finance.id).await.unwrap());
    assert!(!store.delete(None, &role_id("missing")).await.unwrap());
    let ids: Vec<RoleId> = store.list().await.unwrap().into_iter().map(|role| role.id).collect();
    assert_eq!(ids, [role_id("analyst"), role_id("zoning")]);

    tenants_keep_their_own_roles(store.as_ref()).await;
}

/// Roles are kept by tenant and id: a tenant's role may share its id with a built-in (the
/// tenant's override) or with another tenant's role, and each is written and removed alone.
async fn tenants_keep_their_own_roles(store: &dyn RoleStore) {
    let tenant = |name: &str| Some(TenantId::parse(name).unwrap());
    let own =
        |name: &str, prompt: &str| Role { tenant: tenant(name), system_prompt: prompt.to_owned(), ..role("zoning") };
    let (acme, globex) = (own("acme", "Acme's zoning rules."), own("globex", "Globex's zoning rules."));
    assert!(store.insert(&globex).await.unwrap());
    assert!(store.insert(&acme).await.unwrap(), "another tenant's role of the same id is no conflict");
    assert!(!store.insert(&own("acme", "again")).await.unwrap(), "one id once per tenant");
    let builtin_zoning = role("zoning");
    let listed = store.list().await.unwrap();
    let keys: Vec<(Option<&str>, &str)> =
        listed.iter().map(|role| (role.tenant.as_ref().map(TenantId::as_str), role.id.as_str())).collect();
    assert_eq!(
        keys,
        [(None, "analyst"), (None, "zoning"), (Some("acme"), "zoning"), (Some("globex"), "zoning")],
        "built-ins first, then by tenant"
    );
    assert_eq!(listed[1], builtin_zoning, "the built-in is untouched");
    assert_eq!(listed[2], acme);

    let changed = Role { system_prompt: "Acme's new rules.".to_owned(), updated_at: at(90), ..acme.clone() };
    assert!(store.update(&changed).await.unwrap());
    assert!(!store.update(&own("initech", "none")).await.unwrap(), "a tenant without the role updates nothing");
    let listed = store.list().await.unwrap();
    assert_eq!(listed[2], changed);
    assert_eq!((&listed[1], &listed[3]), (&builtin_zoning, &globex), "only that tenant's role changed");

    assert!(store.delete(tenant("acme").as_ref(), &role_id("zoning")).await.unwrap());
    assert!(!store.delete(tenant("acme").as_ref(), &role_id("zoning")).await.unwrap());
    assert!(!store.delete(tenant("acme").as_ref(), &role_id("analyst")).await.unwrap(), "not a built-in");
    assert_eq!(store.list().await.unwrap(), vec![listed[0].clone(), builtin_zoning, globex], "the others stay");
}

#[tokio::test]
async fn memory_role_store() {
    role_store_behaves(Arc::new(MemoryRoleStore::default())).await;
}

#[tokio::test]
async fn postgres_role_store() {
    let schema = Schema::new("t");
    let store = PostgresStore::connect(&database_url(), &schema)
        .await
        .expect("connect to postgres at DATABASE_URL (is it running?)");
    role_store_behaves(Arc::new(store)).await;
}
