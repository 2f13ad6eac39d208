package datapath

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/lab/mipv6/mh"
)

// mipTopo is the lab's shape: CN - R1 - {R2, R3}; R2 is the home agent with the home link L2,
// R3 the router of the foreign link L3; the MN sits on both links (m2 on L2, m3 on L3).
//
//	CN c0 --- r1c R1 r1a --- r2u R2(HA) r2h --- m2 MN
//	              R1 r1b --- r3u R3     r3f --- m3 MN
//
// Set up the way the package doc asks: routes with mtu 1460 advmss 1400 on the CN and the MN,
// TSO and TX checksum offload off on their veths (finished checksums in the captures), the HoA
// as a /128 on the MN's lo as well as on its home interface, forwarding on the routers.
type mipTopo struct {
	route              []string // extra route arguments of the hosts (MTU)
	cn, r1, r2, r3, mn *nstest.NS
	ha, mn6, corr      *Datapath
	r2u, r2h, m2, m3   int
	c0                 int
}

const hostRoute = "mtu 1460 advmss 1400"

// topoOptions: tsoOff turns TSO and TX checksum offload off on the hosts' veths; noRouteMTU
// leaves the hosts' routes at the links' 1500 bytes, so the datapath's Packet Too Big messages
// must bring the path MTU down.
type topoOptions struct{ tsoOff, noRouteMTU bool }

