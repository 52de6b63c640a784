//! The day-partitioned history on PostgreSQL (`TROUPE_TEST_DATABASE_URL`): the migration keeps
//! the rows of the unpartitioned schema, partitions are made ahead, retention drops whole
//! days, pages read across partitions and a time range reads only its own.

use std::borrow::Cow;

use sqlx::migrate::Migrator;
use sqlx::{Connection, PgConnection};
use troupe_protocol::{EventBody, MemberStatus};
use troupe_server::store::{
    DAYS_AHEAD, DeadLetterFilter, EventFilter, PARTITIONED_TABLES, Store, partition_name,
};
use troupe_server::testing::{BatchBuilder, TestDatabase};

static MIGRATIONS: Migrator = sqlx::migrate!("../migrations/postgres");

/// The migration that partitions the history.
const PARTITIONING: i64 = 20261203120001;

const DAY_MS: i64 = 86_400_000;

fn today() -> i64 {
    let now = chrono::Utc::now().timestamp_millis();
    now - now.rem_euclid(DAY_MS)
}

async fn cluster_id(store: &Store, key: &str) -> i64 {
    store.cluster(key).await.unwrap().expect("cluster").id
}

/// Which table each stored row of `table` lives in, with how many rows.
async fn rows_by_partition(store: &Store, table: &str) -> Vec<(String, i64)> {
    sqlx::query_as(&format!(
        "SELECT tableoid::regclass::text, COUNT(*) FROM {table} GROUP BY 1 ORDER BY 1"
    ))
    .fetch_all(store.postgres_pool().expect("postgres"))
    .await
    .unwrap()
}

fn every_event(limit: i64) -> EventFilter {
    EventFilter {
        limit,
        ..EventFilter::default()
    }
}

/// Every page of `filter`'s events, following the cursor.
async fn all_pages(store: &Store, cluster: i64, mut filter: EventFilter) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    loop {
        let page = store.events(cluster, &filter).await.unwrap();
        let Some(last) = page.last() else {
            return out;
        };
        filter.before = Some((last.at_ms, last.id));
        out.extend(page.iter().map(|e| (e.at_ms, e.id)));
    }
}

#[tokio::test]
async fn the_migration_keeps_every_row_of_the_unpartitioned_schema_with_its_id() {
    let db = TestDatabase::create().await;
    let mut conn = PgConnection::connect(db.url()).await.unwrap();
    let before = Migrator {
        migrations: Cow::Owned(
            MIGRATIONS
                .iter()
                .filter(|m| m.version < PARTITIONING)
                .cloned()
                .collect(),
        ),
        ..Migrator::DEFAULT
    };
    before.run(&mut conn).await.unwrap();
    // Rows as the previous schema stored them: two days ago, yesterday, and one from an
    // agent whose clock said 1970.
    let (d2, d1) = (today() - 2 * DAY_MS, today() - DAY_MS);
    let setup = format!(
        "INSERT INTO clusters (cluster_key, name, first_seen_ms, last_report_ms)
            VALUES ('app', 'app', 0, 0);
         INSERT INTO agents (cluster_id, node, incarnation, first_seen_ms, last_report_ms,
            last_sent_ms, last_sequence) VALUES (1, 'a:1', 1, 0, 0, 0, 1);
         INSERT INTO events (cluster_id, agent_id, at_ms, kind, subject, detail)
            SELECT 1, 1, CASE WHEN g % 3 = 0 THEN {d2} + g ELSE {d1} + g END, 'member-up',
                'a:1', '{{}}' FROM generate_series(1, 300) g;
         INSERT INTO events (cluster_id, agent_id, at_ms, kind, subject, detail)
            VALUES (1, 1, 5, 'member-up', 'a:1', '{{}}');
         INSERT INTO dead_letters (cluster_id, agent_id, at_ms, recipient, sender, message_type,
            reason) SELECT 1, 1, {d1} + g, '/user/x', NULL, 'T', 'gone'
            FROM generate_series(1, 50) g;
         INSERT INTO depth_ticks (cluster_id, agent_id, at_ms, samples)
            SELECT 1, 1, {d2} + g * 1000, '[]' FROM generate_series(1, 20) g;"
    );
    sqlx::raw_sql(&setup).execute(&mut conn).await.unwrap();
    let old_events: Vec<(i64, i64)> =
        sqlx::query_as("SELECT at_ms, id FROM events ORDER BY at_ms DESC, id DESC")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    conn.close().await.unwrap();

    let store = db
        .store()
        .await
        .expect("the partitioning migration applies");
    let totals = store.totals().await.unwrap();
    assert_eq!(
        (totals.events, totals.dead_letters, totals.depth_ticks),
        (301, 50, 20)
    );
    let cluster = cluster_id(&store, "app").await;
    assert_eq!(
        all_pages(&store, cluster, every_event(37)).await,
        old_events,
        "every event kept with its id, paged newest first across partitions"
    );
    assert_eq!(
        rows_by_partition(&store, "events").await,
        vec![
            ("events_p19700101".to_owned(), 1),
            (partition_name("events", d2), 100),
            (partition_name("events", d1), 200),
        ],
        "every day of the old rows has its partition"
    );
    assert_eq!(
        rows_by_partition(&store, "depth_ticks").await,
        vec![(partition_name("depth_ticks", d2), 20)]
    );
    // The stream positions go on from the old ids: nothing is handed out twice.
    let max_old = old_events.iter().map(|(_, id)| *id).max().unwrap();
    store
        .ingest(
            &BatchBuilder::new("app", "a:1", 2)
                .member(
                    today() + 1,
                    EventBody::MemberUp,
                    "b:1",
                    MemberStatus::Up,
                    &[],
                )
                .build(),
            today() + 2,
        )
        .await
        .unwrap();
    let newest = store.events(cluster, &every_event(1)).await.unwrap();
    assert!(newest[0].id > max_old, "{} > {max_old}", newest[0].id);
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE tablename = 'events' ORDER BY 1",
    )
    .fetch_all(store.postgres_pool().unwrap())
    .await
    .unwrap();
    assert_eq!(
        indexes,
        [
            "events_kind",
            "events_pkey",
            "events_subject",
            "events_subject_kind",
            "events_time"
        ]
    );
    store.close().await;
}

