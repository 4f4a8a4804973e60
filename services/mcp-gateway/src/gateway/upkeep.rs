//! The gateway's work beside requests, all stopped by the shutdown token: catalog upkeep as
//! servers change, history reloads for the usage prior, metric refreshes, and the record
//! writer that takes usage records to Postgres off the request path.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Gateway;
use crate::{catalog::History, domain::UsageRecord, store::UsageStore};

/// Starts every background task of `gateway`; `records` is the receiving end of its record queue.
pub(super) fn spawn(gateway: &Arc<Gateway>, records: mpsc::Receiver<UsageRecord>, shutdown: CancellationToken) {
    tokio::spawn(write_records(gateway.usage.clone(), records, shutdown.clone()));
    tokio::spawn(maintain_catalog(gateway.clone(), shutdown.clone()));
    tokio::spawn(reload_history(gateway.clone(), shutdown.clone()));
    tokio::spawn(refresh_metrics(gateway.clone(), shutdown));
}

impl Gateway {
    /// Queues a record for Postgres, off the request path; counted and dropped when the
    /// buffer is full (Postgres down for long).
    pub(super) fn record(&self, record: UsageRecord) {
        if self.records.try_send(record).is_err() {
            let dropped = self.records_dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(dropped, "usage record buffer full; records dropped");
            }
        }
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
        match gateway.usage.history(gateway.settings.history_limit).await {
            Ok(pairs) => {
                let fingerprint = (pairs.len(), pairs.first().map(|p| (p.context.clone(), p.tool.clone())));
                if last.as_ref() != Some(&fingerprint) {
                    gateway.history.store(Arc::new(History { pairs }));
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

/// Writes queued records in batches; while Postgres is down, holds the batch and retries, so
/// the queue (bounded) absorbs the outage.
async fn write_records(
    usage: Arc<dyn UsageStore>,
    mut queue: mpsc::Receiver<UsageRecord>,
    shutdown: CancellationToken,
) {
    const BATCH: usize = 256;
    let mut batch = Vec::with_capacity(BATCH);
    let mut delay = Duration::from_millis(100);
    loop {
        if batch.is_empty() {
            tokio::select! {
                received = queue.recv_many(&mut batch, BATCH) => if received == 0 { return },
                _ = shutdown.cancelled() => {
                    // Drain what is queued, once, before stopping.
                    while let Ok(record) = queue.try_recv() {
                        batch.push(record);
                    }
                    if !batch.is_empty() && let Err(err) = usage.record(&batch).await {
                        tracing::warn!(error = %err, lost = batch.len(), "records not written at shutdown");
                    }
                    return;
                }
            }
        }
        match usage.record(&batch).await {
            Ok(()) => {
                batch.clear();
                delay = Duration::from_millis(100);
            }
            Err(err) => {
                tracing::warn!(error = %err, held = batch.len(), "writing usage records; will retry");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.cancelled() => return,
                }
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}
