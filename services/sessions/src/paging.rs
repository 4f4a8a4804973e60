//! Page sizes and page tokens for the list calls (switch history, roles): a size of 0 means
//! the default, past the maximum is refused, and a page holds one item more than it returns
//! so the last one shown becomes the next page's token only when more follow.

use crate::error::SessionsError;

/// The page sizes one list call accepts.
#[derive(Debug, Clone, Copy)]
pub struct PageLimits {
    /// What a page size of 0 (unset) means.
    pub default: u32,
    pub max: u32,
}

/// Switch events per page of a session's history.
pub const HISTORY_PAGE: PageLimits = PageLimits { default: 50, max: 500 };
/// Roles per page of the role list.
pub const ROLES_PAGE: PageLimits = PageLimits { default: 100, max: 1000 };

impl PageLimits {
    /// The page size to serve for a requested one.
    pub fn size(self, requested: u32) -> Result<u32, SessionsError> {
        if requested > self.max {
            return Err(SessionsError::invalid("page_size", format!("must be at most {}, got {requested}", self.max)));
        }
        Ok(if requested == 0 { self.default } else { requested })
    }
}

/// The position a page token names, `None` for the first page. Tokens are opaque to callers:
/// anything this service did not issue is refused the same way.
pub fn after<T>(token: &str, parse: impl FnOnce(&str) -> Option<T>) -> Result<Option<T>, SessionsError> {
    if token.is_empty() {
        return Ok(None);
    }
    parse(token).map(Some).ok_or_else(|| SessionsError::invalid("page_token", "is not a token this service issued"))
}

/// The history's token: the sequence of the last switch event shown.
pub fn sequence(token: &str) -> Option<u64> {
    token.parse().ok()
}

/// Cuts `items` (fetched with one more than `size`) to the page, with the token of the next
/// page if there is one.
pub fn page<T>(mut items: Vec<T>, size: usize, token: impl Fn(&T) -> String) -> (Vec<T>, Option<String>) {
    if items.len() <= size {
        return (items, None);
    }
    items.truncate(size);
    let next = items.last().map(token);
    (items, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(err: SessionsError) -> String {
        match err {
            SessionsError::InvalidArgument { field, .. } => field,
            other => panic!("expected an invalid argument, got {other:?}"),
        }
    }

    #[test]
    fn zero_means_the_default_and_the_maximum_is_inclusive() {
        assert_eq!(HISTORY_PAGE.size(0).unwrap(), 50);
        assert_eq!(HISTORY_PAGE.size(7).unwrap(), 7);
        assert_eq!(HISTORY_PAGE.size(500).unwrap(), 500);
        assert_eq!(ROLES_PAGE.size(0).unwrap(), 100);
        assert_eq!(ROLES_PAGE.size(1000).unwrap(), 1000);
    }

    #[test]
    fn a_size_past_the_maximum_names_page_size() {
        let err = HISTORY_PAGE.size(501).unwrap_err();
        assert_eq!(err.to_string(), "page_size: must be at most 500, got 501");
        assert_eq!(field(err), "page_size");
        assert_eq!(field(ROLES_PAGE.size(1001).unwrap_err()), "page_size");
    }

    #[test]
    fn tokens_parse_or_name_page_token() {
        assert_eq!(after("", sequence).unwrap(), None);
        assert_eq!(after("42", sequence).unwrap(), Some(42));
        let err = after("forty-two", sequence).unwrap_err();
        assert_eq!(err.to_string(), "page_token: is not a token this service issued");
        assert_eq!(field(after("-1", sequence).unwrap_err()), "page_token");
    }

    #[test]
    fn the_next_token_is_the_last_item_shown_and_only_when_more_follow() {
        let token = |n: &u64| n.to_string();
        assert_eq!(page(vec![1, 2, 3], 2, token), (vec![1, 2], Some("2".to_owned())));
        assert_eq!(page(vec![1, 2], 2, token), (vec![1, 2], None));
        assert_eq!(page(Vec::<u64>::new(), 2, token), (Vec::new(), None));
    }
}
