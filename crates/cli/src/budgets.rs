//! `switchyard budgets`: set, list and delete spend budgets through the router's gRPC API, as
//! the operator (an administrator of the default tenant).

use clap::{Args, Subcommand, ValueEnum};
use switchyard_proto::router::v1::{
    Budget, BudgetAction, BudgetPeriod, DeleteBudgetRequest, ListBudgetsRequest, SetBudgetRequest,
    router_service_client::RouterServiceClient,
};
use tonic::{Request, transport::Channel};

#[derive(Debug, Args)]
pub struct RouterAddress {
    /// The router's gRPC address.
    #[arg(long, env = "ROUTER_URL", default_value = "http://127.0.0.1:50053")]
    router_url: String,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Period {
    Day,
    Month,
}

/// What a budget does at its hard limit.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OnLimit {
    /// Refuse new turns (429).
    Refuse,
    /// Answer them on the direct route, by --degrade-model when given.
    Degrade,
}

#[derive(Debug, Subcommand)]
pub enum BudgetsCommand {
    /// Set (create or replace) a tenant's budget, or one of its API keys'.
    Set {
        #[command(flatten)]
        router: RouterAddress,
        #[command(flatten)]
        target: BudgetTarget,
        /// The hard limit in USD: turns are refused with 429 once the period's spend reaches it.
        #[arg(long, allow_negative_numbers = true)]
        limit_usd: f64,
        /// The window spend is counted over (UTC).
        #[arg(long, value_enum)]
        period: Period,
        /// The soft threshold in USD: past it, turns go on with a warning.
        #[arg(long, allow_negative_numbers = true)]
        soft_usd: Option<f64>,
        /// What happens at the hard limit (refuse by default).
        #[arg(long, value_enum)]
        on_limit: Option<OnLimit>,
        /// With --on-limit degrade: the cheaper model (`provider/model`) degraded turns use.
        #[arg(long)]
        degrade_model: Option<String>,
    },
    /// List budgets with what they have spent in their current period.
    List {
        #[command(flatten)]
        router: RouterAddress,
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Delete a tenant's budget, or one of its API keys'; fails when there is none.
    Delete {
        #[command(flatten)]
        router: RouterAddress,
        #[command(flatten)]
        target: BudgetTarget,
    },
}

/// Which budget: a tenant's, or one of its API keys' or users'.
#[derive(Debug, Args)]
pub struct BudgetTarget {
    /// The tenant the budget is for.
    #[arg(long)]
    tenant: String,
    /// Only this API key's turns (by key id); the whole tenant without one.
    #[arg(long = "key")]
    key_id: Option<String>,
    /// Only this user's turns (the user the credential names); every user without one.
    #[arg(long = "user")]
    user_id: Option<String>,
}

/// A request as the operator: the default tenant (no `x-tenant-id`), an administrator.
fn as_operator<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert(switchyard_kit::identity::ADMIN_HEADER, tonic::metadata::MetadataValue::from_static("true"));
    request
}

async fn connect(router: &RouterAddress) -> anyhow::Result<RouterServiceClient<Channel>> {
    let channel = Channel::from_shared(router.router_url.clone())
        .map_err(|err| anyhow::anyhow!("--router-url `{}`: {err}", router.router_url))?
        .connect()
        .await
        .map_err(|err| anyhow::anyhow!("connecting to the router at {}: {err}", router.router_url))?;
    Ok(RouterServiceClient::new(channel))
}

fn refused(status: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("the router refused: {} ({:?})", status.message(), status.code())
}

fn period_name(period: i32) -> &'static str {
    match BudgetPeriod::try_from(period) {
        Ok(BudgetPeriod::Day) => "day",
        Ok(BudgetPeriod::Month) => "month",
        _ => "?",
    }
}

fn print_table(budgets: &[Budget]) {
    println!(
        "{:<20} {:<14} {:>12} {:>12} {:<6} {:>12} {:<12} {:<16} ON LIMIT",
        "TENANT", "KEY", "LIMIT USD", "SOFT USD", "PERIOD", "SPENT USD", "PERIOD START", "USER"
    );
    for budget in budgets {
        let start = budget
            .period_start
            .as_ref()
            .and_then(|t| chrono::DateTime::from_timestamp(t.seconds, 0))
            .map_or_else(|| "-".to_owned(), |t| t.format("%Y-%m-%d").to_string());
        let on_limit = match BudgetAction::try_from(budget.on_limit) {
            Ok(BudgetAction::Degrade) if budget.degrade_model.is_empty() => "degrade".to_owned(),
            Ok(BudgetAction::Degrade) => format!("degrade:{}", budget.degrade_model),
            _ => "refuse".to_owned(),
        };
        println!(
            "{:<20} {:<14} {:>12.2} {:>12} {:<6} {:>12.4} {:<12} {:<16} {}",
            budget.tenant_id,
            if budget.key_id.is_empty() { "-" } else { budget.key_id.as_str() },
            budget.limit_usd,
            if budget.soft_usd > 0.0 { format!("{:.2}", budget.soft_usd) } else { "-".to_owned() },
            period_name(budget.period),
            budget.spent_usd,
            start,
            if budget.user_id.is_empty() { "-" } else { budget.user_id.as_str() },
            on_limit,
        );
    }
}

pub async fn run(command: BudgetsCommand) -> anyhow::Result<()> {
    match command {
        BudgetsCommand::Set {
            router,
            target: BudgetTarget { tenant, key_id, user_id },
            limit_usd,
            period,
            soft_usd,
            on_limit,
            degrade_model,
        } => {
            let budget = Budget {
                tenant_id: tenant,
                key_id: key_id.unwrap_or_default(),
                user_id: user_id.unwrap_or_default(),
                limit_usd,
                soft_usd: soft_usd.unwrap_or(0.0),
                period: match period {
                    Period::Day => BudgetPeriod::Day,
                    Period::Month => BudgetPeriod::Month,
                } as i32,
                on_limit: match on_limit {
                    None => BudgetAction::Unspecified,
                    Some(OnLimit::Refuse) => BudgetAction::Refuse,
                    Some(OnLimit::Degrade) => BudgetAction::Degrade,
                } as i32,
                degrade_model: degrade_model.unwrap_or_default(),
                ..Budget::default()
            };
            let set = connect(&router)
                .await?
                .set_budget(as_operator(SetBudgetRequest { budget: Some(budget) }))
                .await
                .map_err(refused)?
                .into_inner();
            print_table(&set.budget.into_iter().collect::<Vec<_>>());
        }
        BudgetsCommand::List { router, tenant } => {
            let listed = connect(&router)
                .await?
                .list_budgets(as_operator(ListBudgetsRequest { tenant_id: tenant.unwrap_or_default() }))
                .await
                .map_err(refused)?
                .into_inner();
            print_table(&listed.budgets);
        }
        BudgetsCommand::Delete { router, target: BudgetTarget { tenant, key_id, user_id } } => {
            let (key_id, user_id) = (key_id.unwrap_or_default(), user_id.unwrap_or_default());
            let mut name = tenant.clone();
            if !key_id.is_empty() {
                name = format!("{name}/{key_id}");
            }
            if !user_id.is_empty() {
                name = format!("{name}/user:{user_id}");
            }
            let deleted = connect(&router)
                .await?
                .delete_budget(as_operator(DeleteBudgetRequest { tenant_id: tenant, key_id, user_id }))
                .await
                .map_err(refused)?
                .into_inner()
                .deleted;
            if !deleted {
                anyhow::bail!("no budget {name} to delete");
            }
            println!("deleted budget {name}");
        }
    }
    Ok(())
}
