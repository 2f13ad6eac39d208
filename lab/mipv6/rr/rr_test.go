package rr

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"net/netip"
	"testing"
	"time"

	"ilnp/lab/mipv6/mh"
)

var (
	hoa = netip.MustParseAddr("2001:db8:2:0:1b:21ff:fe67:97a8")
	coa = netip.MustParseAddr("2001:db8:3:0:1b:21ff:fe67:97a8")
	cn  = netip.MustParseAddr("2001:db8:1:0:14:4fff:ff20:ee64")
	kcn = func() (k Key) {
		for i := range k {
			k[i] = byte(i)
		}
		return k
	}()
	homeNonce   = Nonce{1, 2, 3, 4, 5, 6, 7, 8}
	careOfNonce = Nonce{0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18}
)

// Vectors computed with Python's hmac/hashlib (an implementation independent of Go's) from the
// RFC 6275 s.5.2.5 / s.6.2.7 formulas for the inputs above.
const (
	pyHomeToken   = "6a5bb4f107015fa5"
	pyCareOfToken = "3bdb7cfadd1a6fa9"
	pyKbm         = "07cc842418ed6963574a427eb31e755ebd09f45e"
	pyKbmDereg    = "bf739321fdc0724c74a448f6c5f4677b8ba7874d"
	pyMHData      = "3b0305000000000780000069040400010002050c"
	pyAuth        = "86915fe42c90b0547075167b"
)

func TestKeygenTokens(t *testing.T) {
	ht := HomeKeygenToken(kcn, hoa, homeNonce)
	ct := CareOfKeygenToken(kcn, coa, careOfNonce)
	if hex.EncodeToString(ht[:]) != pyHomeToken || hex.EncodeToString(ct[:]) != pyCareOfToken {
		t.Fatalf("tokens %x %x", ht, ct)
	}
	// Independent construction with crypto/hmac, field order spelled out: address | nonce | 0/1.
	a := hoa.As16()
	m := hmac.New(sha1.New, kcn[:])
	m.Write(append(append(a[:], homeNonce[:]...), 0))
	if !bytes.Equal(m.Sum(nil)[:8], ht[:]) {
		t.Fatal("home keygen token differs from HMAC_SHA1(Kcn, home | nonce | 0)")
	}
	// The trailing octet separates home from care-of tokens for the same inputs.
	if HomeKeygenToken(kcn, hoa, homeNonce) == CareOfKeygenToken(kcn, hoa, homeNonce) {
		t.Fatal("home and care-of tokens equal for the same address and nonce")
	}
	// The wrong field order (nonce first) gives another value: the test above pins the order.
	m = hmac.New(sha1.New, kcn[:])
	m.Write(append(append(homeNonce[:], a[:]...), 0))
	if bytes.Equal(m.Sum(nil)[:8], ht[:]) {
		t.Fatal("nonce | address gives the same token")
	}
}

func TestBindingKeys(t *testing.T) {
	ht := HomeKeygenToken(kcn, hoa, homeNonce)
	ct := CareOfKeygenToken(kcn, coa, careOfNonce)
	kbm := BindingKey(ht, ct)
	if hex.EncodeToString(kbm[:]) != pyKbm {
		t.Fatalf("Kbm %x", kbm)
	}
	if want := sha1.Sum(append(ht[:], ct[:]...)); kbm != want {
		t.Fatal("Kbm != SHA1(home | care-of)")
	}
	d := DeregistrationKey(ht)
	if hex.EncodeToString(d[:]) != pyKbmDereg || d != sha1.Sum(ht[:]) {
		t.Fatalf("deregistration Kbm %x", d)
	}
}

