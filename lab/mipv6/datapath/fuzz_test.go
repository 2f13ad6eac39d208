package datapath

import (
	"bytes"
	"testing"

	"github.com/cilium/ebpf"

	"ilnp/internal/wire"
	"ilnp/lab/mipv6/mh"
)

// FuzzPrograms feeds arbitrary frames to every program: they never fail, answer only with
// known verdicts, keep the Ethernet header, and change a packet's length only by what their
// role adds or removes (40 tunnel, 24 RH2 or HAO, a whole Destination Options header).
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

	hagent, mn, corr := newDatapath(f), newDatapath(f), newDatapath(f)
	for _, d := range []*Datapath{hagent, mn, corr} {
		must(f, d.SetHomeAgent(ha))
		must(f, d.SetBinding(hoa, coa))
	}
	must(f, mn.SetRO(cn, true))
	must(f, corr.SetSignallingTap(true))
	progs := []struct {
		name   string
		prog   *ebpf.Program
		deltas []int
	}{
		{"ha", hagent.objs.Mip6HaIngress, []int{40, -40}},
		{"mn egress", mn.objs.Mip6MnEgress, []int{40, 24}},
		{"mn ingress", mn.objs.Mip6MnIngress, []int{-40, -24}},
		{"cn egress", corr.objs.Mip6CnEgress, []int{24}},
		{"cn ingress", corr.objs.Mip6CnIngress, []int{0, -8, -16, -24, -32, -40, -48, -56, -64}},
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 14+40 || len(in) > 1514 {
			return // BPF_PROG_TEST_RUN refuses short and page-sized frames (EINVAL)
		}
		for _, p := range progs {
			ret, out := run(t, p.prog, in)
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
