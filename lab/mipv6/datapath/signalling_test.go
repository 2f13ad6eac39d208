package datapath

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"ilnp/internal/wire"
	"ilnp/lab/mipv6/mh"
)

func nextSignal(t *testing.T, ch <-chan Signal) Signal {
	t.Helper()
	select {
	case s, ok := <-ch:
		if !ok {
			t.Fatal("signalling channel closed")
		}
		return s
	case <-time.After(2 * time.Second):
		t.Fatal("no signal")
	}
	return Signal{}
}

func signals(t *testing.T, d *Datapath) <-chan Signal {
	t.Helper()
	must(t, d.SetSignallingTap(true))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := d.Signalling(ctx)
	must(t, err)
	if _, err := d.Signalling(ctx); err == nil {
		t.Fatal("a second signalling reader was allowed")
	}
	return ch
}

func message(t testing.TB, e mh.Envelope, m mh.Message) []byte {
	t.Helper()
	b, err := mh.AppendMessage(nil, e, m)
	must(t, err)
	return b
}

// With the tap on, Mobility Header packets for the node reach the signalling exactly as
// they would reach a MIPv6 kernel's daemon: after the tunnel, HAO and type 2 RH in place; the
// stack never sees them. Everything else passes as before.
func TestSignallingTap(t *testing.T) {
	bu := message(t, mh.Envelope{Src: coa, Dst: ha, HomeAddress: hoa}, &mh.BindingUpdate{Seq: 9, Ack: true, Home: true, Lifetime: 100})
	back := message(t, mh.Envelope{Src: ha, Dst: coa, RoutingHome: hoa}, &mh.BindingAck{Seq: 9, Lifetime: 100})
	hot := message(t, mh.Envelope{Src: cn, Dst: hoa}, &mh.HomeTest{Cookie: mh.Cookie{1}, Token: mh.Token{2}})
	cot := message(t, mh.Envelope{Src: cn, Dst: coa}, &mh.CareOfTest{Cookie: mh.Cookie{3}, Token: mh.Token{4}})
	hoti := message(t, mh.Envelope{Src: hoa, Dst: cn}, &mh.HomeTestInit{Cookie: mh.Cookie{5}})
	robu := message(t, mh.Envelope{Src: coa, Dst: cn, HomeAddress: hoa}, &mh.BindingUpdate{Seq: 3, Lifetime: 10})

	hagent, mn, corr := homeAgent(t), mobileNode(t), correspondent(t)
	ns := haNamespace(t)
	cases := []struct {
		name string
		d    *Datapath
		prog *ebpf.Program
		in   []byte
		want []byte
	}{
		{"HA: BU with HAO", hagent, hagent.objs.Mip6HaIngress, bu, bu},
		{"MN: BAck with type 2 RH", mn, mn.objs.Mip6MnIngress, back, back},
		{"MN: HoT through the tunnel", mn, mn.objs.Mip6MnIngress, tunnelled(ha, coa, hot), hot},
		{"MN: CoT", mn, mn.objs.Mip6MnIngress, cot, cot},
		{"CN: HoTI", corr, corr.objs.Mip6CnIngress, hoti, hoti},
		{"CN: BU with HAO", corr, corr.objs.Mip6CnIngress, robu, robu},
	}
	chans := map[*Datapath]<-chan Signal{hagent: signals(t, hagent), mn: signals(t, mn), corr: signals(t, corr)}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ret, _ := runIn(t, ns, c.prog, frame(c.in))
			if ret != verdictDrop {
				t.Fatalf("verdict %d, want drop (handed to the signalling)", ret)
			}
			s := nextSignal(t, chans[c.d])
			if !bytes.Equal(s.Packet, c.want) || s.Ns == 0 || s.Ifindex != 1 {
				t.Fatalf("signal %+v\nwant packet % x", s, c.want)
			}
			if _, _, err := mh.ParseMessage(s.Packet); err != nil {
				t.Fatalf("signalled packet does not parse: %v", err)
			}
		})
	}
	if counter(t, mn, "signalling") != 3 || counter(t, corr, "signalling") != 2 || counter(t, hagent, "signalling") != 1 {
		t.Fatal("signalling counters")
	}
	// MH passing through the HA (a HoT on its way to the home address) is tunnelled, not
	// tapped; data packets are untouched by the tap.
	ret, out := runIn(t, ns, hagent.objs.Mip6HaIngress, frame(hot))
	hot[7]--
	expect(t, ret, out, verdictRedirect, frame(tunnelled(ha, coa, hot)))
	data := frame(ipv6Packet(cn, coa, wire.ProtoUDP, 64, transport(t, wire.ProtoUDP, cn, coa)))
	ret, out = run(t, mn.objs.Mip6MnIngress, data)
	expect(t, ret, out, verdictNext, data)

	// Tap off again: the packets go on to the stack as before.
	must(t, corr.SetSignallingTap(false))
	ret, out = run(t, corr.objs.Mip6CnIngress, frame(hoti))
	expect(t, ret, out, verdictNext, frame(hoti))
}

func TestDecodeSignalRejectsShortRecords(t *testing.T) {
	if _, err := decodeSignal(make([]byte, 10)); err == nil {
		t.Fatal("short record accepted")
	}
	rec := make([]byte, signalHeader+4)
	rec[12] = 5
	if _, err := decodeSignal(rec); err == nil {
		t.Fatal("record claiming more than it holds accepted")
	}
	rec[12] = 4
	if s, err := decodeSignal(rec); err != nil || len(s.Packet) != 4 {
		t.Fatalf("%+v %v", s, err)
	}
}
