package mh

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

func TestHomeAddressDestOptsBytes(t *testing.T) {
	got, err := AppendHomeAddressDestOpts([]byte{0xee}, 135, hoa)
	if err != nil {
		t.Fatal(err)
	}
	// Next Header, Hdr Ext Len 2, PadN(4), then the option at offset 6 (8n+6).
	want := unhex(t, "ee 87 02 0102 0000 c9 10 20010db800020000001b21fffe6797a8")
	if !bytes.Equal(got, want) {
		t.Fatalf("got %x\nwant %x", got, want)
	}
	d, err := ParseDestOpts(got[1:])
	if err != nil {
		t.Fatal(err)
	}
	if d != (DestOpts{NextHeader: 135, Length: 24, HomeAddress: hoa}) {
		t.Fatalf("parsed %+v", d)
	}
	if _, err := AppendHomeAddressDestOpts(nil, 135, netip.MustParseAddr("fe80::1")); !errors.Is(err, ErrBadAddress) {
		t.Fatalf("link-local home address: %v", err)
	}
}

func TestParseDestOpts(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
		off  int
		hoa  netip.Addr
	}{
		{"only padding", "3b 00 0104 00000000", nil, 0, netip.Addr{}},
		{"skippable unknown option then HAO", "3b 02 1e02 0000 c910 20010db800020000001b21fffe6797a8", nil, 0, hoa},
		{"pad1 x4 then HAO", "3b 02 00000000 c910 20010db800020000001b21fffe6797a8", nil, 0, hoa},
		{"one byte", "3b", ErrTruncated, 0, netip.Addr{}},
		{"header longer than buffer", "3b 01 0104 00000000", ErrTruncated, 1, netip.Addr{}},
		{"option without length", "3b 00 00000000 00 1e", ErrTruncated, 7, netip.Addr{}},
		{"option past the header", "3b 00 0108 00000000", ErrTruncated, 2, netip.Addr{}},
		{"HAO length 15", "3b 02 0102 0000 c90f 20010db800020000001b21fffe6797 00", ErrLength, 7, netip.Addr{}},
		{"HAO misaligned at 2", "3b 02 c910 20010db800020000001b21fffe6797a8 0102 0000", ErrMisaligned, 2, netip.Addr{}},
		{"HAO twice", "3b 05 0102 0000 c910 20010db800020000001b21fffe6797a8 0104 00000000 c910 20010db800020000001b21fffe6797a8", ErrDuplicate, 30, netip.Addr{}},
		{"HAO multicast", "3b 02 0102 0000 c910 ff020000000000000000000000000001", ErrBadAddress, 8, netip.Addr{}},
		{"HAO unspecified", "3b 02 0102 0000 c910 00000000000000000000000000000000", ErrBadAddress, 8, netip.Addr{}},
		{"ILNP nonce (act 10) not skipped", "3b 00 8b04 deadbeef", ErrUnknownOption, 2, netip.Addr{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ParseDestOpts(unhex(t, tc.in))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Offset != tc.off {
					t.Fatalf("error %v: want offset %d", err, tc.off)
				}
				return
			}
			if d.HomeAddress != tc.hoa || d.NextHeader != 0x3b {
				t.Fatalf("parsed %+v", d)
			}
		})
	}
}

