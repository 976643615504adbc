-- The fleet ledger: projects, tokens, nodes and what their agents shipped.
-- It shares the migration sequence with the agent's tables, so an agent's
-- file simply has these tables empty. Types are spelled as in 0001 so that
-- postgres/migrations/0002_fleet.sql means the same thing: BIGINT Unix
-- milliseconds, DOUBLE PRECISION, JSON as TEXT (NULL when empty). There are
-- no foreign keys: nodes are never deleted, every write checks its node in
-- its own transaction, and a key check would cost each hot insert a lookup.

-- A team's share of the fleet; budget_cents is the monthly limit, 0 for none.
CREATE TABLE projects (
    name         TEXT NOT NULL PRIMARY KEY,
    budget_cents BIGINT NOT NULL,
    currency     TEXT NOT NULL,
    created_ms   BIGINT NOT NULL
);

-- API credentials; hash is the secret's SHA-256, revoked_ms NULL while valid.
-- project is '*' for a fleet-wide token, so it references no project row.
CREATE TABLE tokens (
    id         TEXT NOT NULL PRIMARY KEY,
    project    TEXT NOT NULL,
    role       TEXT NOT NULL,
    name       TEXT NOT NULL,
    hash       BLOB,
    created_ms BIGINT NOT NULL,
    revoked_ms BIGINT
);

CREATE INDEX tokens_project ON tokens (project, id);

-- One row per box. labels, gpus and live are the JSON the agent sent; owner,
-- provider, region, hourly_price_micros and currency repeat labels' fields
-- as columns so that Ingest prices a minute without decoding JSON and
-- reports can group by them. last_seen_ms and live are NULL until the first
-- heartbeat.
CREATE TABLE nodes (
    id                  TEXT NOT NULL PRIMARY KEY,
    project             TEXT NOT NULL,
    hostname            TEXT NOT NULL,
    owner               TEXT NOT NULL,
    provider            TEXT NOT NULL,
    region              TEXT NOT NULL,
    hourly_price_micros BIGINT NOT NULL,
    currency            TEXT NOT NULL,
    labels              TEXT NOT NULL,
    gpus                TEXT,
    agent_version       TEXT NOT NULL,
    token_id            TEXT NOT NULL,
    registered_ms       BIGINT NOT NULL,
    last_seen_ms        BIGINT,
    live                TEXT
);

CREATE INDEX nodes_project ON nodes (project, id);

-- One row per node per minute the agent shipped. The primary key is the
-- dedup key of a replayed minute: a minute is counted into node_hours only
-- when its row is new. gpu_util and gpu_mem_percent are JSON arrays by GPU
-- index. Kept 35 days, longer than an agent keeps minutes to replay.
CREATE TABLE node_minutes (
    node_id         TEXT NOT NULL,
    minute_ms       BIGINT NOT NULL,
    samples         BIGINT NOT NULL,
    cpu_percent     DOUBLE PRECISION NOT NULL,
    gpu_util        TEXT,
    gpu_mem_percent TEXT,
    PRIMARY KEY (node_id, minute_ms)
);

CREATE INDEX node_minutes_minute ON node_minutes (minute_ms);

-- One row per node per clock hour: the minutes it was up and price_minutes,
-- the sum of the node's hourly price (micros) over those minutes, so that
-- the hour costs price_minutes/60 rounded once, exactly, even when the price
-- changed within the hour.
CREATE TABLE node_hours (
    node_id       TEXT NOT NULL,
    hour_ms       BIGINT NOT NULL,
    minutes       BIGINT NOT NULL,
    price_minutes BIGINT NOT NULL,
    currency      TEXT NOT NULL,
    PRIMARY KEY (node_id, hour_ms)
);

CREATE INDEX node_hours_hour ON node_hours (hour_ms);

-- One row per GPU of a node hour: its minutes and the sum of its per-minute
-- utilisation, so that an upsert adds to it and a read divides.
CREATE TABLE gpu_hours (
    node_id  TEXT NOT NULL,
    hour_ms  BIGINT NOT NULL,
    gpu      BIGINT NOT NULL,
    minutes  BIGINT NOT NULL,
    util_sum DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (node_id, hour_ms, gpu)
);

CREATE INDEX gpu_hours_hour ON gpu_hours (hour_ms);

-- Events the agents shipped, keyed by the agent's sequence number so that a
-- replay stores nothing twice.
CREATE TABLE fleet_events (
    node_id   TEXT NOT NULL,
    seq       BIGINT NOT NULL,
    time_ms   BIGINT NOT NULL,
    kind      TEXT NOT NULL,
    severity  TEXT NOT NULL,
    message   TEXT NOT NULL,
    dedup_key TEXT,
    data      TEXT,
    PRIMARY KEY (node_id, seq)
);

CREATE INDEX fleet_events_time ON fleet_events (time_ms);
CREATE INDEX fleet_events_node_time ON fleet_events (node_id, time_ms);
