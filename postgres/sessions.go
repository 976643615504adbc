package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/fleetrow"
)

// CreateSession stores a new session; a taken ID hash is a conflict.
func (f *Fleet) CreateSession(ctx context.Context, s gpuwarden.Session) error {
	args, err := fleetrow.SessionArgs(s)
	if err != nil {
		return err
	}
	tag, err := f.pool.Exec(ctx, fleetrow.InsertSessionSQL, args...)
	if err != nil {
		return f.wrap("create session for token "+s.TokenID, err)
	}
	if tag.RowsAffected() == 0 {
		return gpuwarden.Errorf(gpuwarden.EConflict, "create session for token %s: the id is taken", s.TokenID)
	}
	return nil
}

// Session returns a session by the SHA-256 of its ID, expired or not.
func (f *Fleet) Session(ctx context.Context, idHash []byte) (gpuwarden.Session, error) {
	if !fleetrow.ValidSessionHash(idHash) {
		return gpuwarden.Session{}, gpuwarden.Errorf(gpuwarden.ENotFound, "session not found")
	}
	var r fleetrow.SessionRow
	err := f.pool.QueryRow(ctx, fleetrow.SessionSQL, idHash).Scan(r.Dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return gpuwarden.Session{}, gpuwarden.Errorf(gpuwarden.ENotFound, "session not found")
	}
	if err != nil {
		return gpuwarden.Session{}, f.wrap("read session", err)
	}
	return r.Session(), nil
}

// DeleteSession removes a session; an unknown one is no error.
func (f *Fleet) DeleteSession(ctx context.Context, idHash []byte) error {
	if !fleetrow.ValidSessionHash(idHash) {
		return nil
	}
	if _, err := f.pool.Exec(ctx, fleetrow.DeleteSessionSQL, idHash); err != nil {
		return f.wrap("delete session", err)
	}
	return nil
}
