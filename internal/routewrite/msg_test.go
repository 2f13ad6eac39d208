package routewrite

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

func TestAppendMessage(t *testing.T) {
	dst := netip.MustParseAddr("2001:db8::1")
	gw := netip.MustParseAddr("fe80::1")
	src := netip.MustParseAddr("2001:db8:1::2")
	hdr := func(l uint16, typ uint16, flags uint16, seq byte) string {
		return hex.EncodeToString([]byte{byte(l), byte(l >> 8), 0, 0, byte(typ), byte(typ >> 8), byte(flags), byte(flags >> 8), seq, 0, 0, 0, 0, 0, 0, 0})
	}
	dstAttr := "1400" + "0100" + "20010db8000000000000000000000001"
	oif := "0800" + "0400" + "07000000"
	for _, tc := range []struct {
		name string
		del  bool
		r    Route
		want string
	}{
		{"replace, link only", false, Route{Dst: dst, LinkIndex: 7},
			hdr(16+12+20+8, unix.RTM_NEWROUTE, unix.NLM_F_REQUEST|unix.NLM_F_CREATE|unix.NLM_F_REPLACE, 5) +
				"0a800000fe0400010000000" + "0" + dstAttr + oif},
		{"delete", true, Route{Dst: dst, LinkIndex: 7},
			hdr(16+12+20+8, unix.RTM_DELROUTE, unix.NLM_F_REQUEST, 5) +
				"0a800000fe04ff000000000" + "0" + dstAttr + oif},
		{"delete by destination", true, Route{Dst: dst},
			hdr(16+12+20, unix.RTM_DELROUTE, unix.NLM_F_REQUEST, 5) +
				"0a800000fe04ff000000000" + "0" + dstAttr},
		{"everything", false, Route{Dst: dst, LinkIndex: 7, Gw: gw, Src: src, MTU: 1432, AdvMSS: 1372, MTULock: true},
			hdr(16+12+20+20+20+(4+8+8+8)+8, unix.RTM_NEWROUTE, unix.NLM_F_REQUEST|unix.NLM_F_CREATE|unix.NLM_F_REPLACE, 5) +
				"0a800000fe0400010000000" + "0" + dstAttr +
				"1400" + "0700" + "20010db8000100000000000000000002" + // RTA_PREFSRC
				"1400" + "0500" + "fe800000000000000000000000000001" + // RTA_GATEWAY
				"1c00" + "0800" + "0800" + "0200" + "98050000" + "0800" + "0100" + "04000000" + "0800" + "0800" + "5c050000" +
				oif},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := appendMessage([]byte{0xaa}, tc.del, 5, 0, tc.r)
			if got[0] != 0xaa {
				t.Fatal("prefix overwritten")
			}
			if g := hex.EncodeToString(got[1:]); g != tc.want {
				t.Errorf("got  %s\nwant %s", g, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	for _, r := range []Route{
		{Dst: netip.MustParseAddr("192.0.2.1"), LinkIndex: 1},
		{Dst: netip.MustParseAddr("::ffff:192.0.2.1"), LinkIndex: 1},
		{Dst: netip.MustParseAddr("2001:db8::1")},
		{Dst: netip.MustParseAddr("2001:db8::1"), LinkIndex: -1},
		{},
	} {
		if r.check(false) == nil {
			t.Errorf("%+v accepted", r)
		}
	}
	if err := (Route{Dst: netip.MustParseAddr("2001:db8::1"), LinkIndex: 1}).check(false); err != nil {
		t.Errorf("good route refused: %v", err)
	}
	if err := (Route{Dst: netip.MustParseAddr("2001:db8::1")}).check(true); err != nil {
		t.Errorf("delete by destination refused: %v", err)
	}
	if (Route{Dst: netip.MustParseAddr("2001:db8::1"), LinkIndex: -1}).check(true) == nil {
		t.Error("delete with a negative interface accepted")
	}
}

func errMsg(seq uint32, code int32, pad int) []byte {
	b := ne.AppendUint32(nil, uint32(16+4+16+pad))
	b = ne.AppendUint16(b, unix.NLMSG_ERROR)
	b = ne.AppendUint16(b, 0)
	b = ne.AppendUint32(b, seq)
	b = ne.AppendUint32(b, 0)
	b = ne.AppendUint32(b, uint32(code))
	b = append(b, make([]byte, 16+pad)...)
	return b
}

func TestParseReplies(t *testing.T) {
	other := ne.AppendUint32(nil, 20)
	other = ne.AppendUint16(other, unix.NLMSG_DONE)
	other = append(other, make([]byte, 14)...)
	for _, tc := range []struct {
		name    string
		in      []byte
		want    []reply
		wantErr bool
	}{
		{"ack", errMsg(9, 0, 0), []reply{{9, 0}}, false},
		{"error", errMsg(9, -int32(unix.ENODEV), 0), []reply{{9, unix.ENODEV}}, false},
		{"two with padding, other skipped", append(append(errMsg(1, -int32(unix.EINVAL), 1), 0, 0, 0), append(other, errMsg(2, 0, 0)...)...),
			[]reply{{1, unix.EINVAL}, {2, 0}}, false},
		{"empty", nil, nil, false},
		{"short header", make([]byte, 10), nil, true},
		{"length past end", errMsg(1, 0, 0)[:30], nil, true},
		{"length below header", append(ne.AppendUint32(nil, 4), make([]byte, 12)...), nil, true},
		{"error without code", func() []byte { b := errMsg(1, 0, 0)[:16]; ne.PutUint32(b, 16); return b }(), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []reply
			err := parseReplies(tc.in, func(r reply) { got = append(got, r) })
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && !equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func equal(a, b []reply) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func FuzzParseReplies(f *testing.F) {
	f.Add(errMsg(1, 0, 0))
	f.Add(append(errMsg(1, -1, 3), errMsg(2, -19, 0)...))
	f.Add(bytes.Repeat([]byte{0xff}, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		_ = parseReplies(b, func(reply) { n++ })
		if n > len(b)/20 {
			t.Fatalf("%d replies from %d bytes", n, len(b))
		}
	})
}
