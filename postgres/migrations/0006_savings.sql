-- Version 6: the savings ledger (issue #29), one row per event, in the
-- agent's file and the fleet server's alike. The ID is the event's
-- deterministic ID, so recording an event again replaces it (the agent
-- re-prices a stop once the box starts again). Amounts are exact: the
-- rate in micros per hour, the hours in micro-hours, the amount in cents.
CREATE TABLE savings (
    id           TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    kind         TEXT NOT NULL,
    node_id      TEXT COLLATE "C" NOT NULL,
    project      TEXT NOT NULL,
    owner        TEXT NOT NULL,
    from_ms      BIGINT NOT NULL,
    to_ms        BIGINT NOT NULL,
    hours_micros BIGINT NOT NULL,
    rate_micros  BIGINT NOT NULL,
    rate_source  TEXT NOT NULL,
    amount_cents BIGINT NOT NULL,
    currency     TEXT NOT NULL,
    basis        TEXT NOT NULL,
    evidence     TEXT NOT NULL,
    not_saved    TEXT NOT NULL,
    at_ms        BIGINT NOT NULL
);

CREATE INDEX savings_from ON savings (from_ms);
CREATE INDEX savings_at ON savings (at_ms);
