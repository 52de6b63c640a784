-- History partitioned by day (issue 16): `events`, `dead_letters` and `depth_ticks` become
-- tables partitioned by range of `at_ms`, one partition per UTC day (`<table>_pYYYYMMDD`,
-- [midnight, next midnight) in epoch milliseconds) and a default partition (`<table>_default`)
-- for rows of days that have none. Retention then detaches and drops whole days instead of
-- deleting rows, and a query over a time range reads only the partitions of that range.
--
-- # Keys
-- A unique key of a partitioned table must include the partition column, so the primary key
-- becomes `(id, at_ms)`. Ids stay unique all the same: they come from one sequence per table
-- (`<table>_id_seq`, a plain sequence as the column default rather than an identity column,
-- so that the rows moved here keep their ids), and nothing inserts an id of its own. The
-- ids keep their meaning as live stream positions (`crate::feed`): the sequence continues
-- where the old identity stopped, so no id is ever handed out twice, and the key's leading
-- `id` still serves "this cluster's rows after id N" in id order. None of the three tables
-- is the target of an `ON CONFLICT` (the idempotency of a batch is `batches`' key).
--
-- # Existing data
-- Every row is kept with its id. Each table is renamed, the partitioned table is made in its
-- place with a partition for every day the old rows fall on (epoch days >= 0; earlier rows go
-- to the default partition) and for today and the next 3 days, the rows are copied, the old
-- table dropped and every index it had (whatever earlier migrations made, read from
-- `pg_indexes`) made again on the partitioned table, which makes it on every partition. The
-- server makes the partitions of the coming days from then on (see `store::partitions`).
-- This runs in one transaction, like every migration: a big history takes a while to copy,
-- and the server does not serve before it is done.

DO $migration$
DECLARE
    tbl text;
    old text;
    seq text;
    idx record;
    day bigint;
    today bigint := floor(extract(epoch FROM now()) / 86400)::bigint;
    columns text;
BEGIN
    CREATE TEMP TABLE partition_indexes (table_name text, def text) ON COMMIT DROP;
    FOREACH tbl IN ARRAY ARRAY['events', 'dead_letters', 'depth_ticks'] LOOP
        old := tbl || '_unpartitioned';
        seq := tbl || '_id_seq';
        -- Index definitions (the primary key apart), taken before the rename changes them.
        INSERT INTO partition_indexes
            SELECT tbl, i.indexdef FROM pg_indexes i
            WHERE i.schemaname = current_schema() AND i.tablename = tbl
              AND i.indexname <> tbl || '_pkey';
        EXECUTE format('ALTER TABLE %I RENAME TO %I', tbl, old);
        EXECUTE format('ALTER SEQUENCE %I RENAME TO %I', seq, old || '_id_seq');
        -- The same columns in the same order, without the identity.
        SELECT string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod))
                   || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END, ', '
                   ORDER BY a.attnum)
            INTO columns
            FROM pg_attribute a
            WHERE a.attrelid = old::regclass AND a.attnum > 0 AND NOT a.attisdropped;
        EXECUTE format('CREATE TABLE %I (%s) PARTITION BY RANGE (at_ms)', tbl, columns);
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', tbl || '_default', tbl);
        FOR day IN EXECUTE format(
            'SELECT DISTINCT at_ms / 86400000 FROM %I WHERE at_ms >= 0
             UNION SELECT generate_series($1, $1 + 3)', old) USING today
        LOOP
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%s) TO (%s)',
                tbl || '_p' || to_char(to_timestamp(day * 86400) AT TIME ZONE 'UTC', 'YYYYMMDD'),
                tbl, day * 86400000, (day + 1) * 86400000);
        END LOOP;
        EXECUTE format('CREATE SEQUENCE %I OWNED BY %I.id', seq, tbl);
        EXECUTE format('SELECT setval(%L, last_value, is_called) FROM %I', seq, old || '_id_seq');
        EXECUTE format('ALTER TABLE %I ALTER COLUMN id SET DEFAULT nextval(%L)', tbl, seq);
        SELECT string_agg(format('%I', a.attname), ', ' ORDER BY a.attnum) INTO columns
            FROM pg_attribute a
            WHERE a.attrelid = old::regclass AND a.attnum > 0 AND NOT a.attisdropped;
        EXECUTE format('INSERT INTO %I (%s) SELECT %s FROM %I', tbl, columns, columns, old);
        EXECUTE format('DROP TABLE %I', old);
        EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (id, at_ms)', tbl);
        FOR idx IN SELECT def FROM partition_indexes WHERE table_name = tbl LOOP
            EXECUTE idx.def;
        END LOOP;
    END LOOP;
END
$migration$;
