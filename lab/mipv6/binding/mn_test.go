package binding

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/mh"
)

var (
	hoa        = netip.MustParseAddr("2001:db8:2::1b:21ff:fe67:97a8")
	coa        = netip.MustParseAddr("2001:db8:3::1b:21ff:fe67:97a8")
	coa2       = netip.MustParseAddr("2001:db8:4::1b:21ff:fe67:97a8")
	haAddr     = netip.MustParseAddr("2001:db8:2::1")
	cnAddr     = netip.MustParseAddr("2001:db8:1::14:4fff:ff20:ee64")
	homePrefix = netip.MustParsePrefix("2001:db8:2::/64")
	t0         = time.Unix(1_700_000_000, 0)
)

func ofKind(as []Action, k ActionKind) []Action {
	var out []Action
	for _, a := range as {
		if a.Kind == k {
			out = append(out, a)
		}
	}
	return out
}

func one(t *testing.T, as []Action, k ActionKind) Action {
	t.Helper()
	got := ofKind(as, k)
	if len(got) != 1 {
		t.Fatalf("want one %v action, got %d in %+v", k, len(got), as)
	}
	return got[0]
}

// wireRoundTrip re-parses a sent packet: machines only ever see what the wire carries.
func wireRoundTrip(t *testing.T, a Action) Received {
	t.Helper()
	r, err := Parse(a.Packet)
	if err != nil {
		t.Fatalf("sent packet does not parse: %v", err)
	}
	return r
}

