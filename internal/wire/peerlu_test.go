package wire

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// standrewsSendLU builds the ICMPv6 part of an LU as ilnp-public-1's net/ipv6/ilnp6.c
// send_lu() does at commit 61f77af: an icmp6hdr with type 156, code 0, un_data8[0] = 1
// (number of locators), un_data8[1] = 1 or 2 (LU or LU-ACK), then one struct lu_data
// (include/net/ilnp6.h at 61f77af: uint64_t l64; uint32_t prec; uint32_t lifetime) filled
// with l64 as copied from the address, prec = L64_DEFAULT_PREC (10) and lifetime =
// L64_DEFAULT_LIFETIME (30) without htonl (x86: little-endian), and the checksum by
// csum_ipv6_magic over the addresses with their upper 64 bits memset to 0 (0 sent as 0xffff).
func standrewsSendLU(l64 L64, ack bool, src, dst netip.Addr) []byte {
	msg := make([]byte, 24)
	msg[0], msg[4], msg[5] = 156, 1, 1
	if ack {
		msg[5] = 2
	}
	binary.BigEndian.PutUint64(msg[8:], uint64(l64))
	binary.LittleEndian.PutUint32(msg[16:], 10)
	binary.LittleEndian.PutUint32(msg[20:], 30)
	c := PseudoHeaderChecksum(zeroLocator(src), zeroLocator(dst), ProtoICMPv6, msg)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(msg[2:], c)
	return msg
}

// standrewsCodeSendLU is send_lu() at commit 96efc65: the Operation in icmp6_code (1 LU, 2
// LU-ACK), un_data8[1..3] zero, lu_data's prec and lifetime 16-bit with htons, and the 4
// tail-padding bytes of the 16-byte struct left as skb_put found them (here 0xa5).
func standrewsCodeSendLU(l64 L64, ack bool, src, dst netip.Addr) []byte {
	msg := make([]byte, 24)
	msg[0], msg[1], msg[4] = 156, 1, 1
	if ack {
		msg[1] = 2
	}
	binary.BigEndian.PutUint64(msg[8:], uint64(l64))
	binary.BigEndian.PutUint16(msg[16:], 10)
	binary.BigEndian.PutUint16(msg[18:], 30)
	copy(msg[20:], []byte{0xa5, 0xa5, 0xa5, 0xa5})
	binary.BigEndian.PutUint16(msg[2:], PseudoHeaderChecksum(zeroLocator(src), zeroLocator(dst), ProtoICMPv6, msg))
	return msg
}

// freebsdLUOutput is sys/netinet6/ilnp6.c lu_output() of ilnp-freebsd14: struct
// ilnp_locator_update (type 156, code 0, numl64s, operation LU_OP_ADVERT = 1, reserved16 0)
// followed by cc_lul64s, one struct ilnp_lu_l64 per valid local locator (locator, htons
// preference, htons lifetime = V_ilnp6_lu_ttl, 300 by default: lu_output_schedule()), and
// in6_cksum over the real addresses.
func freebsdLUOutput(locs []L64, prefs []uint16, src, dst netip.Addr) []byte {
	msg := []byte{156, 0, 0, 0, byte(len(locs)), 1, 0, 0}
	for i, l := range locs {
		msg = binary.BigEndian.AppendUint64(msg, uint64(l))
		msg = binary.BigEndian.AppendUint16(msg, prefs[i])
		msg = binary.BigEndian.AppendUint16(msg, 300)
	}
	binary.BigEndian.PutUint16(msg[2:], PseudoHeaderChecksum(src, dst, ProtoICMPv6, msg))
	return msg
}

// freebsdReflectAck is sys/netinet6/icmp6.c icmp6_input(), case ILNP6_LOCATOR_UPDATE: the
// received LU copied, icmp6_data8[1] (byte 5) set to LU_OP_ACK (2), then icmp6_reflect()
// swaps the addresses and recomputes in6_cksum over the real ones.
func freebsdReflectAck(lu []byte, luSrc, luDst netip.Addr) []byte {
	msg := slices.Clone(lu)
	msg[5] = 2
	msg[2], msg[3] = 0, 0
	binary.BigEndian.PutUint16(msg[2:], PseudoHeaderChecksum(luDst, luSrc, ProtoICMPv6, msg))
	return msg
}

