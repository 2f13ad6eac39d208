package wire

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// Nonce is an ILNPv6 nonce value (RFC 6744 s.2): 4 or 12 bytes. It is
// comparable with ==; the zero Nonce (Len 0) means "no nonce".
type Nonce struct {
	b [12]byte
	n uint8
}

// NonceFromBytes copies a 4- or 12-byte nonce (RFC 6744 s.2 allows only
// these two lengths).
func NonceFromBytes(b []byte) (Nonce, error) {
	if len(b) != 4 && len(b) != 12 {
		return Nonce{}, fmt.Errorf("nonce: %d bytes, want 4 or 12 (RFC 6744 s.2)", len(b))
	}
	var n Nonce
	copy(n.b[:], b)
	n.n = uint8(len(b))
	return n, nil
}

// RandomNonce returns a new unpredictable nonce of size 4 or 12 bytes from
// crypto/rand (RFC 6744 s.3 requires nonces to be hard to guess).
func RandomNonce(size int) (Nonce, error) {
	if size != 4 && size != 12 {
		return Nonce{}, fmt.Errorf("random nonce: size %d, want 4 or 12 (RFC 6744 s.2)", size)
	}
	var b [12]byte
	if _, err := rand.Read(b[:size]); err != nil {
		return Nonce{}, fmt.Errorf("random nonce: %w", err)
	}
	return NonceFromBytes(b[:size])
}

// Bytes returns a copy of the nonce value (nil for the zero Nonce).
func (n Nonce) Bytes() []byte {
	if n.n == 0 {
		return nil
	}
	return append([]byte(nil), n.b[:n.n]...)
}

// Len is 4, 12, or 0 for the zero Nonce.
func (n Nonce) Len() int { return int(n.n) }

// IsZero reports whether n is the zero Nonce, i.e. no nonce at all. A 4-byte
// nonce whose bytes are all zero is not zero.
func (n Nonce) IsZero() bool { return n.n == 0 }

// String returns the nonce in lower-case hex, "" for the zero Nonce.
func (n Nonce) String() string { return hex.EncodeToString(n.b[:n.n]) }
