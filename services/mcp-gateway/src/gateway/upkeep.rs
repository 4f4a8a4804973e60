//! The gateway's work beside requests, all stopped by the shutdown token: catalog upkeep as
//! servers change, history reloads for the usage prior, metric refreshes; and the usage
//! records' way to Postgres through the kit's record buffer, off the request path.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use switchyard_kit::records::{BufferedRecord, DrainReport, RecordSink};
use tokio_util::sync::CancellationToken;

use super::Gateway;
use crate::{
    domain::UsageRecord,
    store::{StoreError, UsageStore},
};

/// Starts every background task of `gateway`.
pub(super) fn spawn(gateway: &Arc<Gateway>, shutdown: CancellationToken) {
    tokio::spawn(maintain_catalog(gateway.clone(), shutdown.clone()));
    tokio::spawn(reload_history(gateway.clone(), shutdown.clone()));
    tokio::spawn(refresh_metrics(gateway.clone(), shutdown.clone()));
    tokio::spawn(prune_audit(gateway.clone(), shutdown.clone()));
    tokio::spawn(keep_usage(gateway.clone(), shutdown));
}

/// How often audit records past the retention are pruned.
const AUDIT_PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Removes audit records older than `--audit-retention`, at start and hourly.
async fn prune_audit(gateway: Arc<Gateway>, shutdown: CancellationToken) {
    let Ok(retention) = chrono::Duration::from_std(gateway.settings.audit_retention) else { return };
    let mut tick = tokio::time::interval(AUDIT_PRUNE_EVERY);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        match gateway.usage.prune_audit(chrono::Utc::now() - retention).await {
            Ok(0) => {}
            Ok(pruned) => tracing::info!(pruned, "pruned audit records past the retention"),
            Err(err) => tracing::warn!(error = %err, "pruning audit records"),
        }
    }
}

/// How often the usage record's partitions are made ahead and its retention applied.
const USAGE_UPKEEP_EVERY: Duration = Duration::from_secs(3600);

/// The usage record's upkeep, at start and hourly: the coming months' partitions, and with
/// `--usage-retention` the whole months before the cut's month dropped.
async fn keep_usage(gateway: Arc<Gateway>, shutdown: CancellationToken) {
    let retention = match gateway.settings.usage_retention.map(chrono::Duration::from_std).transpose() {
        Ok(retention) => retention,
        Err(_) => {
            tracing::warn!("--usage-retention is too long to compute a cut; the usage record is kept for ever");
            None
        }
    };
    let mut tick = tokio::time::interval(USAGE_UPKEEP_EVERY);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        // No cut when the retention reaches before the calendar's start: nothing is that old.
        let cut = retention.and_then(|retention| chrono::Utc::now().checked_sub_signed(retention));
        match gateway.usage.keep_usage(cut).await {
            Ok(0) => {}
            Ok(removed) => tracing::info!(removed, "usage records past the retention dropped"),
            Err(err) => tracing::warn!(error = %err, "usage record upkeep failed; retrying next hour"),
        }
    }
}

impl BufferedRecord for UsageRecord {
    fn key_fields(&self) -> String {
        match self {
            UsageRecord::SetContext { key, at, .. } => {
                format!("tenant={} session={} kind=set_context at={at}", key.tenant, key.id)
            }
            UsageRecord::ToolCall { key, server, at, .. } => {
                format!("tenant={} session={} kind=tool_call server={server} at={at}", key.tenant, key.id)
            }
            UsageRecord::Audit(audit) => {
                format!("tenant={} id={} kind=audit server={} at={}", audit.tenant, audit.id, audit.server, audit.at)
            }
        }
    }
}

/// The usage store as the record buffer's sink.
pub(super) struct UsageSink(pub(super) Arc<dyn UsageStore>);

#[async_trait]
impl RecordSink<UsageRecord> for UsageSink {
    async fn write(&self, records: &[UsageRecord]) -> Result<(), StoreError> {
        self.0.record(records).await
    }
}

impl Gateway {
    /// Holds a record for Postgres, off the request path; counted and dropped when the
    /// buffer is full (Postgres down for long).
    pub(super) fn record(&self, record: UsageRecord) {
        self.records.push(record);
    }

    /// At shutdown: writes the usage records still held, within `deadline`.
    pub async fn drain_records(&self, deadline: Duration) -> DrainReport {
        self.records.drain(deadline).await
    }
}

async fn maintain_catalog(gateway: Arc<Gateway>, shutdown: CancellationToken) {
    let mut upstream_changes = gateway.upstreams.subscribe();
    let mut requests = gateway.rebuild.subscribe();
    loop {
        gateway.rebuild_catalog().await;
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = upstream_changes.changed() => if changed.is_err() { return },
            changed = requests.changed() => if changed.is_err() { return },
        }
    }
}

/// Keeps the metric gauges' figures fresh (they count every replica, from the shared store).
async fn refresh_metrics(gateway: Arc<Gateway>, shutdown: CancellationToken) {
    loop {
        match gateway.stats().await {
            Ok(stats) => gateway.metrics.update(stats),
            Err(err) => tracing::debug!(error = %err, "refreshing gateway metrics"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(10)) => {}
        }
    }
}

async fn reload_history(gateway: Arc<Gateway>, shutdown: CancellationToken) {
    let mut last = None;
    loop {
        match gateway.load_history().await {
            Ok(history) => {
                let newest = history.newest().map(|(context, tool)| (context.to_owned(), tool.to_owned()));
                let fingerprint = (history.len(), newest);
                if last.as_ref() != Some(&fingerprint) {
                    gateway.history.store(Arc::new(history));
                    gateway.request_rebuild();
                    last = Some(fingerprint);
                }
            }
            Err(err) => tracing::warn!(error = %err, "reloading the usage history"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(gateway.settings.history_refresh) => {}
        }
    }
}
