package datapath

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"ilnp/internal/nstest"

	"ilnp/internal/wire"
	"ilnp/lab/mipv6/mh"
)

// FuzzPrograms feeds arbitrary frames to every program (in a namespace whose loopback, the
// test-run device, has MTU 1500 and where the HA's routes exist: newAnonNS): they never fail, answer only
// with known verdicts, keep the Ethernet header (or swap it for a Packet Too Big sent back up),
// and change a packet's length only by what their role adds or removes (40 tunnel, 24 RH2 or
// HAO, a whole Destination Options header), or turn it into a well-formed Packet Too Big
// quoting it.
func FuzzPrograms(f *testing.F) {
	up := ipv6Packet(hoa, cn, wire.ProtoTCP, 64, tcpSegment(hoa, cn, payload))
	down := ipv6Packet(cn, hoa, wire.ProtoUDP, 64, wire.AppendUDP(nil, cn, hoa, 1, 2, payload))
	f.Add(frame(up))
	f.Add(frame(down))
	f.Add(frame(tunnelled(coa, ha, up)))
	f.Add(frame(tunnelled(ha, coa, down)))
	f.Add(frame(envelope(f, mh.Envelope{Src: coa, Dst: cn, HomeAddress: hoa}, wire.ProtoTCP, tcpSegment(hoa, cn, payload))))
	f.Add(frame(envelope(f, mh.Envelope{Src: cn, Dst: coa, RoutingHome: hoa}, wire.ProtoUDP, wire.AppendUDP(nil, cn, hoa, 1, 2, payload))))
	f.Add(frame(ipv6Packet(hoa, cn, wire.ProtoHopByHop, 64, []byte{wire.ProtoUDP, 0, 1, 4, 0, 0, 0, 0}, wire.AppendUDP(nil, hoa, cn, 1, 2, payload))))
	f.Add(frame(ipv6Packet(cn, hoa, wire.ProtoUDP, 64, wire.AppendUDP(nil, cn, hoa, 1, 2, make([]byte, 1452)))))
	f.Add(frame(ipv6Packet(hoa, cn, wire.ProtoUDP, 64, wire.AppendUDP(nil, hoa, cn, 1, 2, make([]byte, 1430)))))
	f.Add(frame(ipv6Packet(hoa, peerHoA, wire.ProtoUDP, 64, wire.AppendUDP(nil, hoa, peerHoA, 1, 2, payload))))
	f.Add(frame(envelope(f, mh.Envelope{Src: peerCoA, Dst: coa, RoutingHome: hoa, HomeAddress: peerHoA}, wire.ProtoUDP, wire.AppendUDP(nil, peerHoA, hoa, 1, 2, payload))))
	f.Add(frame(tunnelled(ha, coa, envelope(f, mh.Envelope{Src: peerCoA, Dst: hoa, HomeAddress: peerHoA}, wire.ProtoUDP, wire.AppendUDP(nil, peerHoA, hoa, 1, 2, payload)))))

	ns := newAnonNS(f)
	hagent, mn, corr := newDatapath(f), newDatapath(f), newDatapath(f)
	for _, d := range []*Datapath{hagent, mn, corr} {
		must(f, d.SetHomeAgent(ha))
		must(f, d.SetBinding(hoa, coa))
	}
	must(f, mn.SetRO(cn, true))
	// The MN is also a mobile peer's correspondent (the double jump), route-optimised both ways.
	must(f, mn.SetBinding(peerHoA, peerCoA))
	must(f, mn.SetRO(peerHoA, true))
	must(f, corr.SetSignallingTap(true))
	progs := []struct {
		name   string
		prog   *ebpf.Program
		deltas []int
	}{
		{"ha", hagent.objs.Mip6HaIngress, []int{40, -40}},
		{"mn egress", mn.objs.Mip6MnEgress, []int{40, 24, 48}},
		{"mn ingress", mn.objs.Mip6MnIngress, mnIngressDeltas()},
		{"cn egress", corr.objs.Mip6CnEgress, []int{24}},
		{"cn ingress", corr.objs.Mip6CnIngress, []int{0, -8, -16, -24, -32, -40, -48, -56, -64}},
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 14+40 || len(in) > 1514 {
			return // BPF_PROG_TEST_RUN refuses short and page-sized frames (EINVAL)
		}
		rets := make([]uint32, len(progs))
		outs := make([][]byte, len(progs))
		must(t, ns.do(func() error {
			for i, p := range progs {
				var err error
				if rets[i], outs[i], err = runProg(p.prog, in); err != nil {
					return err
				}
			}
			return nil
		}))
		for i, p := range progs {
			ret, out := rets[i], outs[i]
			switch ret {
			case verdictDrop:
				continue
			case verdictNext, verdictPass, verdictRedirect:
			default:
				t.Fatalf("%s: verdict %d", p.name, ret)
			}
			if bytes.Equal(out, in) {
				continue
			}
			if isPacketTooBig(in, out) {
				checkPacketTooBig(t, p.name, in, out)
				continue
			}
			if !bytes.Equal(out[:14], in[:14]) {
				t.Fatalf("%s: Ethernet header changed", p.name)
			}
			delta := len(out) - len(in)
			ok := false
			for _, d := range p.deltas {
				ok = ok || d == delta
			}
			if !ok {
				t.Fatalf("%s: length changed by %d", p.name, delta)
			}
		}
	})
}