func TestParsePeerLU(t *testing.T) {
	l := L64(0x20010db800030000)
	one := []LocatorEntry{{Locator: l, Preference: 10, Lifetime: 30}}
	fb := freebsdLUOutput([]L64{0x20010db800030000, 0x20010db800020000}, []uint16{10, 20}, luSrc, luDst)
	for _, tc := range []struct {
		name    string
		msg     []byte
		src     netip.Addr
		want    PeerLU
		wantErr string
	}{
		{name: "our RFC form", msg: must(luTwo.Marshal(luSrc, luDst)), want: PeerLU{Update: luTwo}},
		{name: "FreeBSD LU", msg: fb, want: PeerLU{Update: LocatorUpdate{Op: OpAdvertisement, Locators: []LocatorEntry{
			{Locator: 0x20010db800030000, Preference: 10, Lifetime: 300}, {Locator: 0x20010db800020000, Preference: 20, Lifetime: 300}}}}},
		{name: "FreeBSD reflected ACK", msg: freebsdReflectAck(fb, luDst, luSrc), want: PeerLU{Update: LocatorUpdate{Op: OpAcknowledgement, Locators: []LocatorEntry{
			{Locator: 0x20010db800030000, Preference: 10, Lifetime: 300}, {Locator: 0x20010db800020000, Preference: 20, Lifetime: 300}}}}},
		{name: "St Andrews LU", msg: standrewsSendLU(l, false, luSrc, luDst),
			want: PeerLU{Update: LocatorUpdate{Op: OpAdvertisement, Locators: one}, Layout: LayoutStAndrews, Checksum: ChecksumZeroLocators}},
		{name: "St Andrews ACK", msg: standrewsSendLU(l, true, luSrc, luDst),
			want: PeerLU{Update: LocatorUpdate{Op: OpAcknowledgement, Locators: one}, Layout: LayoutStAndrews, Checksum: ChecksumZeroLocators}},
		{name: "St Andrews 96efc65 LU", msg: standrewsCodeSendLU(l, false, luSrc, luDst),
			want: PeerLU{Update: LocatorUpdate{Op: OpAdvertisement, Locators: one}, Layout: LayoutStAndrewsCode, Checksum: ChecksumZeroLocators}},
		{name: "St Andrews layout, full checksum", msg: must(PeerLU{Update: LocatorUpdate{Op: OpAcknowledgement, Locators: one}, Layout: LayoutStAndrews}.Marshal(luSrc, luDst)),
			want: PeerLU{Update: LocatorUpdate{Op: OpAcknowledgement, Locators: one}, Layout: LayoutStAndrews}},
		{name: "St Andrews: 32-bit preference clamped", msg: func() []byte {
			b := standrewsSendLU(l, false, luSrc, luDst)
			b[18] = 1 // preference 0x1000a
			b[2], b[3] = 0, 0
			binary.BigEndian.PutUint16(b[2:], PseudoHeaderChecksum(luSrc, luDst, ProtoICMPv6, b))
			return b
		}(), want: PeerLU{Update: LocatorUpdate{Op: OpAdvertisement, Locators: []LocatorEntry{{Locator: l, Preference: 0xffff, Lifetime: 30}}}, Layout: LayoutStAndrews}},

		{name: "St Andrews LU for other addresses", msg: standrewsSendLU(l, false, luSrc, luDst), src: netip.MustParseAddr("2001:db8:9::21b:21ff:fe67:97a9"), wantErr: "bad ICMPv6 checksum"},
		{name: "24 bytes, 2 locators", msg: withChecksum(luBody(0, 2, 1, make([]byte, 16)...), luSrc, luDst), wantErr: "2 locators need 32 bytes, have 24"},
		{name: "RFC with pad", msg: withChecksum(append(luBody(0, 2, 1, twoEntries...), 0, 0, 0, 0), luSrc, luDst), wantErr: "need 32 bytes, have 36"},
		{name: "op in code with 12-byte entries", msg: withChecksum(luBody(1, 2, 0, twoEntries...), luSrc, luDst), wantErr: "code 1, want 0"},
		{name: "St Andrews length, code and op", msg: withChecksum(luBody(1, 1, 1, make([]byte, 16)...), luSrc, luDst), wantErr: "code 1, want 0"},
		{name: "St Andrews op 3", msg: withChecksum(luBody(0, 1, 3, make([]byte, 16)...), luSrc, luDst), wantErr: "unknown operation(3)"},
		{name: "St Andrews code 3", msg: withChecksum(luBody(3, 1, 0, make([]byte, 16)...), luSrc, luDst), wantErr: "unknown operation(3)"},
		{name: "num 0", msg: withChecksum(luBody(0, 0, 1, twoEntries...), luSrc, luDst), wantErr: "Num of Locs is 0"},
		{name: "short", msg: withChecksum(luBody(0, 1, 1, 1, 2, 3), luSrc, luDst), wantErr: "11 bytes"},
		{name: "wrong type", msg: withChecksum(append([]byte{155, 0, 0, 0, 2, 1, 0, 0}, twoEntries...), luSrc, luDst), wantErr: "type 155"},
		{name: "IPv4 source", msg: fb, src: netip.MustParseAddr("192.0.2.1"), wantErr: "not IPv6"},
	} {
		src := luSrc
		if tc.src.IsValid() {
			src = tc.src
		}
		dst := luDst
		if strings.Contains(tc.name, "reflected") {
			src, dst = luDst, luSrc
		}
		got, err := ParsePeerLU(tc.msg, src, dst)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "locator update: ") {
				t.Errorf("%s: ParsePeerLU(% x) = %+v, %v; want error containing %q", tc.name, tc.msg, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: ParsePeerLU(% x): %v", tc.name, tc.msg, err)
			continue
		}
		if got.Layout != tc.want.Layout || got.Checksum != tc.want.Checksum || got.Update.Op != tc.want.Update.Op ||
			!slices.Equal(got.Update.Locators, tc.want.Update.Locators) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestPeerLUMarshal: what we send in the St Andrews layouts is what their send_lu writes
// (padding aside, which we zero), and the RFC layout is byte for byte LocatorUpdate.Marshal.
func TestPeerLUMarshal(t *testing.T) {
	l := L64(0x20010db800030000)
	one := LocatorUpdate{Op: OpAcknowledgement, Locators: []LocatorEntry{{Locator: l, Preference: 10, Lifetime: 30}}}
	if got, want := must(PeerLU{Update: one, Layout: LayoutStAndrews, Checksum: ChecksumZeroLocators}.Marshal(luSrc, luDst)),
		standrewsSendLU(l, true, luSrc, luDst); !bytes.Equal(got, want) {
		t.Errorf("St Andrews ACK = % x\nsend_lu writes % x", got, want)
	}
	code := must(PeerLU{Update: one, Layout: LayoutStAndrewsCode, Checksum: ChecksumZeroLocators}.Marshal(luSrc, luDst))
	want := standrewsCodeSendLU(l, true, luSrc, luDst)
	copy(want[20:], []byte{0, 0, 0, 0})
	want[2], want[3] = 0, 0
	binary.BigEndian.PutUint16(want[2:], PseudoHeaderChecksum(zeroLocator(luSrc), zeroLocator(luDst), ProtoICMPv6, want))
	if !bytes.Equal(code, want) {
		t.Errorf("96efc65 ACK = % x\nwant % x", code, want)
	}
	if got := must(PeerLU{Update: luTwo}.Marshal(luSrc, luDst)); !bytes.Equal(got, must(luTwo.Marshal(luSrc, luDst))) {
		t.Errorf("RFC layout differs from LocatorUpdate.Marshal: % x", got)
	}
	if _, err := (PeerLU{Update: luTwo, Layout: LayoutStAndrews}).Marshal(luSrc, luDst); err == nil || !strings.Contains(err.Error(), "carries 1 locator, have 2") {
		t.Errorf("two locators in the St Andrews layout: %v", err)
	}
	if _, err := (PeerLU{Update: LocatorUpdate{Op: 3, Locators: one.Locators}, Layout: LayoutStAndrews}).Marshal(luSrc, luDst); err == nil {
		t.Error("operation 3 marshalled")
	}
	if _, err := (PeerLU{Update: one, Layout: 9}).Marshal(luSrc, luDst); err == nil {
		t.Error("layout 9 marshalled")
	}
}

func FuzzParsePeerLU(f *testing.F) {
	l := L64(0x20010db800030000)
	f.Add(must(luTwo.Marshal(luSrc, luDst)), false)
	f.Add(standrewsSendLU(l, false, luSrc, luDst), true)
	f.Add(standrewsCodeSendLU(l, true, luSrc, luDst), false)
	f.Add(withChecksum(luBody(0, 1, 3, make([]byte, 16)...), luSrc, luDst), false)
	f.Add([]byte{156, 0}, true)
	f.Fuzz(func(t *testing.T, msg []byte, swap bool) {
		src, dst := luSrc, luDst
		if swap {
			src, dst = dst, src
		}
		p, err := ParsePeerLU(msg, src, dst)
		if err != nil {
			return
		}
		if len(p.Update.Locators) != int(msg[4]) || (p.Layout != LayoutRFC6743 && len(msg) != StAndrewsLULen) {
			t.Fatalf("% x: %+v", msg, p)
		}
		out, err := p.Marshal(src, dst)
		if err != nil {
			t.Fatalf("% x: parsed %+v does not marshal: %v", msg, p, err)
		}
		again, err := ParsePeerLU(out, src, dst)
		if err != nil || again.Layout != p.Layout || again.Checksum != p.Checksum || again.Update.Op != p.Update.Op ||
			!slices.Equal(again.Update.Locators, p.Update.Locators) {
			t.Fatalf("% x -> %+v -> % x -> %+v %v", msg, p, out, again, err)
		}
		// The RFC layout with zero reserved bytes is reproduced exactly.
		if p.Layout == LayoutRFC6743 && p.Checksum == ChecksumFull && msg[6] == 0 && msg[7] == 0 && !bytes.Equal(out, msg) {
			t.Fatalf("RFC form % x re-marshals as % x", msg, out)
		}
	})
}
