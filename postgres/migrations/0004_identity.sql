-- The same columns and meaning as the SQLite ledger's 0004_identity.sql:
-- which machine (instance_id: the cloud's instance ID or a hash of the host
-- name and machine-id) and which boot of it (boot_id) registered each node,
-- so that a second box sending a live node's ID is refused rather than
-- merged into it. '' is unknown and never compared. Version 3 is the
-- sessions migration; the two are independent.
ALTER TABLE nodes ADD COLUMN instance_id TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN boot_id TEXT NOT NULL DEFAULT '';