func TestType2RH(t *testing.T) {
	got, err := AppendType2RH(nil, 135, hoa)
	if err != nil {
		t.Fatal(err)
	}
	want := unhex(t, "87 02 02 01 00000000 20010db800020000001b21fffe6797a8")
	if !bytes.Equal(got, want) {
		t.Fatalf("got %x\nwant %x", got, want)
	}
	rh, err := ParseType2RH(got)
	if err != nil || rh != (Type2RH{NextHeader: 135, HomeAddress: hoa}) {
		t.Fatalf("parsed %+v %v", rh, err)
	}
	if _, err := AppendType2RH(nil, 135, netip.MustParseAddr("::1")); !errors.Is(err, ErrBadAddress) {
		t.Fatalf("loopback: %v", err)
	}
	bad := []struct {
		name string
		in   string
		want error
		off  int
	}{
		{"3 bytes", "87 02 02", ErrTruncated, 0},
		{"type 0", "87 02 00 01 00000000 20010db800020000001b21fffe6797a8", ErrRoutingType, 2},
		{"type 2 with hdr ext len 4", "87 04 02 01 00000000 20010db800020000001b21fffe6797a8", ErrRoutingType, 1},
		{"truncated address", "87 02 02 01 00000000 20010db8000200000000", ErrTruncated, 0},
		{"segments left 0", "87 02 02 00 00000000 20010db800020000001b21fffe6797a8", ErrSegmentsLeft, 3},
		{"segments left 2", "87 02 02 02 00000000 20010db800020000001b21fffe6797a8", ErrSegmentsLeft, 3},
		{"multicast home address", "87 02 02 01 00000000 ff020000000000000000000000000001", ErrBadAddress, 8},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseType2RH(unhex(t, tc.in))
			var e *Error
			if !errors.Is(err, tc.want) || !errors.As(err, &e) || e.Offset != tc.off {
				t.Fatalf("got %v, want %v at %d", err, tc.want, tc.off)
			}
		})
	}
}

func TestMessagePackets(t *testing.T) {
	tests := []struct {
		name string
		env  Envelope
		m    Message
		ext  string // extension headers expected between the IPv6 header and the MH
	}{
		{"BU MN -> HA with HAO", Envelope{Src: coa, Dst: ha, HomeAddress: hoa},
			&BindingUpdate{Seq: 1, Ack: true, Home: true, Lifetime: 105},
			"87 02 0102 0000 c910 20010db800020000001b21fffe6797a8"},
		{"BAck HA -> MN with type 2 RH", Envelope{Src: ha, Dst: coa, RoutingHome: hoa},
			&BindingAck{Seq: 1, Lifetime: 105}, "87 02 02 01 00000000 20010db800020000001b21fffe6797a8"},
		{"HoTI inner packet HoA -> CN", Envelope{Src: hoa, Dst: cn}, &HomeTestInit{Cookie: cookie(1)}, ""},
		{"CoT CN -> CoA", Envelope{Src: cn, Dst: coa}, &CareOfTest{NonceIndex: 3, Cookie: cookie(2), Token: token(3)}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pkt, err := AppendMessage(nil, tc.env, tc.m)
			if err != nil {
				t.Fatal(err)
			}
			ext := unhex(t, tc.ext)
			if !bytes.Equal(pkt[40:40+len(ext)], ext) {
				t.Fatalf("extension headers %x, want %x", pkt[40:40+len(ext)], ext)
			}
			body := pkt[40+len(ext):]
			// Independent check of the pseudo-header rule: HAO -> home address as source,
			// type 2 RH -> home address as destination (RFC 6275 s.6.1.1).
			src, dst := tc.env.Src, tc.env.Dst
			if tc.env.HomeAddress.IsValid() {
				src = tc.env.HomeAddress
			}
			if tc.env.RoutingHome.IsValid() {
				dst = tc.env.RoutingHome
			}
			if c := refChecksum(src, dst, body); c != uint16(body[4])<<8|uint16(body[5]) {
				t.Fatalf("checksum %02x%02x, independent %04x", body[4], body[5], c)
			}
			p, m, err := ParseMessage(pkt)
			if err != nil {
				t.Fatal(err)
			}
			env := tc.env
			env.HopLimit = 64
			if p.Envelope != env || p.Proto != Proto || !reflect.DeepEqual(m, tc.m) {
				t.Fatalf("parsed %+v %#v", p, m)
			}
		})
	}
}

