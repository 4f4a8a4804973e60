//! The three ways a message can be answered, named as the router's tools and logs name them.

use std::fmt;
use std::str::FromStr;

/// Where a message goes. Serialised by its name (`"mcp_agent"`), as the router's cache stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// The model answers itself: greetings, simple questions, follow-ups, general knowledge.
    Direct,
    /// An agent with MCP tools: files, web search, APIs, calculations, system operations.
    McpAgent,
    /// Several domain experts and a synthesis: cross-domain analysis.
    Multiagent,
}

impl Route {
    /// Every route, in the order scores and confusion matrices use.
    pub const ALL: [Route; 3] = [Route::Direct, Route::McpAgent, Route::Multiagent];

    pub fn as_str(self) -> &'static str {
        match self {
            Route::Direct => "direct",
            Route::McpAgent => "mcp_agent",
            Route::Multiagent => "multiagent",
        }
    }

    /// Position in [`Route::ALL`] (and in every per-route array of this crate).
    pub fn index(self) -> usize {
        match self {
            Route::Direct => 0,
            Route::McpAgent => 1,
            Route::Multiagent => 2,
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown route `{0}` (expected direct, mcp_agent or multiagent)")]
pub struct UnknownRoute(pub String);

impl FromStr for Route {
    type Err = UnknownRoute;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Route::ALL.into_iter().find(|route| route.as_str() == text).ok_or_else(|| UnknownRoute(text.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::Route;

    #[test]
    fn names_round_trip_and_unknown_names_are_errors() {
        for route in Route::ALL {
            assert_eq!(route.as_str().parse::<Route>(), Ok(route));
            assert_eq!(Route::ALL[route.index()], route);
        }
        assert!("Direct".parse::<Route>().is_err());
        // The router's cache stores routes by the same names.
        for route in Route::ALL {
            assert_eq!(serde_json::to_string(&route).unwrap(), format!("\"{route}\""));
        }
        assert!("".parse::<Route>().is_err());
    }
}
