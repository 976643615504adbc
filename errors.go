package gpuwarden

import (
	"errors"
	"fmt"
)

// ErrorCode classifies an application error so that the CLI and the HTTP API
// can each map it once, to an exit code and to a status.
type ErrorCode string

// The error codes; the CLI maps them to exit codes in one place.
const (
	// EInvalid is bad input: a malformed file, row or flag (exit 2).
	EInvalid ErrorCode = "invalid"
	// ENotFound is a missing file or record (exit 2 on the CLI).
	ENotFound ErrorCode = "not_found"
	// EUnauthorized is a missing or wrong token.
	EUnauthorized ErrorCode = "unauthorized"
	// EForbidden is a valid token asking for what its project or role
	// does not allow.
	EForbidden ErrorCode = "forbidden"
	// EConflict is a write that clashes with existing state.
	EConflict ErrorCode = "conflict"
	// EFinding is a result the user must act on: nothing fits, drift, FAIL (exit 1).
	EFinding ErrorCode = "finding"
	// EEnvironment is a missing driver, GPU or tool on this machine (exit 3).
	EEnvironment ErrorCode = "environment"
	// EUnavailable is a store that cannot take writes now: a full disk, a
	// read-only or vanished database, a lost connection (HTTP 503 with
	// Retry-After, exit 3). Retrying later may succeed; nothing was written.
	EUnavailable ErrorCode = "unavailable"
	// EInternal is a bug or an unexpected failure (exit 4).
	EInternal ErrorCode = "internal"
)

// Error is the one application error: a code, a message the user can read,
// and a hint that says what to do about it.
type Error struct {
	Code    ErrorCode
	Message string
	Hint    string
	Err     error
}

// Error returns the message, followed by the wrapped cause when there is one.
func (e *Error) Error() string {
	if e.Err != nil && e.Message == "" {
		return e.Err.Error()
	}
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

// Unwrap exposes the cause to errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an application error with a formatted message.
func Errorf(code ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithHint returns the error with a hint attached.
func (e *Error) WithHint(format string, args ...any) *Error {
	e.Hint = fmt.Sprintf(format, args...)
	return e
}

// ErrorCodeOf returns the code of the first application error in err's chain,
// EInternal for any other error, and "" for nil.
func ErrorCodeOf(err error) ErrorCode {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

// ErrorHint returns the hint of the first application error in err's chain.
func ErrorHint(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Hint
	}
	return ""
}