func TestPacketErrors(t *testing.T) {
	bu := &BindingUpdate{Seq: 1, Ack: true, Home: true, Lifetime: 105}
	good, err := AppendMessage(nil, Envelope{Src: coa, Dst: ha, HomeAddress: hoa}, bu)
	if err != nil {
		t.Fatal(err)
	}
	// A checksum computed over the IPv6 source (the CoA) instead of the home address.
	wrongPseudo, _ := Marshal(bu, coa, ha)
	wrongPkt, _ := AppendPacket(nil, Envelope{Src: coa, Dst: ha, HomeAddress: hoa}, Proto, wrongPseudo)
	hbh := append([]byte(nil), good...)
	hbh[6] = 0
	udp, _ := AppendPacket(nil, Envelope{Src: coa, Dst: ha}, 17, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	back, _ := Marshal(&BindingAck{Seq: 1}, hoa, coa)
	backWithHAO, _ := AppendPacket(nil, Envelope{Src: ha, Dst: coa, HomeAddress: hoa}, Proto, back)
	buRH, _ := Marshal(bu, ha, hoa)
	buWithRH, _ := AppendPacket(nil, Envelope{Src: ha, Dst: coa, RoutingHome: hoa}, Proto, buRH)
	twoRH := append(append([]byte(nil), good[:40]...), unhex(t, "2b 02 02 01 00000000 20010db800020000001b21fffe6797a8 3c 02 02 01 00000000 20010db800020000001b21fffe6797a8")...)
	twoRH = append(twoRH, good[40:]...)
	twoRH[5] += 48
	twoRH[6] = ProtoRouting
	badDO, _ := AppendPacket(nil, Envelope{Src: coa, Dst: ha}, ProtoDestOpts, unhex(t, "87 00 c9 10 00 00 00 00"))
	twoHAO := append(append(append([]byte(nil), good[:40]...), good[40:64]...), good[40:]...)
	twoHAO[5] += 24
	twoHAO[40] = ProtoDestOpts

	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"short", good[:39], ErrTruncated},
		{"payload length beyond the bytes", good[:len(good)-1], ErrTruncated},
		{"trailing bytes", append(append([]byte(nil), good...), 0), ErrLength},
		{"checksum over the CoA, not the home address", wrongPkt, ErrChecksum},
		{"hop-by-hop header", hbh, ErrHeader},
		{"not a mobility header", udp, ErrHeader},
		{"BAck with a home address option", backWithHAO, ErrHeader},
		{"BU with a type 2 routing header", buWithRH, ErrHeader},
		{"two routing headers", twoRH, ErrDuplicate},
		{"two home address options", twoHAO, ErrDuplicate},
		{"bad destination options inside", badDO, ErrTruncated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := ParseMessage(tc.in); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("encoder rules", func(t *testing.T) {
		if _, err := AppendMessage(nil, Envelope{Src: ha, Dst: coa, HomeAddress: hoa}, &BindingAck{}); !errors.Is(err, ErrHeader) {
			t.Fatalf("BAck with HAO: %v", err)
		}
		if _, err := AppendMessage(nil, Envelope{Src: hoa, Dst: cn, RoutingHome: hoa}, &HomeTestInit{}); !errors.Is(err, ErrHeader) {
			t.Fatalf("HoTI with RH2: %v", err)
		}
		if _, err := AppendPacket(nil, Envelope{Dst: cn}, 17, nil); !errors.Is(err, ErrBadAddress) {
			t.Fatalf("no source: %v", err)
		}
		if _, err := AppendPacket(nil, Envelope{Src: coa, Dst: cn, RoutingHome: netip.MustParseAddr("ff02::1")}, 17, nil); !errors.Is(err, ErrBadAddress) {
			t.Fatalf("multicast RH2: %v", err)
		}
		if _, err := AppendPacket(nil, Envelope{Src: coa, Dst: cn}, 17, make([]byte, 0x10000)); !errors.Is(err, ErrLength) {
			t.Fatalf("jumbo: %v", err)
		}
	})
}

// seedMH returns encodings of every message type for the fuzz corpora.
func seedMH(tb testing.TB) [][]byte {
	var out [][]byte
	for _, m := range []Message{
		&BindingRefreshRequest{}, &HomeTestInit{Cookie: cookie(1)}, &CareOfTestInit{Cookie: cookie(2)},
		&HomeTest{NonceIndex: 1, Cookie: cookie(1), Token: token(9)}, &CareOfTest{NonceIndex: 2},
		&BindingUpdate{Seq: 1, Ack: true, Home: true, Lifetime: 105, Options: []Option{AltCareOf{coa}}},
		&BindingUpdate{Seq: 2, Ack: true, Options: []Option{NonceIndices{1, 2}, AuthData{}}},
		&BindingAck{Status: 135, Seq: 4, Options: []Option{RefreshAdvice{3}, UnknownOption{Type: 0x40, Data: []byte{1}}}},
		&BindingError{Status: 2, HomeAddress: hoa},
	} {
		b, err := Marshal(m, coa, cn)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func FuzzParse(f *testing.F) {
	for _, b := range seedMH(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseUnchecked(b)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if _, err := Parse(b, coa, cn); err != nil && !errors.Is(err, ErrChecksum) {
			t.Fatalf("Parse disagrees with ParseUnchecked: %v", err)
		}
		// Whatever parses re-encodes and parses to the same message.
		enc, err := Marshal(m, coa, cn)
		if err != nil {
			t.Fatalf("re-marshal %#v: %v", m, err)
		}
		back, err := Parse(enc, coa, cn)
		if err != nil || !reflect.DeepEqual(back, m) {
			t.Fatalf("round trip %#v -> %x -> %#v %v", m, enc, back, err)
		}
	})
}

func FuzzParseMessage(f *testing.F) {
	for _, env := range []Envelope{{Src: coa, Dst: ha, HomeAddress: hoa}, {Src: ha, Dst: coa, RoutingHome: hoa}, {Src: cn, Dst: coa}} {
		for _, m := range []Message{&BindingUpdate{Seq: 1, Home: true}, &BindingAck{Seq: 1}, &CareOfTest{}} {
			if p, err := AppendMessage(nil, env, m); err == nil {
				f.Add(p)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, m, err := ParseMessage(b)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		enc, err := AppendMessage(nil, p.Envelope, m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		want := p.Envelope
		if want.HopLimit == 0 {
			want.HopLimit = 64 // AppendPacket's default for the zero value
		}
		p2, m2, err := ParseMessage(enc)
		if err != nil || p2.Envelope != want || !reflect.DeepEqual(m2, m) {
			t.Fatalf("round trip: %+v %#v %v", p2, m2, err)
		}
	})
}

func FuzzParseDestOpts(f *testing.F) {
	b, _ := AppendHomeAddressDestOpts(nil, 135, hoa)
	f.Add(b)
	f.Add(unhex(f, "3b 00 1e02 0000 0100"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDestOpts(b)
		if err != nil {
			return
		}
		if d.Length > len(b) || d.Length%8 != 0 {
			t.Fatalf("length %d of %d", d.Length, len(b))
		}
		if d.HomeAddress.IsValid() {
			enc, err := AppendHomeAddressDestOpts(nil, d.NextHeader, d.HomeAddress)
			if err != nil {
				t.Fatal(err)
			}
			if d2, err := ParseDestOpts(enc); err != nil || d2.HomeAddress != d.HomeAddress {
				t.Fatalf("round trip %+v %v", d2, err)
			}
		}
	})
}

func FuzzParseType2RH(f *testing.F) {
	b, _ := AppendType2RH(nil, 135, hoa)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		rh, err := ParseType2RH(b)
		if err != nil {
			return
		}
		enc, err := AppendType2RH(nil, rh.NextHeader, rh.HomeAddress)
		if err != nil || !bytes.Equal(enc[:2], b[:2]) || !bytes.Equal(enc[8:24], b[8:24]) {
			t.Fatalf("round trip %x -> %x %v", b[:24], enc, err)
		}
	})
}