func TestAuthenticatorOfBindingUpdate(t *testing.T) {
	kbm := BindingKey(HomeKeygenToken(kcn, hoa, homeNonce), CareOfKeygenToken(kcn, coa, careOfNonce))
	bu := &mh.BindingUpdate{Seq: 7, Ack: true, Lifetime: 105,
		Options: []mh.Option{mh.NonceIndices{Home: 1, CareOf: 2}, mh.AuthData{}}}
	// The BU travels CoA -> CN with a Home Address option: pseudo-header source is the HoA.
	b, err := Sign(bu, kbm, coa, cn, hoa, cn)
	if err != nil {
		t.Fatal(err)
	}
	// MH Data: the header with the checksum zeroed, the BAD option's type and length, no
	// authenticator.
	data := append([]byte(nil), b[:len(b)-12]...)
	data[4], data[5] = 0, 0
	if hex.EncodeToString(data) != pyMHData {
		t.Fatalf("MH data %x", data)
	}
	if got := hex.EncodeToString(b[len(b)-12:]); got != pyAuth {
		t.Fatalf("authenticator %s, want %s", got, pyAuth)
	}
	// Independent construction: HMAC_SHA1(Kbm, care-of | correspondent | MH data), first 96 bits.
	c, k := coa.As16(), cn.As16()
	m := hmac.New(sha1.New, kbm[:])
	m.Write(c[:])
	m.Write(k[:])
	m.Write(data)
	if !bytes.Equal(m.Sum(nil)[:12], b[len(b)-12:]) {
		t.Fatal("authenticator differs from the independent HMAC")
	}
	// The checksum still covers the authenticator and verifies.
	if _, err := mh.Parse(b, hoa, cn); err != nil {
		t.Fatal(err)
	}
	if err := Verify(kbm, coa, cn, b); err != nil {
		t.Fatal(err)
	}
	// Any change to what the MAC covers breaks it: the sequence number, the care-of address,
	// the correspondent, the key.
	tampered := append([]byte(nil), b...)
	tampered[7] ^= 1
	if err := Verify(kbm, coa, cn, tampered); !errors.Is(err, ErrBadAuthenticator) {
		t.Fatalf("tampered sequence: %v", err)
	}
	if err := Verify(kbm, hoa, cn, b); !errors.Is(err, ErrBadAuthenticator) {
		t.Fatalf("other care-of address: %v", err)
	}
	if err := Verify(kbm, coa, hoa, b); !errors.Is(err, ErrBadAuthenticator) {
		t.Fatalf("other correspondent: %v", err)
	}
	if err := Verify(DeregistrationKey(HomeKeygenToken(kcn, hoa, homeNonce)), coa, cn, b); !errors.Is(err, ErrBadAuthenticator) {
		t.Fatalf("other key: %v", err)
	}
	// The checksum field is excluded: a different checksum leaves the MAC valid.
	rechecked := append([]byte(nil), b...)
	rechecked[4] ^= 0xff
	if err := Verify(kbm, coa, cn, rechecked); err != nil {
		t.Fatalf("checksum should not be covered: %v", err)
	}
	plain, _ := mh.Marshal(&mh.BindingUpdate{Seq: 1}, hoa, cn)
	if err := Verify(kbm, coa, cn, plain); !errors.Is(err, ErrNoAuthData) {
		t.Fatalf("no BAD: %v", err)
	}
	if _, err := Sign(&mh.BindingUpdate{}, kbm, coa, cn, hoa, cn); err == nil {
		t.Fatal("Sign without a BAD option")
	}
}

type counter byte

func (c *counter) Read(p []byte) (int, error) {
	for i := range p {
		*c++
		p[i] = byte(*c)
	}
	return len(p), nil
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("no entropy") }

func TestNonces(t *testing.T) {
	var c counter
	tab := NewNonces(&c, 0, 0)
	if tab.Regen != 30*time.Second || tab.Lifetime != MaxNonceLifetime {
		t.Fatalf("defaults %v %v", tab.Regen, tab.Lifetime)
	}
	t0 := time.Unix(1000, 0)
	i0, n0, err := tab.Current(t0)
	if err != nil {
		t.Fatal(err)
	}
	i1, n1, _ := tab.Current(t0.Add(29 * time.Second))
	if i1 != i0 || n1 != n0 {
		t.Fatal("a new nonce before Regen")
	}
	i2, n2, _ := tab.Current(t0.Add(30 * time.Second))
	if i2 == i0 || n2 == n0 {
		t.Fatal("no new nonce after Regen")
	}
	if n, ok := tab.Lookup(i0, t0.Add(239*time.Second)); !ok || n != n0 {
		t.Fatal("nonce 0 gone before its lifetime")
	}
	if _, ok := tab.Lookup(i0, t0.Add(240*time.Second)); ok {
		t.Fatal("nonce 0 accepted at MAX_NONCE_LIFETIME")
	}
	if _, ok := tab.Lookup(i0, t0.Add(-time.Second)); ok {
		t.Fatal("nonce accepted before it was made")
	}
	if _, ok := tab.Lookup(999, t0); ok {
		t.Fatal("unknown index accepted")
	}
	// After everything expired the table holds only the fresh nonce.
	i3, _, _ := tab.Current(t0.Add(time.Hour))
	if len(tab.list) != 1 || tab.list[0].index != i3 {
		t.Fatalf("table after expiry %+v", tab.list)
	}
	if _, _, err := NewNonces(failing{}, 0, 0).Current(t0); err == nil {
		t.Fatal("nonce without entropy")
	}
	if _, err := NewKey(failing{}); err == nil {
		t.Fatal("key without entropy")
	}
	if k, err := NewKey(&c); err != nil || k == (Key{}) {
		t.Fatal("NewKey")
	}
}
