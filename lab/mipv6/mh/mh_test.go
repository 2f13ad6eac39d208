package mh

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

var (
	hoa = netip.MustParseAddr("2001:db8:2::1b:21ff:fe67:97a8")
	coa = netip.MustParseAddr("2001:db8:3::1b:21ff:fe67:97a8")
	ha  = netip.MustParseAddr("2001:db8:2::1")
	cn  = netip.MustParseAddr("2001:db8:1::14:4fff:ff20:ee64")
)

// refChecksum is an independent RFC 1071 checksum over the IPv6 pseudo-header (RFC 8200
// s.8.1) and the Mobility Header, written out long-hand so the test does not trust
// wire.PseudoHeaderChecksum.
func refChecksum(src, dst netip.Addr, mh []byte) uint16 {
	var buf []byte
	s, d := src.As16(), dst.As16()
	buf = append(buf, s[:]...)
	buf = append(buf, d[:]...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(mh)))
	buf = append(buf, 0, 0, 0, 135)
	buf = append(buf, mh...)
	buf[40+4], buf[40+5] = 0, 0
	if len(buf)%2 == 1 {
		buf = append(buf, 0)
	}
	var sum uint32
	for i := 0; i < len(buf); i += 2 {
		sum += uint32(buf[i])<<8 | uint32(buf[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func cookie(v uint64) (c Cookie) {
	binary.BigEndian.PutUint64(c[:], v)
	return c
}

func token(v uint64) (c Token) {
	binary.BigEndian.PutUint64(c[:], v)
	return c
}

// TestMarshalExactBytes pins every message type's encoding, including padding chosen for
// each option's alignment, against bytes written from the RFC 6275 s.6.1/6.2 diagrams.
func TestMarshalExactBytes(t *testing.T) {
	var auth [12]byte
	for i := range auth {
		auth[i] = byte(0xa0 + i)
	}
	tests := []struct {
		name string
		m    Message
		want string // checksum bytes written as "cccc"
	}{
		{"BRR", &BindingRefreshRequest{}, "3b 00 00 00 cccc 0000"},
		{"HoTI", &HomeTestInit{Cookie: cookie(0x0102030405060708)},
			"3b 01 01 00 cccc 0000 0102030405060708"},
		{"CoTI", &CareOfTestInit{Cookie: cookie(0x1112131415161718)},
			"3b 01 02 00 cccc 0000 1112131415161718"},
		{"HoT", &HomeTest{NonceIndex: 0x0203, Cookie: cookie(0x0102030405060708), Token: token(0xf1f2f3f4f5f6f7f8)},
			"3b 02 03 00 cccc 0203 0102030405060708 f1f2f3f4f5f6f7f8"},
		{"CoT", &CareOfTest{NonceIndex: 0x0405, Cookie: cookie(0x1112131415161718), Token: token(0xe1e2e3e4e5e6e7e8)},
			"3b 02 04 00 cccc 0405 1112131415161718 e1e2e3e4e5e6e7e8"},
		{"BU home registration (A, H), PadN to 16", &BindingUpdate{Seq: 0x1234, Ack: true, Home: true, Lifetime: 105},
			"3b 01 05 00 cccc 1234 c000 0069 0102 0000"},
		{"BU all flags", &BindingUpdate{Seq: 0xffff, Ack: true, Home: true, LinkLocal: true, KeyMgmt: true, Lifetime: 0xffff},
			"3b 01 05 00 cccc ffff f000 ffff 0102 0000"},
		{"BU route optimisation: nonce indices 2n at 12, BAD 8n+2 at 18, no trailing pad",
			&BindingUpdate{Seq: 7, Ack: true, Lifetime: 105, Options: []Option{NonceIndices{Home: 0x0a0b, CareOf: 0x0c0d}, AuthData{auth}}},
			"3b 03 05 00 cccc 0007 8000 0069 0404 0a0b 0c0d 050c a0a1a2a3a4a5a6a7a8a9aaab"},
		{"BU alternate CoA at 8n+6 after PadN(2)", &BindingUpdate{Seq: 1, Home: true, Options: []Option{AltCareOf{coa}}},
			"3b 03 05 00 cccc 0001 4000 0000 0100 0310 20010db800030000001b21fffe6797a8"},
		{"BU BAD alone needs PadN(6)", &BindingUpdate{Seq: 2, Options: []Option{AuthData{auth}}},
			"3b 03 05 00 cccc 0002 0000 0000 0104 00000000 050c a0a1a2a3a4a5a6a7a8a9aaab"},
		{"BU unknown option then Pad1 to 16", &BindingUpdate{Seq: 3, Options: []Option{UnknownOption{Type: 0x2a, Data: []byte{9}}}},
			"3b 01 05 00 cccc 0003 0000 0000 2a01 09 00"},
		{"BAck accepted with refresh advice", &BindingAck{Status: StatusAccepted, Seq: 0x1234, Lifetime: 100, Options: []Option{RefreshAdvice{Interval: 75}}},
			"3b 01 06 00 cccc 00 00 1234 0064 0202 004b"},
		{"BAck rejected, K", &BindingAck{Status: StatusSeqOutOfWindow, KeyMgmt: true, Seq: 9},
			"3b 01 06 00 cccc 87 80 0009 0000 0102 0000"},
		{"BAck from CN with BAD", &BindingAck{Status: StatusAccepted, Seq: 7, Lifetime: 105, Options: []Option{AuthData{auth}}},
			"3b 03 06 00 cccc 00 00 0007 0069 0104 00000000 050c a0a1a2a3a4a5a6a7a8a9aaab"},
		{"BE", &BindingError{Status: ErrorStatusUnknownHAO, HomeAddress: hoa},
			"3b 02 07 00 cccc 01 00 20010db800020000001b21fffe6797a8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Marshal(tc.m, coa, cn)
			if err != nil {
				t.Fatal(err)
			}
			want := unhex(t, strings.ReplaceAll(tc.want, "cccc", "0000"))
			binary.BigEndian.PutUint16(want[4:], refChecksum(coa, cn, want))
			if !bytes.Equal(got, want) {
				t.Fatalf("Marshal:\n got %x\nwant %x", got, want)
			}
			if got[1] != byte(len(got)/8-1) || len(got)%8 != 0 {
				t.Fatalf("header len %d for %d bytes", got[1], len(got))
			}
			back, err := Parse(got, coa, cn)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, tc.m) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", back, tc.m)
			}
			// The checksum binds the pseudo-header: another destination must fail.
			if _, err := Parse(got, coa, ha); !errors.Is(err, ErrChecksum) {
				t.Fatalf("Parse with another destination: %v, want ErrChecksum", err)
			}
		})
	}
}

