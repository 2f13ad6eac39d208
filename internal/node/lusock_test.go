package node

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

// cmsg builds one control message as the kernel lays it out (struct cmsghdr + data, aligned).
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, unix.CmsgSpace(len(data)))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(len(data)))
	copy(b[unix.CmsgLen(0):], data)
	return b
}

func TestParseLUControlArrivalStamp(t *testing.T) {
	dst := netip.MustParseAddr("2001:db8:3::214:4fff:fe20:ee64")
	pktinfo := make([]byte, unix.SizeofInet6Pktinfo)
	copy(pktinfo, dst.AsSlice())
	binary.NativeEndian.PutUint32(pktinfo[16:], 7)
	stamp := make([]byte, 16) // struct timespec: 1700000000.000000250 s, CLOCK_REALTIME
	binary.NativeEndian.PutUint64(stamp[0:], 1700000000)
	binary.NativeEndian.PutUint64(stamp[8:], 250)
	const realMinusMono = 1699990000 * 1e9 // CLOCK_MONOTONIC = 10000 s + 250 ns at arrival

	for _, tc := range []struct {
		name    string
		oob     []byte
		wantAt  int64
		wantIf  int
		wantDst netip.Addr
	}{
		{"pktinfo and stamp", append(cmsg(unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, pktinfo),
			cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, stamp)...), 10000*1e9 + 250, 7, dst},
		{"stamp first", append(cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, stamp),
			cmsg(unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, pktinfo)...), 10000*1e9 + 250, 7, dst},
		{"no stamp", cmsg(unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, pktinfo), 0, 7, dst},
		{"truncated stamp", cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, stamp[:8]), 0, 0, netip.Addr{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := parseLUControl(tc.oob, realMinusMono)
			if r.at != tc.wantAt || r.ifindex != tc.wantIf || r.dst != tc.wantDst {
				t.Fatalf("at=%d ifindex=%d dst=%v, want at=%d ifindex=%d dst=%v",
					r.at, r.ifindex, r.dst, tc.wantAt, tc.wantIf, tc.wantDst)
			}
		})
	}
}

// TestParseDstOptsLU: what the Destination Options socket hands on. A St Andrews LU (checksum
// over zeroed locators, which the ICMPv6 socket would drop) behind a datapath-verified nonce is
// an LU with its layout; an unchecked nonce option (the kernel drops that packet), another
// ICMPv6 message, another upper layer and a truncated header are not ours.
func TestParseDstOptsLU(t *testing.T) {
	src := netip.MustParseAddr("2001:db8:1::214:4fff:fe20:cc01")
	dst := netip.MustParseAddr("2001:db8:3::214:4fff:fe20:ee64")
	pktinfo := make([]byte, unix.SizeofInet6Pktinfo)
	copy(pktinfo, dst.AsSlice())
	binary.NativeEndian.PutUint32(pktinfo[16:], 3)
	oob := cmsg(unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, pktinfo)
	lu, err := wire.PeerLU{Update: wire.LocatorUpdate{Op: wire.OpAdvertisement,
		Locators: []wire.LocatorEntry{{Locator: 0x20010db800060000, Preference: 10, Lifetime: 30}}},
		Layout: wire.LayoutStAndrews, Checksum: wire.ChecksumZeroLocators}.Marshal(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	do := func(opt byte) []byte { return []byte{wire.ProtoICMPv6, 0, opt, 4, 1, 2, 3, 4} }
	from := &net.IPAddr{IP: src.AsSlice()}
	r, ok := parseDstOptsLU(append(do(wire.VerifiedNonceOptionType), lu...), oob, from, 0)
	if !ok || r.err != nil || r.nonceErr != nil || r.peer.Layout != wire.LayoutStAndrews ||
		r.peer.Checksum != wire.ChecksumZeroLocators || r.src != src || r.dst != dst || r.ifindex != 3 || r.size != len(lu) {
		t.Fatalf("verified St Andrews LU: ok=%v %+v", ok, r)
	}
	echo := []byte{128, 0, 0, 0, 0, 1, 0, 1}
	udp := append([]byte{wire.ProtoUDP, 0, wire.VerifiedNonceOptionType, 4, 1, 2, 3, 4}, make([]byte, 8)...)
	for name, pkt := range map[string][]byte{
		"unchecked nonce": append(do(wire.NonceOptionType), lu...),
		"echo request":    append(do(wire.VerifiedNonceOptionType), echo...),
		"UDP":             udp,
		"truncated":       do(wire.VerifiedNonceOptionType)[:6],
	} {
		if _, ok := parseDstOptsLU(pkt, oob, from, 0); ok {
			t.Errorf("%s: handed on as an LU", name)
		}
	}
}

// The LU socket's receive buffer holds a burst of thousands of LUs (issue 28).
func TestLUSocketBuffer(t *testing.T) {
	nstest.RequireRoot(t)
	s, err := openLUSocket()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for name, conn := range map[string]*net.IPConn{"ICMPv6": s.conn, "Destination Options": s.do} {
		raw, err := conn.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var got int
		var gerr error
		if err := raw.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) }); err != nil || gerr != nil {
			t.Fatal(err, gerr)
		}
		if got < luSocketBuffer {
			t.Errorf("%s LU socket receive buffer %d bytes, want at least %d", name, got, luSocketBuffer)
		}
	}
}
