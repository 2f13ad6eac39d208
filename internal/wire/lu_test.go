package wire

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

var (
	luSrc = netip.MustParseAddr("2001:db8:2::21b:21ff:fe67:97a8")
	luDst = netip.MustParseAddr("2001:db8:1::14:4fff:ff20:ee64")
	luTwo = LocatorUpdate{Op: OpAdvertisement, Locators: []LocatorEntry{
		{Locator: 0x20010db800030000, Preference: 10, Lifetime: 300},
		{Locator: 0x20010db800020000, Preference: 20, Lifetime: 60},
	}}
)

// luBody is the RFC 6743 s.2 layout written out by hand, checksum zero.
func luBody(code, nlocs, op byte, entries ...byte) []byte {
	return append([]byte{156, code, 0, 0, nlocs, op, 0, 0}, entries...)
}

var twoEntries = []byte{
	0x20, 0x01, 0x0d, 0xb8, 0x00, 0x03, 0x00, 0x00, 0x00, 10, 0x01, 0x2c,
	0x20, 0x01, 0x0d, 0xb8, 0x00, 0x02, 0x00, 0x00, 0x00, 20, 0x00, 60,
}

// withChecksum fills in the checksum computed by the reference naiveChecksum
// over the pseudo-header of src and dst.
func withChecksum(msg []byte, src, dst netip.Addr) []byte {
	msg = slices.Clone(msg)
	binary.BigEndian.PutUint16(msg[2:], 0)
	s, d := src.As16(), dst.As16()
	ph := slices.Concat(s[:], d[:], binary.BigEndian.AppendUint32(nil, uint32(len(msg))), []byte{0, 0, 0, 58})
	binary.BigEndian.PutUint16(msg[2:], naiveChecksum(append(ph, msg...)))
	return msg
}

func TestLocatorUpdateMarshal(t *testing.T) {
	got, err := luTwo.Marshal(luSrc, luDst)
	if err != nil {
		t.Fatal(err)
	}
	want := withChecksum(luBody(0, 2, 1, twoEntries...), luSrc, luDst)
	if !bytes.Equal(got, want) {
		t.Fatalf("Marshal = % x\nwant      % x", got, want)
	}
	ack, err := luTwo.Ack().Marshal(luDst, luSrc)
	if err != nil {
		t.Fatal(err)
	}
	if want := withChecksum(luBody(0, 2, 2, twoEntries...), luDst, luSrc); !bytes.Equal(ack, want) {
		t.Fatalf("ACK = % x\nwant  % x", ack, want)
	}
	many := LocatorUpdate{Op: OpAdvertisement, Locators: make([]LocatorEntry, 255)}
	if b, err := many.Marshal(luSrc, luDst); err != nil || len(b) != 8+255*12 || b[4] != 255 {
		t.Errorf("255 locators: %d bytes, %v", len(b), err)
	}

	for _, tc := range []struct {
		name     string
		lu       LocatorUpdate
		src, dst netip.Addr
		wantErr  string
	}{
		{"no locators", LocatorUpdate{Op: OpAdvertisement}, luSrc, luDst, "0 locators"},
		{"256 locators", LocatorUpdate{Op: OpAdvertisement, Locators: make([]LocatorEntry, 256)}, luSrc, luDst, "256 locators"},
		{"op 0", LocatorUpdate{Locators: luTwo.Locators}, luSrc, luDst, "unknown operation(0)"},
		{"op 3", LocatorUpdate{Op: 3, Locators: luTwo.Locators}, luSrc, luDst, "unknown operation(3)"},
		{"IPv4 source", luTwo, netip.MustParseAddr("10.0.0.1"), luDst, "source 10.0.0.1 is not IPv6"},
		{"4in6 destination", luTwo, luSrc, netip.MustParseAddr("::ffff:10.0.0.1"), "destination ::ffff:10.0.0.1 is not IPv6"},
		{"invalid source", luTwo, netip.Addr{}, luDst, "not IPv6"},
	} {
		if b, err := tc.lu.Marshal(tc.src, tc.dst); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: Marshal = % x, %v; want error containing %q", tc.name, b, err, tc.wantErr)
		}
	}
}

func TestLocatorUpdateAck(t *testing.T) {
	ack := luTwo.Ack()
	if ack.Op != OpAcknowledgement || !slices.Equal(ack.Locators, luTwo.Locators) {
		t.Fatalf("Ack = %+v", ack)
	}
	ack.Locators[0].Preference = 99
	if luTwo.Locators[0].Preference != 10 {
		t.Fatal("Ack shares the locator list with the advertisement")
	}
	if luTwo.Op != OpAdvertisement {
		t.Fatal("Ack changed the advertisement")
	}
}

// zeroLocatorChecksum is the St Andrews Linux form: the checksum is computed
// over a pseudo-header whose addresses have their upper 64 bits zeroed.
func zeroLocatorChecksum(msg []byte, src, dst netip.Addr) []byte {
	return withChecksum(msg, zeroLocator(src), zeroLocator(dst))
}