#[tokio::test]
async fn partitions_are_made_from_yesterday_to_days_ahead_and_on_demand_further() {
    let db = TestDatabase::create().await;
    let store = db.store().await.unwrap();
    let partitions = store.day_partitions().await.unwrap();
    for table in PARTITIONED_TABLES {
        let days: Vec<i64> = partitions
            .iter()
            .filter(|p| p.table == table && p.attached)
            .map(|p| p.start_ms)
            .collect();
        let expected: Vec<i64> = (-1..=DAYS_AHEAD).map(|d| today() + d * DAY_MS).collect();
        assert_eq!(days, expected, "{table}");
    }
    assert!(
        store.make_partitions(today()).await.unwrap().is_empty(),
        "made once"
    );
    // A server running on: ten days later the maintenance makes that day's partitions
    // before a row of it arrives, and the row goes to its day.
    let later = today() + 10 * DAY_MS;
    let made = store.make_partitions(later).await.unwrap();
    assert_eq!(made.len(), 3 * (DAYS_AHEAD as usize + 2));
    store
        .ingest(
            &BatchBuilder::new("app", "a:1", 1)
                .member(later + 5, EventBody::MemberUp, "a:1", MemberStatus::Up, &[])
                .dead_letter(later + 6, "/x", "T")
                .depth_tick(later + 7, &[("/x", None, 1)])
                .build(),
            later + 10,
        )
        .await
        .unwrap();
    for table in PARTITIONED_TABLES {
        assert_eq!(
            rows_by_partition(&store, table).await,
            vec![(partition_name(table, later), 1)]
        );
    }
    store.close().await;
}

#[tokio::test]
async fn rows_of_a_day_without_partition_wait_in_the_default_and_move_when_it_is_made() {
    let db = TestDatabase::create().await;
    let store = db.store().await.unwrap();
    // An agent whose clock is a month behind.
    let old = today() - 30 * DAY_MS;
    store
        .ingest(
            &BatchBuilder::new("app", "a:1", 1)
                .member(old, EventBody::MemberUp, "a:1", MemberStatus::Up, &[])
                .member(old + 1, EventBody::MemberUp, "b:1", MemberStatus::Up, &[])
                .build(),
            today(),
        )
        .await
        .expect("a row of a day without partition is stored all the same");
    assert_eq!(
        rows_by_partition(&store, "events").await,
        vec![("events_default".to_owned(), 2)]
    );
    store.make_partitions(old).await.unwrap();
    assert_eq!(
        rows_by_partition(&store, "events").await,
        vec![(partition_name("events", old), 2)]
    );
    let cluster = cluster_id(&store, "app").await;
    assert_eq!(
        store.events(cluster, &every_event(10)).await.unwrap().len(),
        2
    );
    store.close().await;
}

