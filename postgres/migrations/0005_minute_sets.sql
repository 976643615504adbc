-- Version 5: a node's minutes as one row per node hour instead of one row
-- per minute. minute_sets.bits has bit i set when minute i of the hour is
-- stored: all that the dedup of a replayed minute needs. What a minute
-- said is added to its hour, as utilisation and cost already were:
-- node_hours gains the sums of the minutes' sample counts and CPU
-- percentages, gpu_hours the sum of the memory use. Nothing read a minute
-- row back, and the rows cost 270 KB per 1-GPU node-day
-- (BenchmarkStorageGrowth); the sets and sums cost a few. Hours stored
-- before this version, whose minutes were already past retention, keep
-- samples 0: not recorded. Sets are kept as long as minutes were (35 days).
CREATE TABLE minute_sets (
    node_id TEXT COLLATE "C" NOT NULL,
    hour_ms BIGINT NOT NULL,
    bits    BIGINT NOT NULL,
    PRIMARY KEY (node_id, hour_ms)
);

CREATE INDEX minute_sets_hour ON minute_sets (hour_ms);

-- Minutes are stored at their start (a multiple of 60,000 ms); the modulo
-- is floored so that minutes before 1970 fall in the right hour. The
-- primary key made each minute unique.
INSERT INTO minute_sets (node_id, hour_ms, bits)
SELECT node_id, hour_ms, bit_or(bit) FROM (
    SELECT node_id,
           minute_ms - ((minute_ms % 3600000) + 3600000) % 3600000 AS hour_ms,
           1::bigint << ((((minute_ms % 3600000) + 3600000) % 3600000) / 60000)::int AS bit
    FROM node_minutes) AS m
GROUP BY node_id, hour_ms;

ALTER TABLE node_hours ADD COLUMN samples BIGINT NOT NULL DEFAULT 0;
ALTER TABLE node_hours ADD COLUMN cpu_sum DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE gpu_hours ADD COLUMN mem_sum DOUBLE PRECISION NOT NULL DEFAULT 0;

UPDATE node_hours SET (samples, cpu_sum) = (
    SELECT COALESCE(SUM(m.samples), 0), COALESCE(SUM(m.cpu_percent), 0) FROM node_minutes m
    WHERE m.node_id = node_hours.node_id AND m.minute_ms >= node_hours.hour_ms AND m.minute_ms < node_hours.hour_ms + 3600000);

UPDATE gpu_hours SET mem_sum = (
    SELECT COALESCE(SUM((m.gpu_mem_percent::jsonb ->> gpu_hours.gpu::int)::float8), 0) FROM node_minutes m
    WHERE m.node_id = gpu_hours.node_id AND m.minute_ms >= gpu_hours.hour_ms AND m.minute_ms < gpu_hours.hour_ms + 3600000
      AND m.gpu_util IS NOT NULL AND jsonb_array_length(m.gpu_util::jsonb) > gpu_hours.gpu);

DROP INDEX node_minutes_minute;
DROP TABLE node_minutes;
