package fleetrow

import (
	"crypto/sha256"

	"github.com/gpuwarden/gpuwarden"
)

// ---- sessions ----

// SessionCols are the columns of sessions in the order of SessionRow.Dest.
const SessionCols = "id_hash, token_id, created_ms, expires_ms"

// InsertSessionSQL stores a new session; a taken hash inserts nothing, which
// the caller reports as a conflict without parsing database errors.
const InsertSessionSQL = `INSERT INTO sessions (` + SessionCols + `) VALUES ($1, $2, $3, $4)
ON CONFLICT (id_hash) DO NOTHING`

// SessionSQL reads one session by the hash of its ID.
const SessionSQL = `SELECT ` + SessionCols + ` FROM sessions WHERE id_hash = $1`

// DeleteSessionSQL removes one session.
const DeleteSessionSQL = `DELETE FROM sessions WHERE id_hash = $1`

// SweepSessionsSQL removes, at $1, the sessions that expired and those of
// revoked tokens: the server refuses them anyway, and a sign-in leaves no
// row behind for longer than it could be used.
const SweepSessionsSQL = `DELETE FROM sessions WHERE expires_ms <= $1
OR token_id IN (SELECT id FROM tokens WHERE revoked_ms IS NOT NULL)`

// SessionArgs checks s and returns InsertSessionSQL's arguments.
func SessionArgs(s gpuwarden.Session) ([]any, error) {
	switch {
	case len(s.IDHash) != sha256.Size:
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "create session: the id hash has %d bytes, not %d", len(s.IDHash), sha256.Size).
			WithHint("store the SHA-256 of the session ID")
	case s.TokenID == "" || !Text(s.TokenID):
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "create session: no token id, or one that is not UTF-8 without NUL")
	case s.Created.IsZero() || s.Expires.IsZero() || !s.Expires.After(s.Created):
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "create session for token %s: it needs a creation time and a later expiry", s.TokenID)
	}
	return []any{s.IDHash, s.TokenID, Ms(s.Created), Ms(s.Expires)}, nil
}

// SessionRow is a row of sessions as stored.
type SessionRow struct {
	IDHash           []byte
	TokenID          string
	Created, Expires int64
}

// Dest is the scan destinations of SessionCols.
func (r *SessionRow) Dest() []any { return []any{&r.IDHash, &r.TokenID, &r.Created, &r.Expires} }

// Session is the row as a Session.
func (r *SessionRow) Session() gpuwarden.Session {
	return gpuwarden.Session{IDHash: append([]byte(nil), r.IDHash...), TokenID: r.TokenID,
		Created: Time(r.Created), Expires: Time(r.Expires)}
}

// ValidSessionHash reports whether h can be a stored session's key; any
// other value finds nothing without a query.
func ValidSessionHash(h []byte) bool { return len(h) == sha256.Size }
