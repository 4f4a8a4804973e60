//! Retrying a change to a live session that lost a race. Every change is a conditional update
//! made from the state just read, so concurrent calls on one session serialise: the loser
//! re-reads, decides again and tries once more, up to a bound.

use std::future::Future;

use crate::{domain::SessionId, error::SessionsError};

/// How many times one call tries before telling its caller the session is too busy.
pub const MAX_ATTEMPTS: usize = 64;

/// What one attempt came to.
#[derive(Debug)]
pub enum Attempt<T> {
    Done(T),
    /// Another call changed the session first, or its live copy went missing: try again.
    Conflict,
}

/// Runs `attempt` until it is done or fails, at most [`MAX_ATTEMPTS`] times.
// A plain closure returning a future, not an async closure: the gRPC handlers' futures must
// be `Send`, which the compiler cannot yet prove through `AsyncFnMut`.
pub async fn on_conflict<T, F>(session: &SessionId, attempt: impl FnMut() -> F) -> Result<T, SessionsError>
where
    F: Future<Output = Result<Attempt<T>, SessionsError>>,
{
    within(MAX_ATTEMPTS, session, attempt).await
}

async fn within<T, F>(attempts: usize, session: &SessionId, mut attempt: impl FnMut() -> F) -> Result<T, SessionsError>
where
    F: Future<Output = Result<Attempt<T>, SessionsError>>,
{
    for _ in 0..attempts {
        if let Attempt::Done(value) = attempt().await? {
            return Ok(value);
        }
    }
    Err(SessionsError::Unavailable(format!("session `{session}` is too busy: retry")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> SessionId {
        SessionId::parse("s-1").unwrap()
    }

    #[tokio::test]
    async fn retries_conflicts_until_an_attempt_is_done() {
        let mut calls = 0;
        let value = on_conflict(&session(), || {
            calls += 1;
            let call = calls;
            async move { Ok(if call < 3 { Attempt::Conflict } else { Attempt::Done(call) }) }
        })
        .await
        .unwrap();
        assert_eq!((value, calls), (3, 3));
    }

    #[tokio::test]
    async fn gives_up_as_unavailable_after_the_attempt_limit() {
        let mut calls = 0;
        let err = on_conflict(&session(), || {
            calls += 1;
            async { Ok::<Attempt<()>, _>(Attempt::Conflict) }
        })
        .await
        .unwrap_err();
        assert_eq!(calls, MAX_ATTEMPTS);
        assert!(matches!(&err, SessionsError::Unavailable(_)), "{err:?}");
        assert_eq!(err.to_string(), "session `s-1` is too busy: retry");
    }

    #[tokio::test]
    async fn an_error_ends_the_retries_at_once() {
        let mut calls = 0;
        let err = within(5, &session(), || {
            calls += 1;
            async { Err::<Attempt<()>, _>(SessionsError::SessionClosed("s-1".to_owned())) }
        })
        .await
        .unwrap_err();
        assert_eq!(calls, 1);
        assert!(matches!(err, SessionsError::SessionClosed(_)), "{err:?}");
    }
}
