package mh

import (
	"errors"
	"fmt"
)

// Sentinel causes; every error returned by this package wraps one of them in an *Error, so
// callers test with errors.Is and read the position with errors.As.
var (
	// ErrTruncated: the buffer ends before a header, message or option does.
	ErrTruncated = errors.New("truncated")
	// ErrLength: a length field disagrees with the fixed size of what it describes, or with
	// the bytes present (e.g. trailing bytes after the Mobility Header).
	ErrLength = errors.New("bad length")
	// ErrPayloadProto: the Mobility Header's Payload Proto is not IPPROTO_NONE (59).
	ErrPayloadProto = errors.New("payload proto is not IPPROTO_NONE")
	// ErrUnknownType: an MH Type this package does not know (RFC 6275 s.9.2: answer with a
	// Binding Error, status 2).
	ErrUnknownType = errors.New("unknown MH type")
	// ErrTooShort: Header Len is smaller than the MH type's fixed part (RFC 6275 s.9.2).
	ErrTooShort = errors.New("header len below the type's minimum")
	// ErrChecksum: the Mobility Header checksum over the pseudo-header is wrong.
	ErrChecksum = errors.New("bad checksum")
	// ErrMisaligned: an option or the Home Address option does not start at its required
	// alignment (RFC 6275 s.6.2, s.6.3).
	ErrMisaligned = errors.New("misaligned option")
	// ErrAuthNotLast: the Binding Authorization Data option is not the last bytes of the
	// Mobility Header (RFC 6275 s.6.2.7: last option, no trailing padding).
	ErrAuthNotLast = errors.New("binding authorization data is not the last option")
	// ErrBadAddress: an address that must be a routable unicast IPv6 address is not.
	ErrBadAddress = errors.New("address is not routable unicast IPv6")
	// ErrRoutingType: a Routing header that is not type 2, or a type 2 header of a wrong size.
	ErrRoutingType = errors.New("not a type 2 routing header")
	// ErrSegmentsLeft: a type 2 routing header whose Segments Left is not 1 (RFC 6275 s.6.4).
	ErrSegmentsLeft = errors.New("segments left is not 1")
	// ErrDuplicate: a Home Address option or type 2 routing header appears twice.
	ErrDuplicate = errors.New("duplicate")
	// ErrUnknownOption: a destination option whose action bits say "do not skip" (RFC 8200
	// s.4.2).
	ErrUnknownOption = errors.New("unrecognised destination option that must not be skipped")
	// ErrHeader: an IPv6 header or extension header this package does not handle.
	ErrHeader = errors.New("unsupported header")
	// ErrInvalid: a value given to an encoder is out of range.
	ErrInvalid = errors.New("invalid value")
)

// Error locates a failure: which structure, the byte offset in the buffer handed to the
// parser (-1 for encoders), and the cause.
type Error struct {
	Where  string
	Offset int
	Err    error
	Detail string
}

func (e *Error) Error() string {
	s := "mh: " + e.Where
	if e.Offset >= 0 {
		s += fmt.Sprintf(" at offset %d", e.Offset)
	}
	s += ": " + e.Err.Error()
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

func errAt(where string, off int, err error, format string, args ...any) error {
	return &Error{Where: where, Offset: off, Err: err, Detail: fmt.Sprintf(format, args...)}
}
