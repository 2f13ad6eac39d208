package daemon

import (
	"encoding/binary"
	"net"
	"testing"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"ilnp/lab/mipv6/movement"
)

// The kernel's SLAAC addresses stand for the prefixes the RAs advertised: a global /64 on one
// of our links is a prefix, its deletion withdraws it; everything else is not movement.
func TestAddrEvent(t *testing.T) {
	names := map[int]string{3: "mn-r3"}
	ipnet := func(s string) net.IPNet {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		return net.IPNet{IP: ip, Mask: n.Mask}
	}
	for _, c := range []struct {
		name string
		u    netlink.AddrUpdate
		want *movement.PrefixInfo
	}{
		{"new", netlink.AddrUpdate{LinkIndex: 3, NewAddr: true, LinkAddress: ipnet("2001:db8:3::214:4fff:fe20:ee64/64")},
			&movement.PrefixInfo{Prefix: foreign, ValidLifetime: addressLifetime}},
		{"deleted", netlink.AddrUpdate{LinkIndex: 3, LinkAddress: ipnet("2001:db8:3::214:4fff:fe20:ee64/64")},
			&movement.PrefixInfo{Prefix: foreign}},
		{"other link", netlink.AddrUpdate{LinkIndex: 1, NewAddr: true, LinkAddress: ipnet("2001:db8:3::1/64")}, nil},
		{"link-local", netlink.AddrUpdate{LinkIndex: 3, NewAddr: true, LinkAddress: ipnet("fe80::1/64")}, nil},
		{"host route", netlink.AddrUpdate{LinkIndex: 3, NewAddr: true, LinkAddress: ipnet("2001:db8:3::1/128")}, nil},
		{"ipv4", netlink.AddrUpdate{LinkIndex: 3, NewAddr: true, LinkAddress: ipnet("192.0.2.1/24")}, nil},
		{"tentative", netlink.AddrUpdate{LinkIndex: 3, NewAddr: true, Flags: unix.IFA_F_TENTATIVE, LinkAddress: ipnet("2001:db8:3::1/64")}, nil},
	} {
		ev, ok := addrEvent(c.u, names)
		if c.want == nil {
			if ok {
				t.Errorf("%s: %+v", c.name, ev)
			}
			continue
		}
		adv, isAdv := ev.(movement.Advertisement)
		if !ok || !isAdv || adv.Link != "mn-r3" || len(adv.Prefixes) != 1 || adv.Prefixes[0] != *c.want {
			t.Errorf("%s: %+v, want %+v", c.name, ev, *c.want)
		}
	}
}

func TestLinkEvent(t *testing.T) {
	names := map[int]string{2: "mn-r2"}
	mk := func(idx int, flags net.Flags, raw uint32) netlink.LinkUpdate {
		return netlink.LinkUpdate{Link: &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Index: idx, Flags: flags, RawFlags: raw}}}
	}
	for _, c := range []struct {
		u      netlink.LinkUpdate
		ok, up bool
	}{
		{mk(2, net.FlagUp, unix.IFF_UP|unix.IFF_LOWER_UP), true, true},
		{mk(2, net.FlagUp, unix.IFF_UP), true, false}, // no carrier
		{mk(2, 0, 0), true, false},
		{mk(9, net.FlagUp, unix.IFF_UP|unix.IFF_LOWER_UP), false, false},
	} {
		ev, ok := linkEvent(c.u, names)
		if ok != c.ok {
			t.Errorf("%+v: ok %v", c.u.Attrs(), ok)
			continue
		}
		if ok && ev != (movement.LinkState{Link: "mn-r2", Up: c.up}) {
			t.Errorf("%+v: %+v", c.u.Attrs(), ev)
		}
	}
}

// The NA's arrival comes from the kernel's SO_TIMESTAMPNS stamp moved onto CLOCK_MONOTONIC;
// without stamp or hop limit the message is refused.
func TestArrivalOf(t *testing.T) {
	cmsg := func(level, typ int, data []byte) []byte {
		b := make([]byte, unix.CmsgSpace(len(data)))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		h.Level, h.Type = int32(level), int32(typ)
		h.SetLen(unix.CmsgLen(len(data)))
		copy(b[unix.CmsgLen(0):], data)
		return b
	}
	ts := make([]byte, 16)
	binary.NativeEndian.PutUint64(ts, 1_700_000_000)
	binary.NativeEndian.PutUint64(ts[8:], 250)
	hop := make([]byte, 4)
	binary.NativeEndian.PutUint32(hop, 255)
	both := append(cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ts), cmsg(unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT, hop)...)
	// Real time 1_700_000_001 s is monotonic 5 s: the stamp, 1 s earlier, is 4 s + 250 ns.
	got, h, err := arrivalOf(both, 1_700_000_001*1e9, 5e9)
	if err != nil || got != 4e9+250 || h != 255 {
		t.Fatalf("arrival %d hop %d: %v", got, h, err)
	}
	if _, _, err := arrivalOf(cmsg(unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT, hop), 0, 0); err == nil {
		t.Error("no time stamp accepted")
	}
	if _, _, err := arrivalOf(cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ts), 0, 0); err == nil {
		t.Error("no hop limit accepted")
	}
}
