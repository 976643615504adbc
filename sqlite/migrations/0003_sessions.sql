-- Dashboard sign-ins. The browser's cookie holds a random session ID; only
-- its SHA-256 is kept, with the token it stands for and its absolute expiry
-- (Unix milliseconds, as in 0002). The server checks the token on every use,
-- so a revoked token's sessions are refused before Retain deletes them.
CREATE TABLE sessions (
    id_hash    BLOB NOT NULL PRIMARY KEY,
    token_id   TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL
);

CREATE INDEX sessions_expires ON sessions (expires_ms);
CREATE INDEX sessions_token ON sessions (token_id);