func newMIPTopo(t testing.TB, o topoOptions) *mipTopo {
	t.Helper()
	nstest.RequireTool(t, "tcpdump", "tshark", "ethtool")
	tp := &mipTopo{route: strings.Fields(hostRoute), cn: nstest.New(t, "mipCN"), r1: nstest.New(t, "mipR1"), r2: nstest.New(t, "mipR2"),
		r3: nstest.New(t, "mipR3"), mn: nstest.New(t, "mipMN")}
	if o.noRouteMTU {
		tp.route = nil
	}
	for _, ns := range []*nstest.NS{tp.cn, tp.r1, tp.r2, tp.r3, tp.mn} {
		ns.Run("sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	}
	for _, ns := range []*nstest.NS{tp.r1, tp.r2, tp.r3} {
		ns.Run("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	}
	nstest.Link(t, tp.cn, "c0", tp.r1, "r1c")
	nstest.Link(t, tp.r1, "r1a", tp.r2, "r2u")
	nstest.Link(t, tp.r1, "r1b", tp.r3, "r3u")
	nstest.Link(t, tp.r2, "r2h", tp.mn, "m2")
	nstest.Link(t, tp.r3, "r3f", tp.mn, "m3")

	addr := func(ns *nstest.NS, a, dev string) { ns.Run("ip", "addr", "add", a, "dev", dev, "nodad") }
	addr(tp.cn, cn.String()+"/64", "c0")
	addr(tp.r1, "2001:db8:1::1/64", "r1c")
	addr(tp.r1, "2001:db8:12::1/64", "r1a")
	addr(tp.r1, "2001:db8:13::1/64", "r1b")
	addr(tp.r2, "2001:db8:12::2/64", "r2u")
	addr(tp.r2, ha.String()+"/64", "r2h")
	addr(tp.r3, "2001:db8:13::3/64", "r3u")
	addr(tp.r3, "2001:db8:3::1/64", "r3f")
	addr(tp.mn, hoa.String()+"/128", "lo")
	addr(tp.mn, hoa.String()+"/64", "m2")
	tp.r1.Run("ip", "-6", "route", "add", "2001:db8:2::/64", "via", "2001:db8:12::2")
	tp.r1.Run("ip", "-6", "route", "add", "2001:db8:3::/64", "via", "2001:db8:13::3")
	tp.r2.Run("ip", "-6", "route", "add", "default", "via", "2001:db8:12::1")
	tp.r3.Run("ip", "-6", "route", "add", "default", "via", "2001:db8:13::1")
	tp.cn.Run(append([]string{"ip", "-6", "route", "add", "default", "via", "2001:db8:1::1", "dev", "c0"}, tp.route...)...)
	tp.mn.Run(append([]string{"ip", "-6", "route", "add", "default", "via", ha.String(), "dev", "m2"}, tp.route...)...)
	if o.tsoOff {
		tp.cn.Run("ethtool", "-K", "c0", "tx", "off", "tso", "off")
		tp.mn.Run("ethtool", "-K", "m2", "tx", "off", "tso", "off")
		tp.mn.Run("ethtool", "-K", "m3", "tx", "off", "tso", "off")
	}

	tp.r2u, tp.r2h = tp.r2.Ifindex("r2u"), tp.r2.Ifindex("r2h")
	tp.m2, tp.m3 = tp.mn.Ifindex("m2"), tp.mn.Ifindex("m3")
	tp.c0 = tp.cn.Ifindex("c0")

	tp.ha, tp.mn6, tp.corr = newDatapath(t), newDatapath(t), newDatapath(t)
	must(t, tp.ha.SetHomeAgent(ha))
	must(t, tp.mn6.SetHomeAgent(ha))
	must(t, tp.r2.Do(func() error { return errors.Join(tp.ha.AttachHA(tp.r2u), tp.ha.AttachHA(tp.r2h)) }))
	must(t, tp.mn.Do(func() error { return errors.Join(tp.mn6.AttachMN(tp.m2), tp.mn6.AttachMN(tp.m3)) }))
	must(t, tp.cn.Do(func() error { return tp.corr.AttachCN(tp.c0) }))
	return tp
}

// moveToForeignLink is the MN leaving home the thesis's way (the home link goes down), then
// what signalling would do, by map updates only: the CoA on L3, the HA's binding cache entry
// and proxy ND for the HoA, the MN's own binding.
func (tp *mipTopo) moveToForeignLink(t testing.TB) {
	t.Helper()
	tp.mn.Run("ip", "link", "set", "m2", "down")
	tp.mn.Run("ip", "addr", "add", coa.String()+"/64", "dev", "m3", "nodad")
	// src: new sockets keep choosing the HoA (this kernel has no MIPv6 source address rule,
	// RFC 6724 rule 4, and would otherwise pick the CoA of the outgoing interface).
	tp.mn.Run(append([]string{"ip", "-6", "route", "replace", "default", "via", "2001:db8:3::1", "dev", "m3", "src", hoa.String()}, tp.route...)...)
	must(t, tp.ha.SetBinding(hoa, coa))
	must(t, tp.r2.Do(func() error { return ProxyND(tp.r2h, hoa, true) }))
	must(t, tp.mn6.SetBinding(hoa, coa))
}

// echoFlow is a TCP connection from the CN to the MN's home address; the MN echoes, the CN
// checks every byte that comes back.
type echoFlow struct {
	echoed atomic.Int64
	errs   chan error
}

func startEchoFlow(t *testing.T, ctx context.Context, tp *mipTopo) *echoFlow {
	t.Helper()
	f := &echoFlow{errs: make(chan error, 4)}
	ln := tp.mn.Listen("tcp6", netip.AddrPortFrom(hoa, 5001).String())
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			f.errs <- err
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	var c net.Conn
	must(t, tp.cn.Do(func() error {
		var err error
		c, err = (&net.Dialer{Timeout: 5 * time.Second}).Dial("tcp6", netip.AddrPortFrom(hoa, 5001).String())
		return err
	}))
	t.Cleanup(func() { c.Close() })
	go func() { // writer: a known pattern, about 1 MB/s
		if err := nstest.WritePattern(ctx, c, 8<<10, 8*time.Millisecond); err != nil {
			f.errs <- err
		}
	}()
	go func() { // reader: the echo, byte for byte
		if err := nstest.ReadPattern(ctx, c, &f.echoed); err != nil {
			f.errs <- err
		}
	}()
	return f
}

// udpEcho is a UDP exchange CN -> HoA: numbered datagrams every 5 ms, the MN echoes them.
type udpEcho struct{ replies atomic.Int64 }

func startUDPEcho(t *testing.T, ctx context.Context, tp *mipTopo) *udpEcho {
	t.Helper()
	u := &udpEcho{}
	srv := tp.mn.ListenPacket("udp6", netip.AddrPortFrom(hoa, 5002).String())
	t.Cleanup(func() { srv.Close() })
	go nstest.EchoUDP(srv)
	c := tp.cn.Dial("udp6", netip.AddrPortFrom(hoa, 5002).String())
	t.Cleanup(func() { c.Close() })
	go func() {
		msg := make([]byte, 512)
		for i := 0; ctx.Err() == nil; i++ {
			msg[0], msg[1] = byte(i>>8), byte(i)
			_, _ = c.Write(msg) // refused/unreachable while moving: keep going
			time.Sleep(5 * time.Millisecond)
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for ctx.Err() == nil {
			if _, err := c.Read(buf); err != nil {
				if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
					return
				}
				continue // ICMP errors during the move surface here
			}
			u.replies.Add(1)
		}
	}()
	return u
}

func (u *udpEcho) progresses(t *testing.T, n int64, timeout time.Duration, what string) {
	t.Helper()
	start := u.replies.Load()
	deadline := time.Now().Add(timeout)
	for u.replies.Load() < start+n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: only %d of %d UDP replies in %v", what, u.replies.Load()-start, n, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// returnHome is the MN coming back: route optimisation ended first (the MN stops the HAO, then
// the CN's binding goes, each after packets in flight had time to land: otherwise they are
// counted drops, cn_hao_no_binding and mn_rh2_unknown), then the home link up with the HoA on
// it, deregistration at the HA, proxy ND off.
func (tp *mipTopo) returnHome(t testing.TB) {
	t.Helper()
	must(t, tp.mn6.SetRO(cn, false))
	time.Sleep(50 * time.Millisecond)
	must(t, tp.corr.DeleteBinding(hoa))
	time.Sleep(50 * time.Millisecond)
	tp.mn.Run("ip", "link", "set", "m2", "up")
	tp.mn.Run("ip", "addr", "add", hoa.String()+"/64", "dev", "m2", "nodad")
	tp.mn.Run(append([]string{"ip", "-6", "route", "replace", "default", "via", ha.String(), "dev", "m2"}, tp.route...)...)
	must(t, tp.ha.DeleteBinding(hoa))
	must(t, tp.r2.Do(func() error { return ProxyND(tp.r2h, hoa, false) }))
	must(t, tp.mn6.DeleteBinding(hoa))
}

// dialFromMN opens a TCP connection from the MN (no source given) to a CN listener and returns
// the address the CN sees it come from.
func dialFromMN(t *testing.T, tp *mipTopo) netip.Addr {
	t.Helper()
	ln := tp.cn.Listen("tcp6", netip.AddrPortFrom(cn, 5003).String())
	defer ln.Close()
	var c net.Conn
	must(t, tp.mn.Do(func() error {
		var err error
		c, err = (&net.Dialer{Timeout: 5 * time.Second}).Dial("tcp6", netip.AddrPortFrom(cn, 5003).String())
		return err
	}))
	defer c.Close()
	s, err := ln.Accept()
	must(t, err)
	defer s.Close()
	return netip.MustParseAddrPort(s.RemoteAddr().String()).Addr()
}

// progresses waits until at least n more bytes came back, failing on a flow error.
func (f *echoFlow) progresses(t *testing.T, n int64, timeout time.Duration, what string) {
	t.Helper()
	start := f.echoed.Load()
	deadline := time.Now().Add(timeout)
	for f.echoed.Load() < start+n {
		select {
		case err := <-f.errs:
			t.Fatalf("%s: %v", what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: only %d of %d bytes echoed in %v", what, f.echoed.Load()-start, n, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// capture runs tcpdump on a router interface until the returned stop is called.
func capture(t *testing.T, ns *nstest.NS, dev, file string) (stop func()) {
	t.Helper()
	return ns.Capture(dev, file, "ip6 and not icmp6").Stop
}

// captured is one packet as tshark dissects it; fields with several occurrences (outer and
// inner header) are comma-joined.
type captured map[string]string

var tsharkFields = []string{"ipv6.src", "ipv6.dst", "ipv6.nxt", "ipv6.routing.type", "ipv6.routing.segleft",
	"ipv6.routing.mipv6.home_address", "ipv6.opt.mipv6.home_address", "tcp.checksum.status", "tcp.len"}

func dissect(t *testing.T, file string) []captured {
	t.Helper()
	args := []string{"tshark", "-r", file, "-o", "tcp.check_checksum:TRUE", "-T", "fields", "-E", "separator=|"}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(args[0], args[1:]...).Output()
	if err != nil {
		t.Fatalf("tshark %s: %v", file, err)
	}
	var rows []captured
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		vals := strings.Split(line, "|")
		row := captured{}
		for i, f := range tsharkFields {
			if i < len(vals) {
				row[f] = vals[i]
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// TestNetnsMoveAndRouteOptimise: a TCP echo flow and a UDP echo exchange from the CN to the
// MN's home address keep working when the MN moves from its home link to L3 (bindings set by
// map updates only): the HA tunnels both ways, captures on R1 show IPv6-in-IPv6 between HA and
// CoA. With route optimisation on, the CN's packets go straight to the CoA with a type 2 RH
// and the MN's carry the Home Address option; nothing of the flow passes the HA any more, and
// tshark finds every captured TCP checksum good (computed over the HoA). Back home, with every
// binding deleted, the flows go on as plain IPv6.
//
// With TSO on (GSO super-packets through tunnel, RH2 and HAO; the routers forward them as they
// are) the flow checks are the same; captured checksums are then unfinished and not judged.
func TestNetnsMoveAndRouteOptimise(t *testing.T) {
	t.Run("tso-off", func(t *testing.T) { testMoveAndRouteOptimise(t, topoOptions{tsoOff: true}) })
	t.Run("tso-on", func(t *testing.T) { testMoveAndRouteOptimise(t, topoOptions{}) })
	// Without route MTUs the flows still survive: Packet Too Big from the HA (to the CN) and
	// from the MN's and CN's own datapath (to their sockets) lowers the path MTU.
	t.Run("no-route-mtu", func(t *testing.T) { testMoveAndRouteOptimise(t, topoOptions{noRouteMTU: true}) })
}

func testMoveAndRouteOptimise(t *testing.T, o topoOptions) {
	tsoOff := o.tsoOff
	tp := newMIPTopo(t, o)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	flow := startEchoFlow(t, ctx, tp)
	udp := startUDPEcho(t, ctx, tp)
	flow.progresses(t, 256<<10, 10*time.Second, "at home")
	udp.progresses(t, 50, 10*time.Second, "at home")

	// Away: tunnelled through the HA.
	tunnelR3 := filepath.Join(dir, "tunnel-r1b.pcap")
	stop := capture(t, tp.r1, "r1b", tunnelR3)
	moved := time.Now()
	tp.moveToForeignLink(t)
	flow.progresses(t, 256<<10, 15*time.Second, "after the move, through the tunnel")
	t.Logf("flow resumed %v after the move", time.Since(moved).Round(time.Millisecond))
	udp.progresses(t, 50, 10*time.Second, "after the move, through the tunnel")
	stop()
	var down, up int
	for _, p := range dissect(t, tunnelR3) {
		switch {
		case p["ipv6.src"] == ha.String()+","+cn.String() && p["ipv6.dst"] == coa.String()+","+hoa.String() && p["ipv6.nxt"] == "41,6":
			down++
		case p["ipv6.src"] == coa.String()+","+hoa.String() && p["ipv6.dst"] == ha.String()+","+cn.String() && p["ipv6.nxt"] == "41,6":
			up++
		case p["ipv6.routing.type"] != "" || p["ipv6.opt.mipv6.home_address"] != "":
			t.Fatalf("route-optimised packet before RO: %v", p)
		}
		if tsoOff && p["tcp.checksum.status"] != "" && p["tcp.checksum.status"] != "1" {
			t.Fatalf("bad inner TCP checksum in the tunnel: %v", p)
		}
	}
	t.Logf("R1-R3 while away: %d tunnelled HA->CoA, %d CoA->HA", down, up)
	if down < 20 || up < 20 {
		t.Fatalf("tunnel on R1-R3: %d packets HA->CoA, %d CoA->HA; want both > 20", down, up)
	}
	for name, min := range map[string]uint64{"ha_encapsulated": 20, "ha_decapsulated": 20} {
		if n := counter(t, tp.ha, name); n < min {
			t.Fatalf("HA %s = %d", name, n)
		}
	}
	for name, min := range map[string]uint64{"mn_tunnelled": 20, "mn_detunnelled": 20} {
		if n := counter(t, tp.mn6, name); n < min {
			t.Fatalf("MN %s = %d", name, n)
		}
	}
	if out := tp.r2.Run("ip", "-6", "neigh", "show", "proxy", "dev", "r2h"); !strings.Contains(out, hoa.String()) {
		t.Fatalf("no proxy ND entry for the HoA: %q", out)
	}
	// A connection the MN opens while away comes from its HoA, through the tunnel.
	if got := dialFromMN(t, tp); got != hoa {
		t.Fatalf("MN-initiated connection arrives from %v, want the HoA %v", got, hoa)
	}

	// Route optimisation (as after return routability and the BU to the CN).
	must(t, tp.corr.SetBinding(hoa, coa))
	must(t, tp.mn6.SetRO(cn, true))
	time.Sleep(200 * time.Millisecond) // let tunnelled packets in flight drain
	roR3, roR2 := filepath.Join(dir, "ro-r1b.pcap"), filepath.Join(dir, "ro-r1a.pcap")
	stop3 := capture(t, tp.r1, "r1b", roR3)
	stop2 := capture(t, tp.r1, "r1a", roR2)
	haBefore := counter(t, tp.ha, "ha_encapsulated") + counter(t, tp.ha, "ha_decapsulated")
	flow.progresses(t, 256<<10, 10*time.Second, "route-optimised")
	udp.progresses(t, 50, 10*time.Second, "route-optimised")
	stop3()
	stop2()
	var rh2, hao int
	for _, p := range dissect(t, roR3) {
		switch {
		case p["ipv6.nxt"] == "41,6":
			t.Fatalf("tunnelled packet after RO: %v", p)
		case p["ipv6.routing.type"] == "2":
			if p["ipv6.src"] != cn.String() || p["ipv6.dst"] != coa.String() || p["ipv6.routing.segleft"] != "1" ||
				p["ipv6.routing.mipv6.home_address"] != hoa.String() {
				t.Fatalf("type 2 RH packet: %v", p)
			}
			rh2++
		case p["ipv6.opt.mipv6.home_address"] != "":
			if p["ipv6.src"] != coa.String() || p["ipv6.dst"] != cn.String() || p["ipv6.opt.mipv6.home_address"] != hoa.String() {
				t.Fatalf("HAO packet: %v", p)
			}
			hao++
		case p["tcp.len"] != "":
			t.Fatalf("TCP packet of the flow without RO headers: %v", p)
		}
		if tsoOff && p["tcp.len"] != "" && p["tcp.checksum.status"] != "1" {
			t.Fatalf("TCP checksum not good over the HoA: %v", p)
		}
	}
	t.Logf("R1-R3 with RO: %d with a type 2 RH, %d with a HAO", rh2, hao)
	if rh2 < 20 || hao < 20 {
		t.Fatalf("R1-R3 after RO: %d packets with a type 2 RH, %d with a HAO; want both > 20", rh2, hao)
	}
	for _, p := range dissect(t, roR2) {
		if p["tcp.len"] != "" {
			t.Fatalf("flow packet on the HA's link after RO: %v", p)
		}
	}
	if haAfter := counter(t, tp.ha, "ha_encapsulated") + counter(t, tp.ha, "ha_decapsulated"); haAfter != haBefore {
		t.Fatalf("HA still handled %d packets after RO", haAfter-haBefore)
	}
	for name, d := range map[string]*Datapath{"cn_rh2_inserted": tp.corr, "cn_hao_swapped": tp.corr,
		"mn_hao_inserted": tp.mn6, "mn_rh2_stripped": tp.mn6} {
		if n := counter(t, d, name); n < 20 {
			t.Fatalf("%s = %d", name, n)
		}
	}
	// Back home: plain IPv6 again, nothing tunnelled or route-optimised.
	tp.returnHome(t)
	time.Sleep(200 * time.Millisecond)
	homeR2 := filepath.Join(dir, "home-r1a.pcap")
	stopHome := capture(t, tp.r1, "r1a", homeR2)
	flow.progresses(t, 256<<10, 15*time.Second, "back home")
	udp.progresses(t, 50, 10*time.Second, "back home")
	stopHome()
	plain := 0
	for _, p := range dissect(t, homeR2) {
		if p["ipv6.nxt"] == "41,6" || p["ipv6.routing.type"] != "" || p["ipv6.opt.mipv6.home_address"] != "" {
			t.Fatalf("mobility headers after returning home: %v", p)
		}
		if p["tcp.len"] != "" && (p["ipv6.src"] == hoa.String() || p["ipv6.dst"] == hoa.String()) {
			plain++
		}
	}
	if plain < 20 {
		t.Fatalf("only %d plain TCP packets of the flow on R1-R2 after returning home", plain)
	}

	for name, d := range map[string]*Datapath{"HA": tp.ha, "MN": tp.mn6, "CN": tp.corr} {
		c, err := d.Counters()
		must(t, err)
		bads := []string{"errors", "malformed", "cn_hao_no_binding", "mn_rh2_unknown", "ptb_failed"}
		if !o.noRouteMTU {
			bads = append(bads, "ha_too_big", "mn_too_big", "cn_too_big")
		}
		for _, bad := range bads {
			if c[bad] != 0 {
				t.Errorf("%s counter %s = %d", name, bad, c[bad])
			}
		}
	}
	if o.noRouteMTU {
		t.Logf("Packet Too Big sent: HA %d, MN %d, CN %d", counter(t, tp.ha, "ha_too_big"),
			counter(t, tp.mn6, "mn_too_big"), counter(t, tp.corr, "cn_too_big"))
		if counter(t, tp.ha, "ha_too_big") == 0 || counter(t, tp.mn6, "mn_too_big") == 0 {
			t.Fatal("no Packet Too Big from the HA or the MN: the path MTU never had to drop?")
		}
	}
	cancel()
}

// TestNetnsSignallingTransport carries every MIPv6 message of home registration and route
// optimisation between the nodes with Sender and the signalling tap, the MN away on L3: each
// arrives at its addressee's Signalling exactly as sent (hop limit aside), HoTI and HoT through
// the HA's tunnel, BU with its HAO, BAck with its type 2 RH; none reaches a stack that would
// discard it.
func TestNetnsSignallingTransport(t *testing.T) {
	tp := newMIPTopo(t, topoOptions{})
	tp.moveToForeignLink(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	taps := map[*nstest.NS]<-chan Signal{}
	senders := map[*nstest.NS]*Sender{}
	for ns, d := range map[*nstest.NS]*Datapath{tp.r2: tp.ha, tp.mn: tp.mn6, tp.cn: tp.corr} {
		must(t, d.SetSignallingTap(true))
		ch, err := d.Signalling(ctx)
		must(t, err)
		taps[ns] = ch
		must(t, ns.Do(func() error {
			s, err := NewSender()
			senders[ns] = s
			return err
		}))
		t.Cleanup(func() { senders[ns].Close() })
	}
	msgs := []struct {
		name     string
		from, to *nstest.NS
		pkt      []byte
	}{
		{"BU to the HA", tp.mn, tp.r2, message(t, mh.Envelope{Src: coa, Dst: ha, HomeAddress: hoa}, &mh.BindingUpdate{Seq: 1, Ack: true, Home: true, Lifetime: 100})},
		{"BAck from the HA", tp.r2, tp.mn, message(t, mh.Envelope{Src: ha, Dst: coa, RoutingHome: hoa}, &mh.BindingAck{Seq: 1, Lifetime: 100})},
		{"HoTI via the HA", tp.mn, tp.cn, message(t, mh.Envelope{Src: hoa, Dst: cn}, &mh.HomeTestInit{Cookie: mh.Cookie{1}})},
		{"CoTI", tp.mn, tp.cn, message(t, mh.Envelope{Src: coa, Dst: cn}, &mh.CareOfTestInit{Cookie: mh.Cookie{2}})},
		{"HoT via the HA", tp.cn, tp.mn, message(t, mh.Envelope{Src: cn, Dst: hoa}, &mh.HomeTest{Cookie: mh.Cookie{1}, Token: mh.Token{3}})},
		{"CoT", tp.cn, tp.mn, message(t, mh.Envelope{Src: cn, Dst: coa}, &mh.CareOfTest{Cookie: mh.Cookie{2}, Token: mh.Token{4}})},
		{"BU to the CN", tp.mn, tp.cn, message(t, mh.Envelope{Src: coa, Dst: cn, HomeAddress: hoa}, &mh.BindingUpdate{Seq: 2, Ack: true, Lifetime: 10})},
		{"BAck from the CN", tp.cn, tp.mn, message(t, mh.Envelope{Src: cn, Dst: coa, RoutingHome: hoa}, &mh.BindingAck{Seq: 2, Lifetime: 10})},
	}
	for _, m := range msgs {
		t.Run(m.name, func(t *testing.T) {
			must(t, senders[m.from].Send(m.pkt))
			s := nextSignal(t, taps[m.to])
			got, want := bytes.Clone(s.Packet), bytes.Clone(m.pkt)
			got[7], want[7] = 0, 0 // hop limit: routers on the way
			if !bytes.Equal(got, want) {
				t.Fatalf("arrived\n% x\nsent\n% x", s.Packet, m.pkt)
			}
			if _, _, err := mh.ParseMessage(s.Packet); err != nil {
				t.Fatal(err)
			}
		})
	}
	if n := counter(t, tp.mn6, "mn_tunnelled"); n != 1 {
		t.Fatalf("HoTI not reverse-tunnelled (mn_tunnelled %d)", n)
	}
	if n := counter(t, tp.mn6, "mn_detunnelled"); n != 1 {
		t.Fatalf("HoT not through the tunnel (mn_detunnelled %d)", n)
	}
	// Nothing else arrived anywhere (no duplicates, no stray ICMP-provoking copies).
	time.Sleep(100 * time.Millisecond)
	for ns, ch := range taps {
		select {
		case s := <-ch:
			t.Fatalf("unexpected signal in %s: % x", ns.Name, s.Packet)
		default:
		}
	}
	if err := senders[tp.cn].Send([]byte{0x60, 0, 0}); err == nil {
		t.Fatal("Send accepted a truncated packet")
	}
}
