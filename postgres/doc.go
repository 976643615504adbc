// Package postgres is the ledger of a fleet on PostgreSQL through
// jackc/pgx: the same tables, rollups, dedup keys and state as the agent's
// SQLite ledger, and the server's fleet ledger (OpenFleet), so that a server
// can hold many agents' history and the shared conformance suites
// (ledgertest) hold both databases to one behaviour.
package postgres
