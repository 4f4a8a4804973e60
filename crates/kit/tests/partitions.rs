//! The partition keeper on the real Postgres (`DATABASE_URL`), each test in a schema of its
//! own, for day and month partitions: the coming periods are created ahead, a row of any time
//! is stored, retention drops whole periods and keeps the rest, and several keepers at once
//! neither fail nor duplicate a period.
#![allow(clippy::unwrap_used, reason = "a panic in a test is the failure report")]

use chrono::{DateTime, Datelike, Days, Months, NaiveDate, NaiveTime, TimeZone, Utc};
use sqlx::PgPool;
use switchyard_kit::{
    partitions::{DailyPartitions, Granularity, Pruned, TimePartitions},
    postgres::connect_in_schema,
    store::StoreError,
};
use switchyard_testkit::postgres::{Schema, database_url};

/// A pool in a fresh schema holding `events`, partitioned by day on `at` with its default
/// partition — the shape the services' migrations give their record tables.
async fn events_table(schema: &Schema) -> (PgPool, DailyPartitions) {
    let pool = connect_in_schema(&database_url(), schema.name(), 8)
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()));
    for statement in [
        "CREATE TABLE events (id bigserial, at timestamptz NOT NULL, note text NOT NULL, PRIMARY KEY (id, at)) \
         PARTITION BY RANGE (at)",
        "CREATE INDEX events_at ON events (at)",
        "CREATE TABLE events_default PARTITION OF events DEFAULT",
    ] {
        sqlx::query(statement).execute(&pool).await.unwrap();
    }
    (pool, DailyPartitions::new("events", "at").unwrap())
}

fn days_from(first: NaiveDate, count: u64) -> Vec<NaiveDate> {
    (0..count).map(|offset| first.checked_add_days(Days::new(offset)).unwrap()).collect()
}

fn noon(day: NaiveDate) -> DateTime<Utc> {
    day.and_time(NaiveTime::from_hms_opt(12, 0, 0).unwrap()).and_utc()
}

async fn insert(pool: &PgPool, at: DateTime<Utc>, note: &str) {
    sqlx::query("INSERT INTO events (at, note) VALUES ($1, $2)").bind(at).bind(note).execute(pool).await.unwrap();
}

/// The partition a row was stored in.
async fn partition_of(pool: &PgPool, note: &str) -> String {
    sqlx::query_scalar("SELECT tableoid::regclass::text FROM events WHERE note = $1")
        .bind(note)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM events").fetch_one(pool).await.unwrap()
}

#[tokio::test]
async fn today_and_the_days_ahead_get_their_partitions_once() {
    let schema = Schema::new("kit_partitions_ahead");
    let (pool, events) = events_table(&schema).await;
    let today = Utc::now().date_naive();

    assert_eq!(events.create_ahead(&pool, today, 3).await.unwrap(), 4, "today and three days ahead");
    assert_eq!(events.days(&pool).await.unwrap(), days_from(today, 4));
    assert_eq!(events.create_ahead(&pool, today, 3).await.unwrap(), 0, "a second round finds them made");
    // A day later the round adds the one new day.
    let tomorrow = today.succ_opt().unwrap();
    assert_eq!(events.create_ahead(&pool, tomorrow, 3).await.unwrap(), 1);
    assert_eq!(events.days(&pool).await.unwrap(), days_from(today, 5));

    // A row of a made day lands in its partition, which carries the parent's indexes.
    insert(&pool, noon(tomorrow), "tomorrow").await;
    assert_eq!(partition_of(&pool, "tomorrow").await, events.partition_name(tomorrow));
    let indexes: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND tablename = $2")
        .bind(schema.name())
        .bind(events.partition_name(tomorrow))
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(indexes, 2, "the primary key and the index on at");
}