// mhBytes builds a Mobility Header from hex with a correct checksum for coa -> cn.
func mhBytes(t *testing.T, s string) []byte {
	b := unhex(t, s)
	if len(b) >= 6 {
		b[4], b[5] = 0, 0
		binary.BigEndian.PutUint16(b[4:], refChecksum(coa, cn, b))
	}
	return b
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
		off  int
	}{
		{"empty", "", ErrTruncated, 0},
		{"7 bytes", "3b 00 00 00 0000 00", ErrTruncated, 0},
		{"header len past the end", "3b 01 05 00 0000 0001 8000 0000", ErrTruncated, 1},
		{"trailing bytes", "3b 00 00 00 0000 0000 00", ErrLength, 8},
		{"payload proto not none", "06 01 05 00 0000 0001 8000 0000 0102 0000", ErrPayloadProto, 0},
		{"unknown MH type 9", "3b 00 09 00 0000 0000", ErrUnknownType, 2},
		{"HoT too short for its fixed part", "3b 01 03 00 0000 0001 0102030405060708 ", ErrTooShort, 1},
		{"BU shorter than its fixed part", "3b 00 05 00 0000 0001", ErrTooShort, 1},
		{"option type without length", "3b 01 05 00 0000 0001 8000 0000 00 00 00 04", ErrTruncated, 15},
		{"option runs past the end", "3b 01 05 00 0000 0001 8000 0000 0404 0000", ErrTruncated, 12},
		{"nonce indices wrong length", "3b 01 05 00 0000 0001 8000 0000 0402 0000", ErrLength, 13},
		{"refresh advice wrong length", "3b 01 06 00 0000 00 00 0001 0000 0201 00 00", ErrLength, 13},
		{"nonce indices misaligned (odd)", "3b 02 05 00 0000 0001 8000 0000 00 0404 00000000 0000000000", ErrMisaligned, 13},
		{"BAD misaligned at 16", "3b 03 05 00 0000 0002 0000 0000 0102 0000 050c a0a1a2a3a4a5a6a7a8a9aaab 0100", ErrMisaligned, 16},
		{"BAD not last", "3b 04 05 00 0000 0002 0000 0000 0104 00000000 050c a0a1a2a3a4a5a6a7a8a9aaab 0106 000000000000", ErrAuthNotLast, 18},
		{"alternate CoA multicast", "3b 03 05 00 0000 0001 4000 0000 0100 0310 ff020000000000000000000000000001", ErrBadAddress, 16},
		{"alternate CoA link-local", "3b 03 05 00 0000 0001 4000 0000 0100 0310 fe800000000000000000000000000001", ErrBadAddress, 16},
		{"alternate CoA misaligned", "3b 03 05 00 0000 0001 4000 0000 0310 20010db800030000001b21fffe6797a8 0100", ErrMisaligned, 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := mhBytes(t, tc.in)
			_, err := Parse(b, coa, cn)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Parse(%x) = %v, want %v", b, err, tc.want)
			}
			var e *Error
			if !errors.As(err, &e) || e.Offset != tc.off {
				t.Fatalf("error %v: offset want %d", err, tc.off)
			}
			if !strings.HasPrefix(err.Error(), "mh: ") {
				t.Fatalf("error text %q", err)
			}
		})
	}
	t.Run("bad checksum", func(t *testing.T) {
		b := mhBytes(t, "3b 01 05 00 0000 0001 8000 0000 0102 0000")
		b[5] ^= 1
		if _, err := Parse(b, coa, cn); !errors.Is(err, ErrChecksum) {
			t.Fatalf("got %v", err)
		}
		if _, err := ParseUnchecked(b); err != nil {
			t.Fatalf("ParseUnchecked ignores the checksum: %v", err)
		}
	})
}