// mnIngressDeltas: the MN's ingress removes the tunnel (40) or a type 2 RH (24), and then, as a
// mobile peer's correspondent, a Home Address option: its whole Destination Options header (8n
// bytes) or nothing (the option turned into PadN in place).
func mnIngressDeltas() []int {
	var out []int
	for _, first := range []int{0, -40, -24} {
		for do := 0; do <= 64; do += 8 {
			out = append(out, first-do)
		}
	}
	return out
}

func isPacketTooBig(in, out []byte) bool {
	return len(out) >= 14+48 && len(in) >= 14+40 && out[14+6] == wire.ProtoICMPv6 && out[14+40] == 2 &&
		!(in[14+6] == wire.ProtoICMPv6 && len(in) >= 14+41 && in[14+40] == 2 && bytes.Equal(in[14:14+40], out[14:14+40]))
}

// checkPacketTooBig: a Packet Too Big built from in quotes in (up to 1280 bytes in all, 4-byte
// multiple), goes to in's source, announces at least the IPv6 minimum MTU and verifies.
func checkPacketTooBig(t *testing.T, name string, in, out []byte) {
	t.Helper()
	h, err := wire.ParseIPv6Header(out[14:])
	if err != nil {
		t.Fatalf("%s: Packet Too Big header: %v", name, err)
	}
	orig, _ := wire.ParseIPv6Header(in[14:])
	q := min(40+int(orig.PayloadLen), 1280-48) &^ 3
	if len(out) != 14+48+q || int(h.PayloadLen) != 8+q || h.Dst != orig.Src ||
		!bytes.Equal(out[14+48:], in[14:14+q]) {
		t.Fatalf("%s: Packet Too Big of %d bytes for a %d-byte frame", name, len(out), len(in))
	}
	if c := wire.PseudoHeaderChecksum(h.Src, h.Dst, wire.ProtoICMPv6, out[14+40:]); c != 0 {
		t.Fatalf("%s: Packet Too Big checksum residue %#x", name, c)
	}
	sameEth := bytes.Equal(out[:14], in[:14])
	swapped := bytes.Equal(out[0:6], in[6:12]) && bytes.Equal(out[6:12], in[0:6])
	if !sameEth && !swapped {
		t.Fatalf("%s: Ethernet header of the Packet Too Big", name)
	}
}

// FuzzDecodeSignal: ring records of any shape decode or fail cleanly, and a decoded packet is
// exactly the record's announced bytes.
func FuzzDecodeSignal(f *testing.F) {
	rec := make([]byte, signalHeader+40)
	rec[12] = 40
	f.Add(rec)
	f.Add([]byte{1, 2, 3})
	f.Add(make([]byte, signalHeader))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSignal(b)
		if err != nil {
			return
		}
		if len(s.Packet) > len(b)-signalHeader || !bytes.Equal(s.Packet, b[signalHeader:signalHeader+len(s.Packet)]) {
			t.Fatalf("decoded %d bytes from a %d-byte record", len(s.Packet), len(b))
		}
	})
}

// anonNS is an unnamed network namespace owned by one locked OS thread, which runs the calls
// given to do. Fuzz workers are killed without running cleanups, and a namespace without a
// name goes with its last thread, so nothing is left behind. Inside: loopback (the test-run
// device) at MTU 1500, forwarding on, and the HA's routes of haNamespace via a veth pair.
type anonNS struct{ calls chan func() }

func newAnonNS(t testing.TB) *anonNS {
	t.Helper()
	nstest.RequireRoot(t)
	a := &anonNS{calls: make(chan func())}
	ready := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, and the namespace with it.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ready <- fmt.Errorf("unshare: %w", err)
			return
		}
		ready <- setupAnonNS()
		for f := range a.calls {
			f()
		}
	}()
	must(t, <-ready)
	t.Cleanup(func() { close(a.calls) })
	return a
}

func setupAnonNS() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetMTU(lo, 1500); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return err
	}
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644); err != nil {
		return err
	}
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "h0"}, PeerName: "r0"}); err != nil {
		return err
	}
	for _, name := range []string{"h0", "r0"} {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
	}
	h0, err := netlink.LinkByName("h0")
	if err != nil {
		return err
	}
	a, err := netlink.ParseAddr("2001:db8:9::1/64")
	if err != nil {
		return err
	}
	a.Flags = unix.IFA_F_NODAD
	if err := netlink.AddrAdd(h0, a); err != nil {
		return err
	}
	for _, dst := range []string{"2001:db8:3::/64", "2001:db8:1::/64"} {
		_, n, _ := net.ParseCIDR(dst)
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: h0.Attrs().Index, Dst: n, Gw: net.ParseIP("2001:db8:9::2")}); err != nil {
			return fmt.Errorf("route %s: %w", dst, err)
		}
	}
	return nil
}

// do runs fn inside the namespace.
func (a *anonNS) do(fn func() error) error {
	errc := make(chan error, 1)
	a.calls <- func() { errc <- fn() }
	return <-errc
}
