// Package rr is the return routability cryptography of Mobile IPv6 (RFC 6275 s.5.2): the
// correspondent's secret Kcn and nonces, the home and care-of keygen tokens, the binding
// management key Kbm and the Binding Authorization Data authenticator.
//
// Pure: randomness comes from an io.Reader the caller passes, time from the caller's clock.
package rr

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // RFC 6275 s.5.2 mandates HMAC_SHA1 and SHA1.
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"ilnp/lab/mipv6/mh"
)

// RFC 6275 s.12 protocol constants for return routability.
const (
	// MaxNonceLifetime is how long a correspondent accepts a nonce after generating it.
	MaxNonceLifetime = 240 * time.Second
	// MaxTokenLifetime is how long a mobile node uses a keygen token after receiving it.
	MaxTokenLifetime = 210 * time.Second
	// MaxRRBindingLifetime caps the lifetime of a binding authorised by return routability.
	MaxRRBindingLifetime = 420 * time.Second
)

// KeyLen is the size of Kcn and Kbm (SHA1 / HMAC_SHA1, s.5.2.1, s.5.2.5).
const KeyLen = sha1.Size

// Key is Kcn (the correspondent's secret) or Kbm (the binding management key).
type Key [KeyLen]byte

// NonceLen is the nonce size this implementation uses (s.5.2.2 leaves it to the
// implementation; 64 bits like the cookies and tokens).
const NonceLen = 8

// Nonce is a correspondent's nonce.
type Nonce [NonceLen]byte

// NewKey draws a Kcn from rand.
func NewKey(rand io.Reader) (Key, error) {
	var k Key
	if _, err := io.ReadFull(rand, k[:]); err != nil {
		return Key{}, fmt.Errorf("rr: drawing Kcn: %w", err)
	}
	return k, nil
}

// keygenToken is First(64, HMAC_SHA1(Kcn, (address | nonce | which))) (s.5.2.5).
func keygenToken(kcn Key, addr netip.Addr, n Nonce, which byte) mh.Token {
	a := addr.As16()
	m := hmac.New(sha1.New, kcn[:])
	m.Write(a[:])
	m.Write(n[:])
	m.Write([]byte{which})
	var t mh.Token
	copy(t[:], m.Sum(nil))
	return t
}

// HomeKeygenToken is First(64, HMAC_SHA1(Kcn, (home address | nonce | 0))) (s.5.2.5).
func HomeKeygenToken(kcn Key, home netip.Addr, n Nonce) mh.Token {
	return keygenToken(kcn, home, n, 0)
}

// CareOfKeygenToken is First(64, HMAC_SHA1(Kcn, (care-of address | nonce | 1))) (s.5.2.5).
func CareOfKeygenToken(kcn Key, careOf netip.Addr, n Nonce) mh.Token {
	return keygenToken(kcn, careOf, n, 1)
}

// BindingKey is Kbm = SHA1(home keygen token | care-of keygen token) (s.5.2.5).
func BindingKey(home, careOf mh.Token) Key {
	return sha1.Sum(append(home[:], careOf[:]...))
}

// DeregistrationKey is Kbm = SHA1(home keygen token), used when the mobile node deletes the
// binding from home (lifetime 0 or care-of address = home address, s.5.2.5).
func DeregistrationKey(home mh.Token) Key { return sha1.Sum(home[:]) }

// Authenticator is First(96, HMAC_SHA1(Kbm, (care-of address | correspondent | MH Data)))
// (s.6.2.7). mhData is the Mobility Header with a zero checksum and without the
// authenticator, as mh.MarshalAuthorized and mh.AuthorizedData produce it.
func Authenticator(kbm Key, careOf, correspondent netip.Addr, mhData []byte) [mh.AuthenticatorLen]byte {
	c, k := careOf.As16(), correspondent.As16()
	m := hmac.New(sha1.New, kbm[:])
	m.Write(c[:])
	m.Write(k[:])
	m.Write(mhData)
	var a [mh.AuthenticatorLen]byte
	copy(a[:], m.Sum(nil))
	return a
}

// ErrBadAuthenticator: a Binding Authorization Data option that does not verify.
var ErrBadAuthenticator = errors.New("rr: binding authorization data does not verify")

// ErrNoAuthData: the message carries no Binding Authorization Data option.
var ErrNoAuthData = errors.New("rr: no binding authorization data option")

// Verify checks the Binding Authorization Data of the Mobility Header mhBytes (as received)
// in constant time.
func Verify(kbm Key, careOf, correspondent netip.Addr, mhBytes []byte) error {
	data, got, ok := mh.AuthorizedData(mhBytes)
	if !ok {
		return ErrNoAuthData
	}
	want := Authenticator(kbm, careOf, correspondent, data)
	if !hmac.Equal(got[:], want[:]) {
		return ErrBadAuthenticator
	}
	return nil
}

// Sign encodes m (whose last option is a zero mh.AuthData) with its authenticator and the
// checksum for the pseudo-header pseudoSrc -> pseudoDst.
func Sign(m mh.Message, kbm Key, careOf, correspondent, pseudoSrc, pseudoDst netip.Addr) ([]byte, error) {
	return mh.MarshalAuthorized(m, pseudoSrc, pseudoDst, func(data []byte) [mh.AuthenticatorLen]byte {
		return Authenticator(kbm, careOf, correspondent, data)
	})
}

// Nonces is a correspondent's nonce table (s.5.2.2): a new nonce every Regen, each accepted
// for Lifetime after its creation, indexed by a 16-bit Nonce Index.
type Nonces struct {
	Regen    time.Duration
	Lifetime time.Duration
	rand     io.Reader
	list     []nonceEntry
	next     uint16
}

type nonceEntry struct {
	index uint16
	nonce Nonce
	born  time.Time
}

// NewNonces returns a table drawing nonces from rand; regen <= 0 means 30 s, lifetime <= 0
// means MaxNonceLifetime.
func NewNonces(rand io.Reader, regen, lifetime time.Duration) *Nonces {
	if regen <= 0 {
		regen = 30 * time.Second
	}
	if lifetime <= 0 {
		lifetime = MaxNonceLifetime
	}
	return &Nonces{Regen: regen, Lifetime: lifetime, rand: rand}
}

// Current returns the nonce to hand out now, creating one when the newest is older than Regen,
// and forgets expired ones.
func (t *Nonces) Current(now time.Time) (uint16, Nonce, error) {
	t.prune(now)
	if n := len(t.list); n > 0 && now.Sub(t.list[n-1].born) < t.Regen {
		e := t.list[n-1]
		return e.index, e.nonce, nil
	}
	var n Nonce
	if _, err := io.ReadFull(t.rand, n[:]); err != nil {
		return 0, Nonce{}, fmt.Errorf("rr: drawing a nonce: %w", err)
	}
	e := nonceEntry{index: t.next, nonce: n, born: now}
	t.next++
	t.list = append(t.list, e)
	return e.index, e.nonce, nil
}

// Lookup returns the nonce with index i if it is still within its lifetime.
func (t *Nonces) Lookup(i uint16, now time.Time) (Nonce, bool) {
	for _, e := range t.list {
		if e.index == i && now.Sub(e.born) < t.Lifetime && !now.Before(e.born) {
			return e.nonce, true
		}
	}
	return Nonce{}, false
}

func (t *Nonces) prune(now time.Time) {
	keep := t.list[:0]
	for _, e := range t.list {
		if now.Sub(e.born) < t.Lifetime {
			keep = append(keep, e)
		}
	}
	t.list = keep
}