func newMN(t *testing.T, mod func(*MNConfig)) *MobileNode {
	t.Helper()
	cfg := MNConfig{HomeAddress: hoa, HomeAgent: haAddr, InitialSeq: 100, Node: "mn"}
	if mod != nil {
		mod(&cfg)
	}
	n, err := NewMobileNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func backPacket(t *testing.T, back *mh.BindingAck) Received {
	t.Helper()
	pkt, err := mh.AppendMessage(nil, mh.Envelope{Src: haAddr, Dst: coa, RoutingHome: hoa}, back)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse(pkt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMobileNodeRegistration(t *testing.T) {
	n := newMN(t, nil)
	as := n.Event(Moved{CareOf: coa}, t0)
	send := one(t, as, Send)
	r := wireRoundTrip(t, send)
	bu, ok := r.Msg.(*mh.BindingUpdate)
	if !ok {
		t.Fatalf("sent %T", r.Msg)
	}
	if !reflect.DeepEqual(bu, &mh.BindingUpdate{Seq: 101, Ack: true, Home: true, Lifetime: 105}) {
		t.Fatalf("BU %+v", bu)
	}
	if r.Packet.Envelope != (mh.Envelope{Src: coa, Dst: haAddr, HomeAddress: hoa, HopLimit: 64}) {
		t.Fatalf("envelope %+v", r.Packet.Envelope)
	}
	if send.ViaTunnel {
		t.Fatal("home registration BU must not be tunnelled")
	}
	if tm := one(t, as, Timer); !tm.At.Equal(t0.Add(1500 * time.Millisecond)) {
		t.Fatalf("first registration timer %v, want +1.5 s", tm.At.Sub(t0))
	}
	rec := one(t, as, Record).Event
	if rec.Kind != timeline.BUSent || rec.Seq != 101 || rec.Attempt != 1 || rec.Peer != haAddr.String() || rec.Node != "mn" {
		t.Fatalf("record %+v", rec)
	}
	if s, c := n.State(); s != Registering || c != coa {
		t.Fatalf("state %v %v", s, c)
	}

	// A BAck for another sequence number or from another node is ignored.
	if as := n.Event(backPacket(t, &mh.BindingAck{Seq: 100, Lifetime: 105}), t0.Add(10*time.Millisecond)); len(as) != 0 {
		t.Fatalf("stale BAck gave %+v", as)
	}
	stray := backPacket(t, &mh.BindingAck{Seq: 101, Lifetime: 105})
	stray.Packet.Src = cnAddr
	if as := n.Event(stray, t0.Add(10*time.Millisecond)); len(as) != 0 {
		t.Fatalf("BAck from a stranger gave %+v", as)
	}

	as = n.Event(backPacket(t, &mh.BindingAck{Seq: 101, Lifetime: 100}), t0.Add(40*time.Millisecond))
	res := one(t, as, Done).Result
	if res.Err != nil || res.Elapsed != 40*time.Millisecond || res.Attempts != 1 || res.Lifetime != 400*time.Second || res.CareOf != coa {
		t.Fatalf("result %+v", res)
	}
	if rec := one(t, as, Record).Event; rec.Kind != timeline.BAckReceived || rec.Duration != int64(40*time.Millisecond) {
		t.Fatalf("record %+v", rec)
	}
	// Refresh at 80 % of the granted 400 s.
	if tm := one(t, as, Timer); !tm.At.Equal(t0.Add(40*time.Millisecond + 320*time.Second)) {
		t.Fatalf("refresh timer at %v", tm.At.Sub(t0))
	}
	if s, _ := n.State(); s != Registered {
		t.Fatalf("state %v", s)
	}
	// The refresh is a new BU with a 1 s first timeout (a binding exists now).
	at := t0.Add(40*time.Millisecond + 320*time.Second)
	as = n.Event(Tick{}, at)
	if bu := wireRoundTrip(t, one(t, as, Send)).Msg.(*mh.BindingUpdate); bu.Seq != 102 {
		t.Fatalf("refresh BU seq %d", bu.Seq)
	}
	if tm := one(t, as, Timer); !tm.At.Equal(at.Add(time.Second)) {
		t.Fatalf("refresh retransmission timer %v", tm.At.Sub(at))
	}
}

func TestMobileNodeBackoff(t *testing.T) {
	for _, giveUp := range []bool{false, true} {
		n := newMN(t, func(c *MNConfig) { c.GiveUp = giveUp })
		as := n.Event(Moved{CareOf: coa}, t0)
		var sentAt []time.Duration
		var seqs []uint16
		now := t0
		var done *Result
		for i := 0; i < 12 && done == nil; i++ {
			for _, a := range as {
				switch a.Kind {
				case Send:
					sentAt = append(sentAt, now.Sub(t0))
					seqs = append(seqs, a.Msg.(*mh.BindingUpdate).Seq)
				case Timer:
					now = a.At
				case Done:
					r := a.Result
					done = &r
				}
			}
			if done == nil {
				as = n.Event(Tick{}, now)
			}
		}
		// 1.5 s, doubling, capped at MAX_BINDACK_TIMEOUT 32 s (RFC 6275 s.11.8).
		want := []time.Duration{0, 1500, 4500, 10500, 22500, 46500, 78500, 110500}
		for i := range want {
			want[i] *= time.Millisecond
		}
		if giveUp {
			want = want[:6] // the BU sent with the 32 s timeout is the last
			if done == nil || !errors.Is(done.Err, ErrGaveUp) || done.Attempts != 6 || done.Elapsed != 78500*time.Millisecond {
				t.Fatalf("give up result %+v", done)
			}
			if s, _ := n.State(); s != AtHome {
				t.Fatalf("state after giving up %v", s)
			}
		}
		if len(sentAt) < len(want) {
			t.Fatalf("giveUp=%v sent at %v", giveUp, sentAt)
		}
		for i := range want {
			if sentAt[i] != want[i] {
				t.Fatalf("giveUp=%v transmission %d at %v, want %v (all %v)", giveUp, i, sentAt[i], want[i], sentAt)
			}
			if seqs[i] != uint16(101+i) {
				t.Fatalf("retransmission %d seq %d: every BU needs a new sequence number", i, seqs[i])
			}
		}
	}
}

func TestMobileNodeSequenceOutOfWindowAndWrap(t *testing.T) {
	n := newMN(t, func(c *MNConfig) { c.InitialSeq = 0xffff })
	as := n.Event(Moved{CareOf: coa}, t0)
	if bu := one(t, as, Send).Msg.(*mh.BindingUpdate); bu.Seq != 0 {
		t.Fatalf("seq after 0xffff is %d", bu.Seq)
	}
	// The HA knows seq 5000: status 135 carries it, the MN resends with 5001 at once.
	as = n.Event(backPacket(t, &mh.BindingAck{Status: mh.StatusSeqOutOfWindow, Seq: 5000}), t0.Add(30*time.Millisecond))
	if bu := one(t, as, Send).Msg.(*mh.BindingUpdate); bu.Seq != 5001 {
		t.Fatalf("seq after 135 is %d", bu.Seq)
	}
	if len(ofKind(as, Done)) != 0 {
		t.Fatal("135 must not end the exchange")
	}
	as = n.Event(backPacket(t, &mh.BindingAck{Seq: 5001, Lifetime: 10}), t0.Add(60*time.Millisecond))
	if r := one(t, as, Done).Result; r.Err != nil || r.Attempts != 2 || r.Elapsed != 60*time.Millisecond {
		t.Fatalf("result %+v", r)
	}
}

func TestMobileNodeRejectedAndHome(t *testing.T) {
	n := newMN(t, nil)
	n.Event(Moved{CareOf: coa}, t0)
	as := n.Event(backPacket(t, &mh.BindingAck{Status: mh.StatusNotHomeSubnet, Seq: 101}), t0.Add(time.Millisecond))
	if r := one(t, as, Done).Result; !errors.Is(r.Err, ErrRejected) || r.Status != mh.StatusNotHomeSubnet {
		t.Fatalf("result %+v", r)
	}
	if s, _ := n.State(); s != AtHome {
		t.Fatalf("state %v", s)
	}

	// Register, then move again: the second registration uses the 1 s timeout.
	n = newMN(t, nil)
	n.Event(Moved{CareOf: coa}, t0)
	n.Event(backPacket(t, &mh.BindingAck{Seq: 101, Lifetime: 105}), t0.Add(time.Millisecond))
	if as := n.Event(Moved{CareOf: coa}, t0.Add(time.Second)); len(ofKind(as, Send)) != 0 {
		t.Fatal("same care-of address re-registered")
	}
	as = n.Event(Moved{CareOf: coa2}, t0.Add(2*time.Second))
	if tm := one(t, as, Timer); !tm.At.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("re-registration timer %v", tm.At.Sub(t0))
	}
	r := wireRoundTrip(t, one(t, as, Send))
	if r.Packet.Src != coa2 || r.Msg.(*mh.BindingUpdate).Seq != 102 {
		t.Fatalf("second BU %+v %+v", r.Packet.Envelope, r.Msg)
	}
	n.Event(backPacket(t, &mh.BindingAck{Seq: 102, Lifetime: 105}), t0.Add(2100*time.Millisecond))

	// Back home: BU from the home address, lifetime 0, no Home Address option (s.11.5.5).
	as = n.Event(ReturnedHome{}, t0.Add(10*time.Second))
	r = wireRoundTrip(t, one(t, as, Send))
	if bu := r.Msg.(*mh.BindingUpdate); bu.Lifetime != 0 || !bu.Home || !bu.Ack || bu.Seq != 103 {
		t.Fatalf("deregistration BU %+v", bu)
	}
	if r.Packet.Envelope != (mh.Envelope{Src: hoa, Dst: haAddr, HopLimit: 64}) {
		t.Fatalf("deregistration envelope %+v", r.Packet.Envelope)
	}
	pkt, _ := mh.AppendMessage(nil, mh.Envelope{Src: haAddr, Dst: hoa}, &mh.BindingAck{Seq: 103})
	back, _ := Parse(pkt)
	as = n.Event(back, t0.Add(10*time.Second+5*time.Millisecond))
	if r := one(t, as, Done).Result; r.Err != nil || !r.Deregistered {
		t.Fatalf("deregistration result %+v", r)
	}
	if tm := one(t, as, Timer); !tm.At.IsZero() {
		t.Fatalf("timer left at %v", tm.At)
	}
	if s, _ := n.State(); s != AtHome {
		t.Fatalf("state %v", s)
	}
	if as := n.Event(ReturnedHome{}, t0.Add(11*time.Second)); len(as) != 0 {
		t.Fatalf("second ReturnedHome gave %+v", as)
	}
}

func TestMobileNodeRefreshAdvice(t *testing.T) {
	n := newMN(t, nil)
	n.Event(Moved{CareOf: coa}, t0)
	as := n.Event(backPacket(t, &mh.BindingAck{Seq: 101, Lifetime: 105, Options: []mh.Option{mh.RefreshAdvice{Interval: 15}}}), t0)
	if tm := one(t, as, Timer); !tm.At.Equal(t0.Add(60 * time.Second)) {
		t.Fatalf("refresh at %v, want the advised 60 s", tm.At.Sub(t0))
	}
}

func TestInExchange(t *testing.T) {
	for _, tc := range []struct {
		seq, first, last uint16
		want             bool
	}{
		{5, 5, 5, true}, {4, 5, 5, false}, {6, 5, 7, true}, {8, 5, 7, false},
		{0xffff, 0xfffe, 1, true}, {0, 0xfffe, 1, true}, {2, 0xfffe, 1, false}, {0xfffd, 0xfffe, 1, false},
	} {
		if got := inExchange(tc.seq, tc.first, tc.last); got != tc.want {
			t.Errorf("inExchange(%d, %d, %d) = %v", tc.seq, tc.first, tc.last, got)
		}
	}
}

func TestStateStrings(t *testing.T) {
	if Registered.String() != "registered" || MNState(9).String() != "state(9)" || ROBound.String() != "bound" ||
		ROState(9).String() != "state(9)" || Send.String() != "send" || ActionKind(99).String() != "action(99)" {
		t.Fatal("String")
	}
}

func TestSeqNewer(t *testing.T) {
	for _, tc := range []struct {
		a, b uint16
		want bool
	}{
		{1, 0, true}, {0, 1, false}, {0, 0, false}, {0, 0xffff, true}, {5, 0xfff0, true},
		{0x7fff, 0, true}, {0x8000, 0, false}, {0xfff0, 5, false},
	} {
		if got := SeqNewer(tc.a, tc.b); got != tc.want {
			t.Errorf("SeqNewer(%d, %d) = %v", tc.a, tc.b, got)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	bad := []MNConfig{
		{HomeAddress: netip.MustParseAddr("fe80::1"), HomeAgent: haAddr},
		{HomeAddress: hoa},
		{HomeAddress: hoa, HomeAgent: haAddr, Lifetime: time.Second},
		{HomeAddress: hoa, HomeAgent: haAddr, MaxTimeout: time.Second},
		{HomeAddress: hoa, HomeAgent: haAddr, RefreshFraction: 1.5},
	}
	for _, c := range bad {
		if _, err := NewMobileNode(c); err == nil {
			t.Errorf("NewMobileNode(%+v) accepted", c)
		}
	}
	if _, err := NewHomeAgent(HAConfig{Addr: cnAddr, HomePrefix: homePrefix}); err == nil {
		t.Error("home agent outside its home prefix accepted")
	}
	if _, err := NewHomeAgent(HAConfig{Addr: haAddr, HomePrefix: homePrefix, ProcessingDelay: -1}); err == nil {
		t.Error("negative T_HA accepted")
	}
	if _, err := NewCorrespondent(CNConfig{Addr: cnAddr}); err == nil {
		t.Error("correspondent without randomness accepted")
	}
	if _, err := NewRouteOptimizer(ROConfig{HomeAddress: hoa, Correspondent: cnAddr}); err == nil {
		t.Error("route optimiser without randomness accepted")
	}
}

func TestBindingErrorFor(t *testing.T) {
	// An MH of unknown type 42 from a care-of address with a Home Address option. Its checksum
	// is valid: only the type is unknown.
	body := []byte{59, 1, 42, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	env := mh.Envelope{Src: coa, Dst: cnAddr, HomeAddress: hoa}
	sum := mhChecksum(hoa, cnAddr, body)
	body[4], body[5] = byte(sum>>8), byte(sum)
	pkt, err := mh.AppendPacket(nil, env, mh.Proto, body)
	if err != nil {
		t.Fatal(err)
	}
	a, ok := BindingErrorFor(pkt, cnAddr)
	if !ok {
		t.Fatal("no binding error")
	}
	r := wireRoundTrip(t, a)
	be := r.Msg.(*mh.BindingError)
	if be.Status != mh.ErrorStatusUnknownMHType || be.HomeAddress != hoa || r.Packet.Dst != coa || r.Packet.Src != cnAddr {
		t.Fatalf("BE %+v to %v", be, r.Packet.Envelope)
	}
	// Known types, bad checksums and non-MH packets get nothing.
	good, _ := mh.AppendMessage(nil, mh.Envelope{Src: coa, Dst: cnAddr}, &mh.CareOfTestInit{})
	corrupt := append([]byte(nil), pkt...)
	corrupt[len(corrupt)-1] ^= 1
	for _, p := range [][]byte{good, corrupt, pkt[:30]} {
		if _, ok := BindingErrorFor(p, cnAddr); ok {
			t.Fatalf("binding error for %x", p)
		}
	}
}

// mhChecksum is the MH checksum of body (checksum field zero) for src -> dst.
func mhChecksum(src, dst netip.Addr, body []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	add([]byte{0, 0, 0, byte(len(body)), 0, 0, 0, mh.Proto})
	add(body)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
