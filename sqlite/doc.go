// Package sqlite is the agent's local ledger on modernc.org/sqlite (pure Go,
// no cgo): samples with their one-minute rollups, events with their dedup
// keys, and small named state, in one file under the data directory. The
// same file format holds the server's fleet ledger (OpenFleet) for a small
// fleet that needs no database server: both share one migration sequence.
package sqlite

import _ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
