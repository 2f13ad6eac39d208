// Package routewrite writes IPv6 host routes to the kernel in batches: many RTM_NEWROUTE and
// RTM_DELROUTE messages in one sendmsg on one NETLINK_ROUTE socket, their errors read back
// and matched to the route by sequence number. A request of its own per route (a sendmsg and
// a recvmsg of its ACK each) was more than half of what a correspondent recording 5,000-7,000
// sessions a second spent per session, and a move rerouted 100,000 peers at 75 ms per 1,000
// in one turn of its loop (issue 28).
//
// This file is the wire format (no I/O): the messages and the replies.
package routewrite

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Route is an IPv6 /128 route in the main table with protocol static: what ilnpd writes for
// a correspondent (internal/node, host.route).
type Route struct {
	Dst       netip.Addr // the /128 destination
	LinkIndex int
	Gw, Src   netip.Addr // zero: none (Src is the preferred source, RTA_PREFSRC)
	MTU       int        // 0: none
	AdvMSS    int        // 0: none
	MTULock   bool
}

var (
	errNotIPv6 = errors.New("routewrite: destination is not an IPv6 address")
	errBadLink = errors.New("routewrite: no interface index")
)

// check refuses what is not an IPv6 host route; a delete may leave the interface out (any
// route to Dst of protocol static).
func (r Route) check(del bool) error {
	if !r.Dst.Is6() || r.Dst.Is4In6() {
		return errNotIPv6
	}
	if r.LinkIndex < 0 || (r.LinkIndex == 0 && !del) {
		return errBadLink
	}
	return nil
}

// Netlink's own byte order is the host's; every machine this runs on is little-endian, and the
// test pins the layout.
var ne = binary.NativeEndian

// appendMessage appends the RTM_NEWROUTE (replace: create or replace) or RTM_DELROUTE message
// for r with seq and the header flags. Its attributes are those vishvananda/netlink's
// RouteReplace and RouteDel send for the same route, so a delete matches what either wrote.
func appendMessage(b []byte, del bool, seq uint32, flags uint16, r Route) []byte {
	start := len(b)
	typ := uint16(unix.RTM_NEWROUTE)
	scope := uint8(unix.RT_SCOPE_UNIVERSE)
	rtype := uint8(unix.RTN_UNICAST)
	flags |= unix.NLM_F_REQUEST
	if del {
		typ = unix.RTM_DELROUTE
		scope, rtype = unix.RT_SCOPE_NOWHERE, 0
	} else {
		flags |= unix.NLM_F_CREATE | unix.NLM_F_REPLACE
	}
	b = ne.AppendUint32(b, 0) // nlmsg_len, set below
	b = ne.AppendUint16(b, typ)
	b = ne.AppendUint16(b, flags)
	b = ne.AppendUint32(b, seq)
	b = ne.AppendUint32(b, 0) // nlmsg_pid: the kernel's
	// struct rtmsg
	b = append(b, unix.AF_INET6, 128, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_STATIC, scope, rtype)
	b = ne.AppendUint32(b, 0) // rtm_flags
	dst := r.Dst.As16()
	b = appendAttr(b, unix.RTA_DST, dst[:])
	if r.Src.IsValid() {
		s := r.Src.As16()
		b = appendAttr(b, unix.RTA_PREFSRC, s[:])
	}
	if r.Gw.IsValid() {
		g := r.Gw.As16()
		b = appendAttr(b, unix.RTA_GATEWAY, g[:])
	}
	if r.MTU > 0 || r.AdvMSS > 0 {
		m := len(b)
		b = ne.AppendUint16(b, 0)
		b = ne.AppendUint16(b, unix.RTA_METRICS)
		if r.MTU > 0 {
			b = appendAttr(b, unix.RTAX_MTU, ne.AppendUint32(nil, uint32(r.MTU)))
			if r.MTULock {
				b = appendAttr(b, unix.RTAX_LOCK, ne.AppendUint32(nil, 1<<unix.RTAX_MTU))
			}
		}
		if r.AdvMSS > 0 {
			b = appendAttr(b, unix.RTAX_ADVMSS, ne.AppendUint32(nil, uint32(r.AdvMSS)))
		}
		ne.PutUint16(b[m:], uint16(len(b)-m))
	}
	if r.LinkIndex > 0 {
		b = appendAttr(b, unix.RTA_OIF, ne.AppendUint32(nil, uint32(r.LinkIndex)))
	}
	ne.PutUint32(b[start:], uint32(len(b)-start))
	return b
}

// appendAttr appends one rtattr, padded to 4 bytes.
func appendAttr(b []byte, typ uint16, data []byte) []byte {
	b = ne.AppendUint16(b, uint16(unix.SizeofRtAttr+len(data)))
	b = ne.AppendUint16(b, typ)
	b = append(b, data...)
	for i := len(data); i%unix.RTA_ALIGNTO != 0; i++ {
		b = append(b, 0)
	}
	return b
}

// reply is one NLMSG_ERROR message the kernel sent: the sequence number of the request it
// answers and its errno (0: an acknowledgement).
type reply struct {
	seq   uint32
	errno unix.Errno
}

// parseReplies calls f for every NLMSG_ERROR message in b, one datagram read from the socket.
// Other messages are skipped; a truncated or malformed one ends the walk with an error.
func parseReplies(b []byte, f func(reply)) error {
	for len(b) > 0 {
		if len(b) < unix.SizeofNlMsghdr {
			return errors.New("routewrite: truncated netlink header")
		}
		l := ne.Uint32(b)
		if l < unix.SizeofNlMsghdr || uint64(l) > uint64(len(b)) {
			return errors.New("routewrite: bad netlink message length")
		}
		typ, seq := ne.Uint16(b[4:]), ne.Uint32(b[8:])
		if typ == unix.NLMSG_ERROR {
			if l < unix.SizeofNlMsghdr+4 {
				return errors.New("routewrite: truncated netlink error")
			}
			code := int32(ne.Uint32(b[unix.SizeofNlMsghdr:]))
			var errno unix.Errno
			if code < 0 {
				errno = unix.Errno(-int64(code))
			}
			f(reply{seq: seq, errno: errno})
		}
		next := (uint64(l) + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if next >= uint64(len(b)) {
			return nil
		}
		b = b[next:]
	}
	return nil
}
