//! `switchyard keys`: the edge's API keys, managed in its Postgres. A key's text is printed
//! once, when it is created; only its digest is stored.

use clap::{Args, Subcommand};
use switchyard_edge::auth::KeyStore;
use switchyard_kit::{Secret, TenantId, UserId};

#[derive(Debug, Args)]
pub struct KeyDatabase {
    /// Postgres of the edge.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Secret,

    /// Schema of the edge's key table.
    #[arg(long, env = "EDGE_DB_SCHEMA", default_value = "edge")]
    db_schema: String,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key; prints it once.
    Create {
        #[command(flatten)]
        db: KeyDatabase,
        /// The tenant the key acts for.
        #[arg(long)]
        tenant: String,
        /// The user the key acts as: sessions and corrections are per user (another user of
        /// the tenant gets 404 for them); without one, the key sees every session of the
        /// tenant.
        #[arg(long)]
        user: Option<String>,
        /// A label to recognise the key by.
        #[arg(long, default_value = "")]
        name: String,
        /// Make the key an administrator of its tenant: it may create, change and delete the
        /// tenant's own roles (updating a built-in role makes the tenant's own copy; built-ins
        /// themselves are read-only) and read every user's sessions of the tenant.
        #[arg(long)]
        admin: bool,
    },
    /// List keys (never their text), newest first.
    List {
        #[command(flatten)]
        db: KeyDatabase,
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Revoke a key by id; every edge stops accepting it within EDGE_KEY_CACHE_TTL.
    Revoke {
        #[command(flatten)]
        db: KeyDatabase,
        /// The key's id (the part after `sy_`, before the second `_`).
        id: String,
    },
}

async fn open(db: &KeyDatabase) -> anyhow::Result<KeyStore> {
    KeyStore::connect(db.database_url.expose(), &db.db_schema, std::time::Duration::ZERO)
        .await
        .map_err(|err| anyhow::anyhow!("opening the key table at {}: {err}", db.database_url.url_without_credentials()))
}

pub async fn run(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Create { db, tenant, user, name, admin } => {
            let tenant = TenantId::parse(&tenant).map_err(|e| anyhow::anyhow!("--tenant {}", e.reason))?;
            let user =
                user.map(|u| UserId::parse(&u)).transpose().map_err(|e| anyhow::anyhow!("--user {}", e.reason))?;
            let created = open(&db).await?.create(&tenant, user.as_ref(), &name, admin).await?;
            eprintln!(
                "created key {} for tenant {}{}{}; it is shown only now:",
                created.key.id,
                created.key.tenant,
                created.key.user.as_deref().map(|u| format!(", user {u}")).unwrap_or_default(),
                if admin { " (administrator)" } else { "" },
            );
            println!("{}", created.secret);
        }
        KeysCommand::List { db, tenant } => {
            let tenant = tenant
                .map(|t| TenantId::parse(&t))
                .transpose()
                .map_err(|e| anyhow::anyhow!("--tenant {}", e.reason))?;
            let keys = open(&db).await?.list(tenant.as_ref()).await?;
            println!(
                "{:<14} {:<20} {:<20} {:<6} {:<25} {:<25} NAME",
                "ID", "TENANT", "USER", "ADMIN", "CREATED", "REVOKED"
            );
            for key in keys {
                println!(
                    "{:<14} {:<20} {:<20} {:<6} {:<25} {:<25} {}",
                    key.id,
                    key.tenant,
                    key.user.as_deref().unwrap_or("-"),
                    if key.admin { "yes" } else { "no" },
                    key.created_at.format("%Y-%m-%d %H:%M:%S UTC"),
                    key.revoked_at.map_or_else(|| "-".to_owned(), |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string()),
                    key.name,
                );
            }
        }
        KeysCommand::Revoke { db, id } => {
            if open(&db).await?.revoke(&id).await? {
                eprintln!("revoked key {id}");
            } else {
                anyhow::bail!("no live key with id `{id}`");
            }
        }
    }
    Ok(())
}