func TestParseLiberal(t *testing.T) {
	// Reserved bits and PadN contents are ignored on receipt; unknown options are kept.
	b := mhBytes(t, "3b 03 05 00 0000 0005 c7ff 0010 01 01 ff 2b03 010203 0404 0001 0002 0104 00000000")
	m, err := Parse(b, coa, cn)
	if err != nil {
		t.Fatal(err)
	}
	want := &BindingUpdate{Seq: 5, Ack: true, Home: true, Lifetime: 16, Options: []Option{
		UnknownOption{Type: 0x2b, Data: []byte{1, 2, 3}}, NonceIndices{Home: 1, CareOf: 2},
	}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %#v", m)
	}
	if ni, ok := Find[NonceIndices](m.MobilityOptions()); !ok || ni.CareOf != 2 {
		t.Fatalf("Find: %v %v", ni, ok)
	}
	if _, ok := Find[AuthData](m.MobilityOptions()); ok {
		t.Fatal("Find found an absent option")
	}
}

func TestMarshalErrors(t *testing.T) {
	big := make([]Option, 300)
	for i := range big {
		big[i] = UnknownOption{Type: 0x30, Data: make([]byte, 10)}
	}
	tests := []struct {
		name string
		m    Message
		want error
	}{
		{"nil message", nil, ErrInvalid},
		{"BAD not last", &BindingUpdate{Options: []Option{AuthData{}, NonceIndices{}}}, ErrAuthNotLast},
		{"alt CoA multicast", &BindingUpdate{Options: []Option{AltCareOf{netip.MustParseAddr("ff02::1")}}}, ErrBadAddress},
		{"alt CoA IPv4", &BindingUpdate{Options: []Option{AltCareOf{netip.MustParseAddr("192.0.2.1")}}}, ErrBadAddress},
		{"nil option", &BindingAck{Options: []Option{nil}}, ErrInvalid},
		{"unknown option posing as padding", &BindingAck{Options: []Option{UnknownOption{Type: OptPadN}}}, ErrInvalid},
		{"unknown option posing as a known one", &BindingAck{Options: []Option{UnknownOption{Type: OptNonceIndices, Data: []byte{1, 2, 3, 4}}}}, ErrInvalid},
		{"unknown option too long", &BindingAck{Options: []Option{UnknownOption{Type: 0x30, Data: make([]byte, 256)}}}, ErrInvalid},
		{"BE without address", &BindingError{Status: 1}, ErrBadAddress},
		{"header len overflow", &BindingUpdate{Options: big}, ErrLength},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Marshal(tc.m, coa, cn); !errors.Is(err, tc.want) {
				t.Fatalf("Marshal = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestLifetimeUnits(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want uint16
	}{{-time.Second, 0}, {0, 0}, {3 * time.Second, 0}, {4 * time.Second, 1}, {420 * time.Second, 105}, {1000 * time.Hour, 0xffff}} {
		if got := LifetimeUnits(tc.d); got != tc.want {
			t.Errorf("LifetimeUnits(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
	if LifetimeDuration(105) != 420*time.Second {
		t.Fatal("LifetimeDuration(105)")
	}
}

func TestStrings(t *testing.T) {
	if TypeBindingUpdate.String() != "BU" || Type(99).String() != "MH(99)" {
		t.Fatal("Type.String")
	}
	if StatusSeqOutOfWindow.String() != "sequence number out of window" || Status(77).String() != "status 77" {
		t.Fatal("Status.String")
	}
	if !StatusAcceptedPrefixDiscovery.Accepted() || StatusUnspecified.Accepted() {
		t.Fatal("Status.Accepted")
	}
}

func TestAuthorized(t *testing.T) {
	bu := &BindingUpdate{Seq: 7, Ack: true, Lifetime: 105, Options: []Option{NonceIndices{Home: 1, CareOf: 2}, AuthData{}}}
	var seen []byte
	b, err := MarshalAuthorized(bu, hoa, cn, func(data []byte) (a [12]byte) {
		seen = append([]byte(nil), data...)
		copy(a[:], "authenticate")
		return a
	})
	if err != nil {
		t.Fatal(err)
	}
	// The MAC input is the MH with a zero checksum, up to and including the BAD option's
	// type and length, without the authenticator (RFC 6275 s.5.2.6).
	want := unhex(t, "3b 03 05 00 0000 0007 8000 0069 0404 0001 0002 050c")
	if !bytes.Equal(seen, want) {
		t.Fatalf("MAC input\n got %x\nwant %x", seen, want)
	}
	m, err := Parse(b, hoa, cn)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := Find[AuthData](m.MobilityOptions())
	if string(a.Authenticator[:]) != "authenticate" {
		t.Fatalf("authenticator %q", a.Authenticator)
	}
	data, auth, ok := AuthorizedData(b)
	if !ok || !bytes.Equal(data, want) || auth != a.Authenticator {
		t.Fatalf("AuthorizedData = %x %x %v", data, auth, ok)
	}
	if _, _, ok := AuthorizedData(b[:16]); ok {
		t.Fatal("AuthorizedData accepted a truncated header")
	}
	plain, _ := Marshal(&BindingUpdate{Seq: 1}, hoa, cn)
	if _, _, ok := AuthorizedData(plain); ok {
		t.Fatal("AuthorizedData accepted a BU without BAD")
	}
	if _, err := MarshalAuthorized(&BindingUpdate{}, hoa, cn, nil); !errors.Is(err, ErrAuthNotLast) {
		t.Fatalf("MarshalAuthorized without BAD: %v", err)
	}
}