#[tokio::test]
async fn a_row_of_any_time_is_stored_and_moves_to_its_day_when_that_day_is_made() {
    let schema = Schema::new("kit_partitions_any_time");
    let (pool, events) = events_table(&schema).await;
    let today = Utc::now().date_naive();
    events.create_ahead(&pool, today, 1).await.unwrap();

    // A clock a week fast, an old import, the far past and future Postgres can hold, and the
    // infinities: none has a day partition, each is stored in the default one.
    let odd = [
        ("week ahead", "now() + interval '7 days'"),
        ("old import", "'2001-02-03 04:05:06+00'"),
        ("far past", "'4000-01-01 00:00:00+00 BC'"),
        ("far future", "'200000-01-01 00:00:00+00'"),
        ("infinity", "'infinity'"),
        ("minus infinity", "'-infinity'"),
    ];
    for (note, at) in odd {
        sqlx::query(sqlx::AssertSqlSafe(format!("INSERT INTO events (at, note) VALUES ({at}, $1)")))
            .bind(note)
            .execute(&pool)
            .await
            .unwrap_or_else(|err| panic!("{note}: {err}"));
        assert_eq!(partition_of(&pool, note).await, events.default_partition(), "{note}");
    }
    insert(&pool, noon(today), "today").await;
    assert_eq!(partition_of(&pool, "today").await, events.partition_name(today));

    // A time before 4713 BC is no timestamp Postgres holds: refused for its content, as
    // before partitioning — the record buffer sets such a record aside instead of retrying.
    let refused = sqlx::query("INSERT INTO events (at, note) VALUES ('4714-11-23 00:00:00+00 BC', 'too old')")
        .execute(&pool)
        .await
        .map_err(StoreError::from)
        .unwrap_err();
    assert!(refused.is_refused_content(), "{refused}");

    // Making the day of the old import (or the week-ahead day) moves its row out of the default.
    let imported = NaiveDate::from_ymd_opt(2001, 2, 3).unwrap();
    assert!(events.create_day(&pool, imported).await.unwrap());
    assert_eq!(partition_of(&pool, "old import").await, events.partition_name(imported));
    let week_ahead: NaiveDate =
        sqlx::query_scalar("SELECT (at AT TIME ZONE 'UTC')::date FROM events WHERE note = 'week ahead'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(events.create_day(&pool, week_ahead).await.unwrap());
    assert_eq!(partition_of(&pool, "week ahead").await, events.partition_name(week_ahead));
    assert_eq!(count(&pool).await, 7, "every row still there once");
}

#[tokio::test]
async fn retention_drops_whole_days_before_the_cut_and_keeps_the_rest() {
    let schema = Schema::new("kit_partitions_retention");
    let (pool, events) = events_table(&schema).await;
    let today = Utc::now().date_naive();
    let first = today.checked_sub_days(Days::new(10)).unwrap();
    for day in days_from(first, 11) {
        assert!(events.create_day(&pool, day).await.unwrap());
        // Three rows a day: early, noon, late.
        for (hour, label) in [(1, "early"), (12, "noon"), (23, "late")] {
            let at = day.and_time(NaiveTime::from_hms_opt(hour, 0, 0).unwrap()).and_utc();
            insert(&pool, at, &format!("{day} {label}")).await;
        }
    }
    // Older than any partition: in the default.
    insert(&pool, Utc.with_ymd_and_hms(2001, 1, 1, 0, 0, 0).unwrap(), "ancient").await;
    assert_eq!(count(&pool).await, 34);

    // The cut at 06:00 five days back: the five days before it go whole; of its own day only
    // the early row goes; the ancient row in the default goes too.
    let cut_day = today.checked_sub_days(Days::new(5)).unwrap();
    let cut = cut_day.and_time(NaiveTime::from_hms_opt(6, 0, 0).unwrap()).and_utc();
    let pruned = events.prune_before(&pool, cut).await.unwrap();
    assert_eq!(pruned, Pruned { dropped_days: days_from(first, 5), rows: 5 * 3 + 1 + 1 });
    assert_eq!(events.days(&pool).await.unwrap(), days_from(cut_day, 6), "the cut's day and after are kept");
    assert_eq!(count(&pool).await, 34 - 17);
    let oldest: DateTime<Utc> = sqlx::query_scalar("SELECT min(at) FROM events").fetch_one(&pool).await.unwrap();
    assert_eq!(oldest, cut_day.and_time(NaiveTime::from_hms_opt(12, 0, 0).unwrap()).and_utc());
    let dropped_tables: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'events_p%'")
            .bind(schema.name())
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(dropped_tables, 6, "the dropped days' tables are gone, not only detached");

    // A second round at the same cut finds nothing left to remove.
    assert_eq!(events.prune_before(&pool, cut).await.unwrap(), Pruned::default());
}

/// Replicas start together: four keepers make the same days while rows are written, then
/// prune at the same cut. Nothing fails, each day exists once, no row is lost or counted twice.
#[tokio::test]
async fn keepers_running_at_once_neither_fail_nor_duplicate_a_day() {
    let schema = Schema::new("kit_partitions_replicas");
    let (pool, events) = events_table(&schema).await;
    let today = Utc::now().date_naive();
    let first = today.checked_sub_days(Days::new(4)).unwrap();

    let writer = {
        let pool = pool.clone();
        tokio::spawn(async move {
            for n in 0..200u64 {
                let at = noon(first.checked_add_days(Days::new(n % 8)).unwrap());
                insert(&pool, at, &format!("row {n}")).await;
            }
        })
    };
    let keepers: Vec<_> = (0..4)
        .map(|_| {
            let (pool, events) = (pool.clone(), events.clone());
            tokio::spawn(async move { events.create_ahead(&pool, first, 7).await })
        })
        .collect();
    let mut created = 0;
    for keeper in keepers {
        created += keeper.await.unwrap().unwrap();
    }
    writer.await.unwrap();
    assert_eq!(created, 8, "each of the eight days made by exactly one keeper");
    assert_eq!(events.days(&pool).await.unwrap(), days_from(first, 8));
    assert_eq!(count(&pool).await, 200);
    let in_default: i64 = sqlx::query_scalar("SELECT count(*) FROM events_default").fetch_one(&pool).await.unwrap();
    assert_eq!(in_default, 0, "rows written before their day was made moved into it");

    let cut = today.and_time(NaiveTime::MIN).and_utc();
    let prunes: Vec<_> = (0..4)
        .map(|_| {
            let (pool, events) = (pool.clone(), events.clone());
            tokio::spawn(async move { events.prune_before(&pool, cut).await })
        })
        .collect();
    let mut removed = 0;
    let mut dropped = Vec::new();
    for prune in prunes {
        let pruned = prune.await.unwrap().unwrap();
        removed += pruned.rows;
        dropped.extend(pruned.dropped_days);
    }
    dropped.sort_unstable();
    assert_eq!(dropped, days_from(first, 4), "each past day dropped once");
    assert_eq!(removed, 100, "rows n % 8 < 4 were before today");
    assert_eq!(count(&pool).await, 100);
}

#[test]
fn only_plain_names_are_partitioned() {
    assert!(DailyPartitions::new("routing_decisions", "occurred_at").is_ok());
    for bad in ["", "Upper", "semi;colon", "quote\"", "1st", &"a".repeat(51)] {
        assert!(DailyPartitions::new(bad, "at").is_err(), "{bad}");
        assert!(DailyPartitions::new("events", bad).is_err(), "{bad}");
    }
}

/// A pool in a fresh schema holding `history`, partitioned by month on `at` with its default
/// partition — the shape the services' history tables have.
async fn history_table(schema: &Schema) -> (PgPool, TimePartitions) {
    let pool = connect_in_schema(&database_url(), schema.name(), 8)
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()));
    for statement in [
        "CREATE TABLE history (session text NOT NULL, seq bigint NOT NULL, at timestamptz NOT NULL, \
         PRIMARY KEY (session, seq, at)) PARTITION BY RANGE (at)",
        "CREATE TABLE history_default PARTITION OF history DEFAULT",
    ] {
        sqlx::query(statement).execute(&pool).await.unwrap();
    }
    let history = TimePartitions::monthly("history", "at").unwrap();
    assert_eq!(history.granularity(), Granularity::Month);
    (pool, history)
}

