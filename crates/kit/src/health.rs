//! gRPC health that tells the truth. Each named service (readiness) starts NOT_SERVING,
//! becomes SERVING only while its dependencies answer (a probe the service supplies, run
//! periodically), and goes back to NOT_SERVING as soon as shutdown starts so load balancers
//! stop sending traffic. The empty service name `""` is liveness: SERVING while the process
//! runs and is not shutting down, whatever its dependencies do — a Postgres outage must take
//! pods out of rotation, not get them restarted. Optional parts of a service (a model that
//! may be absent) report under names of their own ([`HealthHandle::set_component`]): a detail
//! for operators that never takes the service out of rotation.

use std::{
    collections::BTreeMap,
    future::Future,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tonic_health::{ServingStatus, server::HealthReporter};

/// Shared handle on the server's health statuses.
#[derive(Clone)]
pub struct HealthHandle {
    inner: Arc<HealthInner>,
}

struct HealthInner {
    reporter: HealthReporter,
    services: Mutex<Vec<String>>,
    /// Optional parts by health name, and whether each is up.
    components: Mutex<BTreeMap<String, bool>>,
    ready: AtomicBool,
    shutting_down: AtomicBool,
    // Serialises status updates so the last update always reflects the latest flags.
    apply_lock: tokio::sync::Mutex<()>,
}

impl HealthHandle {
    pub(crate) fn new(reporter: HealthReporter) -> Self {
        Self {
            inner: Arc::new(HealthInner {
                reporter,
                services: Mutex::new(Vec::new()),
                components: Mutex::new(BTreeMap::new()),
                ready: AtomicBool::new(false),
                shutting_down: AtomicBool::new(false),
                apply_lock: tokio::sync::Mutex::new(()),
            }),
        }
    }

    pub(crate) fn register(&self, service: &str) {
        self.services_guard().push(service.to_owned());
    }

    /// Whether the service's dependencies are reachable.
    pub async fn set_ready(&self, ready: bool) {
        let was = self.inner.ready.swap(ready, Ordering::SeqCst);
        if was != ready {
            if ready {
                tracing::info!("dependencies reachable, serving");
            } else {
                tracing::warn!("dependencies unreachable, not serving");
            }
        }
        self.apply().await;
    }

    pub fn is_ready(&self) -> bool {
        self.inner.ready.load(Ordering::SeqCst)
    }

    /// Reports an optional part of the service under `name` (SERVING while `up` and the
    /// process is not shutting down). It does not affect the service's own readiness.
    pub async fn set_component(&self, name: &str, up: bool) {
        let changed =
            self.inner.components.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name.to_owned(), up)
                != Some(up);
        if changed {
            self.apply().await;
        }
    }

    pub(crate) async fn begin_shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::SeqCst);
        self.apply().await;
    }

    pub(crate) async fn apply(&self) {
        let _guard = self.inner.apply_lock.lock().await;
        let alive = !self.inner.shutting_down.load(Ordering::SeqCst);
        let ready = alive && self.inner.ready.load(Ordering::SeqCst);
        let as_status = |up: bool| if up { ServingStatus::Serving } else { ServingStatus::NotServing };
        let services = self.services_guard().clone();
        self.inner.reporter.set_service_status("", as_status(alive)).await;
        for service in services {
            self.inner.reporter.set_service_status(service, as_status(ready)).await;
        }
        let components = self.inner.components.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        for (component, up) in components {
            self.inner.reporter.set_service_status(component, as_status(alive && up)).await;
        }
    }

    fn services_guard(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        // A poisoned lock only means a panic elsewhere while pushing a name; the list is fine.
        self.inner.services.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `probe` now and then every `interval`, keeping the status in line with its result.
    /// The task ends when the handle's server shuts down.
    pub fn spawn_probe<F, Fut>(&self, interval: Duration, probe: F) -> tokio::task::JoinHandle<()>
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), String>> + Send,
    {
        let handle = self.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                if handle.inner.shutting_down.load(Ordering::SeqCst) {
                    return;
                }
                match probe().await {
                    Ok(()) => handle.set_ready(true).await,
                    Err(reason) => {
                        if handle.is_ready() {
                            tracing::warn!(%reason, "health probe failed");
                        }
                        handle.set_ready(false).await;
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use tonic::Request;
    use tonic_health::{
        pb::{HealthCheckRequest, health_check_response::ServingStatus as Wire, health_server::Health},
        server::HealthService,
    };

    use super::*;

    async fn status(service: &HealthService, name: &str) -> Wire {
        let request = Request::new(HealthCheckRequest { service: name.into() });
        service.check(request).await.expect("known service").into_inner().status()
    }

    #[tokio::test]
    async fn liveness_ignores_dependencies_while_readiness_follows_them() {
        let reporter = HealthReporter::new();
        let service = HealthService::from_health_reporter(reporter.clone());
        let handle = HealthHandle::new(reporter);
        handle.register("svc");
        handle.apply().await;
        assert_eq!(status(&service, "").await, Wire::Serving);
        assert_eq!(status(&service, "svc").await, Wire::NotServing, "not ready until the probe passes");

        handle.set_ready(true).await;
        assert_eq!(status(&service, "svc").await, Wire::Serving);

        handle.set_ready(false).await;
        assert_eq!(status(&service, "").await, Wire::Serving, "a dependency outage must not fail liveness");
        assert_eq!(status(&service, "svc").await, Wire::NotServing);

        handle.set_ready(true).await;
        handle.begin_shutdown().await;
        assert_eq!(status(&service, "").await, Wire::NotServing);
        assert_eq!(status(&service, "svc").await, Wire::NotServing);
        // A probe passing after shutdown began cannot bring it back.
        handle.set_ready(true).await;
        assert_eq!(status(&service, "svc").await, Wire::NotServing);
    }

    #[tokio::test]
    async fn a_component_reports_on_its_own_and_leaves_readiness_alone() {
        let reporter = HealthReporter::new();
        let service = HealthService::from_health_reporter(reporter.clone());
        let handle = HealthHandle::new(reporter);
        handle.register("svc");
        handle.set_ready(true).await;
        handle.set_component("svc.model", false).await;
        assert_eq!(status(&service, "svc.model").await, Wire::NotServing);
        assert_eq!(status(&service, "svc").await, Wire::Serving, "a missing optional part keeps the service ready");
        handle.set_component("svc.model", true).await;
        assert_eq!(status(&service, "svc.model").await, Wire::Serving);
        handle.begin_shutdown().await;
        assert_eq!(status(&service, "svc.model").await, Wire::NotServing);
    }
}
