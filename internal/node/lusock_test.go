package node

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"ilnp/internal/nstest"
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

// The LU socket's receive buffer holds a burst of thousands of LUs (issue 28).
func TestLUSocketBuffer(t *testing.T) {
	nstest.RequireRoot(t)
	s, err := openLUSocket()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	raw, err := s.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	if err := raw.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if got < luSocketBuffer {
		t.Fatalf("LU socket receive buffer %d bytes, want at least %d", got, luSocketBuffer)
	}
}