fn month(year: i32, month: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(year, month, 1).unwrap()
}

fn months_from(first: NaiveDate, count: u32) -> Vec<NaiveDate> {
    (0..count).map(|offset| first.checked_add_months(Months::new(offset)).unwrap()).collect()
}

async fn insert_history(pool: &PgPool, seq: i64, at: DateTime<Utc>) {
    sqlx::query("INSERT INTO history (session, seq, at) VALUES ('s', $1, $2)")
        .bind(seq)
        .bind(at)
        .execute(pool)
        .await
        .unwrap();
}

async fn history_partition_of(pool: &PgPool, seq: i64) -> String {
    sqlx::query_scalar("SELECT tableoid::regclass::text FROM history WHERE seq = $1")
        .bind(seq)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn history_seqs(pool: &PgPool) -> Vec<i64> {
    sqlx::query_scalar("SELECT seq FROM history ORDER BY seq").fetch_all(pool).await.unwrap()
}

#[tokio::test]
async fn month_partitions_are_made_ahead_once_and_split_rows_at_the_month_boundary() {
    let schema = Schema::new("kit_months_ahead");
    let (pool, history) = history_table(&schema).await;

    // Mid-November: November, December and the next year's January.
    let today = NaiveDate::from_ymd_opt(2025, 11, 17).unwrap();
    assert_eq!(history.create_ahead(&pool, today, 2).await.unwrap(), 3, "this month and two ahead");
    assert_eq!(history.periods(&pool).await.unwrap(), months_from(month(2025, 11), 3));
    assert_eq!(history.create_ahead(&pool, today, 2).await.unwrap(), 0, "a second round finds them made");
    assert_eq!(history.partition_name(today), "history_p202511");
    assert_eq!(history.partition_name(month(2026, 1)), "history_p202601");

    // The last microsecond of the year and the first of the next fall on either side.
    let last = Utc.with_ymd_and_hms(2025, 12, 31, 23, 59, 59).unwrap() + chrono::Duration::microseconds(999_999);
    insert_history(&pool, 1, last).await;
    insert_history(&pool, 2, Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()).await;
    insert_history(&pool, 3, Utc.with_ymd_and_hms(2025, 11, 1, 0, 0, 0).unwrap()).await;
    assert_eq!(history_partition_of(&pool, 1).await, "history_p202512");
    assert_eq!(history_partition_of(&pool, 2).await, "history_p202601");
    assert_eq!(history_partition_of(&pool, 3).await, "history_p202511");

    // Outside the made months: the default, until that month is made.
    insert_history(&pool, 4, Utc.with_ymd_and_hms(2026, 2, 28, 23, 0, 0).unwrap()).await;
    insert_history(&pool, 5, Utc.with_ymd_and_hms(2019, 7, 4, 12, 0, 0).unwrap()).await;
    assert_eq!(history_partition_of(&pool, 4).await, history.default_partition());
    assert_eq!(history_partition_of(&pool, 5).await, history.default_partition());
    assert!(history.create_period(&pool, NaiveDate::from_ymd_opt(2026, 2, 14).unwrap()).await.unwrap());
    assert!(!history.create_period(&pool, month(2026, 2)).await.unwrap(), "the month exists");
    assert_eq!(history_partition_of(&pool, 4).await, "history_p202602");
    assert_eq!(history_partition_of(&pool, 5).await, history.default_partition());
    assert_eq!(history_seqs(&pool).await, [1, 2, 3, 4, 5]);

    // Day partition names of the same table are not taken for months.
    let days = TimePartitions::new("history", "at").unwrap();
    assert_eq!(days.days(&pool).await.unwrap(), Vec::<NaiveDate>::new());
}

#[tokio::test]
async fn history_retention_drops_whole_months_only() {
    let schema = Schema::new("kit_months_retention");
    let (pool, history) = history_table(&schema).await;
    let first = month(2025, 1);
    // Six months, each with a row on its first instant, its 15th and its last hour.
    let mut seq = 0;
    for start in months_from(first, 6) {
        assert!(history.create_period(&pool, start).await.unwrap());
        let next = start.checked_add_months(Months::new(1)).unwrap();
        for at in [
            start.and_time(NaiveTime::MIN).and_utc(),
            noon(start.with_day(15).unwrap()),
            next.and_time(NaiveTime::MIN).and_utc() - chrono::Duration::hours(1),
        ] {
            seq += 1;
            insert_history(&pool, seq, at).await;
        }
    }
    // In the default: one before every month, one after.
    insert_history(&pool, 100, Utc.with_ymd_and_hms(2020, 1, 1, 0, 0, 0).unwrap()).await;
    insert_history(&pool, 101, Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap()).await;

    // The cut on 20 March: January and February go whole; all of March stays, the rows before
    // the 20th too; the default keeps only what is after March's start.
    let cut = Utc.with_ymd_and_hms(2025, 3, 20, 6, 0, 0).unwrap();
    let pruned = history.prune_whole_periods_before(&pool, cut).await.unwrap();
    assert_eq!(pruned, Pruned { dropped_days: vec![month(2025, 1), month(2025, 2)], rows: 2 * 3 + 1 });
    assert_eq!(history.periods(&pool).await.unwrap(), months_from(month(2025, 3), 4));
    let kept: Vec<i64> = (7..=18).chain([101]).collect();
    assert_eq!(history_seqs(&pool).await, kept);
    assert_eq!(history.prune_whole_periods_before(&pool, cut).await.unwrap(), Pruned::default());

    // A cut on a month's first instant drops the month before it and nothing of its own.
    let pruned = history.prune_whole_periods_before(&pool, month(2025, 4).and_time(NaiveTime::MIN).and_utc()).await;
    assert_eq!(pruned.unwrap(), Pruned { dropped_days: vec![month(2025, 3)], rows: 3 });
    assert_eq!(history_seqs(&pool).await, (10..=18).chain([101]).collect::<Vec<_>>());
    let tables: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'history_p%'")
            .bind(schema.name())
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(tables, 3, "the dropped months' tables are gone, not only detached");
}

/// Replicas of a history service start together: four keepers make the same months while
/// rows are written across a year's turn, then prune at the same cut.
#[tokio::test]
async fn month_keepers_running_at_once_neither_fail_nor_duplicate_a_month() {
    let schema = Schema::new("kit_months_replicas");
    let (pool, history) = history_table(&schema).await;
    let first = month(2025, 10);

    let writer = {
        let pool = pool.clone();
        tokio::spawn(async move {
            for n in 0..200i64 {
                let start = first.checked_add_months(Months::new(u32::try_from(n % 6).unwrap())).unwrap();
                insert_history(&pool, n, noon(start)).await;
            }
        })
    };
    let keepers: Vec<_> = (0..4)
        .map(|_| {
            let (pool, history) = (pool.clone(), history.clone());
            tokio::spawn(async move { history.create_ahead(&pool, first.with_day(9).unwrap(), 5).await })
        })
        .collect();
    let mut created = 0;
    for keeper in keepers {
        created += keeper.await.unwrap().unwrap();
    }
    writer.await.unwrap();
    assert_eq!(created, 6, "each of the six months made by exactly one keeper");
    assert_eq!(history.periods(&pool).await.unwrap(), months_from(first, 6));
    assert_eq!(history_seqs(&pool).await, (0..200).collect::<Vec<_>>());
    let in_default: i64 = sqlx::query_scalar("SELECT count(*) FROM history_default").fetch_one(&pool).await.unwrap();
    assert_eq!(in_default, 0, "rows written before their month was made moved into it");

    // Mid-January 2026: October to December go.
    let cut = Utc.with_ymd_and_hms(2026, 1, 15, 0, 0, 0).unwrap();
    let prunes: Vec<_> = (0..4)
        .map(|_| {
            let (pool, history) = (pool.clone(), history.clone());
            tokio::spawn(async move { history.prune_whole_periods_before(&pool, cut).await })
        })
        .collect();
    let (mut removed, mut dropped) = (0, Vec::new());
    for prune in prunes {
        let pruned = prune.await.unwrap().unwrap();
        removed += pruned.rows;
        dropped.extend(pruned.dropped_days);
    }
    dropped.sort_unstable();
    assert_eq!(dropped, months_from(first, 3), "each past month dropped once");
    assert_eq!(removed, 101, "rows n % 6 < 3 (101 of 200) were before January");
    assert_eq!(history_seqs(&pool).await, (0..200).filter(|n| n % 6 >= 3).collect::<Vec<_>>());
}
