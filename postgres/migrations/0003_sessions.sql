-- Dashboard sign-ins, as in the SQLite ledger's 0003_sessions.sql, BYTEA
-- for its BLOB. The browser's cookie holds a random session ID; only its
-- SHA-256 is kept, with the token it stands for and its absolute expiry.
-- Being in the database, a session opens every replica that shares it.
CREATE TABLE sessions (
    id_hash    BYTEA NOT NULL PRIMARY KEY,
    token_id   TEXT COLLATE "C" NOT NULL,
    created_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL
);

CREATE INDEX sessions_expires ON sessions (expires_ms);
CREATE INDEX sessions_token ON sessions (token_id);
