// Errors returned by the MicroView Go writer, one per libmicroview MV_ERR_* code.

package microview

import "errors"

// The kinds of error a writer reports. Test with errors.Is(err, microview.ErrFull);
// the error's text says what went wrong and what to do about it.
var (
	ErrNoEnv     = errors.New("MICROVIEW_SEGMENT is not set")                           // MV_ERR_NOENV
	ErrNoSegment = errors.New("segment not found")                                      // MV_ERR_NOSEGMENT
	ErrFormat    = errors.New("not a valid MicroView segment")                          // MV_ERR_FORMAT
	ErrFull      = errors.New("segment full")                                           // MV_ERR_FULL
	ErrName      = errors.New("invalid metric or label name")                           // MV_ERR_NAME
	ErrInvalid   = errors.New("invalid argument")                                       // MV_ERR_INVALID
	ErrConflict  = errors.New("metric already registered with another type or buckets") // MV_ERR_CONFLICT
	ErrBusy      = errors.New("segment registration lock busy")                         // MV_ERR_BUSY
	ErrIO        = errors.New("I/O error")                                              // MV_ERR_IO
)

// Error is a failure of one call: Kind is one of the Err* values above.
type Error struct {
	Kind   error
	Detail string
}

func (e *Error) Error() string { return e.Kind.Error() + ": " + e.Detail }

// Unwrap lets errors.Is match the kind.
func (e *Error) Unwrap() error { return e.Kind }

func fail(kind error, detail string) error { return &Error{Kind: kind, Detail: detail} }
