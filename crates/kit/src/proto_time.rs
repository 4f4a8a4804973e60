//! Times on the wire: `google.protobuf.Timestamp` from the chrono times the services keep.

use chrono::{DateTime, Utc};
use prost_types::Timestamp;

pub fn timestamp(time: DateTime<Utc>) -> Timestamp {
    Timestamp { seconds: time.timestamp(), nanos: i32::try_from(time.timestamp_subsec_nanos()).unwrap_or(0) }
}

/// From milliseconds since the Unix epoch (what Redis hashes keep).
pub fn timestamp_ms(ms: i64) -> Timestamp {
    Timestamp { seconds: ms.div_euclid(1000), nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_sub_second_precision_and_negative_times() {
        let time = DateTime::from_timestamp(1_700_000_000, 123_456_789).expect("time");
        assert_eq!(timestamp(time), Timestamp { seconds: 1_700_000_000, nanos: 123_456_789 });
        assert_eq!(timestamp_ms(1_500), Timestamp { seconds: 1, nanos: 500_000_000 });
        assert_eq!(timestamp_ms(-1), Timestamp { seconds: -1, nanos: 999_000_000 });
    }
}
