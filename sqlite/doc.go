// Package sqlite is the agent's local ledger on modernc.org/sqlite (pure Go,
// no cgo): samples with their one-minute rollups, events with their dedup
// keys, and small named state, in one file under the data directory.
package sqlite

import _ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