#[tokio::test]
async fn retention_drops_the_partitions_of_whole_expired_days_and_pages_stay_correct() {
    let db = TestDatabase::create().await;
    let store = db.store().await.unwrap();
    let (d10, d9) = (today() - 10 * DAY_MS, today() - 9 * DAY_MS);
    store.make_partitions(d10).await.unwrap();
    let mut batch = BatchBuilder::new("app", "a:1", 1);
    for (i, day) in [d10, d9, today()].into_iter().enumerate() {
        for k in 0..5 {
            batch = batch
                .member(day + k, EventBody::MemberUp, "a:1", MemberStatus::Up, &[])
                .dead_letter(day + k, "/x", "T")
                .depth_tick(day + k, &[("/x", None, i as u32)]);
        }
    }
    store.ingest(&batch.build(), today() + 10).await.unwrap();
    let cluster = cluster_id(&store, "app").await;
    let before = all_pages(&store, cluster, every_event(4)).await;
    assert_eq!(before.len(), 15);

    // Half of day -9 has expired: that day stays whole, the days before it go.
    let cutoff = d9 + DAY_MS / 2;
    let dropped = store.drop_expired_partitions(cutoff).await.unwrap();
    for table in PARTITIONED_TABLES {
        for day in [d10 - DAY_MS, d10] {
            assert!(
                dropped.contains(&partition_name(table, day)),
                "{dropped:?} holds {}",
                partition_name(table, day)
            );
        }
        assert!(!dropped.contains(&partition_name(table, d9)));
    }
    assert_eq!(dropped.len(), 6);
    let left: Vec<String> = store
        .day_partitions()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert!(!left.contains(&partition_name("events", d10)), "{left:?}");
    assert!(left.contains(&partition_name("events", d9)), "{left:?}");

    let after = all_pages(&store, cluster, every_event(4)).await;
    assert_eq!(after, before[..10].to_vec(), "days -9 and 0 kept whole");
    let dead_letters = store
        .dead_letters(
            cluster,
            &DeadLetterFilter {
                limit: 100,
                ..DeadLetterFilter::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(dead_letters.len(), 10);
    assert_eq!(
        store
            .depth_ticks(cluster, 0, i64::MAX, 100)
            .await
            .unwrap()
            .len(),
        10
    );
    assert!(
        store
            .drop_expired_partitions(cutoff)
            .await
            .unwrap()
            .is_empty(),
        "nothing left to drop"
    );
    // The row-by-row pass touches only the default partitions, never the kept day -9.
    store.delete_older_than(cutoff, 1000).await.unwrap();
    assert_eq!(all_pages(&store, cluster, every_event(4)).await, after);
    store.close().await;
}

#[tokio::test]
async fn a_partition_detached_but_not_dropped_is_dropped_on_the_next_pass() {
    let db = TestDatabase::create().await;
    let store = db.store().await.unwrap();
    let d5 = today() - 5 * DAY_MS;
    store.make_partitions(d5).await.unwrap();
    let name = partition_name("events", d5);
    sqlx::query(&format!("ALTER TABLE events DETACH PARTITION {name}"))
        .execute(store.postgres_pool().unwrap())
        .await
        .unwrap();
    assert!(
        store.make_partitions(d5).await.unwrap().is_empty(),
        "a detached day is never attached again"
    );
    let dropped = store.drop_expired_partitions(today()).await.unwrap();
    assert!(dropped.contains(&name), "{dropped:?}");
    let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(&name)
        .fetch_one(store.postgres_pool().unwrap())
        .await
        .unwrap();
    assert!(!exists);
    store.close().await;
}

#[tokio::test]
async fn a_page_over_a_time_range_reads_only_the_partitions_of_that_range() {
    let db = TestDatabase::create().await;
    let store = db.store().await.unwrap();
    store
        .ingest(
            &BatchBuilder::new("app", "a:1", 1)
                .member(
                    today() + 1,
                    EventBody::MemberUp,
                    "a:1",
                    MemberStatus::Up,
                    &[],
                )
                .build(),
            today() + 2,
        )
        .await
        .unwrap();
    let cluster = cluster_id(&store, "app").await;
    let yesterday = today() - DAY_MS;
    let events = store
        .explain_events(
            cluster,
            &EventFilter {
                since_ms: Some(today() + 3_600_000),
                until_ms: Some(today() + 7_200_000),
                limit: 50,
                ..EventFilter::default()
            },
        )
        .await
        .unwrap()
        .expect("a plan on PostgreSQL");
    assert!(
        events.contains(&partition_name("events", today())),
        "{events}"
    );
    for other in [
        "events_default".to_owned(),
        partition_name("events", yesterday),
    ] {
        assert!(!events.contains(&other), "{other} not scanned:\n{events}");
    }
    // Two days of dead letters read two partitions.
    let dead_letters = store
        .explain_dead_letters(
            cluster,
            &DeadLetterFilter {
                since_ms: Some(yesterday + 1),
                until_ms: Some(today() + 1),
                limit: 50,
                ..DeadLetterFilter::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    for scanned in [yesterday, today()] {
        let name = partition_name("dead_letters", scanned);
        assert!(dead_letters.contains(&name), "{name}:\n{dead_letters}");
    }
    assert!(
        !dead_letters.contains(&partition_name("dead_letters", today() + DAY_MS)),
        "{dead_letters}"
    );
    let ticks = store
        .explain_depth_ticks(cluster, today(), today() + 60_000, 10)
        .await
        .unwrap()
        .unwrap();
    assert!(
        ticks.contains(&partition_name("depth_ticks", today())),
        "{ticks}"
    );
    assert!(!ticks.contains("depth_ticks_default"), "{ticks}");
    store.close().await;
}
