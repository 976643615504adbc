package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// unavailable reports a failure of the database, not of the request: the
// server gone or refusing connections, a full disk, a read-only standby,
// too many connections. The request may succeed later, unchanged; the API
// says 503.
func unavailable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"),                           // insufficient resources: disk full, out of memory, too many connections
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", // admin or crash shutdown, cannot connect now
			pe.Code == "25006", // read-only SQL transaction: a standby
			pe.Code == "58030": // I/O error
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded)
}

// unavailableHint says what to do about an unavailable database.
const unavailableHint = "the database cannot take writes now: check that PostgreSQL runs, accepts connections and has disk space, and that --db names the primary; agents keep what they have and send it again"
