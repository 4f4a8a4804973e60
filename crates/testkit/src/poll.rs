//! One way to wait for something a test cannot be told about directly (a replica catching up,
//! a record written off the request path): check it until it holds, and fail with what was
//! last seen when it does not hold by the deadline.

use std::{fmt::Display, future::Future, time::Duration};

use tokio::time::Instant;

/// What a check returns: `true`, `Some(value)` or `Ok(value)` when it holds. An `Err` carries
/// what the check saw, which the failure message repeats.
pub trait Outcome {
    type Value;
    fn into_result(self) -> Result<Self::Value, String>;
}

impl Outcome for bool {
    type Value = ();
    fn into_result(self) -> Result<(), String> {
        if self { Ok(()) } else { Err("still false".to_owned()) }
    }
}

impl<T> Outcome for Option<T> {
    type Value = T;
    fn into_result(self) -> Result<T, String> {
        self.ok_or_else(|| "still none".to_owned())
    }
}

impl<T, E: Display> Outcome for Result<T, E> {
    type Value = T;
    fn into_result(self) -> Result<T, String> {
        self.map_err(|err| err.to_string())
    }
}

const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_millis(100);

/// Runs `check` until it holds and returns its value; panics naming `what` and the last
/// outcome once `within` has passed. A check still running at the deadline fails too, so a
/// hung call cannot hang the test.
pub async fn eventually<O, F, Fut>(within: Duration, what: &str, mut check: F) -> O::Value
where
    O: Outcome,
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
{
    let deadline = Instant::now() + within;
    let mut pause = FIRST_PAUSE;
    let mut last = String::new();
    loop {
        last = match tokio::time::timeout_at(deadline, check()).await {
            Ok(outcome) => match outcome.into_result() {
                Ok(value) => return value,
                Err(seen) => seen,
            },
            // A slow check cut off at the deadline says nothing of the state it was reading:
            // what the check saw before is what explains the failure.
            Err(_) if last.is_empty() => "the check itself was still running".to_owned(),
            Err(_) => format!("the check itself was still running; before that: {last}"),
        };
        let now = Instant::now();
        assert!(now < deadline, "{what}: not within {within:?} (last seen: {last})");
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn returns_the_value_once_the_check_holds() {
        let calls = AtomicU32::new(0);
        let value = eventually(Duration::from_secs(5), "the third call", || async {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if n >= 3 { Ok(n) } else { Err(format!("call {n}")) }
        })
        .await;
        assert_eq!(value, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "never true: not within 50ms (last seen: still false)")]
    async fn fails_at_the_deadline_with_what_it_saw() {
        eventually(Duration::from_millis(50), "never true", || async { false }).await;
    }

    #[tokio::test]
    #[should_panic(expected = "hangs: not within 50ms (last seen: the check itself was still running)")]
    async fn a_hung_check_fails_at_the_deadline() {
        eventually(Duration::from_millis(50), "hangs", std::future::pending::<Option<()>>).await;
    }

    #[tokio::test]
    #[should_panic(expected = "slow: not within 200ms (last seen: the check itself was still running; before \
                               that: call 1)")]
    async fn a_check_cut_off_at_the_deadline_keeps_what_it_saw_before() {
        let calls = AtomicU32::new(0);
        eventually(Duration::from_millis(200), "slow", || async {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if n > 1 {
                std::future::pending::<()>().await;
            }
            Err::<(), _>(format!("call {n}"))
        })
        .await;
    }
}
