package sqlite

import (
	"context"
	"errors"
	"syscall"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// unavailable reports a failure of the database, not of the request: a
// full disk, a read-only or vanished file, an I/O error, a lock held too
// long. The request may succeed later, unchanged; the API says 503.
func unavailable(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary result code
		case sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN,
			sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_NOLFS:
			return true
		}
	}
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EIO) ||
		errors.Is(err, context.DeadlineExceeded)
}

// unavailableHint says what to do about an unavailable database file.
const unavailableHint = "the database cannot take writes now: free disk space and check that the file and its folder are writable; agents keep what they have and send it again"