func TestParseLocatorUpdate(t *testing.T) {
	rfc := withChecksum(luBody(0, 2, 1, twoEntries...), luSrc, luDst)
	pad := func(n int) []byte {
		return withChecksum(append(luBody(0, 2, 1, twoEntries...), make([]byte, n)...), luSrc, luDst)
	}
	compat := LUParseOptions{ZeroLocatorChecksum: true}
	for _, tc := range []struct {
		name       string
		msg        []byte
		src, dst   netip.Addr
		opts       LUParseOptions
		wantOp     Operation
		wantQuirks LUQuirks
		wantErr    string
	}{
		{name: "RFC form", msg: rfc, wantOp: OpAdvertisement},
		{name: "RFC ack", msg: withChecksum(luBody(0, 2, 2, twoEntries...), luSrc, luDst), wantOp: OpAcknowledgement},
		{name: "RFC form, compat switch on", msg: rfc, opts: compat, wantOp: OpAdvertisement},
		{name: "reserved bytes set are ignored", msg: withChecksum(slices.Concat([]byte{156, 0, 0, 0, 2, 1, 0xff, 0xff}, twoEntries), luSrc, luDst), wantOp: OpAdvertisement},
		{name: "op in code", msg: withChecksum(luBody(1, 2, 0, twoEntries...), luSrc, luDst), wantOp: OpAdvertisement, wantQuirks: QuirkOpInCode},
		{name: "ack in code", msg: withChecksum(luBody(2, 2, 0, twoEntries...), luSrc, luDst), wantOp: OpAcknowledgement, wantQuirks: QuirkOpInCode},
		{name: "1 pad byte", msg: pad(1), wantOp: OpAdvertisement, wantQuirks: QuirkTrailingPad},
		{name: "4 pad bytes", msg: pad(4), wantOp: OpAdvertisement, wantQuirks: QuirkTrailingPad},
		{name: "7 pad bytes", msg: pad(7), wantOp: OpAdvertisement, wantQuirks: QuirkTrailingPad},
		{name: "zero-locator checksum with switch", msg: zeroLocatorChecksum(luBody(0, 2, 1, twoEntries...), luSrc, luDst), opts: compat,
			wantOp: OpAdvertisement, wantQuirks: QuirkZeroLocatorChecksum},
		{name: "St Andrews form: all three", msg: zeroLocatorChecksum(append(luBody(2, 2, 0, twoEntries...), 0, 0, 0, 0), luSrc, luDst), opts: compat,
			wantOp: OpAcknowledgement, wantQuirks: QuirkOpInCode | QuirkTrailingPad | QuirkZeroLocatorChecksum},

		{name: "zero-locator checksum without switch", msg: zeroLocatorChecksum(luBody(0, 2, 1, twoEntries...), luSrc, luDst), wantErr: "bad ICMPv6 checksum"},
		{name: "bad checksum", msg: func() []byte { b := slices.Clone(rfc); b[3]++; return b }(), wantErr: "bad ICMPv6 checksum"},
		{name: "bad checksum, switch on", msg: func() []byte { b := slices.Clone(rfc); b[3]++; return b }(), opts: compat, wantErr: "also with locators zeroed"},
		{name: "checksum for other addresses", msg: withChecksum(luBody(0, 2, 1, twoEntries...), luSrc, netip.MustParseAddr("2001:db8:1::1")), wantErr: "bad ICMPv6 checksum"},
		{name: "8 pad bytes", msg: pad(8), wantErr: "8 bytes after 2 locators"},
		{name: "truncated entry", msg: withChecksum(luBody(0, 2, 1, twoEntries[:23]...), luSrc, luDst), wantErr: "need 32 bytes, have 31"},
		{name: "one entry missing", msg: withChecksum(luBody(0, 3, 1, twoEntries...), luSrc, luDst), wantErr: "3 locators need 44 bytes, have 32"},
		{name: "num of locs 0", msg: withChecksum(luBody(0, 0, 1, twoEntries...), luSrc, luDst), wantErr: "Num of Locs is 0"},
		{name: "header only", msg: withChecksum(luBody(0, 1, 1), luSrc, luDst), wantErr: "8 bytes, want at least 20"},
		{name: "empty", msg: nil, wantErr: "0 bytes"},
		{name: "wrong type", msg: withChecksum(append([]byte{157, 0, 0, 0, 2, 1, 0, 0}, twoEntries...), luSrc, luDst), wantErr: "ICMPv6 type 157, want 156"},
		{name: "op 0", msg: withChecksum(luBody(0, 2, 0, twoEntries...), luSrc, luDst), wantErr: "unknown operation(0)"},
		{name: "op 3", msg: withChecksum(luBody(0, 2, 3, twoEntries...), luSrc, luDst), wantErr: "unknown operation(3)"},
		{name: "code 3", msg: withChecksum(luBody(3, 2, 0, twoEntries...), luSrc, luDst), wantErr: "unknown operation(3)"},
		{name: "code and op both set", msg: withChecksum(luBody(1, 2, 1, twoEntries...), luSrc, luDst), wantErr: "both code (1) and operation (1) set"},
		{name: "IPv4 source", msg: rfc, src: netip.MustParseAddr("192.0.2.1"), wantErr: "not IPv6"},
		{name: "4in6 destination", msg: rfc, dst: netip.MustParseAddr("::ffff:192.0.2.1"), wantErr: "not IPv6"},
	} {
		src, dst := luSrc, luDst
		if tc.src.IsValid() {
			src = tc.src
		}
		if tc.dst.IsValid() {
			dst = tc.dst
		}
		lu, q, err := ParseLocatorUpdateQuirks(tc.msg, src, dst, tc.opts)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "locator update: ") {
				t.Errorf("%s: ParseLocatorUpdate(% x) = %+v, %v; want error containing %q", tc.name, tc.msg, lu, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: ParseLocatorUpdate(% x): %v", tc.name, tc.msg, err)
			continue
		}
		if lu.Op != tc.wantOp || !slices.Equal(lu.Locators, luTwo.Locators) || q != tc.wantQuirks {
			t.Errorf("%s: got %+v quirks %b, want op %v %+v quirks %b", tc.name, lu, q, tc.wantOp, luTwo.Locators, tc.wantQuirks)
		}
		plain, err := ParseLocatorUpdate(tc.msg, src, dst, tc.opts)
		if err != nil || plain.Op != lu.Op || !slices.Equal(plain.Locators, lu.Locators) {
			t.Errorf("%s: ParseLocatorUpdate disagrees with ParseLocatorUpdateQuirks: %+v, %v", tc.name, plain, err)
		}
	}
}

