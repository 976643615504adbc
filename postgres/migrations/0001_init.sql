-- The agent's ledger on PostgreSQL: the same tables and meaning as the SQLite
-- ledger's 0001_init.sql. BIGINT for milliseconds and bytes (INTEGER is 32
-- bits), DOUBLE PRECISION because REAL is single precision. Times are Unix
-- milliseconds; JSON columns are TEXT, NULL when empty, so that both ledgers
-- store byte-identical values.

-- One row per agent tick, at one-second resolution.
CREATE TABLE host_samples (
    time_ms         BIGINT NOT NULL PRIMARY KEY,
    cpu_percent     DOUBLE PRECISION NOT NULL,
    cpu_per_core    TEXT,
    iowait_percent  DOUBLE PRECISION NOT NULL,
    load1           DOUBLE PRECISION NOT NULL,
    mem_used_bytes  BIGINT NOT NULL,
    mem_total_bytes BIGINT NOT NULL,
    disk_read_bps   DOUBLE PRECISION NOT NULL,
    disk_write_bps  DOUBLE PRECISION NOT NULL,
    net_rx_bps      DOUBLE PRECISION NOT NULL,
    net_tx_bps      DOUBLE PRECISION NOT NULL,
    sessions        BIGINT NOT NULL,
    processes       TEXT
);

-- One row per GPU per tick; time_ms is the tick's, so a tick's rows join on it.
CREATE TABLE gpu_samples (
    time_ms          BIGINT NOT NULL,
    gpu              BIGINT NOT NULL,
    util_percent     DOUBLE PRECISION NOT NULL,
    mem_util_percent DOUBLE PRECISION NOT NULL,
    mem_used_bytes   BIGINT NOT NULL,
    mem_total_bytes  BIGINT NOT NULL,
    power_w          DOUBLE PRECISION NOT NULL,
    temp_c           DOUBLE PRECISION NOT NULL,
    sm_clock_mhz     BIGINT NOT NULL,
    mem_clock_mhz    BIGINT NOT NULL,
    throttle_reasons TEXT,
    processes        TEXT,
    PRIMARY KEY (time_ms, gpu)
);

-- One-minute averages of host_samples; samples counts the ticks averaged so
-- that a late tick can be folded in with the right weight.
CREATE TABLE host_rollups (
    minute_ms       BIGINT NOT NULL PRIMARY KEY,
    samples         BIGINT NOT NULL,
    cpu_percent     DOUBLE PRECISION NOT NULL,
    cpu_per_core    TEXT,
    iowait_percent  DOUBLE PRECISION NOT NULL,
    load1           DOUBLE PRECISION NOT NULL,
    mem_used_bytes  BIGINT NOT NULL,
    mem_total_bytes BIGINT NOT NULL,
    disk_read_bps   DOUBLE PRECISION NOT NULL,
    disk_write_bps  DOUBLE PRECISION NOT NULL,
    net_rx_bps      DOUBLE PRECISION NOT NULL,
    net_tx_bps      DOUBLE PRECISION NOT NULL,
    sessions        BIGINT NOT NULL,
    processes       TEXT
);

-- One-minute averages of gpu_samples, per GPU.
CREATE TABLE gpu_rollups (
    minute_ms        BIGINT NOT NULL,
    gpu              BIGINT NOT NULL,
    samples          BIGINT NOT NULL,
    util_percent     DOUBLE PRECISION NOT NULL,
    mem_util_percent DOUBLE PRECISION NOT NULL,
    mem_used_bytes   BIGINT NOT NULL,
    mem_total_bytes  BIGINT NOT NULL,
    power_w          DOUBLE PRECISION NOT NULL,
    temp_c           DOUBLE PRECISION NOT NULL,
    sm_clock_mhz     BIGINT NOT NULL,
    mem_clock_mhz    BIGINT NOT NULL,
    throttle_reasons TEXT,
    processes        TEXT,
    PRIMARY KEY (minute_ms, gpu)
);

-- Alerts, warnings and actions. dedup_key is UNIQUE so that an event with a
-- key happens once across restarts; NULLs are distinct, so events without a
-- key never conflict. id orders events recorded in the same millisecond.
CREATE TABLE events (
    id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    time_ms   BIGINT NOT NULL,
    kind      TEXT NOT NULL,
    severity  TEXT NOT NULL,
    message   TEXT NOT NULL,
    dedup_key TEXT UNIQUE,
    data      TEXT
);

CREATE INDEX events_time ON events (time_ms, id);

-- Small named values the agent must keep across restarts.
CREATE TABLE state (
    name  TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
);
