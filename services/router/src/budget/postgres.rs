//! Budgets in Postgres (the router's schema, table `budgets`); the spend a lost counter is
//! rebuilt from is the sum of the tenant's (key's, user's) recorded `routing_decisions.cost_nanousd`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};
use switchyard_kit::{TenantId, store::StoreError};

use super::{Budget, BudgetBook, OnLimit, Period};

pub struct PostgresBudgetBook {
    pool: PgPool,
}

fn unavailable(err: impl Into<StoreError>) -> StoreError {
    StoreError::Unavailable(format!("postgres: {}", err.into()))
}

impl PostgresBudgetBook {
    pub async fn connect(url: &str, schema: &str) -> Result<Self, StoreError> {
        let pool = switchyard_kit::postgres::connect_in_schema(url, schema, 2).await.map_err(unavailable)?;
        sqlx::migrate!("./migrations").run(&pool).await.map_err(unavailable)?;
        Ok(Self { pool })
    }
}

#[async_trait]
impl BudgetBook for PostgresBudgetBook {
    async fn put(&self, budget: &Budget) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO budgets (tenant_id, key_id, limit_nanousd, soft_nanousd, period, on_limit, degrade_model, \
             user_id, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now()) \
             ON CONFLICT (tenant_id, key_id, user_id) DO UPDATE SET limit_nanousd = EXCLUDED.limit_nanousd, \
             soft_nanousd = EXCLUDED.soft_nanousd, period = EXCLUDED.period, on_limit = EXCLUDED.on_limit, \
             degrade_model = EXCLUDED.degrade_model, updated_at = now()",
        )
        .bind(budget.tenant.as_str())
        .bind(&budget.key_id)
        .bind(budget.limit_nanousd)
        .bind(budget.soft_nanousd)
        .bind(budget.period.as_str())
        .bind(budget.on_limit.as_str())
        .bind(budget.on_limit.degrade_model().map(ToString::to_string).unwrap_or_default())
        .bind(&budget.user_id)
        .execute(&self.pool)
        .await
        .map_err(unavailable)?;
        Ok(())
    }

    async fn delete(&self, tenant: &TenantId, key_id: &str, user_id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM budgets WHERE tenant_id = $1 AND key_id = $2 AND user_id = $3")
            .bind(tenant.as_str())
            .bind(key_id)
            .bind(user_id)
            .execute(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(done.rows_affected() > 0)
    }

    async fn list(&self, tenant: Option<&TenantId>) -> Result<Vec<Budget>, StoreError> {
        let rows = sqlx::query(
            "SELECT tenant_id, key_id, limit_nanousd, soft_nanousd, period, on_limit, degrade_model, user_id \
             FROM budgets WHERE $1::text IS NULL OR tenant_id = $1 ORDER BY tenant_id, key_id, user_id",
        )
        .bind(tenant.map(TenantId::as_str))
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        rows.into_iter()
            .map(|row| {
                let tenant: String = row.get("tenant_id");
                let period: String = row.get("period");
                let on_limit: String = row.get("on_limit");
                let degrade_model: String = row.get("degrade_model");
                Ok(Budget {
                    tenant: TenantId::parse(&tenant)
                        .map_err(|err| StoreError::Corrupt(format!("budget tenant: {}", err.reason)))?,
                    key_id: row.get("key_id"),
                    limit_nanousd: row.get("limit_nanousd"),
                    soft_nanousd: row.get("soft_nanousd"),
                    period: Period::parse(&period)
                        .ok_or_else(|| StoreError::Corrupt(format!("budget period `{period}`")))?,
                    on_limit: OnLimit::parse(&on_limit, &degrade_model)
                        .ok_or_else(|| StoreError::Corrupt(format!("budget on_limit `{on_limit}`")))?,
                    user_id: row.get("user_id"),
                })
            })
            .collect()
    }

    async fn recorded_spend(
        &self,
        tenant: &TenantId,
        key_id: &str,
        user_id: &str,
        since: DateTime<Utc>,
    ) -> Result<i64, StoreError> {
        let spent: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(cost_nanousd), 0)::bigint FROM routing_decisions \
             WHERE tenant_id = $1 AND ($2 = '' OR key_id = $2) AND ($3 = '' OR user_id = $3) AND occurred_at >= $4",
        )
        .bind(tenant.as_str())
        .bind(key_id)
        .bind(user_id)
        .bind(since)
        .fetch_one(&self.pool)
        .await
        .map_err(unavailable)?;
        Ok(spent)
    }
}