func TestLocatorUpdateRoundTrip(t *testing.T) {
	for n := 1; n <= 255; n += 23 {
		lu := LocatorUpdate{Op: OpAcknowledgement}
		for i := range n {
			lu.Locators = append(lu.Locators, LocatorEntry{Locator: L64(0x20010db800000000 + uint64(i)<<16), Preference: uint16(i), Lifetime: uint16(65535 - i)})
		}
		msg, err := lu.Marshal(luSrc, luDst)
		if err != nil {
			t.Fatal(err)
		}
		got, q, err := ParseLocatorUpdateQuirks(msg, luSrc, luDst, LUParseOptions{})
		if err != nil || q != 0 || got.Op != lu.Op || !slices.Equal(got.Locators, lu.Locators) {
			t.Fatalf("%d locators: %+v %b %v", n, got, q, err)
		}
	}
}

func FuzzParseLocatorUpdate(f *testing.F) {
	src16, dst16 := luSrc.As16(), luDst.As16()
	addrs := append(src16[:], dst16[:]...)
	rfc, _ := luTwo.Marshal(luSrc, luDst)
	f.Add(rfc, addrs, false)
	f.Add(withChecksum(luBody(2, 2, 0, append(twoEntries, 0, 0, 0)...), luSrc, luDst), addrs, false)
	f.Add(zeroLocatorChecksum(luBody(1, 2, 0, twoEntries...), luSrc, luDst), addrs, true)
	f.Add(withChecksum(luBody(0, 0, 1), luSrc, luDst), addrs, false)
	f.Add([]byte{156}, addrs, true)
	f.Fuzz(func(t *testing.T, msg, addrs []byte, zeroLoc bool) {
		src, dst := luSrc, luDst
		if len(addrs) >= 32 {
			src, dst = netip.AddrFrom16([16]byte(addrs[:16])), netip.AddrFrom16([16]byte(addrs[16:32]))
		}
		lu, q, err := ParseLocatorUpdateQuirks(msg, src, dst, LUParseOptions{ZeroLocatorChecksum: zeroLoc})
		plain, perr := ParseLocatorUpdate(msg, src, dst, LUParseOptions{ZeroLocatorChecksum: zeroLoc})
		if (perr == nil) != (err == nil) || (err == nil && !slices.Equal(plain.Locators, lu.Locators)) {
			t.Fatalf("% x: ParseLocatorUpdate %v disagrees with ParseLocatorUpdateQuirks %v", msg, perr, err)
		}
		if err != nil {
			return
		}
		if len(lu.Locators) != int(msg[4]) || (q&QuirkZeroLocatorChecksum != 0 && !zeroLoc) {
			t.Fatalf("% x: %+v quirks %b", msg, lu, q)
		}
		out, err := lu.Marshal(src, dst)
		if err != nil {
			t.Fatalf("% x: parsed %+v does not marshal: %v", msg, lu, err)
		}
		again, q2, err := ParseLocatorUpdateQuirks(out, src, dst, LUParseOptions{})
		if err != nil || q2 != 0 || again.Op != lu.Op || !slices.Equal(again.Locators, lu.Locators) {
			t.Fatalf("% x -> %+v -> % x -> %+v %b %v", msg, lu, out, again, q2, err)
		}
		// An RFC-form input with zero reserved bytes is reproduced exactly.
		if q == 0 && msg[6] == 0 && msg[7] == 0 && !bytes.Equal(out, msg) {
			t.Fatalf("RFC form % x re-marshals as % x", msg, out)
		}
	})
}
